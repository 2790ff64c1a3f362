#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""sdpa_peers.py - the peers of `bench_gpu`, measured in the same run on the same GPU:
PyTorch's scaled_dot_product_attention with its flash (FA2) and cuDNN backends, forward
and backward TFLOPS, and whether two identical backwards give identical gradient bits.

    python3 bench/sdpa_peers.py [--quick | --only D,S,MASK[,SCHED]] > peers.json

Shapes and FLOP counting match bench/bench_gpu.c: bf16, 16384 tokens per batch
(batch = 16384 / seqlen), heads = 2048 / head_dim rounded down (head dims 64, 128, 96), fwd = 4*B*H*S*S*D (halved when
causal), bwd = 2.5 * fwd. Timing: CUDA events, median of 10 calls after 3 warm-ups.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # also under python -I
import cudatime  # noqa: E402
import cudnn_peers  # noqa: E402  (its reading of bench_gpu's arguments)

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def timed(fn, reps=10, warm=3):
    return cudatime.median_ms(torch, fn, reps, warm)


def measure(d, s, causal, backend):
    b, h = 16384 // s, 2048 // d
    g = torch.Generator(device="cuda").manual_seed(1234 + s + d)
    # (batch, seqlen, heads, head_dim) as dashd uses, viewed as SDPA's (batch, heads, seqlen, d)
    q, k, v, do = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=g)
                   .transpose(1, 2) for _ in range(4))
    q.requires_grad_(True)
    k.requires_grad_(True)
    v.requires_grad_(True)
    flops = 4.0 * b * h * s * s * d / (2 if causal else 1)
    with sdpa_kernel(BACKENDS[backend]):
        fwd_ms = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        def bwd():
            q.grad = k.grad = v.grad = None
            out.backward(do, retain_graph=True)

        bwd_ms = timed(bwd)
        bwd()
        g1 = q.grad.clone()
        bwd()
        repeat = bool(torch.equal(g1.view(torch.int16), q.grad.view(torch.int16)))
    return {"D": d, "S": s, "B": b, "H": h, "causal": causal, "backend": backend,
            "fwd_ms": fwd_ms, "bwd_ms": bwd_ms, "fwd_tflops": flops / fwd_ms / 1e9,
            "bwd_tflops": 2.5 * flops / bwd_ms / 1e9, "bitwise_repeat": repeat}


def parse_args(argv):
    """bench_gpu's arguments as cudnn_peers.py reads them (gpu_bench.sh hands the same ones
    to all three): --quick, --only D,S,MASK[,SCHED] (SCHED ignored), --reps (ignored: the
    peers' figures are medians of 10)."""
    ap = argparse.ArgumentParser(prog="sdpa_peers.py",
                                 description="PyTorch SDPA (flash, cuDNN) at bench_gpu's shapes; prints JSON")
    ap.add_argument("--quick", action="store_true", help="seqlens 1024 and 4096 only")
    ap.add_argument("--only", type=cudnn_peers.parse_only, metavar="D,S,MASK[,SCHED]",
                    help="one shape, as bench_gpu --only (SCHED is ignored)")
    ap.add_argument("--reps", type=cudnn_peers.positive, help="accepted, ignored")
    return ap.parse_args(argv)


def shapes(args):
    """(D, causal, S) in bench_gpu's order: its grid (head dims 64, 128, 96), or --only's."""
    if args.only:
        d, s, causal = args.only
        return [(d, causal, s)]
    seqlens = [1024, 4096] if args.quick else [1024, 2048, 4096, 8192, 16384]
    return [(d, causal, s) for d in (64, 128, 96) for causal in (False, True) for s in seqlens]


def main():
    args = parse_args(sys.argv[1:])
    rows = []
    for d, causal, s in shapes(args):
        for backend in BACKENDS:
            try:
                rows.append(measure(d, s, causal, backend))
            except RuntimeError as e:  # a backend that cannot serve the shape
                rows.append({"D": d, "S": s, "causal": causal, "backend": backend,
                             "error": str(e).splitlines()[0]})
    json.dump({"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
               "device": torch.cuda.get_device_name(), "rows": rows}, sys.stdout)


if __name__ == "__main__":
    main()
