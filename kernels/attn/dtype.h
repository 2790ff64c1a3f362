// SPDX-License-Identifier: BSD-3-Clause
/*
 * dtype.h - storage types of attention tensors and their conversions to and from fp32.
 *
 * Tensors are stored as fp32, fp16 (IEEE binary16), bf16 (the top half of a binary32) or
 * fp64. The narrow kinds compute in fp32: narrowing rounds to nearest, ties to even, keeps
 * NaN a NaN and overflows to infinity - the same as CUDA's __float2half_rn /
 * __float2bfloat16_rn, so the CPU engine and the GPU kernels round identically. fp64 is
 * served by the CPU engine only, which computes it in double (kernels/cpu/engine_f64.c);
 * dtype_load/dtype_store give its fp32 view, dtype_load_f64 its exact value.
 */
#ifndef DASH_DTYPE_H
#define DASH_DTYPE_H

#include <stdint.h>
#include <string.h>

enum dtype_kind { DTYPE_F32 = 0, DTYPE_F16, DTYPE_BF16, DTYPE_F64, DTYPE_COUNT };

/* Bytes per element; 0 for an invalid kind. */
static inline int32_t dtype_size(enum dtype_kind t)
{
    return t == DTYPE_F32 ? 4 : (t == DTYPE_F16 || t == DTYPE_BF16) ? 2 : t == DTYPE_F64 ? 8 : 0;
}

const char *dtype_name(enum dtype_kind t); /* "f32", "f16", "bf16", "f64"; NULL if invalid */
int dtype_parse(const char *name);         /* the kind, or -EINVAL */

static inline uint32_t dtype__bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float dtype__float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t dtype_f32_to_bf16(float f)
{
    uint32_t u = dtype__bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet and a NaN */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static inline float dtype_bf16_to_f32(uint16_t h)
{
    return dtype__float((uint32_t)h << 16);
}

static inline uint16_t dtype_f32_to_f16(float f)
{
    uint32_t u = dtype__bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u); /* NaN */
    if (a >= 0x477ff000u)                  /* rounds to >= 65520: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below the smallest normal half, 2^-14: subnormal or zero */
        if (a < 0x33000000u) /* below half the smallest subnormal (2^-25): zero */
            return (uint16_t)sign;
        uint32_t mant = (a & 0x007fffffu) | 0x00800000u;
        int shift = 126 - (int)(a >> 23); /* exponent e gives value mant * 2^(e-150) */
        /* half subnormal unit is 2^-24: result = mant * 2^(e-150+24) = mant >> (126-e) */
        uint32_t q = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1u);
        uint32_t halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (q & 1u)))
            q++;
        return (uint16_t)(sign | q);
    }
    /* normal: rebias exponent 127 -> 15, keep 10 mantissa bits, round to nearest even */
    uint32_t r = a - 0x38000000u; /* subtract (127-15) << 23 */
    r += 0x0fffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

static inline float dtype_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f)
        return dtype__float(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        if (m == 0)
            return dtype__float(sign);
        /* subnormal: m * 2^-24 exactly representable in fp32 */
        float v = (float)m * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    return dtype__float(sign | ((e + 112u) << 23) | (m << 13));
}

/* Element idx of a tensor of kind t, as fp32. */
static inline float dtype_load(const void *base, enum dtype_kind t, int64_t idx)
{
    switch (t) {
    case DTYPE_F16:
        return dtype_f16_to_f32(((const uint16_t *)base)[idx]);
    case DTYPE_BF16:
        return dtype_bf16_to_f32(((const uint16_t *)base)[idx]);
    case DTYPE_F64:
        return (float)((const double *)base)[idx];
    default:
        return ((const float *)base)[idx];
    }
}

/* Element idx of a tensor of kind t, as double: exact for every kind. */
static inline double dtype_load_f64(const void *base, enum dtype_kind t, int64_t idx)
{
    return t == DTYPE_F64 ? ((const double *)base)[idx] : (double)dtype_load(base, t, idx);
}

/* Store v rounded to kind t at element idx. */
static inline void dtype_store(void *base, enum dtype_kind t, int64_t idx, float v)
{
    switch (t) {
    case DTYPE_F16:
        ((uint16_t *)base)[idx] = dtype_f32_to_f16(v);
        break;
    case DTYPE_BF16:
        ((uint16_t *)base)[idx] = dtype_f32_to_bf16(v);
        break;
    case DTYPE_F64:
        ((double *)base)[idx] = v;
        break;
    default:
        ((float *)base)[idx] = v;
        break;
    }
}

/* v rounded to kind t and back: what storing and loading would give. */
static inline float dtype_round(enum dtype_kind t, float v)
{
    switch (t) {
    case DTYPE_F16:
        return dtype_f16_to_f32(dtype_f32_to_f16(v));
    case DTYPE_BF16:
        return dtype_bf16_to_f32(dtype_f32_to_bf16(v));
    default:
        return v;
    }
}

#endif
