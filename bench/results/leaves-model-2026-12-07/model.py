#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""model.py - trial leaves (bench/results/leaves-trial-2026-12-07.md): the head-dim-128
persistent backward's unit-end dK/dV leaves on random rows, byte for byte.

Stages random dK and dV rows (128 rows of 128 16-bit elements each) in bwd_wg_dkv_tile's four
tiles (bwd_wg_smem<128>'s offsets; attn_sw128's layout, as bwd_wg_store_unit_tma writes
them), then checks:
  1. the current reads (leafaddr: 64 LDS.32 a thread at base + 1024 h + ((t % 8) << 4 ^ swz))
     give each thread the pairs it holds, and digest_leaves_quad's exchange and finish over
     them give XXH64 of every row;
  2. the trial's reads (lane L of warp wi: row r0 + 16 wi + L % 16 of dK (L < 16) or dV,
     chunk m at block m / 8, ((m % 8) << 4) ^ swz) feed accumulators 0..3 at stripe k the
     row's words 4 k .. 4 k + 3 (digest_leaf_row's order), and the hash is XXH64 of the row;
  3. each quarter warp's LDS.128 of a step hits eight different 16-byte bank groups.
Needs the xxhash module (pip install xxhash) for the reference hash.
"""
import random
import struct
import sys

try:
    import xxhash
except ImportError:
    sys.exit("model.py: needs the xxhash module (pip install xxhash)")

M64 = (1 << 64) - 1
P1, P2, P3, P4 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x85EBCA77C2B2AE63


def rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def start(a):  # xxh64_start(0, a)
    return [(P1 + P2) & M64, P2, 0, (0 - P1) & M64][a]


def rnd(acc, w):  # xxh64_round
    acc = (acc + w * P2) & M64
    return (rotl(acc, 31) * P1) & M64


def merge(h, v):
    h ^= rnd(0, v)
    return (h * P1 + P4) & M64


def finish(v1, v2, v3, v4, nbytes):  # xxh64_converge + length + xxh64_avalanche
    h = (rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18)) & M64
    for v in (v1, v2, v3, v4):
        h = merge(h, v)
    h = (h + nbytes) & M64
    h ^= h >> 33
    h = (h * P2) & M64
    h ^= h >> 29
    h = (h * P3) & M64
    return h ^ (h >> 32)


D, BN = 128, 128
# bwd_wg_dkv_tile<128>(sm, v, c): {{q_smem[1], dout_smem[1]}, {p_smem, ds_smem}} - bytes from
# the struct's start (k 32 KiB, v 32 KiB, q[2] and dout[2] 16 KiB each, p and ds 16 KiB)
TILE = {(0, 0): 80 * 1024, (0, 1): 112 * 1024, (1, 0): 128 * 1024, (1, 1): 144 * 1024}


def sw128(r, c):  # attn_sw128 within a 64-column block
    return r * 128 + ((((c >> 3) & 7) ^ (r & 7)) << 4) + (c & 7) * 2


def main():
    rng = random.Random(7)
    for _ in range(8):
        rows = [[[rng.getrandbits(16) for _ in range(D)] for _ in range(BN)] for _ in range(2)]
        smem = bytearray(160 * 1024)
        for v in range(2):
            for r in range(BN):
                for col in range(0, D, 2):
                    at = TILE[(v, col >> 6)] + sw128(r, col & 63)
                    smem[at:at + 4] = struct.pack('<HH', rows[v][r][col], rows[v][r][col + 1])
        data = [[struct.pack('<%dH' % D, *rows[v][r]) for r in range(BN)] for v in range(2)]
        ref = [[xxhash.xxh64(data[v][r], seed=0).intdigest() for r in range(BN)] for v in range(2)]

        def lds32(a):
            return struct.unpack_from('<I', smem, a)[0]

        # 1. the current reads and the quads' hash
        for tid in range(256):
            lane, wi, r0 = tid & 31, (tid >> 5) & 3, 64 * (tid >> 7)
            g, t4 = lane >> 2, lane & 3
            rr = r0 + 16 * wi + g
            base, swz = rr * 128 + 4 * t4, (rr & 7) << 4
            for h in range(2):
                for t in range(16):
                    at = base + 1024 * h + (((t & 7) << 4) ^ swz)
                    for v in range(2):
                        x = rows[v][rr + 8 * h]
                        assert lds32(TILE[(v, t >> 3)] + at) == x[8 * t + 2 * t4] | x[8 * t + 2 * t4 + 1] << 16
            if t4:
                continue
            for h in range(2):
                for v in range(2):
                    r = rr + 8 * h
                    q = [[lds32(TILE[(v, t >> 3)] + base + 4 * s + 1024 * h + (((t & 7) << 4) ^ swz))
                          for t in range(16)] for s in range(4)]
                    acc = []
                    for s in range(4):  # lane t4 = s of the quad
                        odd = s & 1
                        x = start(2 * odd + (s >> 1))
                        for k in range(8):
                            got = q[s ^ 1][2 * k] if (s ^ 1) & 1 else q[s ^ 1][2 * k + 1]
                            w = (got | q[s][2 * k + 1] << 32) if odd else (q[s][2 * k] | got << 32)
                            x = rnd(x, w)
                        acc.append(x)
                    assert finish(acc[0], acc[2], acc[1], acc[3], 2 * D) == ref[v][r]
        # 2. the trial's reads and one-lane hash
        for tid in range(256):
            lane, wi, r0 = tid & 31, (tid >> 5) & 3, 64 * (tid >> 7)
            j, v = r0 + 16 * wi + (lane & 15), lane >> 4
            swz = (j & 7) << 4
            acc = [start(a) for a in range(4)]
            for m in range(D // 8):
                at = TILE[(v, m >> 3)] + j * 128 + (((m & 7) << 4) ^ swz)
                assert at % 16 == 0
                w0, w1 = struct.unpack_from('<QQ', smem, at)
                k, s = m >> 1, m & 1
                assert (w0, w1) == struct.unpack_from('<QQ', data[v][j], 8 * (4 * k + 2 * s))
                acc[2 * s] = rnd(acc[2 * s], w0)
                acc[2 * s + 1] = rnd(acc[2 * s + 1], w1)
            assert finish(*acc, 2 * D) == ref[v][j]
    # 3. banks
    for wgi in range(2):
        for wi in range(4):
            for m in range(D // 8):
                slots = []
                for lane in range(32):
                    j, v = 64 * wgi + 16 * wi + (lane & 15), lane >> 4
                    at = TILE[(v, m >> 3)] + j * 128 + (((m & 7) << 4) ^ ((j & 7) << 4))
                    slots.append((at >> 4) & 7)
                for qw in range(4):
                    assert len(set(slots[8 * qw:8 * qw + 8])) == 8
    print("model: the current reads and quad hash = XXH64 of every row; the trial's reads feed "
          "the same words in order, hash = XXH64 of every row; LDS.128 conflict-free per quarter warp")


if __name__ == "__main__":
    main()
