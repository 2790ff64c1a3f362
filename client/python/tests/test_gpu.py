# SPDX-License-Identifier: BSD-3-Clause
"""dash_attn on the GPU through a real `dashd --backend cuda` (DASH_TEST_BACKEND=cuda, as
`make test-gpu` sets it): values and gradients against PyTorch's math attention in
float64, bitwise repeats, tensors that are pieces of the caching allocator's blocks and
strided views, and stream ordering - the result is right when the producer of q is still
running at submit time, and the call returns before it has finished. And PyTorch 2 on CUDA
tensors: opcheck of the custom ops, torch.compile (fullgraph, and reduce-overhead) giving
the eager bits, a CUDA-graph capture refused clearly, float64 refused, the drop-ins;
sliding windows and softcap against float64.

Runs under pytest, or as a script (`python3 test_gpu.py`) where pytest is not installed.
Skips without a CUDA device.
"""
import contextlib
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import Daemon, free_port  # noqa: E402
import random_cases  # noqa: E402

import dash_attn  # noqa: E402

try:
    import pytest

    pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

    @pytest.fixture(autouse=True)
    def _connected(client):
        """Every test talks to the session's dashd (conftest's client fixture)."""
        yield
except ImportError:
    pytest = None

SEED = int.from_bytes(os.urandom(4), "little")


def ref_attention(q, k, v, causal):
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    kk = k.repeat_interleave(hq // hkv, dim=2)
    vv = v.repeat_interleave(hq // hkv, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) / math.sqrt(d)
    if causal:
        i = torch.arange(sq, device=q.device).view(-1, 1)
        j = torch.arange(sk, device=q.device).view(1, -1)
        s = s.masked_fill(j > i + (sk - sq), float("-inf"))
    return torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, dim=-1), vv)


def rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def inputs(shape, dtype, seed):
    b, sq, sk, hq, hkv, d = shape
    g = torch.Generator(device="cuda").manual_seed(seed)
    mk = lambda s, h: torch.randn(b, s, h, d, generator=g, device="cuda").to(dtype)  # noqa: E731
    return mk(sq, hq), mk(sk, hkv), mk(sk, hkv), mk(sq, hq)


def check_against_reference(shape, dtype, causal, tol):
    q, k, v, dout = inputs(shape, dtype, SEED)
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    out = dash_attn.flash_attn_func(q, k, v, causal=causal)
    out.backward(dout)
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref = ref_attention(q64, k64, v64, causal)
    ref.backward(dout.double())
    assert rel(out.detach(), ref.detach()) < tol, f"out, seed {SEED}"
    for name, got, want in (("dq", q.grad, q64.grad), ("dk", k.grad, k64.grad),
                            ("dv", v.grad, v64.grad)):
        assert rel(got, want) < tol, f"{name}, seed {SEED}"
    assert dash_attn.last_result()["backend"] == "cuda"


def test_gpu_values_and_gradients_match_float64():
    for shape in [(2, 300, 300, 8, 8, 64), (1, 257, 513, 8, 2, 128)]:
        for causal in (False, True):
            check_against_reference(shape, torch.bfloat16, causal, 1e-2)
            check_against_reference(shape, torch.float16, causal, 5e-3)


def _grads(fn, q, k, v, dout):
    q, k, v = (x.detach().clone().requires_grad_() for x in (q, k, v))
    out = fn(q, k, v)
    out.backward(dout)
    torch.cuda.synchronize()
    return out.detach(), q.grad, k.grad, v.grad, out.grad_fn.name()


def test_gpu_the_native_op_gives_the_ctypes_paths_bits():
    # an eager call on CUDA tensors runs as one C++ autograd node where the native op is
    # loaded (dash_attn/_native.py); the same requests as the ctypes path, so the same bits -
    # with GQA, a window and softcap, a strided q, fp16 - and the backward on autograd's thread
    from dash_attn import _client
    c = _client.client_by_id(0, torch.empty(1, device="cuda"))
    if not c._native:
        pytest.skip(f"the native op is not loaded: {dash_attn._native.why_not}")
    cases = [((2, 300, 300, 8, 2, 64), torch.bfloat16, dict(causal=True)),
             ((1, 257, 513, 4, 4, 128), torch.float16, dict(window_size=(50, 20), softcap=30.0)),
             ((1, 200, 200, 4, 4, 96), torch.bfloat16, dict(schedule="shift"))]
    for n, (shape, dtype, kw) in enumerate(cases):
        q, k, v, dout = inputs(shape, dtype, SEED ^ (40 + n))
        if n == 0:  # q as a strided view (heads and seqlen swapped back)
            q = q.transpose(1, 2).contiguous().transpose(1, 2)
        native = _grads(lambda a, b, c_: dash_attn.flash_attn_func(a, b, c_, **kw), q, k, v, dout)
        c._native = False
        try:
            ctypes_path = _grads(lambda a, b, c_: dash_attn.flash_attn_func(a, b, c_, **kw),
                                 q, k, v, dout)
        finally:
            c._native = True
        assert "attn_fn" in native[4] and "attn_fn" not in ctypes_path[4], (native[4],
                                                                          ctypes_path[4])
        for name, a, b in zip(("out", "dq", "dk", "dv"), native[:4], ctypes_path[:4]):
            assert torch.equal(a, b), f"case {n}: {name} differs between the paths"
            assert torch.isfinite(a).all(), f"case {n}: {name}"


def test_gpu_the_custom_ops_take_the_native_request_with_the_ctypes_bits():
    # dash_attn::fwd / bwd (torch.compile's graphs, opcheck, an audit block inside compiled
    # code) run the native op's requests on CUDA tensors, without its autograd node: the
    # same bits as their ctypes path, under the same audit tag
    from dash_attn import _client, _native
    c = _client.client_by_id(0, torch.empty(1, device="cuda"))
    if not c._native:
        pytest.skip(f"the native op is not loaded: {_native.why_not}")
    calls = []
    fwd0, bwd0 = _native.forward, _native.backward
    _native.forward = lambda *a: calls.append("fwd") or fwd0(*a)
    _native.backward = lambda *a: calls.append("bwd") or bwd0(*a)
    try:
        for n, (shape, dtype, left, right, cap) in enumerate(
                [((2, 300, 300, 8, 2, 64), torch.bfloat16, -1, -1, 0.0),
                 ((1, 257, 513, 4, 4, 128), torch.float16, 50, 20, 30.0)]):
            q, k, v, dout = inputs(shape, dtype, SEED ^ (60 + n))
            runs = []
            for native in (True, False):
                c._native = native
                try:
                    out, lse, tag = torch.ops.dash_attn.fwd(q, k, v, None, True, left, right, cap,
                                                            "auto", 0, True, 7, "ops")
                    grads = torch.ops.dash_attn.bwd(dout, q, k, v, out, lse, tag, None, True, left,
                                                    right, cap, "auto", 0)
                finally:
                    c._native = True
                torch.cuda.synchronize()
                runs.append((out, lse) + tuple(grads))
            assert tag.tolist()[:2] == [1, 7]
            for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), *runs):
                assert torch.equal(a, b), f"case {n}: {name} differs between the paths"
    finally:
        _native.forward, _native.backward = fwd0, bwd0
    assert calls == ["fwd", "bwd"] * 2, calls


def _assert_second_order_refused(out, q, dout):
    """A gradient of out's gradient in q raises (the native node's refusal), never a silent
    zero."""
    dq, = torch.autograd.grad(out, q, dout, create_graph=True)
    try:
        torch.autograd.grad(dq.float().square().sum(), q)
        raised = None
    except RuntimeError as e:
        raised = e
    assert raised is not None and "second-order" in str(raised), str(raised)


def test_gpu_the_native_op_refuses_second_order_gradients():
    from dash_attn import _client
    c = _client.client_by_id(0, torch.empty(1, device="cuda"))
    if not c._native:
        pytest.skip(f"the native op is not loaded: {dash_attn._native.why_not}")
    # (its refusals as DashError, a capture refused: the tests above and below run on it)
    q, k, v, dout = inputs((1, 128, 128, 2, 2, 64), torch.bfloat16, SEED ^ 51)
    # a gradient of the gradients raises, it is not silently zero
    for x in (q, k, v):
        x.requires_grad_()
    out = dash_attn.flash_attn_func(q, k, v, causal=True)
    _assert_second_order_refused(out, q, dout)
    dash_attn.synchronize()


def test_gpu_the_native_op_runs_under_compiled_autograd():
    # an eager call's node (the native op's C++ node) in a backward that compiled autograd
    # runs: the eager backward's bits, lse still without a gradient
    from dash_attn import _client
    import torch._dynamo.compiled_autograd as compiled_autograd
    c = _client.client_by_id(0, torch.empty(1, device="cuda"))
    if not c._native:
        pytest.skip(f"the native op is not loaded: {dash_attn._native.why_not}")
    q, k, v, dout = inputs((2, 256, 256, 4, 2, 64), torch.bfloat16, SEED ^ 53)
    grads = []
    for compiled in (False, True):
        x = [t.clone().requires_grad_() for t in (q, k, v)]
        out, lse = dash_attn.flash_attn_func(*x, causal=True, return_softmax_lse=True)
        assert not lse.requires_grad
        loss = (out.float() * dout.float()).sum()
        if compiled:
            with compiled_autograd._enable(torch.compile(backend="eager")):
                loss.backward()
        else:
            loss.backward()
        grads.append([t.grad for t in x])
    torch.cuda.synchronize()
    for a, b in zip(*grads):
        assert torch.equal(a.view(torch.int16), b.view(torch.int16))
    dash_attn.synchronize()


def test_gpu_gradients_repeat_bitwise():
    q, k, v, dout = inputs((1, 512, 512, 8, 8, 128), torch.bfloat16, SEED ^ 1)
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    first = None
    for _ in range(5):
        for x in (q, k, v):
            x.grad = None
        dash_attn.flash_attn_func(q, k, v, causal=True).backward(dout)
        got = [x.grad.view(torch.int16).clone() for x in (q, k, v)]
        if first is None:
            first = got
        assert all(torch.equal(a, b) for a, b in zip(first, got))


def test_gpu_views_of_cached_blocks_and_strided_slices():
    # one block of the caching allocator holding several tensors, and a packed qkv
    g = torch.Generator(device="cuda").manual_seed(SEED ^ 2)
    qkv = torch.randn(2, 200, 3, 4, 64, generator=g, device="cuda").bfloat16()
    q, k, v = qkv.unbind(dim=2)
    a = dash_attn.flash_attn_func(q, k, v, causal=True)
    b = dash_attn.flash_attn_func(q.contiguous(), k.contiguous(), v.contiguous(), causal=True)
    assert torch.equal(a, b)
    big = torch.randn(1, 400, 4, 64, generator=g, device="cuda").bfloat16()
    sl = big[:, 100:300]  # starts mid-allocation
    c = dash_attn.flash_attn_func(sl, sl, sl)
    d = dash_attn.flash_attn_func(sl.clone(), sl.clone(), sl.clone())
    assert torch.equal(c, d)


def test_gpu_inputs_whose_last_dim_is_strided_have_a_backward_too():
    # the forward copies such q (dashd needs the last stride 1); the backward must too
    g = torch.Generator(device="cuda").manual_seed(SEED ^ 7)
    q = torch.randn(1, 128, 64, 4, generator=g, device="cuda").bfloat16().transpose(-1, -2)
    k, v = (torch.randn(1, 128, 4, 64, generator=g, device="cuda").bfloat16() for _ in "kv")
    assert q.stride(-1) != 1
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    dash_attn.flash_attn_func(q, k, v, causal=True).sum().backward()
    dash_attn.synchronize()
    qc, kc, vc = (x.detach().contiguous().requires_grad_() for x in (q, k, v))
    dash_attn.flash_attn_func(qc, kc, vc, causal=True).sum().backward()
    for x, y in ((q, qc), (k, kc), (v, vc)):
        assert torch.equal(x.grad, y.grad)


def test_gpu_stream_order_holds_when_the_producer_is_still_running():
    q0, k, v, dout = inputs((1, 1024, 1024, 8, 8, 128), torch.bfloat16, SEED ^ 3)
    expect = dash_attn.flash_attn_func(q0, k, v, causal=True)
    torch.cuda.synchronize()
    q = torch.full_like(q0, float("nan"))
    torch.cuda._sleep(int(3e8))  # ~150-300 ms of GPU time before q gets its values
    q.copy_(q0)
    out = dash_attn.flash_attn_func(q, k, v, causal=True)
    early = not torch.cuda.current_stream().query()
    doubled = out * 2  # a consumer queued right behind the daemon's work
    torch.cuda.synchronize()
    assert early, "the call waited for the GPU instead of returning once queued"
    assert torch.equal(out, expect)
    assert torch.equal(doubled, expect * 2)
    # and the backward on another stream of the caller's
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        q.requires_grad_()
        torch.cuda._sleep(int(1e8))
        out = dash_attn.flash_attn_func(q, k, v, causal=True)
        out.backward(dout)
    torch.cuda.synchronize()
    q2 = q0.clone().requires_grad_()
    dash_attn.flash_attn_func(q2, k, v, causal=True).backward(dout)
    torch.cuda.synchronize()
    assert torch.equal(q.grad, q2.grad)


def test_gpu_a_failure_the_daemon_finds_is_raised_later_and_never_hangs():
    # head dim 84 (not a multiple of 8): the CUDA backend refuses it, after the call has
    # returned (the call only sends the op); the stream goes on, and synchronize() (or the
    # next call) raises
    q, k, v, _ = inputs((1, 128, 128, 2, 2, 84), torch.bfloat16, SEED ^ 5)
    dash_attn.flash_attn_func(q, k, v, causal=True)
    torch.cuda.synchronize()
    try:
        dash_attn.synchronize()
        raised = None
    except dash_attn.DashError as e:
        raised = e
    assert raised is not None, "the daemon's refusal was lost"
    assert "head" in str(raised).lower(), str(raised)
    q, k, v, _ = inputs((1, 128, 128, 2, 2, 64), torch.bfloat16, SEED ^ 6)
    dash_attn.flash_attn_func(q, k, v, causal=True)  # and the client goes on working
    dash_attn.synchronize()


def _raised(fn):
    try:
        fn()
    except dash_attn.DashError as e:
        return e
    return None


def test_gpu_a_refused_forward_leaves_out_and_lse_all_nan_before_the_stream_goes_on():
    # head dim 84, refused by the daemon after the call returned: once the stream has passed
    # the op, out and lse are all NaN (bytes 0xFF), not what the memory held before, and the
    # refusal is raised by synchronize()
    q, k, v, _ = inputs((1, 128, 128, 2, 2, 84), torch.bfloat16, SEED ^ 7)
    # the blocks the caching allocator hands the outputs next held zeros, not NaN
    z = (torch.zeros_like(q), torch.zeros(1, 2, 128, device="cuda"))
    del z
    out, lse = dash_attn.forward(q, k, v, causal=True)
    torch.cuda.synchronize()
    assert torch.isnan(out).all() and torch.isnan(lse).all()
    assert (out.view(torch.int16) == -1).all()  # every byte 0xFF
    raised = _raised(dash_attn.synchronize)
    assert raised is not None and "head" in str(raised).lower(), str(raised)


def test_gpu_a_refused_backward_leaves_the_gradients_all_nan_and_raises_at_the_next_call():
    # a daemon whose per-client limit admits the forward's tensor bytes (264 KB here) but
    # not the backward's (526 KB): dq, dk, dv are all NaN when the stream has passed it
    d = Daemon(extra=["--limit-request-bytes", "400K"])
    c = dash_attn.Client(d.endpoint, client_name="pytest-poison")
    try:
        q, k, v, dout = inputs((1, 256, 256, 2, 2, 64), torch.bfloat16, SEED ^ 8)
        out, lse = c.forward(q, k, v, causal=True)
        c.synchronize()
        z = tuple(torch.zeros_like(x) for x in (q, k, v))
        del z
        dq, dk, dv = c.backward(dout, q, k, v, out, lse, causal=True)
        torch.cuda.synchronize()
        for g in (dq, dk, dv):
            assert torch.isnan(g).all()
        # the next call raises the refusal (and is not sent: its outputs are NaN too)
        raised = _raised(lambda: c.forward(q, k, v, causal=True))
        assert raised is not None and "earlier" in str(raised), str(raised)
        out2, _ = c.forward(q, k, v, causal=True)  # and the client goes on
        c.synchronize()
        assert torch.equal(out2, out)
    finally:
        c.close()
        assert d.stop() == 0


def test_gpu_random_shapes_layouts_and_schedules_match_float64():
    random_cases.check(dash_attn, SEED ^ 4, 24, "cuda", [torch.bfloat16, torch.float16],
                       {torch.bfloat16: 1e-2, torch.float16: 5e-3})


# ---- PyTorch 2: the custom op, torch.compile, float64 and CUDA graphs on CUDA tensors ----------

def test_gpu_opcheck_passes_for_both_ops_on_cuda_tensors():
    q, k, v, dout = inputs((1, 130, 130, 4, 2, 64), torch.bfloat16, SEED ^ 7)
    for x in (q, k, v):
        x.requires_grad_()
    torch.library.opcheck(torch.ops.dash_attn.fwd.default,
                          (q, k, v, None, True, -1, -1, 0.0, "auto", 0, False, None, None))
    out, lse, tag = torch.ops.dash_attn.fwd(q.detach(), k.detach(), v.detach(), None, True,
                                            -1, -1, 0.0, "auto", 0, False, None, None)
    torch.library.opcheck(torch.ops.dash_attn.bwd.default,
                          (dout, q.detach(), k.detach(), v.detach(), out, lse, tag, None, True,
                           -1, -1, 0.0, "auto", 0))


class _Block(torch.nn.Module):
    def __init__(self, dim=512, heads=8, kv_heads=2):
        super().__init__()
        self.h, self.hkv, self.d = heads, kv_heads, dim // heads
        self.q = torch.nn.Linear(dim, dim, bias=False)
        self.kv = torch.nn.Linear(dim, 2 * kv_heads * self.d, bias=False)
        self.o = torch.nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.h, self.d)
        k, v = self.kv(x).view(b, s, 2, self.hkv, self.d).unbind(2)
        return self.o(dash_attn.flash_attn_func(q, k, v, causal=True).reshape(b, s, -1))


def _step(model, x, dy):
    x = x.detach().clone().requires_grad_()
    for p in model.parameters():
        p.grad = None
    y = model(x)
    y.backward(dy)
    torch.cuda.synchronize()
    return [y.detach(), x.grad] + [p.grad.clone() for p in model.parameters()]


def _compiled_matches_eager(mode):
    torch.manual_seed(SEED)
    model = _Block().cuda().bfloat16()
    g = torch.Generator(device="cuda").manual_seed(SEED ^ 8)
    x = torch.randn(2, 1000, 512, generator=g, device="cuda").bfloat16()
    dy = torch.randn(2, 1000, 512, generator=g, device="cuda").bfloat16()
    eager = _step(model, x, dy)
    torch._dynamo.reset()
    cm = torch.compile(model, fullgraph=True, mode=mode)
    for _ in range(3):  # reduce-overhead records on the later calls
        got = _step(cm, x, dy)
        for i, (a, b) in enumerate(zip(eager, got)):
            assert torch.equal(a, b), f"tensor {i} differs from eager ({mode}), seed {SEED}"


def test_gpu_compile_fullgraph_gives_the_eager_bits():
    _compiled_matches_eager("default")


def test_gpu_compile_reduce_overhead_leaves_the_op_out_of_cuda_graphs():
    # with the cudagraph_unsafe tag (recent PyTorch) Inductor keeps dash_attn's ops out of
    # its CUDA graphs and the bits are eager's; without it, the capture is refused clearly
    if getattr(torch._C.Tag, "cudagraph_unsafe", None) is not None:
        _compiled_matches_eager("reduce-overhead")
        return
    try:
        _compiled_matches_eager("reduce-overhead")
    except Exception as e:  # noqa: BLE001 - what matters is the message
        assert "CUDA graph capture" in str(e), str(e)


def test_gpu_a_cuda_graph_captured_beside_dash_attn_is_not_broken():
    """libdash's watchdog thread polls the done words of stream-ordered ops whose replies
    are unread; a CUDA graph captured meanwhile (global mode, PyTorch's default) must not
    be invalidated by it."""
    q, k, v, _ = inputs((1, 256, 256, 4, 4, 64), torch.bfloat16, SEED ^ 12)
    dash_attn.flash_attn_func(q, k, v, causal=True)  # its reply stays unread for now
    torch.cuda.synchronize()
    time.sleep(0.3)  # several watchdog ticks
    x = torch.ones(1024, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = x * 2
    graph.replay()
    torch.cuda.synchronize()
    assert bool((y == 2).all())
    dash_attn.synchronize()


def test_gpu_cuda_graph_capture_is_refused_clearly_and_the_client_goes_on():
    q, k, v, _ = inputs((1, 256, 256, 4, 4, 64), torch.bfloat16, SEED ^ 9)
    expect = dash_attn.flash_attn_func(q, k, v, causal=True)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    raised = None
    try:
        with torch.cuda.graph(graph):
            dash_attn.flash_attn_func(q, k, v, causal=True)
    except Exception as e:  # noqa: BLE001
        raised = e
    assert raised is not None and "CUDA graph capture" in str(raised), repr(raised)
    torch.cuda.synchronize()
    assert torch.equal(dash_attn.flash_attn_func(q, k, v, causal=True), expect)
    dash_attn.synchronize()


def test_gpu_float64_is_refused_with_a_clear_error():
    q = torch.randn(1, 64, 2, 64, device="cuda", dtype=torch.float64)
    try:
        dash_attn.flash_attn_func(q, q, q)
        raised = None
    except TypeError as e:
        raised = e
    assert raised is not None and "CPU engine" in str(raised)
    # CPU float64 tensors reach the CUDA backend through shared memory: dashd refuses them
    try:
        dash_attn.flash_attn_func(q.cpu(), q.cpu(), q.cpu())
        raised = None
    except dash_attn.DashError as e:
        raised = e
    assert raised is not None and raised.name == "DASH_EBADDTYPE" and "f64" in str(raised), \
        repr(raised)
    qb = q.bfloat16()
    assert torch.isfinite(dash_attn.flash_attn_func(qb, qb, qb)).all()  # still served


def test_gpu_float64_packed_batch_is_refused_before_anything_is_queued():
    """A packed batch of CUDA float64 tensors (the native op and the ctypes path alike) is
    refused at the call, as a dense one is - not sent, to fail later with its outputs
    poisoned and DASH_EBADDTYPE raised by whichever call comes next."""
    q = torch.randn(64, 2, 64, device="cuda", dtype=torch.float64)
    cu = torch.tensor([0, 20, 64], dtype=torch.int32)
    c = dash_attn._client.default_client(0)
    calls = [("DashVarlenFunction", lambda: dash_attn._varlen.DashVarlenFunction.apply(
        q, q, q, cu, cu, 44, 44, None, False, (-1, -1), 0.0, "auto", False, c))]
    if dash_attn._native.varlen_ok(c, q):  # the native op where it is loaded
        calls.append(("native", lambda: dash_attn._native.varlen_attention(
            c, q, q, q, cu, cu, 44, 44, None, False, (-1, -1), 0.0, "auto", False)))
    for name, call in calls:
        raised = None
        try:
            call()
        except TypeError as e:
            raised = e
        assert raised is not None and "CPU engine" in str(raised), (name, repr(raised))
    qb = q.bfloat16()
    out = dash_attn.flash_attn_varlen_func(qb, qb, qb, cu, cu, 44, 44)
    dash_attn.synchronize()  # nothing earlier failed
    assert torch.isfinite(out).all()


def test_gpu_the_native_op_refuses_tensors_of_another_dtype_than_the_ops():
    """torch.ops.dash_torch.* take the dtype as a number beside the tensors: a tensor of
    another dtype (a direct call) would be read with the request's element size and out
    left half unwritten. Refused as DASH_EINVAL before anything is queued."""
    if not dash_attn._native.load():
        if pytest is not None:
            pytest.skip("native op not loaded")
        return
    c = dash_attn._client.default_client(0)
    q = torch.randn(1, 64, 2, 64, device="cuda")  # float32
    kb = q.bfloat16()
    bf16 = dash_attn._lib.DASH_BF16
    for args in ((q, q, q), (kb, q, kb), (kb, kb, q)):
        raised = None
        try:
            dash_attn._native._run(dash_attn._native._op, *args, c.id, bf16, 0.0, False, -1, -1,
                                   0.0, 0, -1, None)
        except dash_attn.DashError as e:
            raised = e
        assert raised is not None and raised.name == "DASH_EINVAL" and "dtype" in str(raised), \
            repr(raised)
    dash_attn.synchronize()  # nothing was sent


def test_gpu_capture_on_another_device_than_the_current_is_refused():
    """The ctypes path looks for a capture on the tensors' device's current stream, not the
    current device's: a capture on cuda:1 while cuda:0 is current was not seen, and the
    op's ready word went into the graph instead of the stream (dashd's one stream then
    waited for it, every client behind it). Needs two GPUs; refused before dashd is asked,
    so the session's daemon (of cuda:0) serves."""
    if torch.cuda.device_count() < 2:
        if pytest is not None:
            pytest.skip("two GPUs needed")
        return
    dev = torch.device("cuda", 1)
    g = torch.Generator(device=dev).manual_seed(SEED)
    q = torch.randn(1, 128, 2, 64, generator=g, device=dev).bfloat16()
    c = dash_attn._client.default_client(0)  # connect()'s, whatever the device
    torch.cuda.synchronize(dev)
    s = torch.cuda.Stream(dev)
    graph = torch.cuda.CUDAGraph()
    raised = None
    with torch.cuda.device(1), torch.cuda.stream(s):
        graph.capture_begin()
        try:
            with torch.cuda.device(0):  # the tensors' device is not the current one
                c._forward_checked(q, q, q, False, None, "auto", 0, None, None)
        except RuntimeError as e:
            raised = e
        finally:
            try:
                graph.capture_end()
            except RuntimeError:
                pass
    assert raised is not None and "CUDA graph capture" in str(raised), repr(raised)


def ref_window_softcap(q, k, v, causal, window, softcap, scale):
    """float64 attention with flash-attn's window (bottom-right aligned) and softcap."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    kk = k.repeat_interleave(hq // hkv, dim=2)
    vv = v.repeat_interleave(hq // hkv, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(sq, device=q.device).view(-1, 1) + (sk - sq)
    j = torch.arange(sk, device=q.device).view(1, -1)
    left, right = window
    if causal:
        right = 0
    hide = torch.zeros(sq, sk, dtype=torch.bool, device=q.device)
    if left >= 0:
        hide |= j < i - left
    if right >= 0:
        hide |= j > i + right
    s = s.masked_fill(hide, float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)  # rows that see no key: 0
    return torch.einsum("bhqk,bkhd->bqhd", p, vv)


def test_gpu_window_and_softcap_match_float64():
    """window_size and softcap on CUDA tensors run on dashd's CUDA backend (issue 17):
    values and gradients against float64, GQA, causal and not, head dims 64 and 128, and
    96 (the 128 kernels on copies widened by zero columns)."""
    cases = [((2, 300, 300, 8, 2, 64), (128, 0), True, 30.0),
             ((1, 257, 400, 4, 4, 128), (50, 70), False, 50.0),
             ((1, 150, 230, 4, 2, 96), (40, 10), True, 30.0),
             ((1, 200, 333, 4, 1, 64), (0, 0), False, 0.0)]  # one key a row
    for n, (shape, window, causal, cap) in enumerate(cases):
        for dtype, tol in ((torch.bfloat16, 1e-2), (torch.float16, 5e-3)):
            q, k, v, dout = inputs(shape, dtype, SEED ^ (20 + n))
            q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
            scale = 3.0 / math.sqrt(shape[5])
            out = dash_attn.flash_attn_func(q, k, v, softmax_scale=scale, causal=causal,
                                            window_size=window, softcap=cap)
            out.backward(dout)
            assert dash_attn.last_result()["backend"] == "cuda"
            q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
            ref = ref_window_softcap(q64, k64, v64, causal, window, cap, scale)
            ref.backward(dout.double())
            assert rel(out.detach(), ref.detach()) < tol, f"case {n} out, seed {SEED}"
            for name, got, want in (("dq", q.grad, q64.grad), ("dk", k.grad, k64.grad),
                                    ("dv", v.grad, v64.grad)):
                assert torch.isfinite(got).all(), f"case {n} {name} not finite"
                if window == (0, 0) and name != "dv":
                    # one key a row: P = 1, dS = P (dP - D) = 0, so dQ and dK are 0 up to the
                    # rounding of dP - D (relative error against 0 means nothing): small
                    # beside a gradient of the case (dV's)
                    size = float(got.double().norm() / v64.grad.norm())
                    assert size < 1e-3, f"case {n} {name} is {size:.3g} of dV, seed {SEED}"
                    continue
                assert rel(got, want) < tol, f"case {n} {name}, seed {SEED}"


def test_gpu_drop_ins_on_cuda_tensors():
    from dash_attn import fa3
    from dash_attn.flash_attn_interface import flash_attn_func, flash_attn_qkvpacked_func
    g = torch.Generator(device="cuda").manual_seed(SEED ^ 10)
    qkv = torch.randn(2, 300, 3, 8, 128, generator=g, device="cuda").bfloat16().requires_grad_()
    out, lse, s = flash_attn_qkvpacked_func(qkv, 0.0, causal=True, return_attn_probs=True)
    q, k, v = qkv.unbind(2)
    assert torch.equal(out, fa3.flash_attn_func(q, k, v, None, True))
    assert lse.shape == (2, 8, 300) and s.numel() == 0
    (dqkv,) = torch.autograd.grad(out, qkv, torch.ones_like(out))
    q2, k2, v2 = (x.detach().clone().requires_grad_() for x in (q, k, v))
    o2 = flash_attn_func(q2, k2, v2, causal=True)
    dq, dk, dv = torch.autograd.grad(o2, (q2, k2, v2), torch.ones_like(o2))
    assert torch.equal(dqkv, torch.stack([dq, dk, dv], dim=2))


def test_gpu_varlen_on_cuda_tensors_matches_float64():
    # flash_attn_varlen_func on CUDA tensors: q, k, v in place, the offsets by value in the
    # request; values and gradients against float64 sequence by sequence
    g = torch.Generator(device="cuda").manual_seed(SEED)
    lens = [1, 100, 0, 257, 64]
    tq = sum(lens)
    hq, hkv, d = 4, 2, 64
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32)
    q = torch.randn(tq, hq, d, generator=g, device="cuda").to(torch.bfloat16).requires_grad_()
    k = torch.randn(tq, hkv, d, generator=g, device="cuda").to(torch.bfloat16).requires_grad_()
    v = torch.randn(tq, hkv, d, generator=g, device="cuda").to(torch.bfloat16).requires_grad_()
    dout = torch.randn(tq, hq, d, generator=g, device="cuda").to(torch.bfloat16)
    out = dash_attn.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True)
    out.backward(dout)
    dash_attn.synchronize()
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    refs = []
    for b in range(len(lens)):
        a, e = int(cu[b]), int(cu[b + 1])
        if e > a:
            refs.append(ref_attention(q64[None, a:e], k64[None, a:e], v64[None, a:e], True)[0])
    ref = torch.cat(refs, 0)
    ref.backward(dout.double())
    assert rel(out.detach(), ref.detach()) < 2e-2, f"out, seed {SEED}"
    for name, got, want in (("dq", q.grad, q64.grad), ("dk", k.grad, k64.grad),
                            ("dv", v.grad, v64.grad)):
        assert rel(got, want) < 2e-2, f"{name}, seed {SEED}"


def _packed_case(seed):
    """A packed batch of three sequences (70, 0 and 130 tokens; 4 heads of 64, bf16) on the
    GPU: host offsets (int32), q, k, v requiring grad, and an output gradient."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    cu = torch.tensor([0, 70, 70, 200], dtype=torch.int32)
    q, k, v = (torch.randn(200, 4, 64, generator=g, device="cuda").bfloat16().requires_grad_()
               for _ in range(3))
    dout = torch.randn(200, 4, 64, generator=g, device="cuda").bfloat16()
    return cu, q, k, v, dout


def test_gpu_varlen_takes_cuda_offsets_as_flash_attn_users_pass_them():
    # flash-attn takes cu_seqlens on the GPU; dash_attn copies them to the host (a wait).
    # Its .numpy() of the CUDA tensor used to raise TypeError before anything was sent.
    cu, q, k, v, dout = _packed_case(SEED ^ 11)
    got = []
    for cq in (cu, cu.cuda(), cu.cuda().long()):
        out = dash_attn.flash_attn_varlen_func(q, k, v, cq, cq, 130, 130, causal=True)
        got.append((out,) + torch.autograd.grad(out, (q, k, v), dout))
    dash_attn.synchronize()
    for other in got[1:]:
        assert all(torch.equal(a, b) for a, b in zip(got[0], other))


@contextlib.contextmanager
def _offsets_reads():
    """A list that records, for each offsets array dash_attn reads (_varlen._offsets) inside
    the block, whether it was a CUDA tensor (a wait for the stream)."""
    from dash_attn import _varlen
    seen = []
    orig = _varlen._offsets

    def spy(name, x):
        seen.append(isinstance(x, torch.Tensor) and x.is_cuda)
        return orig(name, x)
    _varlen._offsets = spy
    try:
        yield seen
    finally:
        _varlen._offsets = orig


def test_gpu_varlen_backward_uses_the_offsets_its_forward_copied():
    # A CUDA cu_seqlens costs a wait for the stream each time its values are read; an eager
    # call copies it to the host once (one wait for q's and k's offsets), and its backward
    # sends the offsets its forward checked (0f6ec7a): _offsets never sees a device tensor,
    # the backward reads none at all, and the bits are the host offsets' bits.
    cu, q, k, v, dout = _packed_case(SEED ^ 13)
    want = dash_attn.flash_attn_varlen_func(q, k, v, cu, cu, 130, 130, causal=True)
    want = (want,) + torch.autograd.grad(want, (q, k, v), dout)
    with _offsets_reads() as seen:
        for cq, ck in ((cu.cuda(), None), (cu.cuda(), cu.cuda().long())):
            ck = cq if ck is None else ck
            out = dash_attn.flash_attn_varlen_func(q, k, v, cq, ck, 130, 130, causal=True)
            n_fwd = len(seen)
            got = (out,) + torch.autograd.grad(out, (q, k, v), dout)
            assert len(seen) == n_fwd, "the backward read the offsets again"
            dash_attn.synchronize()
            assert all(torch.equal(a, b) for a, b in zip(want, got))
    assert seen and not any(seen), f"device offsets read: {seen}"


def test_gpu_varlen_compiled_reads_cuda_offsets_once_a_forward_and_backward():
    # Under torch.compile the ops run: varlen_fwd copies CUDA offsets to the host once (one
    # wait, in _host_offsets) and returns the copies, which its backward is given - _offsets
    # never sees a device tensor, and the bits are the eager call's.
    cu, q, k, v, dout = _packed_case(SEED ^ 17)

    def f(q, k, v, cq):
        return dash_attn.flash_attn_varlen_func(q, k, v, cq, cq, 130, 130, causal=True)
    want = f(q, k, v, cu)
    want = (want,) + torch.autograd.grad(want, (q, k, v), dout)
    torch._dynamo.reset()
    g = torch.compile(f, fullgraph=True)
    with _offsets_reads() as seen:
        out = g(q, k, v, cu.cuda())
        got = (out,) + torch.autograd.grad(out, (q, k, v), dout)
        dash_attn.synchronize()
    assert seen and not any(seen), f"device offsets read: {seen}"
    assert all(torch.equal(a, b) for a, b in zip(want, got))


def test_gpu_varlen_offsets_on_two_devices_are_both_waited_for():
    # _host_offsets queues the copies of CUDA offsets, then waits for them: each copy runs on
    # the current stream of its own tensor's device. Offsets on the second GPU, written there
    # behind a long queue, must come back as written - not as the pinned buffer held them
    # before the copy landed (a wait for the first GPU's stream alone returns too early).
    if torch.cuda.device_count() < 2:
        if pytest is not None:
            pytest.skip("needs two CUDA devices")
        return
    from dash_attn import _varlen
    want_q = torch.tensor([0, 70, 70, 200], dtype=torch.int32)
    for i in range(3):  # other values each time: a reused pinned block holds no stale answer
        want_k = torch.tensor([0, 90 + i, 150, 260], dtype=torch.int32)
        cq = want_q.to("cuda:0")
        src = want_k.to("cuda:1")
        ck = torch.zeros(4, dtype=torch.int32, device="cuda:1")
        torch.cuda.synchronize("cuda:1")
        with torch.cuda.device(1):
            a = torch.randn(4096, 4096, device="cuda:1")
            for _ in range(20):  # tens of ms queued ahead of the offsets' write
                a = torch.tanh(a @ a)
            ck.copy_(src)
        hq, hk = _varlen._host_offsets(cq, ck)
        assert torch.equal(hq, want_q), hq
        assert torch.equal(hk, want_k), f"{hk.tolist()}: the second GPU's copy was not waited for"


def _same_bits(a, b):
    """a and b hold the same bytes (NaN included: a fully masked row's lse is the same bits
    on both paths, where torch.equal would call it different)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    as_int = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return torch.equal(a.contiguous().view(as_int), b.contiguous().view(as_int))


def _ragged(seed, lens_q, lens_k, hq, hkv, d, dtype):
    """A packed batch on the GPU: q (total_q, hq, d), k, v (total_k, hkv, d), an output
    gradient, and host int32 offsets of the lengths given."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    cu = [torch.tensor([0] + torch.tensor(n).cumsum(0).tolist(), dtype=torch.int32)
          for n in (lens_q, lens_k)]
    tq, tk = sum(lens_q), sum(lens_k)
    mk = lambda t, h: torch.randn(t, h, d, generator=g, device="cuda").to(dtype)  # noqa: E731
    return mk(tq, hq), mk(tk, hkv), mk(tk, hkv), mk(tq, hq), cu[0], cu[1]


def _varlen_run(q, k, v, dout, cq, ck, mq, mk, kw, strided_v=False):
    """out, lse, dq, dk, dv of flash_attn_varlen_func (fresh leaves), and out's node's name.
    strided_v: v is passed as a view whose last stride is 2 (which both paths copy)."""
    q, k, v = (x.detach().clone().requires_grad_() for x in (q, k, v))
    v_in = v
    if strided_v:
        v_in = torch.stack([v, torch.zeros_like(v)], -1).flatten(-2)[..., ::2]
        assert v_in.stride(-1) == 2 and torch.equal(v_in, v)
    out, lse = dash_attn.flash_attn_varlen_func(q, k, v_in, cq, ck, mq, mk,
                                                return_softmax_lse=True, **kw)
    out.backward(dout)
    torch.cuda.synchronize()
    dash_attn.synchronize()
    return out.detach(), lse, q.grad, k.grad, v.grad, out.grad_fn.name()


@contextlib.contextmanager
def _varlen_paths():
    """(c, calls): the shared client and a list that records each call of the native varlen
    wrapper (_native.varlen_attention) inside the block; the test flips c._native to send a
    call through the ctypes path (DashVarlenFunction), as the dense tests do."""
    from dash_attn import _client, _native
    c = _client.client_by_id(0, torch.empty(1, device="cuda"))
    if not c._native or _native._varlen_op is None:
        pytest.skip(f"the native varlen op is not loaded: {_native.why_not or 'no attn_varlen'}")
    calls = []
    orig = _native.varlen_attention
    _native.varlen_attention = lambda *a: calls.append(1) or orig(*a)
    try:
        yield c, calls
    finally:
        _native.varlen_attention = orig
        c._native = True


def _both_paths(c, calls, fn):
    """fn() through the native op, then through the ctypes path: (native's, ctypes')."""
    n = len(calls)
    native = fn()
    assert len(calls) == n + 1, "the native varlen op was not taken"
    c._native = False
    try:
        ctypes_path = fn()
    finally:
        c._native = True
    assert len(calls) == n + 1, "the ctypes path went through the native op"
    return native, ctypes_path


def test_gpu_varlen_native_op_gives_the_ctypes_paths_bits():
    # an eager flash_attn_varlen_func on CUDA tensors runs as one C++ autograd node where
    # the native op is loaded (_native.varlen_attention): DashVarlenFunction's requests -
    # the offsets by value, lse (heads_q, total_q) - so its out, lse and gradients are the
    # ctypes path's bits, on ragged batches (lengths 1 and 0, non-multiples of 128), causal
    # and not, GQA, a window, softcap, cross lengths, strided inputs, CUDA offsets, an audit
    # tag, a deterministic schedule with batch_invariant, and the qkv-packed form
    lq = [1, 300, 129, 77, 1, 513, 0, 200]
    cases = [  # (lens_q, lens_k, hq, hkv, d, dtype, kwargs, offsets on the GPU)
        (lq, lq, 8, 2, 64, torch.bfloat16, dict(causal=True), False),
        (lq, lq, 4, 4, 128, torch.float16, dict(causal=False), True),
        ([1, 130, 1, 255], [5, 300, 1, 700], 4, 4, 128, torch.float16,
         dict(window_size=(50, 20), softcap=30.0), True),
        (lq, lq, 6, 3, 96, torch.bfloat16,
         dict(causal=True, window_size=(64, 0), softcap=20.0, schedule="shift",
              batch_invariant=True), False),
        ([17, 1, 383, 640], [17, 1, 383, 640], 8, 1, 64, torch.bfloat16,
         dict(causal=True, deterministic=True, batch_invariant=True), True),
    ]
    with _varlen_paths() as (c, calls):
        for n, (lens_q, lens_k, hq, hkv, d, dtype, kw, on_gpu) in enumerate(cases):
            q, k, v, dout, cq, ck = _ragged(SEED ^ (80 + n), lens_q, lens_k, hq, hkv, d, dtype)
            if n == 1:  # q a strided view (last stride 1; clone keeps its strides)
                q = q.transpose(0, 1).contiguous().transpose(0, 1)
            if on_gpu:
                cq, ck = cq.cuda(), (ck.cuda().long() if n == 2 else ck.cuda())
            mq, mk = max(lens_q), max(lens_k)

            def run():
                with dash_attn.audit(step=n, label="varlen-native"):
                    return _varlen_run(q, k, v, dout, cq, ck, mq, mk, kw, strided_v=n == 1)
            native, ctypes_path = _both_paths(c, calls, run)
            assert "attn_fn" in native[5] and "DashVarlenFunction" in ctypes_path[5], \
                (native[5], ctypes_path[5])
            for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), native[:5], ctypes_path[:5]):
                assert _same_bits(a, b), f"case {n}: {name} differs between the paths, seed {SEED}"
            assert native[1].shape == (hq, sum(lens_q)) and not native[1].requires_grad
            for name, a in zip(("out", "dq", "dk", "dv"), (native[0],) + native[2:5]):
                assert torch.isfinite(a).all(), f"case {n}: {name}, seed {SEED}"
        # the qkv-packed form: q, k, v are strided views of one tensor, its gradient one too
        lens = [1, 250, 129, 3]
        g = torch.Generator(device="cuda").manual_seed(SEED ^ 90)
        qkv = torch.randn(sum(lens), 3, 4, 64, generator=g, device="cuda").bfloat16()
        dout = torch.randn(sum(lens), 4, 64, generator=g, device="cuda").bfloat16()
        cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32).cuda()

        def packed():
            x = qkv.clone().requires_grad_()
            out = dash_attn.flash_attn_varlen_qkvpacked_func(x, cu, max(lens), causal=True)
            (dx,) = torch.autograd.grad(out, x, dout)
            dash_attn.synchronize()
            return out, dx
        native, ctypes_path = _both_paths(c, calls, packed)
        for name, a, b in zip(("out", "dqkv"), native, ctypes_path):
            assert _same_bits(a, b), f"qkv-packed: {name} differs between the paths"


def test_gpu_varlen_native_op_refuses_second_order_gradients():
    with _varlen_paths() as (c, calls):
        q, k, v, dout, cq, ck = _ragged(SEED ^ 91, [70, 1, 130], [70, 1, 130], 4, 4, 64,
                                        torch.bfloat16)
        for x in (q, k, v):
            x.requires_grad_()
        out = dash_attn.flash_attn_varlen_func(q, k, v, cq, ck, 130, 130, causal=True)
        assert calls and "attn_fn" in out.grad_fn.name(), out.grad_fn.name()
        _assert_second_order_refused(out, q, dout)
        dash_attn.synchronize()


def _outcome(fn):
    """What fn() raised - at the call, or from synchronize() after it (a refusal dashd
    finds comes after the stream-ordered call returned) - as (where, type, name, text)."""
    try:
        fn()
    except Exception as e:
        return "call", type(e), getattr(e, "name", None), str(e)
    torch.cuda.synchronize()
    try:
        dash_attn.synchronize()
    except Exception as e:
        return "sync", type(e), getattr(e, "name", None), str(e)
    return None


def test_gpu_varlen_native_op_refuses_bad_offsets_as_the_ctypes_path_does():
    # bad cu_seqlens raise the same exception, with the same words, at the same moment, on
    # both paths: the binding's checks (dtype, shape, int32, entry counts) before anything is
    # sent, libdash's (max_seqlen) at the call, dashd's (not from 0, decreasing, not ending
    # at the token count, a sequence longer than max_seqlen) from synchronize()
    q, k, v, _, cq, _ = _ragged(SEED ^ 92, [70, 1, 130], [70, 1, 130], 4, 2, 64,
                                torch.bfloat16)
    i32 = lambda *x: torch.tensor(x, dtype=torch.int32)  # noqa: E731
    bad = [
        ("float offsets", cq.float(), cq, 130, 130, "call"),
        ("2-D offsets", cq.view(1, -1).cuda(), cq, 130, 130, "call"),
        ("one entry", i32(0), i32(0), 130, 130, "call"),
        ("entry counts differ", cq, i32(0, 71, 201), 130, 130, "call"),
        ("beyond int32", cq.long() * 2**31, cq, 130, 130, "call"),
        ("max_seqlen 0", cq, cq, 0, 130, "call"),
        ("not ending at the total", i32(0, 70, 71, 190), cq, 130, 130, "sync"),
        ("decreasing", i32(0, 70, 60, 201), i32(0, 70, 60, 201), 130, 130, "sync"),
        ("not from 0", i32(1, 71, 72, 201), cq, 130, 130, "sync"),
        ("longer than max_seqlen", cq.cuda(), cq.cuda(), 100, 130, "sync"),
    ]
    with _varlen_paths() as (c, calls):
        for what, a, b, mq, mk, when in bad:
            got = _both_paths(c, calls, lambda: _outcome(
                lambda: dash_attn.flash_attn_varlen_func(q, k, v, a, b, mq, mk, causal=True)))
            assert got[0] is not None and got[0][0] == when, (what, got[0])
            assert got[0] == got[1], (what, got)
        # and the client goes on, on both paths
        got = _both_paths(c, calls, lambda: _outcome(
            lambda: dash_attn.flash_attn_varlen_func(q, k, v, cq, cq, 130, 130, causal=True)))
        assert got == (None, None), got


def _run_as_script():
    if not torch.cuda.is_available():
        print("test_gpu: skipped: no CUDA device")
        return 0
    os.environ.setdefault("DASH_TEST_BACKEND", "cuda")
    d = Daemon()
    failed = skipped = 0
    try:
        dash_attn.connect(d.endpoint, client_name="test_gpu", run_tag="test_gpu")
        for name, fn in sorted(globals().items()):
            if name.startswith("test_") and callable(fn):
                try:
                    fn()
                    print(f"{name} passed")
                except pytest.skip.Exception as e:  # a BaseException: it ended the run
                    skipped += 1
                    print(f"{name} skipped: {e}")
                except Exception as e:  # report and go on
                    failed += 1
                    print(f"{name} FAILED: {type(e).__name__}: {e}")
    finally:
        rc = d.stop()
    print(f"seed {SEED}; {failed} failed; {skipped} skipped; dashd exit {rc}")
    return 1 if failed or rc else 0


def _scrape(port):
    """dashd's /metrics as {series with labels: value}."""
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_gpu_metrics_count_the_gpu_time_of_the_ops_served():
    """dashd_gpu_seconds_total on the CUDA backend: the ops' run time (what
    dashd_op_run_seconds sums), more than half of what CUDA events measure around 6
    streamed forwards of 16 heads x 4096 x 128 (the stream is busy with them) and less
    than the wall time the client waited for them; the backward's counter moves too."""
    port = free_port()
    d = Daemon(extra=["--metrics", f"127.0.0.1:{port}"])
    c = dash_attn.Client(d.endpoint, client_name="pytest-metrics")
    fwd, bwd = 'op="forward"', 'op="backward"'

    def settled(key, n):  # a snapshot holding n completed ops of that kind (it lags 100 ms)
        deadline = time.time() + 10
        while True:
            m = _scrape(port)
            if m.get(f"dashd_op_run_seconds_count{{{key}}}", 0) >= n or time.time() > deadline:
                return m
            time.sleep(0.05)
    try:
        q, k, v, dout = inputs((1, 4096, 4096, 16, 16, 128), torch.bfloat16, SEED ^ 11)
        out, lse = c.forward(q, k, v, causal=False)  # warm
        c.synchronize()
        m0 = settled(fwd, 1)
        n0 = m0[f"dashd_op_run_seconds_count{{{fwd}}}"]
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.monotonic()
        a.record()
        for _ in range(6):
            out, lse = c.forward(q, k, v, causal=False)
        b.record()
        c.synchronize()
        b.synchronize()
        wall = time.monotonic() - t0
        m1 = settled(fwd, n0 + 6)
        assert m1[f"dashd_op_run_seconds_count{{{fwd}}}"] == n0 + 6, m1
        gpu = m1[f"dashd_gpu_seconds_total{{{fwd}}}"] - m0[f"dashd_gpu_seconds_total{{{fwd}}}"]
        run = m1[f"dashd_op_run_seconds_sum{{{fwd}}}"] - m0[f"dashd_op_run_seconds_sum{{{fwd}}}"]
        events = a.elapsed_time(b) / 1e3
        assert abs(gpu - run) < 1e-6, (gpu, run)
        assert 0.5 * events < gpu < wall + 0.01, (gpu, events, wall)
        c.backward(dout, q, k, v, out, lse, causal=False)
        c.synchronize()
        m2 = settled(bwd, 1)
        assert m2[f"dashd_gpu_seconds_total{{{bwd}}}"] > 0, m2
    finally:
        c.close()
        assert d.stop() == 0


if __name__ == "__main__":
    sys.exit(_run_as_script())
