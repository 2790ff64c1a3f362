/* Digest version 3's device paths run on the host (emu_cuda.h's shims) against libxxhash's
 * XXH3_64bits: xxh3_64 (every length 0..4096 at every start mod 16), digest_leaf_chunks /
 * digest_leaf_row (every chunked length), digest_leaf_staged (the dQ postprocesses' quad
 * split, stage written as they write it), digest_leaves_quad / _fn (the mma layout, N 4 and
 * GQA's N 2), bwd_wg_tile_leaves (staging tiles written as bwd_wg_store_unit_tma writes
 * them, head dims 64 and 128), digest_cuda's leaf_warp (128 .. 4096-byte rows). Built and
 * run by tests/emu/run.sh on sources digest3_device_emu.py copies with the PTX shimmed. */
#include <xxhash.h>
#include <stdio.h>
#include <random>
#include <utility>
#include "emu_cuda.h"

#include "kernels/digest/xxh3.h"
#include "kernels/digest/digest_leaf.cuh"
#include "emu_digest_cuda.h"

struct attn_bwd_params {
    int32_t seqlen_k, heads_kv;
    uint64_t *leaf_dk, *leaf_dv;
};
#include "emu_bwd.h"

static std::mt19937_64 rng(20261207);
static int fails;
#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            if (fails++ < 20) {                                                                                        \
                printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                            \
                printf(__VA_ARGS__);                                                                                   \
                printf("\n");                                                                                          \
            }                                                                                                          \
        }                                                                                                              \
    } while (0)

static void fill(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)rng();
}
static ulonglong2 words_at(const unsigned char *p)
{
    ulonglong2 w;
    memcpy(&w.x, p, 8);
    memcpy(&w.y, p + 8, 8);
    return w;
}

/* 1. xxh3_64 (the device's key words, mul.wide.u32, __umul64hi, aligned 16/8-byte reads) */
static void test_xxh3_64(void)
{
    static unsigned char buf[4096 + 16];
    fill(buf, sizeof buf);
    int n_bad = 0;
    for (size_t n = 0; n <= 4096; n++)
        for (size_t off = 0; off < 16; off++)
            n_bad += xxh3_64(buf + off, n) != XXH3_64bits(buf + off, n);
    CHECK(n_bad == 0, "xxh3_64: %d of 65552 differ", n_bad);
    printf("xxh3_64 device path, 0..4096 bytes x 16 offsets: %d bad\n", n_bad);
}

/* 2. one thread, chunks in order: every chunked length */
template <int LEN> static int one_chunks(const unsigned char *row)
{
    const uint64_t h = digest_leaf_chunks<LEN>([&](int32_t c) { return words_at(row + 16 * c); });
    return h != XXH3_64bits(row, LEN);
}
template <size_t... I> static int all_chunks(const unsigned char *row, std::index_sequence<I...>)
{
    /* 32, 64, 96, 128, then 256 + 64 k */
    return (one_chunks<(I < 4 ? 32 * (I + 1) : 256 + 64 * (I - 4))>(row) + ...);
}
static void test_leaf_chunks(void)
{
    static unsigned char row[4096];
    int bad = 0;
    for (int rep = 0; rep < 4; rep++) {
        fill(row, sizeof row);
        bad += all_chunks(row, std::make_index_sequence<4 + (4096 - 256) / 64 + 1>{});
        bad += (digest_leaf_row<64>([&](int32_t m) { return words_at(row + 16 * m); }) != XXH3_64bits(row, 128));
        bad += (digest_leaf_row<128>([&](int32_t m) { return words_at(row + 16 * m); }) != XXH3_64bits(row, 256));
        bad += (digest_leaf_row<256>([&](int32_t m) { return words_at(row + 16 * m); }) != XXH3_64bits(row, 512));
    }
    CHECK(bad == 0, "digest_leaf_chunks/row: %d bad", bad);
    printf("digest_leaf_chunks (68 lengths) and digest_leaf_row<64,128,256>, 4 rounds: %d bad\n", bad);
}

/* 3. digest_leaf_staged<D>: 8 rows staged as the postprocesses stage them (lane writes word
 * d / 2 = lane + 32 k of row r at r * DIGEST_LEAF_PITCH(D)), quad r hashes row r */
template <int D> static void test_staged(void)
{
    alignas(16) static uint32_t stage[8 * DIGEST_LEAF_PITCH(D)];
    static unsigned char rows[8][2 * D];
    int bad = 0;
    for (int rep = 0; rep < 8; rep++) {
        fill(&rows[0][0], sizeof rows);
        memset(stage, 0xA5, sizeof stage);
        uint64_t got[32];
        emu_run_warp([&](int lane) {
            for (int r = 0; r < 8; r++)
                for (int k = 0; k < (D + 63) / 64; k++) {
                    const int d = 2 * lane + 64 * k;
                    if (d >= D)
                        continue;
                    uint32_t pr;
                    memcpy(&pr, &rows[r][2 * d], 4);
                    stage[r * DIGEST_LEAF_PITCH(D) + d / 2] = pr;
                }
            __syncwarp();
            got[lane] = digest_leaf_staged<D>(stage, lane);
        });
        for (int lane = 0; lane < 32; lane++)
            bad += got[lane] != XXH3_64bits(rows[lane >> 2], 2 * D);
    }
    CHECK(bad == 0, "digest_leaf_staged<%d>: %d bad", D, bad);
    printf("digest_leaf_staged<%d> (8 rows a warp, every lane of each quad), 8 rounds: %d bad\n", D, bad);
}

/* 4. digest_leaves_quad<D, 4> (rows in the mma layout: lane t4 of quad g holds the pairs
 * 8 t + 2 t4 of rows 4 g + r) and digest_leaves_quad_fn<D, 2> as GQA's sum calls it */
template <int D> static void test_quad(void)
{
    static unsigned char rows[32][2 * D];
    int bad4 = 0, bad2 = 0;
    for (int rep = 0; rep < 4; rep++) {
        fill(&rows[0][0], sizeof rows);
        uint64_t got4[32], got2[32];
        emu_run_warp([&](int lane) {
            const int g = lane >> 2, t4 = lane & 3;
            uint32_t q[4][D / 8];
            for (int r = 0; r < 4; r++)
                for (int t = 0; t < D / 8; t++)
                    memcpy(&q[r][t], &rows[4 * g + r][2 * (8 * t + 2 * t4)], 4);
            got4[lane] = digest_leaves_quad<D, 4>(q, lane);
            got2[lane] = digest_leaves_quad_fn<D, 2>(
                [&](int32_t t, uint32_t (&x)[4]) {
                    memcpy(&x[0], &rows[4 * g + 0][2 * (8 * t + 2 * t4)], 4); /* dK */
                    memcpy(&x[1], &rows[4 * g + 1][2 * (8 * t + 2 * t4)], 4); /* dV */
                },
                lane);
        });
        for (int lane = 0; lane < 32; lane++) {
            bad4 += got4[lane] != XXH3_64bits(rows[lane], 2 * D);
            if ((lane & 3) < 2)
                bad2 += got2[lane] != XXH3_64bits(rows[(lane & ~3) + (lane & 3)], 2 * D);
        }
    }
    CHECK(bad4 == 0 && bad2 == 0, "digest_leaves_quad<%d>: N 4 %d bad, N 2 %d bad", D, bad4, bad2);
    printf("digest_leaves_quad<%d, 4> and _fn<%d, 2> (GQA), 4 rounds: %d / %d bad\n", D, D, bad4, bad2);
}

/* 5. bwd_wg_tile_leaves<D, 128>: tiles staged as bwd_wg_store_unit_tma stages them (D 128:
 * DKV_LAP's four tiles, column block c = e / 32; D 64: K's and V's tiles or a dS^T set) */
template <int D> static void test_tiles(uint32_t base_off)
{
    constexpr int BN = 128;
    static unsigned char rows[2][BN][2 * D];
    /* 16 KiB each, 1024-aligned (as the kernels' tiles), not adjacent */
    static const uint32_t at[2][2] = {{0u, 40960u}, {81920u, 147456u}};
    unsigned char *tiles[2][2];
    for (int v = 0; v < 2; v++)
        for (int c = 0; c < 2; c++)
            tiles[v][c] = emu_smem + base_off + at[v][c];
    int bad = 0, extra = 0;
    for (int rep = 0; rep < 3; rep++) {
        fill(&rows[0][0][0], sizeof rows);
        memset(emu_smem, 0x5A, sizeof emu_smem);
        for (uint32_t tid = 0; tid < 256; tid++) { /* the staging writes */
            threadIdx.x = tid;
            const int r0 = 64 * (int)(tid >> 7);
            for (int e = 0; e < D / 2; e += 2) {
                const int R = r0 + bwd_wg_regs<D>::row(e), col = bwd_wg_regs<D>::col(e);
                uint32_t pk, pv;
                memcpy(&pk, &rows[0][R][2 * col], 4);
                memcpy(&pv, &rows[1][R][2 * col], 4);
                if (D == 128) {
                    const int c = e >> 5;
                    const uint32_t at = attn_sw128(R, col - 64 * c, BN);
                    memcpy(tiles[0][c] + at, &pk, 4);
                    memcpy(tiles[1][c] + at, &pv, 4);
                } else {
                    const uint32_t at = attn_sw128(R, col, BN);
                    memcpy(tiles[0][0] + at, &pk, 4);
                    memcpy(tiles[1][0] + at, &pv, 4);
                }
            }
        }
        const int n = 2, hk = 1, b = 1, heads_kv = 3;
        const int seqlen_k = n * BN + (rep == 0 ? BN : rep == 1 ? 77 : 1); /* full and partial kv tiles */
        std::vector<uint64_t> ldk((size_t)2 * seqlen_k * heads_kv, 0xdeadull), ldv(ldk);
        attn_bwd_params p{seqlen_k, heads_kv, ldk.data(), ldv.data()};
        for (uint32_t tid = 0; tid < 256; tid++) {
            threadIdx.x = tid;
            if (D == 128)
                bwd_wg_tile_leaves<D, BN>(p, [&](int32_t v, int32_t c) { return tiles[v][c]; }, b, hk, n);
            else
                bwd_wg_tile_leaves<D, BN>(p, [&](int32_t v, int32_t) { return v ? tiles[1][0] : tiles[0][0]; }, b, hk,
                                          n);
        }
        for (int v = 0; v < 2; v++) {
            const std::vector<uint64_t> &l = v ? ldv : ldk;
            for (int j = 0; j < seqlen_k; j++)
                for (int h = 0; h < heads_kv; h++)
                    for (int bb = 0; bb < 2; bb++) {
                        const uint64_t got = l[((size_t)bb * seqlen_k + j) * heads_kv + h];
                        const bool ours = bb == b && h == hk && j >= n * BN;
                        if (ours)
                            bad += got != XXH3_64bits(rows[v][j - n * BN], 2 * D);
                        else
                            extra += got != 0xdeadull;
                    }
        }
    }
    CHECK(bad == 0 && extra == 0 && emu_ld_misaligned == 0, "bwd_wg_tile_leaves<%d>: %d bad, %d stray, %d misaligned",
          D, bad, extra, emu_ld_misaligned);
    printf("bwd_wg_tile_leaves<%d, 128> (256 threads, Sk - n BN = 128, 77, 1): %d bad, %d stray writes, %d misaligned\n",
           D, bad, extra, emu_ld_misaligned);
}

/* 6. digest_cuda's leaf_warp: 32 leaves of len bytes back to back, SLICES as leaf_kernel
 * picks (len % 256 == 0: 2), every lane's leaf */
static void test_leaf_warp(void)
{
    static uint4 data[32 * 4096 / 16];
    static uint4 stage[32][LEAF_ROW];
    int bad = 0, lens = 0;
    for (uint32_t len = 128; len <= 4096; len += 128, lens++) {
        fill((unsigned char *)data, sizeof data);
        uint64_t got[32];
        emu_run_warp([&](int lane) {
            got[lane] = len % 256 == 0 ? leaf_warp<2>(data, len / 16, stage, (uint32_t)lane)
                                       : leaf_warp<1>(data, len / 16, stage, (uint32_t)lane);
        });
        for (int lane = 0; lane < 32; lane++)
            bad += got[lane] != XXH3_64bits((const unsigned char *)data + (size_t)lane * len, len);
    }
    CHECK(bad == 0, "leaf_warp: %d bad", bad);
    printf("leaf_warp (%d lengths 128..4096 by 128, 32 lanes each): %d bad\n", lens, bad);
}

int main(void)
{
    test_xxh3_64();
    test_leaf_chunks();
    test_staged<32>();
    test_staged<64>();
    test_staged<128>();
    test_staged<256>();
    test_quad<64>();
    test_quad<128>();
    test_quad<256>();
    test_tiles<64>(0);
    test_tiles<128>(0);
    test_tiles<64>(4096);
    test_leaf_warp();
    printf("%s (%d failures)\n", fails ? "FAIL" : "ok", fails);
    return fails != 0;
}
