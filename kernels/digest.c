/*
 * digest.c - see digest.h. The leaves are XXH64 of 64 KiB chunks and the root is fed
 * leaf by leaf into a streaming XXH64 state (the same value as hashing the concatenated
 * leaves), so nothing but one chunk of staging is ever allocated: a strided view is
 * gathered row by row into that chunk.
 */
#include "digest.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH64_state_t on the stack */
#include <xxhash.h>

static void root_add(XXH64_state_t *root, const void *chunk, size_t len)
{
    uint64_t leaf = XXH64(chunk, len, 0);
    unsigned char le[8];
    for (int b = 0; b < 8; b++)
        le[b] = (unsigned char)(leaf >> (8 * b));
    (void)XXH64_update(root, le, sizeof le);
}

uint64_t digest_bytes(const void *p, uint64_t n)
{
    XXH64_state_t root;
    (void)XXH64_reset(&root, n);
    for (uint64_t at = 0; at < n; at += DIGEST_CHUNK)
        root_add(&root, (const unsigned char *)p + at,
                 (size_t)(n - at < DIGEST_CHUNK ? n - at : DIGEST_CHUNK));
    return XXH64_digest(&root);
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
    if (!chunk)
        return -ENOMEM;
    XXH64_state_t root;
    (void)XXH64_reset(&root, total);
    const int64_t es = (int64_t)elem;
    const unsigned char *b = base;
    size_t fill = 0;
    for (int64_t i0 = 0; i0 < dims[0]; i0++)
        for (int64_t i1 = 0; i1 < dims[1]; i1++)
            for (int64_t i2 = 0; i2 < dims[2]; i2++) {
                const unsigned char *row = b + (i0 * st[0] + i1 * st[1] + i2 * st[2]) * es;
                for (int64_t i3 = 0; i3 < dims[3];) {
                    /* a contiguous row goes in runs that fill the chunk; otherwise one
                     * element at a time */
                    int64_t run = 1;
                    if (st[3] == 1) {
                        run = dims[3] - i3;
                        int64_t room = (int64_t)(DIGEST_CHUNK - fill) / es;
                        if (run > room)
                            run = room;
                    }
                    memcpy(chunk + fill, row + i3 * st[3] * es, (size_t)(run * es));
                    fill += (size_t)(run * es);
                    if (fill == DIGEST_CHUNK) {
                        root_add(&root, chunk, DIGEST_CHUNK);
                        fill = 0;
                    }
                    i3 += run;
                }
            }
    if (fill)
        root_add(&root, chunk, fill);
    *ret = XXH64_digest(&root);
    free(chunk);
    return 0;
}
