#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""py_layers.py - the host time of dash_attn's Python layers alone (issue 20): the eager
flash_attn_func path (argument checks, the autograd Function, the client's checks and
request parameters) on CPU tensors, with the transport replaced by a stub that returns at
once, so no daemon, no libdash round trip and no GPU are timed. Best of 5 runs of N calls.

    python3 bench/py_layers.py [--calls N] [--profile]

Needs torch and the binding (client/python) importable; libdash is loaded only for its
constants (DASH_LIBRARY, as the tests set it)."""
import argparse
import os
import sys
import threading
import timeit

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "client", "python"))
import torch  # noqa: E402
import dash_attn  # noqa: E402
from dash_attn import _client  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
    stub = object.__new__(_client.Client)  # no connection: only the Python side runs
    stub._lock = threading.Lock()
    stub._forward_host = lambda q, k, v, attn: (q, torch.empty((q.shape[0], q.shape[2], q.shape[1])))
    stub._backward_host = lambda dout, q, k, v, out, lse, attn: tuple(torch.empty_like(x) for x in (q, k, v))
    _client.client_by_id = lambda cid, q: stub
    import datetime
    import platform
    import subprocess
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip() or "unknown"
    print("# dash_attn's Python layers alone (bench/py_layers.py)\n")
    print(f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%MZ}")
    print(f"- machine: {platform.node()}, {os.cpu_count()} CPUs, {platform.platform()}; "
          f"Python {platform.python_version()}, torch {torch.__version__}")
    print(f"- commit: {commit}; command: python3 bench/py_layers.py --calls {a.calls}\n")
    q, k, v = (torch.randn(8, 1024, 12, 64, dtype=torch.bfloat16) for _ in range(3))
    qg = q.clone().requires_grad_(True)
    for name, f in (("no grad", lambda: dash_attn.flash_attn_func(q, k, v, causal=True)),
                    ("grad graph", lambda: dash_attn.flash_attn_func(qg, k, v, causal=True))):
        for _ in range(2000):
            f()
        best = min(timeit.repeat(f, number=a.calls, repeat=5)) / a.calls * 1e6
        print(f"flash_attn_func, Python layers ({name}, stub transport): {best:.2f} us a call")
    # forward + backward: the autograd Function's backward, the client's checks and
    # allocations, autograd's engine and its gradient accumulation - on tiny tensors, so
    # that the accumulation's arithmetic (a CPU add here, a kernel launch on a GPU) is not
    # what is timed
    qs, ks, vs = (torch.randn(1, 16, 2, 64, dtype=torch.bfloat16).requires_grad_(True) for _ in range(3))
    ds = torch.randn(1, 16, 2, 64, dtype=torch.bfloat16)

    def fwd_bwd():
        dash_attn.flash_attn_func(qs, ks, vs, causal=True).backward(ds)
    for _ in range(2000):
        fwd_bwd()
    best = min(timeit.repeat(fwd_bwd, number=a.calls, repeat=5)) / a.calls * 1e6
    print(f"flash_attn_func + backward, Python layers and autograd (tiny tensors, stub transport): "
          f"{best:.2f} us a pair")
    if a.profile:
        import cProfile
        import pstats
        f = lambda: dash_attn.flash_attn_func(q, k, v, causal=True)  # noqa: E731
        cProfile.runctx("for _ in range(n): f()", {"f": f, "n": a.calls}, {}, "/tmp/py_layers.prof")
        pstats.Stats("/tmp/py_layers.prof").sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
