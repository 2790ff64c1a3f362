# SPDX-License-Identifier: BSD-3-Clause
"""Why a dash_attn backward costs more host time on autograd's device thread than on the
calling thread (issue 20; bench/bwd_parts.py on an H100: Client.backward 131 us inside
o.backward(), 78 us called directly; o.backward alone 526 us, 211 us with autograd's
multithreading off). Times Client.backward's layers one by one (median us of --iters calls,
each after a synchronise) in four settings: called on the main thread; inside o.backward()
(autograd's device thread); inside o.backward() with multithreading off; called on a plain
Python thread kept alive between calls.

    python3 bench/bwd_thread.py --dashd PATH [--iters N] [--device cuda|cpu]
"""
import argparse
import os
import queue
import statistics
import tempfile
import threading
import time

import torch

import dashd_proc  # bench/: dashd on a private endpoint

ap = argparse.ArgumentParser()
ap.add_argument("--dashd", required=True)
ap.add_argument("--iters", type=int, default=100)
ap.add_argument("--device", default="cuda", help="cpu: a dry run on dashd's CPU engine")
a = ap.parse_args()
d = dashd_proc.start_dashd(a.dashd, tempfile.mkdtemp(prefix="dash-bwdthread-"), "--backend",
                           "cuda" if a.device == "cuda" else "cpu")
import dash_attn  # noqa: E402
from dash_attn import _client, _lib  # noqa: E402

dev = a.device
sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
dt = torch.bfloat16 if dev == "cuda" else torch.float32
shape = (8, 1024, 12, 64) if dev == "cuda" else (1, 64, 2, 32)
g = torch.Generator(device=dev).manual_seed(0)
q, k, v = (torch.randn(shape, device=dev, dtype=dt, generator=g).requires_grad_() for _ in range(3))
dout = torch.randn(shape, device=dev, dtype=dt, generator=g)
c = _client.default_client()

# layer timers: each wrapped function adds its duration to the current call's record
rec = {}


def timed(owner, name, key):
    f = getattr(owner, name)
    static = isinstance(getattr(owner, "__dict__", {}).get(name), staticmethod)

    def w(*args, **kw):
        t0 = time.perf_counter()
        try:
            return f(*args, **kw)
        finally:
            rec[key] = rec.get(key, 0.0) + time.perf_counter() - t0
    setattr(owner, name, staticmethod(w) if static else w)


timed(_client, "_check_inputs", "checks")
timed(_client.Client, "_attn", "attn params")
timed(_client.Client, "_tag", "audit tag")
timed(_client.Client, "_cuda_tensors", "dash_cuda_tensors (9 tensors)")
timed(_lib, "dash_backward_stream", "dash_backward_stream")
timed(_lib, "dash_cuda_tensors", "  of which the libdash call")
timed(_client.Client, "_backward_cuda", "_backward_cuda (all below it)")
timed(_client.Client, "backward", "Client.backward (all)")
KEYS = ["Client.backward (all)", "checks", "attn params", "_backward_cuda (all below it)",
        "audit tag", "dash_cuda_tensors (9 tensors)", "  of which the libdash call",
        "dash_backward_stream"]


def run(setup, call, n=a.iters):
    """median us per key over n calls (after 10 warm-ups), and of the whole call"""
    per = {k: [] for k in KEYS + ["the whole call"]}
    for i in range(n + 10):
        st = setup()
        sync()
        rec.clear()
        t0 = time.perf_counter()
        call(st)
        t1 = time.perf_counter()
        if i >= 10:
            for k in KEYS:
                per[k].append(rec.get(k, 0.0))
            per["the whole call"].append(t1 - t0)
    sync()
    return {k: statistics.median(x) * 1e6 for k, x in per.items()}


def fwd():
    return dash_attn.flash_attn_func(q, k, v, causal=True)


def fwd_detached():
    return c.forward(q.detach(), k.detach(), v.detach(), causal=True)


def direct(s):
    c.backward(dout, q.detach(), k.detach(), v.detach(), s[0], s[1], causal=True)


jobs, done = queue.Queue(), queue.Queue()


def worker():
    while True:
        s = jobs.get()
        if s is None:
            return
        direct(s)
        done.put(1)


th = threading.Thread(target=worker, daemon=True)
th.start()


def on_thread(s):
    jobs.put(s)
    done.get()


cols = [("main thread, direct", run(fwd_detached, direct)),
        ("o.backward (device thread)", run(fwd, lambda o: o.backward(dout)))]
with torch.autograd.set_multithreading_enabled(False):
    cols.append(("o.backward, multithreading off", run(fwd, lambda o: o.backward(dout))))
cols.append(("a Python thread, direct", run(fwd_detached, on_thread)))
jobs.put(None)
print("| layer (median us) | " + " | ".join(n for n, _ in cols) + " |")
print("| --- |" + " ---: |" * len(cols))
for k in ["the whole call"] + KEYS:
    print(f"| {k} | " + " | ".join(f"{r[k]:.0f}" for _, r in cols) + " |")
dashd_proc.stop(d)
print(f"\n{torch.cuda.get_device_name() if dev == 'cuda' else 'cpu (dry run)'}; torch "
      f"{torch.__version__}; shape {shape} causal; MPS env: "
      f"{'yes' if os.environ.get('CUDA_MPS_PIPE_DIRECTORY') else 'no'}")
