"""Where a dash_attn backward's host time goes on CUDA tensors (issue 20): each variant
timed alone after a synchronise (median us of --iters calls), through one dashd.
  python3 bench/bwd_parts.py --dashd PATH [--iters N]"""
import argparse, ctypes, os, statistics, tempfile, time
import torch

import dashd_proc  # bench/: dashd on a private endpoint

ap = argparse.ArgumentParser()
ap.add_argument("--dashd", required=True)
ap.add_argument("--iters", type=int, default=100)
a = ap.parse_args()
d = dashd_proc.start_dashd(a.dashd, tempfile.mkdtemp(prefix="dash-bwdparts-"), "--backend", "cuda")
import dash_attn
from dash_attn import _client, _lib

dev = "cuda"
shape = (8, 1024, 12, 64)
g = torch.Generator(device=dev).manual_seed(0)
q, k, v = (torch.randn(shape, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_()
           for _ in range(3))
dout = torch.randn(shape, device=dev, dtype=torch.bfloat16, generator=g)
c = _client.default_client()
attn = c._attn(2, True, 0.0, "auto", 0)
qd, kd, vd = (x.detach() for x in (q, k, v))


def alone(setup, timed, n=a.iters):
    xs = []
    for i in range(n + 10):
        st = setup()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        timed(st)
        t1 = time.perf_counter()
        if i >= 10:
            xs.append(t1 - t0)
    torch.cuda.synchronize()
    return statistics.median(xs) * 1e6


rows = []
def row(name, us):
    rows.append((name, us))
    print(f"| {name} | {us:.0f} |", flush=True)

print("| part (timed alone after a synchronise) | median us |\n| --- | ---: |")
row("forward, no grad", alone(lambda: None, lambda s: dash_attn.flash_attn_func(qd, kd, vd, causal=True)))
row("forward, graph recorded", alone(lambda: None, lambda s: dash_attn.flash_attn_func(q, k, v, causal=True)))
row("forward + o.backward(dout), the pair timed (percall's drained figure)", alone(
    lambda: None, lambda s: dash_attn.flash_attn_func(q, k, v, causal=True).backward(dout)))
row("o.backward(dout) alone (the forward ran and was synchronised, not timed)", alone(
    lambda: dash_attn.flash_attn_func(q, k, v, causal=True), lambda o: o.backward(dout)))
for x in (q, k, v):
    x.grad = None
row("torch.autograd.grad(o, (q, k, v), dout) (no accumulation)", alone(
    lambda: dash_attn.flash_attn_func(q, k, v, causal=True),
    lambda o: torch.autograd.grad(o, (q, k, v), dout)))
def fwd_direct():
    out, lse = c._forward_cuda(qd, kd, vd, attn)
    return out, lse
row("client._backward_cuda direct (no autograd)", alone(
    fwd_direct, lambda s: c._backward_cuda(dout, qd, kd, vd, s[0], s[1], attn)))
row("client.backward (checks + _backward_cuda)", alone(
    fwd_direct, lambda s: c.backward(dout, qd, kd, vd, s[0], s[1], causal=True)))
out, lse = fwd_direct()
def direct(call, tensors):
    """libdash alone: dash_cuda_tensors of [(tensor, ndim)], then one stream-ordered call"""
    ts = c._cuda_tensors(tensors)
    c._check(call(c._c, ctypes.byref(attn), *[ctypes.byref(ts[i]) for i in range(len(tensors))],
                  ctypes.c_void_p(torch.cuda.current_stream().cuda_stream), None))


fwd_views = [(qd, 4), (kd, 4), (vd, 4), (out, 4), (lse, 3)]
grads = [(torch.empty_like(x), 4) for x in (qd, kd, vd)]
row("dash_cuda_tensors + dash_backward_stream, same outputs each call", alone(
    lambda: None, lambda s: direct(_lib.dash_backward_stream, fwd_views + [(dout, 4)] + grads)))
row("... fresh outputs (torch.empty_like) each call", alone(
    lambda: None, lambda s: direct(_lib.dash_backward_stream,
                                   fwd_views + [(dout, 4)] + [(torch.empty_like(x), 4) for x in (qd, kd, vd)])))
row("dash_cuda_tensors + dash_forward_stream, same outputs", alone(
    lambda: None, lambda s: direct(_lib.dash_forward_stream, fwd_views)))
# autograd runs a CUDA graph's nodes on its device thread: the backward's hand-offs to it
# and back, timed from inside (the entry and exit on that thread of Client._backward_checked,
# what the eager Function's backward calls)
marks = {}
_orig_backward = _client.Client._backward_checked
def _marked_backward(self, *args, **kw):
    marks["in"] = time.perf_counter()
    try:
        return _orig_backward(self, *args, **kw)
    finally:
        marks["out"] = time.perf_counter()
_client.Client._backward_checked = _marked_backward
hand_in, inside, hand_out = [], [], []
for i in range(a.iters + 10):
    o = dash_attn.flash_attn_func(q, k, v, causal=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    o.backward(dout)
    t1 = time.perf_counter()
    if i >= 10:
        hand_in.append(marks["in"] - t0)
        inside.append(marks["out"] - marks["in"])
        hand_out.append(t1 - marks["out"])
torch.cuda.synchronize()
_client.Client._backward_checked = _orig_backward
med = lambda xs: statistics.median(xs) * 1e6
row("o.backward: from the call to the client's entry (engine, device thread, GIL)", med(hand_in))
row("o.backward: the client's _backward_checked itself", med(inside))
row("o.backward: from the client's exit to the call's return", med(hand_out))
with torch.autograd.set_multithreading_enabled(False):
    row("o.backward alone, autograd multithreading off (on the calling thread)", alone(
        lambda: dash_attn.flash_attn_func(q, k, v, causal=True), lambda o: o.backward(dout)))


class _Stub(torch.autograd.Function):
    """autograd's cost alone: a CUDA Function whose forward and backward only allocate"""
    @staticmethod
    def forward(ctx, q, k, v):
        ctx.save_for_backward(q, k, v)
        return torch.empty_like(q)

    @staticmethod
    def backward(ctx, dout):
        return tuple(torch.empty_like(x) for x in ctx.saved_tensors)


# does any layer wait for the GPU? each call timed behind 10 ms of queued GPU work
# (torch.cuda._sleep): a call that returns in its usual time queues without waiting; one that
# takes ~10 ms more waits for the GPU somewhere (then the next rows' split says where)
cyc = int(getattr(torch.cuda.get_device_properties(0), "clock_rate", 2_000_000) * 10)  # kHz x 10 ms
def behind(setup, timed, n=20):
    xs = []
    for i in range(n + 3):
        st = setup()
        torch.cuda.synchronize()
        torch.cuda._sleep(cyc)
        t0 = time.perf_counter()
        timed(st)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        if i >= 3:
            xs.append(t1 - t0)
    return statistics.median(xs) * 1e6
row("behind 10 ms of GPU work: forward, graph recorded", behind(
    lambda: None, lambda s: dash_attn.flash_attn_func(q, k, v, causal=True)))
row("behind 10 ms of GPU work: o.backward(dout) alone", behind(
    lambda: dash_attn.flash_attn_func(q, k, v, causal=True), lambda o: o.backward(dout)))
row("behind 10 ms of GPU work: client._backward_cuda direct", behind(
    fwd_direct, lambda s: c._backward_cuda(dout, qd, kd, vd, s[0], s[1], attn)))
row("behind 10 ms of GPU work: dash_backward_stream, same outputs", behind(
    lambda: None, lambda s: direct(_lib.dash_backward_stream, fwd_views + [(dout, 4)] + grads)))
row("behind 10 ms of GPU work: the stub Function's backward", behind(
    lambda: _Stub.apply(q, k, v), lambda o: o.backward(dout)))
row("a stub Python Function's backward alone (allocations only)", alone(
    lambda: _Stub.apply(q, k, v), lambda o: o.backward(dout)))
with torch.autograd.set_multithreading_enabled(False):
    row("... with autograd multithreading off", alone(lambda: _Stub.apply(q, k, v), lambda o: o.backward(dout)))
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
qt, kt, vt = (x.detach().transpose(1, 2).contiguous().requires_grad_() for x in (q, k, v))
doutt = dout.transpose(1, 2).contiguous()
for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cuDNN", SDPBackend.CUDNN_ATTENTION)):
    def sd(be=be):
        with sdpa_kernel(be):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)
    row(f"SDPA {name}: forward + backward, the pair timed", alone(lambda: None, lambda s: sd().backward(doutt)))
    row(f"SDPA {name}: backward alone", alone(sd, lambda o: o.backward(doutt)))
    with torch.autograd.set_multithreading_enabled(False):
        row(f"SDPA {name}: backward alone, autograd multithreading off", alone(sd, lambda o: o.backward(doutt)))
row("behind 10 ms of GPU work: SDPA flash backward alone", behind(
    lambda: sd(SDPBackend.FLASH_ATTENTION), lambda o: o.backward(doutt)))
rtt = ctypes.c_uint64()
row("dash_ping", alone(lambda: None, lambda s: c._check(_lib.dash_ping(c._c, -1, ctypes.byref(rtt)))))
# what autograd's engine does around our backward, as PyTorch's profiler sees it (host side)
from torch.profiler import profile, ProfilerActivity
for _ in range(5):
    dash_attn.flash_attn_func(q, k, v, causal=True).backward(dout)
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CPU]) as prof:
    for _ in range(20):
        o = dash_attn.flash_attn_func(q, k, v, causal=True)
        torch.cuda.synchronize()
        o.backward(dout)
        torch.cuda.synchronize()
print("\ntorch.profiler, 20 pairs (each half after a synchronise), host time:\n")
print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=30, max_name_column_width=70))
dashd_proc.stop(d)
print(f"\n{torch.cuda.get_device_name()}; torch {torch.__version__}; shape {shape} causal bf16; "
      f"MPS env: {'yes' if os.environ.get('CUDA_MPS_PIPE_DIRECTORY') else 'no'}")
