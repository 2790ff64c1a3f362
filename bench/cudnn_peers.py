#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""cudnn_peers.py - cuDNN's own SDPA, the peer the deterministic backward is judged against
(issue 16), measured in the same run as `bench_gpu` on the same GPU: forward and backward
TFLOPS through the cuDNN frontend's Python API (pip package nvidia-cudnn-frontend, module
`cudnn`), the backward both as cuDNN's fastest (use_deterministic_algorithm=False) and as
its deterministic algorithm (True), with a bitwise repeat check of dQ, dK and dV for each.

    python3 bench/cudnn_peers.py [--quick] [--reps N] [--only D,S,MASK[,SCHED]] [--plan] > cudnn.json

It takes bench_gpu's arguments, so scripts/gpu_bench.sh hands the same ones to both:
--quick measures seqlens 1k and 4k, --only one shape (SCHED, a schedule of ours, is
ignored; D any multiple of 8 from 32 to 256), --reps the timed calls (default 10, not bench_gpu's 3). --plan prints the shapes
it would measure and exits without touching a GPU.

Shapes and FLOP counting match bench/bench_gpu.c and bench/sdpa_peers.py: bf16, 16384
tokens per batch (batch = 16384 / seqlen), heads = 2048 / head_dim rounded down, layout
(batch, seqlen, heads, head_dim), fwd = 4*B*H*S*S*D (halved when causal), bwd = 2.5 * fwd;
seqlens 1k..16k, head dims 64, 128, 96 and 256 as bench_gpu. Timing: CUDA events, median
of N calls after 3 warm-ups. 'bitwise_repeat': 5 backwards into outputs poisoned with NaN
before each gave identical dQ, dK and dV bits ('finite': every one wrote every element).

Output: one JSON object shaped as sdpa_peers.py's, so bench/gpu_report.py joins it by
(D, S, causal, backend); backend "cudnn-fe" is the non-deterministic backward and
"cudnn-fe-det" the deterministic one (both rows carry the same forward). "checks" holds,
per head dim and mask, the largest error of O, dQ, dK and dV against float64 at a small
shape, relative to the largest reference element. Where the frontend, PyTorch or a CUDA GPU
is missing it prints {"note": why, "rows": []} and exits 0, so `make bench` goes on.
"""
import argparse
import importlib.util
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # also under python -I
import cudatime  # noqa: E402

TOKENS, HIDDEN = 16384, 2048
DIMS = (64, 128, 96, 256)
SEQLENS, SEQLENS_QUICK = (1024, 2048, 4096, 8192, 16384), (1024, 4096)
BACKENDS = {False: "cudnn-fe", True: "cudnn-fe-det"}  # use_deterministic_algorithm -> name
REPEATS = 5  # backwards compared bit for bit
WARMUPS = 3
CHECK_SEQLEN, CHECK_HEADS = 512, 2  # the float64 check's shape (batch 1)
CHECK_TOLERANCE = 2e-2  # bf16 inputs and outputs: errors of a few 1e-3 are expected


def parse_only(text):
    """D,S,MASK[,SCHED] as bench_gpu reads it, into (D, S, causal)."""
    parts = text.split(",")
    if len(parts) not in (3, 4):
        raise argparse.ArgumentTypeError(f"'{text}': want D,S,MASK[,SCHED]")
    try:
        d, s = int(parts[0]), int(parts[1])
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}': D and S must be integers") from None
    if d % 8 or not 32 <= d <= 256:  # what bench_gpu's kernels serve
        raise argparse.ArgumentTypeError(f"'{text}': head dim {d} is not a multiple of 8 "
                                         "from 32 to 256")
    if not 1 <= s <= TOKENS:
        raise argparse.ArgumentTypeError(f"'{text}': seqlen {s} is not in 1..{TOKENS}")
    if parts[2] not in ("full", "causal"):
        raise argparse.ArgumentTypeError(f"'{text}': mask '{parts[2]}' is not full or causal")
    return d, s, parts[2] == "causal"


def positive(text):
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not a positive integer")
    return n


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="cudnn_peers.py",
        description="cuDNN frontend SDPA forward and backward (deterministic and not) "
                    "at bench_gpu's shapes; prints JSON")
    ap.add_argument("--quick", action="store_true", help="seqlens 1024 and 4096 only")
    ap.add_argument("--reps", type=positive, default=10, help="timed calls per figure")
    ap.add_argument("--only", type=parse_only, metavar="D,S,MASK[,SCHED]",
                    help="one shape, as bench_gpu --only (SCHED is ignored)")
    ap.add_argument("--plan", action="store_true",
                    help="print the shapes that would be measured and exit")
    return ap.parse_args(argv)


def plan(args):
    """The shapes to measure, in bench_gpu's order: (D, S, B, H, causal)."""
    if args.only:
        d, s, causal = args.only
        return [(d, s, TOKENS // s, HIDDEN // d, causal)]
    seqlens = SEQLENS_QUICK if args.quick else SEQLENS
    return [(d, s, TOKENS // s, HIDDEN // d, causal)
            for d in DIMS for causal in (False, True) for s in seqlens]


def skip(why):
    json.dump({"note": why, "rows": []}, sys.stdout)
    print()
    return 0


class Frontend:
    """One cuDNN handle on PyTorch's current stream, and graphs built the same way for the
    forward and for both backwards: bf16 in and out, float32 for the softmax and the
    products, the engine the heuristics rank first (falling back where it cannot run)."""

    def __init__(self, torch, cudnn):
        self.torch, self.cudnn = torch, cudnn
        self.handle = cudnn.create_handle()
        cudnn.set_stream(handle=self.handle, stream=torch.cuda.current_stream().cuda_stream)

    def _graph(self):
        dt = self.cudnn.data_type
        return self.cudnn.pygraph(io_data_type=dt.BFLOAT16, intermediate_data_type=dt.FLOAT,
                                  compute_data_type=dt.FLOAT, handle=self.handle)

    def _finish(self, graph, pack):
        """Builds graph and returns a call that runs it on the tensors of pack."""
        cudnn = self.cudnn
        graph.validate()
        graph.build_operation_graph()
        graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        graph.check_support()
        graph.build_plans()
        ws = self.torch.empty(max(1, graph.get_workspace_size()), device="cuda",
                              dtype=self.torch.uint8)
        return lambda: graph.execute(pack, ws, handle=self.handle)

    @staticmethod
    def _output(node, like):
        node.set_output(True).set_dim(list(like.size())).set_stride(list(like.stride()))

    def forward(self, q, k, v, o, stats, causal):
        """A call writing o (B, H, S, D) and the softmax statistics stats (B, H, S, 1)."""
        g = self._graph()
        gq, gk, gv = g.tensor_like(q), g.tensor_like(k), g.tensor_like(v)
        go, gst = g.sdpa(name="sdpa", q=gq, k=gk, v=gv, generate_stats=True,
                         attn_scale=q.shape[-1] ** -0.5, use_causal_mask=causal)
        self._output(go, o)
        gst.set_output(True).set_data_type(self.cudnn.data_type.FLOAT)
        return self._finish(g, {gq: q, gk: k, gv: v, go: o, gst: stats})

    def backward(self, grads, q, k, v, o, do, stats, causal, deterministic):
        """A call writing grads = (dq, dk, dv), each shaped and strided as q."""
        g = self._graph()
        ins = (q, k, v, o, do, stats)
        gq, gk, gv, go, gdo, gst = (g.tensor_like(t) for t in ins)
        outs = g.sdpa_backward(name="sdpa_backward", q=gq, k=gk, v=gv, o=go, dO=gdo, stats=gst,
                               attn_scale=q.shape[-1] ** -0.5, use_causal_mask=causal,
                               use_deterministic_algorithm=deterministic)
        for node, t in zip(outs, grads):
            self._output(node, t)
        return self._finish(g, {**dict(zip((gq, gk, gv, go, gdo, gst), ins)),
                                **dict(zip(outs, grads))})


def inputs(torch, b, s, h, d, seed):
    """q, k, v, dO of normal bf16 values, stored (b, s, h, d) as dashd lays them out and
    viewed as (b, h, s, d), the order cuDNN's SDPA names its dimensions in."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=gen)
            .transpose(1, 2) for _ in range(4)]


def outputs(torch, b, s, h, d):
    """o and dq, dk, dv (as the inputs), and the float32 statistics (b, h, s, 1)."""
    o, dq, dk, dv = (torch.empty(b, s, h, d, device="cuda", dtype=torch.bfloat16)
                     .transpose(1, 2) for _ in range(4))
    return o, (dq, dk, dv), torch.empty(b, h, s, 1, device="cuda", dtype=torch.float32)


def timed(torch, fn, reps):
    return cudatime.median_ms(torch, fn, reps, WARMUPS)


def repeat_check(torch, bwd, grads):
    """(bitwise_repeat, finite) over REPEATS calls, each into grads poisoned with NaN."""
    first, same, finite = None, True, True
    for _ in range(REPEATS):
        for t in grads:
            t.fill_(float("nan"))
        bwd()
        torch.cuda.synchronize()
        finite = finite and all(bool(torch.isfinite(t).all()) for t in grads)
        bits = [t.view(torch.int16).clone() for t in grads]
        if first is None:
            first = bits
        else:
            same = same and all(torch.equal(x, y) for x, y in zip(first, bits))
    return same, finite


def describe(e):
    """An exception as one line: its type and the first line of its text."""
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:300]


def error_row(d, s, causal, backend, e):
    return {"D": d, "S": s, "causal": causal, "backend": backend, "error": describe(e)}


def measure(torch, fe, shape, reps):
    """The two rows (non-deterministic, deterministic) of one shape."""
    d, s, b, h, causal = shape
    q, k, v, do = inputs(torch, b, s, h, d, 1234 + s + d)
    o, grads, stats = outputs(torch, b, s, h, d)
    flops = 4.0 * b * h * s * s * d / (2 if causal else 1)
    try:
        fwd = fe.forward(q, k, v, o, stats, causal)
        fwd_ms = timed(torch, fwd, reps)
        fwd()  # o and stats for the backward
    except Exception as e:  # a shape the frontend cannot serve: both rows say why
        return [error_row(d, s, causal, BACKENDS[det], e) for det in BACKENDS]
    rows = []
    for det, backend in BACKENDS.items():
        try:
            bwd = fe.backward(grads, q, k, v, o, do, stats, causal, det)
            bwd_ms = timed(torch, bwd, reps)
            repeat, finite = repeat_check(torch, bwd, grads)
        except Exception as e:
            rows.append(error_row(d, s, causal, backend, e))
            continue
        rows.append({"D": d, "S": s, "B": b, "H": h, "causal": causal, "backend": backend,
                     "deterministic": det, "fwd_ms": fwd_ms, "bwd_ms": bwd_ms,
                     "fwd_tflops": flops / fwd_ms / 1e9, "bwd_tflops": 2.5 * flops / bwd_ms / 1e9,
                     "bitwise_repeat": repeat, "finite": finite})
    return rows


def check(torch, fe, d, causal):
    """Largest errors of O, dQ, dK, dV (both backwards) against float64 PyTorch math."""
    s, h = CHECK_SEQLEN, CHECK_HEADS
    q, k, v, do = inputs(torch, 1, s, h, d, 7 + d)
    o, grads, stats = outputs(torch, 1, s, h, d)
    q64, k64, v64 = (t.double().requires_grad_(True) for t in (q, k, v))
    scores = q64 @ k64.transpose(-1, -2) * d ** -0.5
    if causal:
        scores = scores.masked_fill(
            torch.ones(s, s, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
    o64 = torch.softmax(scores, dim=-1) @ v64
    refs = torch.autograd.grad(o64, (q64, k64, v64), do.double())
    rel = lambda x, ref: float((x.double() - ref).abs().max() / ref.abs().max())
    o.fill_(float("nan"))
    fe.forward(q, k, v, o, stats, causal)()
    torch.cuda.synchronize()
    out = {"D": d, "causal": causal, "o": rel(o, o64.detach())}
    for det, backend in BACKENDS.items():
        for t in grads:
            t.fill_(float("nan"))
        fe.backward(grads, q, k, v, o, do, stats, causal, det)()
        torch.cuda.synchronize()
        out[backend] = {n: rel(t, r) for n, t, r in zip(("dq", "dk", "dv"), grads, refs)}
    errs = [out["o"]] + [e for be in BACKENDS.values() for e in out[be].values()]
    out["ok"] = all(e <= CHECK_TOLERANCE for e in errs)  # False also for NaN
    return out


def main(argv=None):
    args = parse_args(argv)
    shapes = plan(args)
    if args.plan:
        json.dump({"shapes": [dict(zip(("D", "S", "B", "H", "causal"), x)) for x in shapes]},
                  sys.stdout)
        print()
        return 0
    # Found before torch is imported, so that a machine without the frontend says so
    # whether or not it has PyTorch; imported after torch, so that it finds torch's libcudnn.
    if importlib.util.find_spec("cudnn") is None:
        return skip("cuDNN frontend not installed (pip package nvidia-cudnn-frontend, "
                    "module cudnn): cuDNN's own SDPA not measured")
    try:
        import torch
    except ImportError as e:
        return skip(f"PyTorch not importable ({e}): cuDNN's own SDPA not measured")
    if not torch.cuda.is_available():
        return skip("no CUDA GPU usable by PyTorch: cuDNN's own SDPA not measured")
    try:
        import cudnn
    except Exception as e:  # installed, but built for another Python, CUDA or libcudnn
        return skip(f"cuDNN frontend not importable ({describe(e)}): "
                    "cuDNN's own SDPA not measured")
    try:
        fe = Frontend(torch, cudnn)
    except Exception as e:  # no libcudnn it can load, or one too old for it
        return skip(f"cuDNN frontend has no handle ({describe(e)}): "
                    "cuDNN's own SDPA not measured")
    checks = []
    for d in sorted({x[0] for x in shapes}):
        for causal in sorted({x[4] for x in shapes}):
            try:
                checks.append(check(torch, fe, d, causal))
            except Exception as e:
                checks.append({"D": d, "causal": causal, "ok": False, "error": describe(e)})
    rows = []
    for shape in shapes:
        rows += measure(torch, fe, shape, args.reps)
        torch.cuda.empty_cache()
    json.dump({"torch": torch.__version__, "cudnn": cudnn.backend_version(),
               "frontend": getattr(cudnn, "__version__", "unknown"),
               "device": torch.cuda.get_device_name(), "reps": args.reps, "repeats": REPEATS,
               "checks": checks, "rows": rows}, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
