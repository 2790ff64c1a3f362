// SPDX-License-Identifier: BSD-3-Clause
/*
 * dash_map.c - the client's map from nonzero uint64 keys (wire ids, tickets) to pointers:
 * open addressing with linear probing, at most half full, deletion by backward shift.
 */
#include "client/dash_internal.h"

#include <stdlib.h>
#include <string.h>

static size_t map_home(uint64_t key, size_t cap)
{
    /* splitmix64's finaliser: ids are sequential, so spread them */
    key ^= key >> 30;
    key *= 0xbf58476d1ce4e5b9ull;
    key ^= key >> 27;
    key *= 0x94d049bb133111ebull;
    key ^= key >> 31;
    return (size_t)key & (cap - 1);
}

static int map_grow(struct dash__map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 16;
    uint64_t *keys = calloc(cap, sizeof *keys);
    void **vals = calloc(cap, sizeof *vals);
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return DASH_ENOMEM;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i])
            continue;
        size_t j = map_home(m->keys[i], cap);
        while (keys[j])
            j = (j + 1) & (cap - 1);
        keys[j] = m->keys[i];
        vals[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
    return 0;
}

int dash__map_put(struct dash__map *m, uint64_t key, void *val)
{
    if ((m->n + 1) * 2 > m->cap) {
        int rc = map_grow(m);
        if (rc)
            return rc;
    }
    size_t i = map_home(key, m->cap);
    while (m->keys[i] && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    if (!m->keys[i])
        m->n++;
    m->keys[i] = key;
    m->vals[i] = val;
    return 0;
}

void *dash__map_get(const struct dash__map *m, uint64_t key)
{
    if (!m->cap || !key)
        return NULL;
    for (size_t i = map_home(key, m->cap); m->keys[i]; i = (i + 1) & (m->cap - 1))
        if (m->keys[i] == key)
            return m->vals[i];
    return NULL;
}

void dash__map_del(struct dash__map *m, uint64_t key)
{
    if (!m->cap || !key)
        return;
    size_t mask = m->cap - 1, i = map_home(key, m->cap);
    while (m->keys[i] != key) {
        if (!m->keys[i])
            return;
        i = (i + 1) & mask;
    }
    /* Backward-shift deletion: pull later members of the probe run into the hole unless
     * their home lies cyclically in (hole, their slot], so every lookup still finds them. */
    m->keys[i] = 0;
    m->vals[i] = NULL;
    m->n--;
    for (size_t j = (i + 1) & mask; m->keys[j]; j = (j + 1) & mask) {
        size_t home = map_home(m->keys[j], m->cap);
        int stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (stays)
            continue;
        m->keys[i] = m->keys[j];
        m->vals[i] = m->vals[j];
        m->keys[j] = 0;
        m->vals[j] = NULL;
        i = j;
    }
}

void dash__map_free(struct dash__map *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}
