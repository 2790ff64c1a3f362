// SPDX-License-Identifier: BSD-3-Clause
/*
 * testutil.c - helpers for the suites; see testutil.h.
 */
#include "testutil.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

uint64_t tu_seed(void)
{
    static uint64_t seed;
    static int ready;
    if (!ready) {
        const char *env = getenv("DASH_TEST_SEED");
        if (env && *env) {
            seed = strtoull(env, NULL, 0);
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            seed = ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec ^
                   ((uint64_t)getpid() << 32);
        }
        ready = 1;
    }
    return seed;
}

void tu_rng_init(struct tu_rng *r, uint64_t seed)
{
    r->s = seed ^ 0x9e3779b97f4a7c15ull;
}

uint64_t tu_next(struct tu_rng *r) /* splitmix64 */
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double tu_normal(struct tu_rng *r)
{
    /* Box-Muller; u1 in (0, 1] so the log is finite */
    double u1 = ((double)(tu_next(r) >> 11) + 1.0) / 9007199254740992.0;
    double u2 = (double)(tu_next(r) >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void tu_fill(void *buf, enum dtype_kind t, int64_t n, struct tu_rng *r, double scale)
{
    int nonzero = 0;
    for (int64_t i = 0; i < n; i++) {
        if (t == DTYPE_F64) { /* every bit of a double, not a float's */
            ((double *)buf)[i] = tu_normal(r) * scale;
            nonzero |= ((double *)buf)[i] != 0.0;
            continue;
        }
        dtype_store(buf, t, i, (float)(tu_normal(r) * scale));
        nonzero |= dtype_load(buf, t, i) != 0.0f;
    }
    if (n > 0 && !nonzero)
        dtype_store(buf, t, 0, (float)scale);
}

void tu_poison(void *buf, size_t bytes)
{
    memset(buf, 0xff, bytes);
}

void tu_to_double(const void *buf, enum dtype_kind t, int64_t n, double *out)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = dtype_load_f64(buf, t, i);
}

const char *tu_build_dir(void)
{
    static char dir[PATH_MAX];
    if (!dir[0]) {
        ssize_t len = readlink("/proc/self/exe", dir, sizeof dir - 1);
        if (len <= 0) {
            strcpy(dir, "build");
        } else {
            dir[len] = 0;
            char *slash = strrchr(dir, '/');
            if (slash)
                *slash = 0;
        }
    }
    return dir;
}

int tu_run(const char *cmd, char **ret_out)
{
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    size_t cap = 4096, len = 0;
    char *out = malloc(cap);
    size_t got;
    while (out && (got = fread(out + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len - 1 == 0) {
            char *bigger = realloc(out, cap * 2);
            if (!bigger) {
                free(out);
                out = NULL;
                break;
            }
            out = bigger;
            cap *= 2;
        }
    }
    int status = pclose(f);
    if (out)
        out[len] = 0;
    if (ret_out)
        *ret_out = out;
    else
        free(out);
    if (status == -1)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

long tu_rss_kib(int pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}
