// SPDX-License-Identifier: BSD-3-Clause
/*
 * memcap.c - see memcap.h.
 */
#include "memcap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CGROUP_ROOT "/sys/fs/cgroup"

/* A limit file's value: "max" or a number (v1's "unlimited" is a huge number). */
static uint64_t read_limit(const char *path)
{
    FILE *f = fopen(path, "r");
    char buf[64];
    uint64_t v = UINT64_MAX;
    if (f && fgets(buf, sizeof buf, f) && strncmp(buf, "max", 3) != 0) {
        char *end;
        unsigned long long x = strtoull(buf, &end, 10);
        if (end != buf)
            v = (uint64_t)x;
    }
    if (f)
        fclose(f);
    return v;
}

/* The smallest limit on the way from dir/rel up to dir: file in each. */
static uint64_t limit_on_path(const char *dir, const char *rel, const char *file, char *where,
                              size_t wherelen)
{
    char path[1024], sub[512];
    snprintf(sub, sizeof sub, "%s", rel);
    uint64_t best = UINT64_MAX;
    for (;;) {
        snprintf(path, sizeof path, "%s%s/%s", dir, sub, file);
        uint64_t v = read_limit(path);
        if (v < best) {
            best = v;
            snprintf(where, wherelen, "cgroup %s%s", dir, sub);
        }
        char *slash = strrchr(sub, '/');
        if (!slash || !sub[0])
            break;
        *slash = '\0';
    }
    return best;
}

uint64_t memcap_bytes(char *why, size_t whylen)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t ram = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX;
    snprintf(why, whylen, "RAM");
    uint64_t cg = UINT64_MAX;
    char where[1100] = "";
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[1024];
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        /* "0::/path" (v2), "N:memory:/path" or "N:cpu,memory:/path" (v1) */
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = '\0';
        const char *ctrl = c1 + 1, *rel = c2 + 1;
        char w[1100];
        uint64_t v = UINT64_MAX;
        if (!*ctrl) {
            v = limit_on_path(CGROUP_ROOT, strcmp(rel, "/") ? rel : "", "memory.max", w, sizeof w);
        } else {
            char list[256];
            snprintf(list, sizeof list, ",%s,", ctrl);
            if (strstr(list, ",memory,"))
                v = limit_on_path(CGROUP_ROOT "/memory", strcmp(rel, "/") ? rel : "",
                                  "memory.limit_in_bytes", w, sizeof w);
        }
        if (v < cg) {
            cg = v;
            snprintf(where, sizeof where, "%s", w);
        }
    }
    if (f)
        fclose(f);
    if (cg < ram) {
        snprintf(why, whylen, "%s", where);
        return cg;
    }
    return ram;
}
