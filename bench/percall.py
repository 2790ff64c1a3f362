# SPDX-License-Identifier: BSD-3-Clause
"""percall.py - what one attention call costs the caller, through dashd and in process.

A host-bound loop (the shape of issue 20: causal, bf16, batch 8, seqlen 1024, 12 heads, head
dim 64, small enough that the call's fixed cost dominates): N calls back to back on the
current stream, one synchronise at the end. For each way of computing attention it reports

  ms/call   wall time of the loop / N: what a training step pays per call
  host us   the median time for the call to return to Python (no synchronise): the part
            the host cannot overlap with the GPU. In a loop the GPU cannot keep up with,
            a call may wait for room in CUDA's queues, so this can grow to the GPU's time
            per call
  drained   the same, each call timed alone after a synchronise (not timed): the host's
            own cost of a call, with nothing queued ahead of it

for dash_attn.flash_attn_func (forward; forward + backward) through a dashd on the same GPU,
the same tokens as a packed batch through dash_attn.flash_attn_varlen_func (batch documents
of seqlen tokens, host cu_seqlens), and PyTorch SDPA's flash and cuDNN backends in process.

    python3 bench/percall.py --dashd build/dashd [--iters 200] [--out FILE]

Starts its own dashd on a private endpoint (CUDA backend) and stops it at the end. Writes a
Markdown table to stdout (and FILE).
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

import dashd_proc  # bench/: dashd on a private endpoint


def timed_loop(step, iters, warmup=20):
    """(ms per call of a back-to-back loop, median host us per call in it, median host us
    of a call timed alone after a synchronise)."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    host = []
    t0 = time.perf_counter()
    for _ in range(iters):
        h0 = time.perf_counter()
        step()
        host.append(time.perf_counter() - h0)
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    alone = []
    for _ in range(iters):
        torch.cuda.synchronize()
        h0 = time.perf_counter()
        step()
        alone.append(time.perf_counter() - h0)
    torch.cuda.synchronize()
    return wall / iters * 1e3, statistics.median(host) * 1e6, statistics.median(alone) * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dashd", required=True)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seqlen", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--hdim", type=int, default=64)
    ap.add_argument("--out", default=None)
    ap.add_argument("--profile", action="store_true",
                    help="also print where Python spends a forward + backward (cProfile)")
    a = ap.parse_args()

    work = tempfile.mkdtemp(prefix="dash-percall-")
    # debug: the daemon logs where each early reply's time went (parsed below)
    d = dashd_proc.start_dashd(a.dashd, work, "--backend", "cuda", "--log-level", "debug")
    import dash_attn

    dev = "cuda"
    shape = (a.batch, a.seqlen, a.heads, a.hdim)
    g = torch.Generator(device=dev).manual_seed(0)
    q, k, v = (torch.randn(shape, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_()
               for _ in range(3))
    dout = torch.randn(shape, device=dev, dtype=torch.bfloat16, generator=g)
    qt, kt, vt = (x.detach().transpose(1, 2).contiguous().requires_grad_() for x in (q, k, v))
    doutt = dout.transpose(1, 2).contiguous()

    def dash_fwd():
        with torch.no_grad():
            dash_attn.flash_attn_func(q, k, v, causal=True)

    def dash_fwd_bwd():
        o = dash_attn.flash_attn_func(q, k, v, causal=True)
        o.backward(dout)

    # the same tokens packed (batch documents of seqlen, offsets on the host)
    tokens = a.batch * a.seqlen
    qp, kp, vp = (x.detach().reshape(tokens, a.heads, a.hdim).requires_grad_() for x in (q, k, v))
    doutp = dout.reshape(tokens, a.heads, a.hdim)
    cu = torch.arange(0, tokens + 1, a.seqlen, dtype=torch.int32)

    def varlen_fwd():
        with torch.no_grad():
            dash_attn.flash_attn_varlen_func(qp, kp, vp, cu, cu, a.seqlen, a.seqlen, causal=True)

    def varlen_fwd_bwd():
        o = dash_attn.flash_attn_varlen_func(qp, kp, vp, cu, cu, a.seqlen, a.seqlen, causal=True)
        o.backward(doutp)

    qd, kd, vd = q.detach(), k.detach(), v.detach()

    def ops_fwd():  # the custom op as a compiled graph calls it (no autograd around it)
        torch.ops.dash_attn.fwd(qd, kd, vd, None, True, -1, -1, 0.0, "auto", 0, False, None, None)

    def ops_fwd_bwd():
        out, lse, tag = torch.ops.dash_attn.fwd(qd, kd, vd, None, True, -1, -1, 0.0, "auto", 0,
                                                False, None, None)
        torch.ops.dash_attn.bwd(dout, qd, kd, vd, out, lse, tag, None, True, -1, -1, 0.0, "auto", 0)

    def ctypes_path(fn):
        """fn with the shared client's calls on the ctypes path (dash_attn/_native.py: the
        native op serves eager CUDA calls where it is loaded)"""
        from dash_attn import _client

        def step():
            c = _client.client_by_id(0, q)
            was, c._native = c._native, False
            try:
                fn()
            finally:
                c._native = was
        return step

    def sdpa(backend):
        def step():
            with torch.nn.attention.sdpa_kernel(backend):
                o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)
                o.backward(doutt)
        return step

    def sdpa_fwd(backend):
        def step():
            with torch.no_grad(), torch.nn.attention.sdpa_kernel(backend):
                F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)
        return step

    def breakdown():
        """Where a dash_attn forward's host time goes: the parts timed one by one."""
        from dash_attn import _client, _lib
        import ctypes
        c = _client.default_client()
        n = a.iters
        rtt = ctypes.c_uint64()
        pings = []
        for _ in range(n):
            t0 = time.perf_counter()
            c._check(_lib.dash_ping(c._c, -1, ctypes.byref(rtt)))
            pings.append(time.perf_counter() - t0)
        out = torch.empty_like(q)
        lse = torch.empty((a.batch, a.heads, a.seqlen), dtype=torch.float32, device=dev)
        views, calls, queue = [], [], []
        attn = c._attn(2, True, 0.0, "auto", 0)  # bf16, causal
        # each call after a synchronise: the daemon idle, as in a host-bound step (back to
        # back, a backward's queue builds up behind the GPU and its hops measure the queue)
        for _ in range(n):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            ts = c._cuda_tensors([(q, 4), (k, 4), (v, 4), (out, 4), (lse, 3)])
            t1 = time.perf_counter()
            res = _lib.DashResult()
            stream = torch.cuda.current_stream().cuda_stream
            fwd_starts.append(time.monotonic_ns())
            c._check(_lib.dash_forward_stream(c._c, ctypes.byref(attn),
                                              *[ctypes.byref(ts[i]) for i in range(5)],
                                              ctypes.c_void_p(stream), ctypes.byref(res)))
            t2 = time.perf_counter()
            views.append(t1 - t0)
            calls.append(t2 - t1)
            queue.append(res.queue_us)
        bviews, bcalls = [], []
        dq, dk, dv = (torch.empty_like(x) for x in (q, k, v))
        for _ in range(n):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            ts = c._cuda_tensors([(q, 4), (k, 4), (v, 4), (out, 4), (lse, 3), (dout, 4),
                                  (dq, 4), (dk, 4), (dv, 4)])
            t1 = time.perf_counter()
            stream = torch.cuda.current_stream().cuda_stream
            bwd_starts.append(time.monotonic_ns())
            c._check(_lib.dash_backward_stream(c._c, ctypes.byref(attn),
                                               *[ctypes.byref(ts[i]) for i in range(9)],
                                               ctypes.c_void_p(stream), None))
            t2 = time.perf_counter()
            bviews.append(t1 - t0)
            bcalls.append(t2 - t1)
        torch.cuda.synchronize()
        med = lambda xs: statistics.median(xs) * 1e6
        return [f"| dash_ping round trip (our transport, no GPU work) | {med(pings):.0f} |",
                f"| dash_cuda_tensors of 5 tensors (find each one's registered allocation) | {med(views):.0f} |",
                f"| dash_forward_stream (send, daemon queues the op, reply, stream wait) | {med(calls):.0f} |",
                f"| of which the daemon's queue_us (received to the worker starting it) | "
                f"{statistics.median(queue):.0f} |",
                f"| dash_cuda_tensors of 9 tensors (a backward's) | {med(bviews):.0f} |",
                f"| dash_backward_stream | {med(bcalls):.0f} |"]

    B = torch.nn.attention.SDPBackend
    rows = []
    parts = []
    fwd_starts, bwd_starts = [], []  # the breakdown's calls, for dashd's launch lines
    lines = []  # dashd's log as the breakdown left it
    try:
        from dash_attn import _client
        from dash_attn import _native
        native = _client.client_by_id(0, q)._native
        how = " (native op)" if native else ""
        # a packed batch takes the native op where its library has attn_varlen
        vhow = " (native op)" if native and _native._varlen_op is not None else ""
        both = [("dash_attn forward" + how, dash_fwd)]
        if native:  # the same calls on the ctypes path, in the same run
            both.append(("dash_attn forward (ctypes path)", ctypes_path(dash_fwd)))
        both.append(("torch.ops.dash_attn.fwd, as in a compiled graph" + how, ops_fwd))
        if native:
            both.append(("torch.ops.dash_attn.fwd (ctypes path)", ctypes_path(ops_fwd)))
        both.append(("dash_attn varlen forward" + vhow, varlen_fwd))
        if vhow:
            both.append(("dash_attn varlen forward (ctypes path)", ctypes_path(varlen_fwd)))
        pairs = [("dash_attn forward + backward" + how, dash_fwd_bwd)]
        if native:
            pairs.append(("dash_attn forward + backward (ctypes path)", ctypes_path(dash_fwd_bwd)))
        pairs.append(("torch.ops.dash_attn.fwd + bwd, as in a compiled graph" + how, ops_fwd_bwd))
        if native:
            pairs.append(("torch.ops.dash_attn.fwd + bwd (ctypes path)", ctypes_path(ops_fwd_bwd)))
        pairs.append(("dash_attn varlen forward + backward" + vhow, varlen_fwd_bwd))
        if vhow:
            pairs.append(("dash_attn varlen forward + backward (ctypes path)",
                          ctypes_path(varlen_fwd_bwd)))
        for name, fn in both + [("SDPA flash forward", sdpa_fwd(B.FLASH_ATTENTION)),
                                ("SDPA cuDNN forward", sdpa_fwd(B.CUDNN_ATTENTION))] + pairs + [
                         ("SDPA flash forward + backward", sdpa(B.FLASH_ATTENTION)),
                         ("SDPA cuDNN forward + backward", sdpa(B.CUDNN_ATTENTION))]:
            try:
                ms, host_us, alone_us = timed_loop(fn, a.iters)
                rows.append(f"| {name} | {ms:.3f} | {host_us:.0f} | {alone_us:.0f} |")
            except Exception as e:  # a backend missing on this build: say so, go on
                rows.append(f"| {name} | failed: {type(e).__name__}: {str(e)[:80]} | | |")
        parts = breakdown()
        # dashd's lines up to here are the breakdown's (and the loops' before it); the
        # profile's calls below must not be read as the breakdown's
        with open(os.path.join(work, "dashd.log")) as f:
            lines = f.readlines()
        if a.profile:
            import cProfile
            import pstats
            for name, fn in (("forwards", dash_fwd), ("forward + backward pairs", dash_fwd_bwd)):
                pr = cProfile.Profile()
                pr.enable()
                for _ in range(100):
                    fn()
                torch.cuda.synchronize()
                pr.disable()
                print(f"cProfile, 100 {name}:")
                pstats.Stats(pr).sort_stats("tottime").print_stats(30)
    finally:
        dashd_proc.stop(d)
    # the daemon's side of the breakdown's forwards: the last iters "forward queued" lines
    import re
    pat = re.compile(r"forward queued on the device; us from receipt: validated (\d+), "
                     r"worker started (\d+), on the device (\d+), replying (\d+)")
    got = [tuple(map(int, m.groups())) for m in (pat.search(line) for line in lines) if m]
    got = got[-a.iters:]
    if got:
        names = ["validated and queued for the worker", "the worker started it",
                 "queued on the device (wait event, kernels, record event)",
                 "the loop sends the reply"]
        for i, nm in enumerate(names):
            parts.append(f"| daemon, from receipt until {nm} | "
                         f"{statistics.median(x[i] for x in got):.0f} |")
    # signal-ordered ops (the mode on sm_90) have no early reply: dashd logs their launch
    for kind, starts in (("forward", fwd_starts), ("backward", bwd_starts)):
        hops = dashd_proc.launch_hops(lines, kind, starts)
        if isinstance(hops, str):
            if not got:  # said, not dropped
                parts.append(f"| {kind}: dashd's hops to the GPU | not measured: {hops} |")
            continue
        parts += [f"| {kind}, signal-ordered: {what} | {us:.0f} |" for what, us in hops]
    mps = "yes" if os.environ.get("CUDA_MPS_PIPE_DIRECTORY") else "no"
    text = "\n".join([
        f"shape: causal bf16 (b, s, h, d) = {shape}; {a.iters} calls per loop after 20 "
        f"warm-ups; torch {torch.__version__}; {torch.cuda.get_device_name()}; MPS env: {mps}",
        "",
        "| call | ms per call (loop) | host us per call (median) | host us, drained (median) |",
        "| --- | ---: | ---: | ---: |",
        *rows, "",
        "Where a dash_attn forward's host time goes (median us, same shape, each call after a synchronise):", "",
        "| part | us |", "| --- | ---: |", *parts, ""])
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
