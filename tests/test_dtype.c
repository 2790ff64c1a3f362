// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_dtype.c - fp16/bf16 conversions: exact round trips for every 16-bit pattern, and
 * round-to-nearest-even against the compiler's own _Float16 on random and edge values.
 */
#include "suites.h"
#include "testutil.h"
#include "kernels/attn/dtype.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <math.h>

static void test_dtype_every_half_round_trips(void)
{
    int bad = 0;
    for (uint32_t h = 0; h <= 0xffff; h++) {
        float f = dtype_f16_to_f32((uint16_t)h);
        uint16_t back = dtype_f32_to_f16(f);
        if (isnan(f))
            bad += !(back & 0x7c00) || !(back & 0x03ff); /* still a NaN */
        else
            bad += back != h;
    }
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_dtype_every_bf16_round_trips(void)
{
    int bad = 0;
    for (uint32_t h = 0; h <= 0xffff; h++) {
        float f = dtype_bf16_to_f32((uint16_t)h);
        uint16_t back = dtype_f32_to_bf16(f);
        bad += isnan(f) ? !isnan(dtype_bf16_to_f32(back)) : back != h;
    }
    CU_ASSERT_EQUAL(bad, 0);
}

#if defined(__FLT16_MAX__)
/* The compiler's conversion rounds to nearest even as IEEE requires: our oracle. */
static uint16_t oracle_f16(float f)
{
    _Float16 h = (_Float16)f;
    uint16_t u;
    memcpy(&u, &h, sizeof u);
    return u;
}
#endif

static void test_dtype_f16_rounds_to_nearest_even(void)
{
#if defined(__FLT16_MAX__)
    struct tu_rng r;
    tu_rng_init(&r, tu_seed());
    int bad = 0;
    for (int i = 0; i < 2000000; i++) {
        /* random bit patterns cover subnormals, overflow and ties; skip NaNs */
        float f = dtype__float((uint32_t)tu_next(&r));
        if (isnan(f))
            continue;
        bad += dtype_f32_to_f16(f) != oracle_f16(f);
    }
    const float edges[] = {65504.0f, 65519.99f, 65520.0f, 65536.0f, 6.1035156e-05f,
                           5.9604645e-08f, 2.9802322e-08f, 2.98023259e-08f, 1.0f + 1.0f / 2048,
                           -0.0f, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        bad += dtype_f32_to_f16(edges[i]) != oracle_f16(edges[i]);
    CU_ASSERT_EQUAL(bad, 0);
#else
    CU_PASS("compiler has no _Float16; covered by the round-trip test only");
#endif
}

static void test_dtype_bf16_rounds_to_nearest_even(void)
{
    /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0);
     * 1 + 3*2^-8 is halfway between 1+2^-7 and 1+2^-6: goes up to 1+2^-6. */
    CU_ASSERT_EQUAL(dtype_f32_to_bf16(1.0f + 1.0f / 256), 0x3f80);
    CU_ASSERT_EQUAL(dtype_f32_to_bf16(1.0f + 3.0f / 256), 0x3f82);
    CU_ASSERT_EQUAL(dtype_f32_to_bf16(1.0f + 1.0f / 256 + 1.0f / 65536), 0x3f81);
    CU_ASSERT_EQUAL(dtype_f32_to_bf16(3.4e38f), 0x7f80); /* rounds up to infinity */
    CU_ASSERT(isnan(dtype_bf16_to_f32(dtype_f32_to_bf16(NAN))));
    /* random values: the result is one of the two neighbours, and the nearer one */
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() + 1);
    int bad = 0;
    for (int i = 0; i < 1000000; i++) {
        float f = (float)(tu_normal(&r) * 1000.0);
        uint16_t b = dtype_f32_to_bf16(f);
        double got = dtype_bf16_to_f32(b);
        double lo = dtype_bf16_to_f32((uint16_t)(b - 1)), hi = dtype_bf16_to_f32((uint16_t)(b + 1));
        bad += fabs(got - f) > fabs(lo - f) || fabs(got - f) > fabs(hi - f);
    }
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_dtype_load_store_and_names(void)
{
    uint16_t buf[3];
    dtype_store(buf, DTYPE_BF16, 1, 2.5f);
    CU_ASSERT_EQUAL(dtype_load(buf, DTYPE_BF16, 1), 2.5f);
    dtype_store(buf, DTYPE_F16, 2, -0.125f);
    CU_ASSERT_EQUAL(dtype_load(buf, DTYPE_F16, 2), -0.125f);
    CU_ASSERT_EQUAL(dtype_size(DTYPE_F32), 4);
    CU_ASSERT_EQUAL(dtype_size(DTYPE_BF16), 2);
    CU_ASSERT_EQUAL(dtype_size(DTYPE_COUNT), 0);
    for (int t = 0; t < DTYPE_COUNT; t++)
        CU_ASSERT_EQUAL(dtype_parse(dtype_name((enum dtype_kind)t)), t);
    CU_ASSERT_EQUAL(dtype_parse("f8"), -EINVAL);
    CU_ASSERT_PTR_NULL(dtype_name(DTYPE_COUNT));
}

int suite_dtype(void)
{
    CU_pSuite s = CU_add_suite("dtype", NULL, NULL);
    if (!s)
        return -1;
    ADD_TEST(s, test_dtype_every_half_round_trips);
    ADD_TEST(s, test_dtype_every_bf16_round_trips);
    ADD_TEST(s, test_dtype_f16_rounds_to_nearest_even);
    ADD_TEST(s, test_dtype_bf16_rounds_to_nearest_even);
    ADD_TEST(s, test_dtype_load_store_and_names);
    return 0;
}
