# SPDX-License-Identifier: BSD-3-Clause
"""Packed variable-length batches, sliding windows and softcap through a real dashd on the
CPU engine: values and gradients against float64 autograd computed sequence by sequence,
flash-attn's argument order and layouts (varlen, qkv-packed, kv-packed), bits that repeat
and do not depend on the packing, and the daemon's words for bad offsets and windows.
Inputs are fresh random draws (the seed is in every assertion message)."""
import math
import os

import numpy as np
import pytest
import torch

import dash_attn

SEED = int.from_bytes(os.urandom(4), "little")


def visible(sq, sk, causal, window):
    """(sq, sk) bool: flash-attn's rule, bottom-right aligned, -1 unbounded."""
    left, right = window
    if causal:
        right = 0
    i = torch.arange(sq).view(-1, 1)
    j = torch.arange(sk).view(1, -1)
    diag = i + (sk - sq)
    ok = torch.ones(sq, sk, dtype=torch.bool)
    if left >= 0:
        ok &= j >= diag - left
    if right >= 0:
        ok &= j <= diag + right
    return ok


def ref_seq(q, k, v, causal, window, softcap, scale):
    """float64 attention of one sequence (s, h, d), as torch ops for autograd; rows that see
    no key give zeros."""
    sq, hq, d = q.shape
    sk, hkv = k.shape[0], k.shape[1]
    if sk == 0:
        return q * 0
    kk = k.repeat_interleave(hq // hkv, dim=1)
    vv = v.repeat_interleave(hq // hkv, dim=1)
    s = torch.einsum("qhd,khd->hqk", q, kk) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    mask = visible(sq, sk, causal, window).unsqueeze(0)
    m = s.masked_fill(~mask, float("-inf")).amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m)).detach()
    e = torch.exp(s - m) * mask
    den = e.sum(-1, keepdim=True)
    p = e / torch.where(den == 0, torch.ones_like(den), den)
    return torch.einsum("hqk,khd->qhd", p, vv)


def ref_varlen(q, k, v, cq, ck, causal, window, softcap, scale):
    outs = []
    for b in range(len(cq) - 1):
        outs.append(ref_seq(q[cq[b]:cq[b + 1]], k[ck[b]:ck[b + 1]], v[ck[b]:ck[b + 1]], causal,
                            window, softcap, scale))
    return torch.cat(outs, 0)


def rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    n = b.norm()
    return float((a - b).norm() / n) if n > 0 else float((a - b).norm())


def offsets(lengths):
    return torch.tensor([0] + list(np.cumsum(lengths)), dtype=torch.int32)


def packed(lq, lk, hq, hkv, d, g, sigma=1.0, dtype=torch.float32):
    tq, tk = sum(lq), sum(lk)
    q = (torch.randn(tq, hq, d, generator=g) * sigma).to(dtype).requires_grad_()
    k = (torch.randn(tk, hkv, d, generator=g) * sigma).to(dtype).requires_grad_()
    v = torch.randn(tk, hkv, d, generator=g).to(dtype).requires_grad_()
    dout = torch.randn(tq, hq, d, generator=g).to(dtype)
    return q, k, v, dout


WINDOWS = [(-1, -1), (0, 0), (5, 0), (13, 4), (3, -1), (-1, 2), (500, 500)]


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("softcap", [0.0, 30.0, 50.0])
def test_varlen_values_and_gradients_match_float64_sequence_by_sequence(client, window, causal,
                                                                         softcap):
    g = torch.Generator().manual_seed(SEED)
    lq = [1, 70, 0, 33, 5]
    lk = [1, 70, 9, 40, 0] if window[0] % 2 else lq
    hq, hkv, d = 4, 2, 32
    q, k, v, dout = packed(lq, lk, hq, hkv, d, g, sigma=3.0 if softcap else 1.0)
    cq, ck = offsets(lq), offsets(lk)
    out = dash_attn.flash_attn_varlen_func(q, k, v, cq, ck, max(lq), max(lk), causal=causal,
                                           window_size=window, softcap=softcap)
    out.backward(dout)
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref = ref_varlen(q64, k64, v64, cq.tolist(), ck.tolist(), causal, window, softcap,
                     1 / math.sqrt(d))
    ref.backward(dout.double())
    msg = f"seed {SEED}"
    assert not torch.isnan(out).any() and not torch.isnan(q.grad).any(), msg
    assert rel(out, ref) < 1e-5, msg
    for got, want in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        assert rel(got, want) < 1e-4, msg


@pytest.mark.parametrize("window,softcap", [((8, 0), 0.0), ((-1, -1), 20.0), ((6, 3), 50.0)])
def test_flash_attn_func_window_and_softcap_match_reference(client, window, softcap):
    g = torch.Generator().manual_seed(SEED ^ 5)
    b, sq, sk, hq, hkv, d = 2, 45, 61, 4, 1, 32
    q = (torch.randn(b, sq, hq, d, generator=g) * 3).requires_grad_()
    k = (torch.randn(b, sk, hkv, d, generator=g) * 3).requires_grad_()
    v = torch.randn(b, sk, hkv, d, generator=g).requires_grad_()
    dout = torch.randn(b, sq, hq, d, generator=g)
    out = dash_attn.flash_attn_func(q, k, v, causal=window == (8, 0), window_size=window,
                                    softcap=softcap)
    out.backward(dout)
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref = torch.stack([ref_seq(q64[i], k64[i], v64[i], window == (8, 0), window, softcap,
                               1 / math.sqrt(d)) for i in range(b)])
    ref.backward(dout.double())
    assert rel(out, ref) < 1e-5, f"seed {SEED}"
    for got, want in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        assert rel(got, want) < 1e-4, f"seed {SEED}"


def test_qkvpacked_and_kvpacked_give_the_unpacked_bits(client):
    g = torch.Generator().manual_seed(SEED ^ 7)
    b, s, h, d = 2, 40, 2, 32
    qkv = torch.randn(b, s, 3, h, d, generator=g, dtype=torch.float32).to(torch.bfloat16)
    dout = torch.randn(b, s, h, d, generator=g).to(torch.bfloat16)
    kw = dict(causal=True, window_size=(9, 0), softcap=30.0)

    def grads(fn):
        x = qkv.clone().requires_grad_()
        out = fn(x)
        out.backward(dout)
        return out.detach(), x.grad

    o1, g1 = grads(lambda x: dash_attn.flash_attn_qkvpacked_func(x, **kw))
    o2, g2 = grads(lambda x: dash_attn.flash_attn_func(x[:, :, 0], x[:, :, 1], x[:, :, 2], **kw))
    o3, g3 = grads(lambda x: dash_attn.flash_attn_kvpacked_func(x[:, :, 0], x[:, :, 1:], **kw))
    assert torch.equal(o1, o2) and torch.equal(g1, g2)
    assert torch.equal(o1, o3) and torch.equal(g1, g3)
    # varlen forms: (total, 3, h, d) with one set of offsets; kv (total, 2, h, d)
    lens = [13, 1, 26]
    cu = offsets(lens)
    flat = qkv.reshape(b * s, 3, h, d)[:sum(lens)]
    fd = dout.reshape(b * s, h, d)[:sum(lens)]

    def vgrads(fn):
        x = flat.clone().requires_grad_()
        out = fn(x)
        out.backward(fd)
        return out.detach(), x.grad

    v1, h1 = vgrads(lambda x: dash_attn.flash_attn_varlen_qkvpacked_func(x, cu, max(lens), **kw))
    v2, h2 = vgrads(lambda x: dash_attn.flash_attn_varlen_func(x[:, 0], x[:, 1], x[:, 2], cu, cu,
                                                               max(lens), max(lens), **kw))
    v3, h3 = vgrads(lambda x: dash_attn.flash_attn_varlen_kvpacked_func(
        x[:, 0], x[:, 1:], cu, cu, max(lens), max(lens), **kw))
    assert torch.equal(v1, v2) and torch.equal(h1, h2)
    assert torch.equal(v1, v3) and torch.equal(h1, h3)


def test_varlen_bits_repeat_and_do_not_depend_on_the_packing(client):
    g = torch.Generator().manual_seed(SEED ^ 11)
    lens = [1, 77, 130, 50, 9]
    hq, hkv, d = 4, 2, 32
    seqs = [packed([n], [n], hq, hkv, d, g, dtype=torch.bfloat16)[:4] for n in lens]
    kw = dict(causal=True, window_size=(40, 0), softcap=30.0, batch_invariant=True)

    def run(order):
        q = torch.cat([seqs[i][0].detach() for i in order]).requires_grad_()
        k = torch.cat([seqs[i][1].detach() for i in order]).requires_grad_()
        v = torch.cat([seqs[i][2].detach() for i in order]).requires_grad_()
        dout = torch.cat([seqs[i][3] for i in order])
        cu = offsets([lens[i] for i in order])
        out = dash_attn.flash_attn_varlen_func(q, k, v, cu, cu, 130, 130, **kw)
        out.backward(dout)
        res = {}
        for pos, i in enumerate(order):
            a, b = int(cu[pos]), int(cu[pos + 1])
            res[i] = tuple(t[a:b].detach().clone() for t in (out, q.grad, k.grad, v.grad))
        return res

    first = run([0, 1, 2, 3, 4])
    again = run([0, 1, 2, 3, 4])
    shuffled = run([3, 0, 4, 2, 1])
    alone = run([2])
    for i in range(len(lens)):
        assert all(torch.equal(a, b) for a, b in zip(first[i], again[i])), f"seed {SEED}"
        assert all(torch.equal(a, b) for a, b in zip(first[i], shuffled[i])), f"seed {SEED}"
    assert all(torch.equal(a, b) for a, b in zip(first[2], alone[2])), f"seed {SEED}"


def test_varlen_numpy_forward_and_backward(client):
    rng = np.random.default_rng(SEED)
    q = rng.standard_normal((20, 2, 32), dtype=np.float32)
    k = rng.standard_normal((20, 2, 32), dtype=np.float32)
    v = rng.standard_normal((20, 2, 32), dtype=np.float32)
    cu = np.array([0, 3, 20], dtype=np.int32)
    out, lse = dash_attn.varlen_forward(q, k, v, cu, cu, 17, 17, causal=True)
    assert isinstance(out, np.ndarray) and out.shape == q.shape and lse.shape == (2, 20)
    ref = ref_varlen(*(torch.from_numpy(x).double() for x in (q, k, v)), [0, 3, 20], [0, 3, 20],
                     True, (-1, -1), 0.0, 1 / math.sqrt(32))
    assert rel(torch.from_numpy(out), ref) < 1e-5
    dq, dk, dv = dash_attn.varlen_backward(np.ones_like(out), q, k, v, out, lse, cu, cu, 17, 17,
                                           causal=True)
    assert dq.shape == q.shape and np.isfinite(dq).all()


def test_bad_offsets_windows_and_softcap_raise_clear_errors(client):
    q = torch.randn(10, 2, 32)
    good = torch.tensor([0, 4, 10], dtype=torch.int32)
    with pytest.raises(dash_attn.DashError) as e:
        dash_attn.flash_attn_varlen_func(q, q, q, torch.tensor([0, 6, 4, 10], dtype=torch.int32),
                                         torch.tensor([0, 4, 6, 10], dtype=torch.int32), 10, 10)
    assert e.value.name == "DASH_ESHAPE" and "must not decrease" in e.value.message
    with pytest.raises(dash_attn.DashError) as e:
        dash_attn.flash_attn_varlen_func(q, q, q, good, torch.tensor([0, 4, 9], dtype=torch.int32),
                                         10, 10)
    assert e.value.name == "DASH_ESHAPE" and "token count 10" in e.value.message
    with pytest.raises(dash_attn.DashError) as e:
        dash_attn.flash_attn_varlen_func(q, q, q, good, good, 5, 10)
    assert "more than max_seqlen_q=5" in e.value.message
    with pytest.raises(dash_attn.DashError) as e:
        dash_attn.flash_attn_varlen_func(q, q, q, good, good, 10, 10, window_size=(-3, 0))
    assert e.value.name == "DASH_EINVAL" and "window (-3, 0)" in e.value.message
    with pytest.raises(ValueError, match="softcap"):
        dash_attn.flash_attn_varlen_func(q, q, q, good, good, 10, 10, softcap=-1.0)
    with pytest.raises(TypeError, match="int32") as te:
        dash_attn.flash_attn_varlen_func(q, q, q, good.float(), good, 10, 10)
    assert "int64" in str(te.value)  # served too (docs/python.md): the message says so
    with pytest.raises(ValueError, match="3-D"):
        dash_attn.flash_attn_varlen_func(q[None], q, q, good, good, 10, 10)
    with pytest.raises(TypeError, match="window_size"):
        dash_attn.flash_attn_func(q[None], q[None], q[None], window_size=5)
    with pytest.raises(NotImplementedError):
        dash_attn.flash_attn_varlen_func(q, q, q, good, good, 10, 10, dropout_p=0.1)
    # the daemon still serves
    out = dash_attn.flash_attn_varlen_func(q, q, q, good, good, 10, 10)
    assert out.shape == q.shape


def test_window_and_max_seqlen_beyond_int32_are_refused_not_truncated(client):
    # the request holds them as int32: a window of 2**32 + 3 used to reach dashd as 3 and
    # compute a 3-key window silently, a max_seqlen of 2**32 as 0 (a message about 0)
    from dash_attn.flash_attn_interface import flash_attn_func as fa2
    g = torch.Generator().manual_seed(SEED)
    q, k, v = (torch.randn(1, 12, 2, 32, generator=g) for _ in range(3))
    for f in (dash_attn.flash_attn_func, fa2):
        with pytest.raises(ValueError, match=r"window_size\[0\]=4294967299 is beyond int32"):
            f(q, k, v, window_size=(2**32 + 3, 2**32 + 3))
        with pytest.raises(ValueError, match=r"window_size\[1\]=-2147483649 is beyond int32"):
            f(q, k, v, window_size=(-1, -2**31 - 1))
        with pytest.raises(TypeError, match=r"window_size\[0\] must be an integer, not 1.5"):
            f(q, k, v, window_size=(1.5, 2))
    # the widest window int32 holds is no window: the same bits as (-1, -1)
    widest = dash_attn.flash_attn_func(q, k, v, window_size=(2**31 - 1, 2**31 - 1))
    assert torch.equal(widest, dash_attn.flash_attn_func(q, k, v)), f"seed {SEED}"
    assert torch.equal(dash_attn.flash_attn_func(q, k, v, window_size=(3.0, 2)),
                       dash_attn.flash_attn_func(q, k, v, window_size=(3, 2)))
    qp, kp, vp = (x[0] for x in (q, k, v))
    cu = torch.tensor([0, 5, 12], dtype=torch.int32)
    with pytest.raises(ValueError, match="max_seqlen_q=4294967296 is beyond int32"):
        dash_attn.flash_attn_varlen_func(qp, kp, vp, cu, cu, 2**32, 7)
    with pytest.raises(ValueError, match="max_seqlen_k=4294967303 is beyond int32"):
        dash_attn.varlen_forward(qp, kp, vp, cu, cu, 7, 2**32 + 7)
    with pytest.raises(TypeError, match="max_seqlen_q must be an integer, not 7.5"):
        dash_attn.flash_attn_varlen_func(qp, kp, vp, cu, cu, 7.5, 7)
    with pytest.raises(ValueError, match=r"window_size\[0\]=4294967299"):
        dash_attn.flash_attn_varlen_func(qp, kp, vp, cu, cu, 7, 7, window_size=(2**32 + 3, 0))
    # a generous bound is as good as the exact one, up to the largest int32 (which dashd
    # once refused as too large for its 32-bit indices), the gradients too
    def run(mq, mk):
        a, b, c = (x.detach().clone().requires_grad_() for x in (qp, kp, vp))
        out = dash_attn.flash_attn_varlen_func(a, b, c, cu, cu, mq, mk, causal=True)
        out.backward(torch.ones_like(out))
        return out, a.grad, b.grad, c.grad
    exact = run(7, 7)
    for mq, mk in ((10**6, 10**6), (2**31 - 1, 2**31 - 1), (7, 2**31 - 1), (12, 12)):
        assert all(torch.equal(x, y) for x, y in zip(run(mq, mk), exact)), (mq, mk)


def test_offsets_on_a_device_whose_values_cannot_be_read_are_a_clear_error(client):
    # meta offsets have no values: a ValueError naming them, not numpy's TypeError (CUDA
    # offsets, flash-attn's usual ones, are copied to the host: test_gpu.py)
    q = torch.randn(10, 2, 32)
    good = torch.tensor([0, 4, 10], dtype=torch.int32)
    with pytest.raises(ValueError, match="cu_seqlens_q is on device 'meta'"):
        dash_attn.flash_attn_varlen_func(q, q, q, good.to("meta"), good, 10, 10)
    with pytest.raises(ValueError, match="cu_seqlens_k is on device 'meta'"):
        dash_attn.varlen_forward(q, q, q, good, good.to("meta"), 10, 10)
    out = dash_attn.flash_attn_varlen_func(q, q, q, good, good.long(), 10, 10)
    assert torch.equal(out, dash_attn.flash_attn_varlen_func(q, q, q, good, good, 10, 10))


# ---- the varlen ops: opcheck and torch.compile ----------------------------------------------

def test_varlen_ops_pass_opcheck(client):
    g = torch.Generator().manual_seed(SEED)
    lq, lk = [3, 17, 1], [5, 17, 9]
    q, k, v, dout = packed(lq, lk, 4, 2, 32, g)
    cq, ck = offsets(lq), offsets(lk)
    args = (q, k, v, cq, ck, max(lq), max(lk), None, True, 6, 0, 30.0, "auto", False, 0,
            False, None, None)
    torch.library.opcheck(torch.ops.dash_attn.varlen_fwd.default, args)
    torch.library.opcheck(torch.ops.dash_attn.varlen_fwd.default, args[:-3] + (True, 3, "l1"))
    out, lse, tag, hq, hk = torch.ops.dash_attn.varlen_fwd(
        *(x.detach() if torch.is_tensor(x) else x for x in args))
    assert torch.equal(hq, cq) and torch.equal(hk, ck) and hq.dtype == torch.int32
    torch.library.opcheck(torch.ops.dash_attn.varlen_bwd.default,
                          (dout, q.detach(), k.detach(), v.detach(), out, lse, tag, cq, ck,
                           max(lq), max(lk), None, True, 6, 0, 30.0, "shift", False, 0))


@pytest.mark.parametrize("window,softcap", [((-1, -1), 0.0), ((7, 0), 30.0)])
def test_varlen_compile_fullgraph_gives_the_eager_bits(client, window, softcap):
    # eager calls take DashVarlenFunction, compiled ones the ops: the same client code, so
    # the same bits for outputs and every gradient
    g = torch.Generator().manual_seed(SEED)
    lq = [1, 40, 13, 64]
    q, k, v, dout = packed(lq, lq, 4, 2, 32, g, sigma=2.0)
    cq = offsets(lq)
    proj = torch.nn.Linear(32, 32, bias=False)

    def f(q, k, v):
        out = dash_attn.flash_attn_varlen_func(proj(q), k, v, cq, cq, max(lq), max(lq),
                                               causal=True, window_size=window, softcap=softcap)
        return out * 2

    def run(fn):
        qs, ks, vs = (x.detach().clone().requires_grad_() for x in (q, k, v))
        proj.weight.grad = None
        out = fn(qs, ks, vs)
        out.backward(dout)
        return [out.detach(), qs.grad, ks.grad, vs.grad, proj.weight.grad.clone()]

    eager = run(f)
    torch._dynamo.reset()
    compiled = run(torch.compile(f, fullgraph=True))
    for name, a, b in zip(["out", "dq", "dk", "dv", "dW"], eager, compiled):
        assert torch.equal(a, b), f"{name} differs, seed {SEED}"
    # and the compiled graph holds the op (one graph, no break around it)
    torch._dynamo.reset()
    ex = torch._dynamo.explain(f)(q.detach(), k.detach(), v.detach())
    assert ex.graph_count == 1 and ex.graph_break_count == 0
    assert "dash_attn.varlen_fwd" in "".join(str(gm.graph) for gm in ex.graphs)


def test_varlen_compiled_backward_takes_the_offsets_its_forward_copied(client):
    # The varlen_fwd op returns the offsets' int32 host copies, and the backward op is given
    # those (as the eager DashVarlenFunction keeps its own): CUDA offsets are read once a
    # forward + backward instead of twice each (test_gpu.py counts the device reads). Here
    # the offsets are passed as int64: the backward's are the forward's int32 copies.
    from dash_attn import _varlen
    g = torch.Generator().manual_seed(SEED ^ 5)
    lq = [7, 0, 12]
    q, k, v, dout = packed(lq, lq, 2, 2, 32, g)
    cq = offsets(lq).long()
    seen = []
    orig = _varlen.varlen_backward

    def spy(dout, q, k, v, out, lse, cu_q, cu_k, *a, **kw):
        seen.append((cu_q.dtype, cu_q.device.type, cu_q.tolist(), cu_k.tolist()))
        return orig(dout, q, k, v, out, lse, cu_q, cu_k, *a, **kw)

    def f(q, k, v):
        return dash_attn.flash_attn_varlen_func(q, k, v, cq, cq, max(lq), max(lq), causal=True)

    qs, ks, vs = (x.detach().clone().requires_grad_() for x in (q, k, v))
    want = torch.autograd.grad(f(qs, ks, vs), (qs, ks, vs), dout)
    torch._dynamo.reset()
    _varlen.varlen_backward = spy
    try:
        got = torch.autograd.grad(torch.compile(f, fullgraph=True)(qs, ks, vs), (qs, ks, vs), dout)
    finally:
        _varlen.varlen_backward = orig
    assert seen == [(torch.int32, "cpu", cq.tolist(), cq.tolist())], seen
    assert all(torch.equal(a, b) for a, b in zip(want, got))


def test_varlen_eager_backward_sends_its_forwards_request_without_checking_again(client):
    # The eager Function's backward sends the request its forward built: the offsets the
    # forward checked and ran with (a caller changing its cu_seqlens in place afterwards
    # changes nothing), and neither the tensors' nor the offsets' checks run again.
    from dash_attn import _varlen
    g = torch.Generator().manual_seed(SEED ^ 17)
    lq = [9, 3, 14]
    q, k, v, dout = packed(lq, lq, 2, 1, 32, g)
    kw = dict(causal=True, window_size=(6, 0), softcap=20.0)

    def grads(mutate):
        cu = offsets(lq)
        qs, ks, vs = (x.detach().clone().requires_grad_() for x in (q, k, v))
        out = dash_attn.flash_attn_varlen_func(qs, ks, vs, cu, cu, max(lq), max(lq), **kw)
        if mutate:
            cu.copy_(offsets([13, 4, 9]))  # another packing of the same 26 tokens
        calls = []
        spied = {name: getattr(_varlen, name) for name in ("_offsets", "_check_packed")}
        for name, fn in spied.items():
            setattr(_varlen, name, lambda *a, _n=name, _f=fn: calls.append(_n) or _f(*a))
        try:
            out.backward(dout)
        finally:
            for name, fn in spied.items():
                setattr(_varlen, name, fn)
        return calls, out.detach(), qs.grad, ks.grad, vs.grad

    calls, *plain = grads(False)
    assert calls == [], calls
    calls, *mutated = grads(True)
    assert calls == [], calls
    assert all(torch.equal(a, b) for a, b in zip(plain, mutated)), f"seed {SEED}"
    # and they are the explicit backward's, given the forward's offsets
    cu = offsets(lq)
    out, lse = dash_attn.varlen_forward(q.detach(), k.detach(), v.detach(), cu, cu, max(lq),
                                        max(lq), **kw)
    want = dash_attn.varlen_backward(dout, q.detach(), k.detach(), v.detach(), out, lse, cu, cu,
                                     max(lq), max(lq), **kw)
    assert all(torch.equal(a, b) for a, b in zip(plain[1:], want)), f"seed {SEED}"


# ---- float64: gradcheck over windows, softcap and packed batches ----------------------------

@pytest.mark.parametrize("causal,window,softcap", [(True, (2, 0), 0.0), (False, (1, 2), 0.0),
                                                   (False, (-1, -1), 2.0), (True, (3, -1), 4.0)])
def test_gradcheck_float64_window_and_softcap(client, causal, window, softcap):
    # the full Jacobian through dashd's CPU engine in float64 (softcap 2 and 4 saturate the
    # tanh for scores of this size: its derivative is what is checked)
    g = torch.Generator().manual_seed(SEED ^ 64)
    q = (torch.randn(1, 5, 2, 32, generator=g, dtype=torch.float64) * 2).requires_grad_()
    k = (torch.randn(1, 6, 1, 32, generator=g, dtype=torch.float64) * 2).requires_grad_()
    v = torch.randn(1, 6, 1, 32, generator=g, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda a, b, c: dash_attn.flash_attn_func(a, b, c, causal=causal, window_size=window,
                                                  softcap=softcap), (q, k, v)), f"seed {SEED}"


def test_gradcheck_float64_packed_batch_with_window_and_softcap(client):
    # three sequences, one without queries and one whose first query sees no key
    g = torch.Generator().manual_seed(SEED ^ 65)
    lq, lk = [3, 0, 2], [4, 2, 1]
    q, k, v, _ = packed(lq, lk, 2, 1, 32, g, sigma=2.0, dtype=torch.float64)
    cq, ck = offsets(lq), offsets(lk)
    assert torch.autograd.gradcheck(
        lambda a, b, c: dash_attn.flash_attn_varlen_func(a, b, c, cq, ck, max(lq), max(lk),
                                                         causal=True, window_size=(1, 0),
                                                         softcap=3.0), (q, k, v)), f"seed {SEED}"


@pytest.mark.parametrize("window,softcap", [((5, 0), 0.0), ((13, 4), 30.0), ((-1, -1), 50.0)])
def test_varlen_float64_matches_float64_autograd_to_double_precision(client, window, softcap):
    g = torch.Generator().manual_seed(SEED ^ 66)
    lq, lk = [1, 40, 0, 17, 5], [1, 33, 9, 20, 0]
    q, k, v, dout = packed(lq, lk, 4, 2, 32, g, sigma=3.0, dtype=torch.float64)
    cq, ck = offsets(lq), offsets(lk)
    out = dash_attn.flash_attn_varlen_func(q, k, v, cq, ck, max(lq), max(lk),
                                           causal=window[1] == 0, window_size=window,
                                           softcap=softcap, softmax_scale=0.125)
    assert out.dtype == torch.float64
    out.backward(dout)
    q64, k64, v64 = (x.detach().clone().requires_grad_() for x in (q, k, v))
    ref = ref_varlen(q64, k64, v64, cq.tolist(), ck.tolist(), window[1] == 0, window, softcap,
                     0.125)  # 0.125 is exact in float32, the wire's scale
    ref.backward(dout)
    msg = f"seed {SEED}"
    assert (out - ref).abs().max() < 1e-12, msg
    for got, want in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        assert (got - want).abs().max() < 1e-11, msg


def test_varlen_compile_fullgraph_takes_softcap_and_scale_as_inputs(client):
    # the dense call compiles with softcap and softmax_scale as (dynamic) float inputs; the
    # varlen call checked them with math.isfinite, which dynamo cannot trace on a symbolic
    # float: fullgraph=True raised (a graph break) on the second value or with dynamic=True
    g = torch.Generator().manual_seed(SEED ^ 77)
    lq, lk = [5, 12, 1], [7, 9, 4]
    cq, ck = offsets(lq), offsets(lk)
    q, k, v, _ = packed(lq, lk, 4, 2, 32, g, sigma=2.0, dtype=torch.float64)

    def f(q, k, v, softcap, scale):
        return dash_attn.flash_attn_varlen_func(q, k, v, cq, ck, max(lq), max(lk), causal=True,
                                               window_size=(3, 0), softcap=softcap,
                                               softmax_scale=scale)

    for dynamic in (None, True):
        torch._dynamo.reset()
        cf = torch.compile(f, fullgraph=True, dynamic=dynamic)
        for softcap, scale in ((5.0, 0.2), (7.0, 0.3), (9.0, 0.25)):
            out = cf(q, k, v, softcap, scale)
            want = ref_varlen(q.detach(), k.detach(), v.detach(), cq, ck, True, (3, 0), softcap,
                              scale)
            assert rel(out, want) < 1e-6, f"dynamic={dynamic} softcap={softcap}, seed {SEED}"
