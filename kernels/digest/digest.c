// SPDX-License-Identifier: BSD-3-Clause
/*
 * digest.c - see digest.h. Leaves (libxxhash's XXH3_64bits), groups, supergroups and the
 * root (its XXH64) are hashed as they complete: a group collects up to 64 leaf hashes, a
 * supergroup up to 64 group hashes, and each finished supergroup's hash is fed into a
 * streaming XXH64 state for the root (the same value as hashing the concatenated
 * supergroup hashes). A strided view is gathered row by row into one leaf of staging, so
 * nothing larger than a leaf is ever allocated.
 */
#include "kernels/digest/digest.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH64_state_t on the stack */
#include <xxhash.h>

struct tree {
    XXH64_state_t root;
    unsigned char group[DIGEST_FANOUT * 8]; /* leaf hashes of the open group, little-endian */
    unsigned char super[DIGEST_FANOUT * 8]; /* group hashes of the open supergroup */
    size_t leaves, groups;                  /* in the open group, supergroup */
};

static void put_le64(unsigned char *p, uint64_t v)
{
    for (int b = 0; b < 8; b++)
        p[b] = (unsigned char)(v >> (8 * b));
}

static void tree_init(struct tree *t, uint64_t total)
{
    (void)XXH64_reset(&t->root, total);
    t->leaves = 0;
    t->groups = 0;
}

static void tree_close_super(struct tree *t)
{
    unsigned char le[8];
    put_le64(le, XXH64(t->super, t->groups * 8, 0));
    (void)XXH64_update(&t->root, le, sizeof le);
    t->groups = 0;
}

static void tree_close_group(struct tree *t)
{
    put_le64(t->super + t->groups * 8, XXH64(t->group, t->leaves * 8, 0));
    t->leaves = 0;
    if (++t->groups == DIGEST_FANOUT)
        tree_close_super(t);
}

static void tree_leaf(struct tree *t, const void *leaf, size_t len)
{
    put_le64(t->group + t->leaves * 8, XXH3_64bits(leaf, len));
    if (++t->leaves == DIGEST_FANOUT)
        tree_close_group(t);
}

static uint64_t tree_digest(struct tree *t)
{
    if (t->leaves)
        tree_close_group(t);
    if (t->groups)
        tree_close_super(t);
    return XXH64_digest(&t->root);
}

int digest_rows(const void *p, uint64_t n, uint64_t row, uint64_t *ret)
{
    if (n && (row == 0 || n % row))
        return -EINVAL;
    struct tree t;
    tree_init(&t, n);
    const unsigned char *b = p;
    for (uint64_t r = 0; r < n; r += row)
        for (uint64_t at = 0; at < row; at += DIGEST_CHUNK)
            tree_leaf(&t, b + r + at, (size_t)(row - at < DIGEST_CHUNK ? row - at : DIGEST_CHUNK));
    *ret = tree_digest(&t);
    return 0;
}

uint64_t digest_bytes(const void *p, uint64_t n)
{
    uint64_t d = 0;
    (void)digest_rows(p, n, n, &d); /* one row of n bytes: never refused */
    return d;
}

int digest_strided(const void *base, int32_t ndim, const int64_t *shape, const int64_t *strides,
                   size_t elem, uint64_t *ret)
{
    /* powers of two up to 16 bytes divide the chunk: no element straddles two chunks */
    if (ndim < 1 || ndim > 4 || elem == 0 || elem > 16 || (elem & (elem - 1)) || !base)
        return -EINVAL;
    int64_t dims[4] = {1, 1, 1, 1}, st[4] = {0, 0, 0, 0};
    uint64_t total = elem;
    for (int32_t i = 0; i < ndim; i++) {
        if (shape[i] < 1)
            return -EINVAL;
        dims[4 - ndim + i] = shape[i];
        st[4 - ndim + i] = strides[i];
        if (__builtin_mul_overflow(total, (uint64_t)shape[i], &total))
            return -EINVAL;
    }
    unsigned char *chunk = malloc(DIGEST_CHUNK);
    struct tree *t = malloc(sizeof *t);
    if (!chunk || !t) {
        free(chunk);
        free(t);
        return -ENOMEM;
    }
    tree_init(t, total);
    const int64_t es = (int64_t)elem;
    const unsigned char *b = base;
    for (int64_t i0 = 0; i0 < dims[0]; i0++)
        for (int64_t i1 = 0; i1 < dims[1]; i1++)
            for (int64_t i2 = 0; i2 < dims[2]; i2++) {
                /* one row: leaves of up to 4 KiB, a contiguous row in runs that fill the
                 * leaf, otherwise one element at a time */
                const unsigned char *row = b + (i0 * st[0] + i1 * st[1] + i2 * st[2]) * es;
                size_t fill = 0;
                for (int64_t i3 = 0; i3 < dims[3];) {
                    int64_t run = 1;
                    if (st[3] == 1) {
                        run = dims[3] - i3;
                        int64_t room = (int64_t)(DIGEST_CHUNK - fill) / es;
                        if (run > room)
                            run = room;
                    }
                    memcpy(chunk + fill, row + i3 * st[3] * es, (size_t)(run * es));
                    fill += (size_t)(run * es);
                    i3 += run;
                    if (fill == DIGEST_CHUNK || i3 == dims[3]) {
                        tree_leaf(t, chunk, fill);
                        fill = 0;
                    }
                }
            }
    *ret = tree_digest(t);
    free(chunk);
    free(t);
    return 0;
}
