// SPDX-License-Identifier: BSD-3-Clause
/*
 * dtype.c - names of the storage types.
 */
#include "kernels/attn/dtype.h"

#include <errno.h>
#include <string.h>

static const char *const names[DTYPE_COUNT] = {
    [DTYPE_F32] = "f32", [DTYPE_F16] = "f16", [DTYPE_BF16] = "bf16", [DTYPE_F64] = "f64"};

const char *dtype_name(enum dtype_kind t)
{
    if ((int)t < 0 || t >= DTYPE_COUNT)
        return NULL;
    return names[t];
}

int dtype_parse(const char *name)
{
    if (!name)
        return -EINVAL;
    for (int i = 0; i < DTYPE_COUNT; i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -EINVAL;
}
