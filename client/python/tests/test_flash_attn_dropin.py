# SPDX-License-Identifier: BSD-3-Clause
"""The flash-attn drop-ins (dash_attn.flash_attn_interface for flash-attn 2, dash_attn.fa3
for flash-attn 3) through a real CPU dashd, called the ways flash-attn's own tests call
them: positional dropout_p (FA2) or softmax_scale (FA3), keywords, return_attn_probs and
its tuple, the qkv- and kv-packed forms with torch.autograd.grad into the packed tensor,
causal and GQA; their signatures against flash-attn's; and every argument dashd cannot
honour raising NotImplementedError that names it."""
import inspect
import math
import os

import pytest
import torch

import dash_attn
from dash_attn import fa3
from dash_attn.flash_attn_interface import (flash_attn_func, flash_attn_kvpacked_func,
                                            flash_attn_qkvpacked_func, flash_attn_varlen_func,
                                            flash_attn_varlen_kvpacked_func,
                                            flash_attn_varlen_qkvpacked_func)

SEED = int.from_bytes(os.urandom(4), "little")

pytestmark = pytest.mark.usefixtures("client")


def gen(salt):
    return torch.Generator().manual_seed(SEED ^ salt)


def ref(q, k, v, causal, scale):
    """float64 attention, GQA and bottom-right causal."""
    q, k, v = (x.double() for x in (q, k, v))
    hq, hkv, sq, sk = q.shape[2], k.shape[2], q.shape[1], k.shape[1]
    kk, vv = (x.repeat_interleave(hq // hkv, dim=2) for x in (k, v))
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    if causal:
        i, j = torch.arange(sq).view(-1, 1), torch.arange(sk).view(1, -1)
        s = s.masked_fill(j > i + (sk - sq), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, dim=-1), vv), lse


def rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm())


# flash-attn's signatures (flash_attn/flash_attn_interface.py, hopper/flash_attn_interface.py)
FA2 = [("q", None), ("k", None), ("v", None), ("dropout_p", 0.0), ("softmax_scale", None),
       ("causal", False), ("window_size", (-1, -1)), ("softcap", 0.0), ("alibi_slopes", None),
       ("deterministic", False), ("return_attn_probs", False)]
FA2_QKV = [("qkv", None)] + FA2[3:]
FA2_KV = [("q", None), ("kv", None)] + FA2[3:]
FA2_VARLEN = FA2[:3] + [("cu_seqlens_q", None), ("cu_seqlens_k", None), ("max_seqlen_q", None),
                        ("max_seqlen_k", None)] + FA2[3:] + [("block_table", None)]
FA2_VARLEN_QKV = [("qkv", None), ("cu_seqlens", None), ("max_seqlen", None)] + FA2[3:]
FA2_VARLEN_KV = [("q", None), ("kv", None)] + FA2_VARLEN[3:-1]
FA3 = [("q", None), ("k", None), ("v", None), ("softmax_scale", None), ("causal", False),
       ("qv", None), ("q_descale", None), ("k_descale", None), ("v_descale", None),
       ("window_size", (-1, -1)), ("attention_chunk", 0), ("softcap", 0.0), ("num_splits", 1),
       ("pack_gqa", None), ("deterministic", False), ("sm_margin", 0),
       ("return_attn_probs", False)]
FA3_QKV = [("qkv", None), ("softmax_scale", None), ("causal", False), ("q_descale", None),
           ("k_descale", None), ("v_descale", None), ("window_size", (-1, -1)),
           ("attention_chunk", 0), ("softcap", 0.0), ("deterministic", False),
           ("num_heads_q", None), ("sm_margin", 0), ("return_attn_probs", False)]


@pytest.mark.parametrize("fn,want", [(flash_attn_func, FA2), (flash_attn_qkvpacked_func, FA2_QKV),
                                     (flash_attn_kvpacked_func, FA2_KV),
                                     (flash_attn_varlen_func, FA2_VARLEN),
                                     (flash_attn_varlen_qkvpacked_func, FA2_VARLEN_QKV),
                                     (flash_attn_varlen_kvpacked_func, FA2_VARLEN_KV),
                                     (fa3.flash_attn_func, FA3),
                                     (fa3.flash_attn_qkvpacked_func, FA3_QKV)],
                         ids=["fa2", "fa2-qkvpacked", "fa2-kvpacked", "fa2-varlen",
                              "fa2-varlen-qkvpacked", "fa2-varlen-kvpacked", "fa3",
                              "fa3-qkvpacked"])
def test_signatures_are_flash_attns(fn, want):
    got = [(p.name, None if p.default is inspect.Parameter.empty else p.default)
           for p in inspect.signature(fn).parameters.values()]
    assert got == want


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [(4, 4), (4, 1), (6, 2)], ids=["mha", "mqa", "gqa"])
def test_fa2_call_as_flash_attns_tests_do(dtype, causal, heads):
    # flash-attn's test_flash_attn_output: dropout_p positional, the rest by keyword,
    # return_attn_probs=True, then torch.autograd.grad with a random output gradient
    hq, hkv = heads
    g = gen(1)
    q = torch.randn(2, 37, hq, 64, generator=g).to(dtype).requires_grad_()
    k = torch.randn(2, 53, hkv, 64, generator=g).to(dtype).requires_grad_()
    v = torch.randn(2, 53, hkv, 64, generator=g).to(dtype).requires_grad_()
    out, lse, S_dmask = flash_attn_func(q, k, v, 0.0, causal=causal, window_size=(-1, -1),
                                        softcap=0.0, alibi_slopes=None, deterministic=False,
                                        return_attn_probs=True)
    assert out.shape == q.shape and out.dtype == dtype
    assert lse.shape == (2, hq, 37) and lse.dtype == torch.float32
    assert S_dmask.numel() == 0 and S_dmask.dtype == dtype  # flash-attn 2 without dropout
    want, want_lse = ref(q, k, v, causal, 64 ** -0.5)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert rel(out, want) < tol and rel(lse, want_lse) < 1e-5, f"seed {SEED}"
    gout = torch.randn(out.shape, generator=g).to(dtype)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), gout)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    # the same call without return_attn_probs, positional to softmax_scale: the same bits
    out2 = flash_attn_func(q, k, v, 0.0, 64 ** -0.5, causal)
    assert torch.equal(out, out2)
    dq2, dk2, dv2 = torch.autograd.grad(out2, (q, k, v), gout)
    assert torch.equal(dq, dq2) and torch.equal(dk, dk2) and torch.equal(dv, dv2)


def test_fa2_varlen_as_flash_attns_users_import_it():
    # `from flash_attn.flash_attn_interface import flash_attn_varlen_func` used to be an
    # ImportError from the drop-in; its answer is dash_attn's own call's, deterministic
    # whatever `deterministic` says, with flash-attn 2's (out, lse, S_dmask)
    g = gen(12)
    cu = torch.tensor([0, 9, 9, 40], dtype=torch.int32)
    q = torch.randn(40, 4, 32, generator=g).requires_grad_()
    kv = torch.randn(40, 2, 2, 32, generator=g).requires_grad_()
    k, v = kv.unbind(1)
    want, want_lse = dash_attn.flash_attn_varlen_func(q, k, v, cu, cu, 31, 31, causal=True,
                                                       return_softmax_lse=True)
    wq, wkv = torch.autograd.grad(want, (q, kv), torch.ones_like(want))
    for det in (False, True):
        out, lse, s = flash_attn_varlen_func(q, k, v, cu, cu, 31, 31, 0.0, causal=True,
                                             deterministic=det, return_attn_probs=True)
        assert torch.equal(out, want) and torch.equal(lse, want_lse) and lse.shape == (4, 40)
        assert s.numel() == 0 and s.dtype == q.dtype
        assert all(torch.equal(a, b) for a, b in
                   zip(torch.autograd.grad(out, (q, kv), torch.ones_like(out)), (wq, wkv)))
        out = flash_attn_varlen_kvpacked_func(q, kv, cu, cu, 31, 31, causal=True,
                                              deterministic=det)
        assert torch.equal(out, want)
        assert all(torch.equal(a, b) for a, b in
                   zip(torch.autograd.grad(out, (q, kv), torch.ones_like(out)), (wq, wkv)))
    qkv = torch.stack([q.detach()[:, :2], k.detach(), v.detach()], dim=1).requires_grad_()
    out = flash_attn_varlen_qkvpacked_func(qkv, cu, 31, causal=True)
    assert torch.equal(out, dash_attn.flash_attn_varlen_func(*qkv.unbind(1), cu, cu, 31, 31,
                                                             causal=True))
    (dqkv,) = torch.autograd.grad(out, qkv, torch.ones_like(out))
    assert dqkv.shape == qkv.shape and torch.isfinite(dqkv).all()
    with pytest.raises(NotImplementedError, match="block_table"):
        flash_attn_varlen_func(q, k, v, cu, cu, 31, 31, block_table=cu)


def test_fa2_is_deterministic_whatever_deterministic_says():
    q, k, v = (torch.randn(1, 64, 2, 32, generator=gen(2)).requires_grad_() for _ in range(3))
    grads = []
    for det in (False, True, False):
        out = flash_attn_func(q, k, v, causal=True, deterministic=det)
        grads.append(torch.autograd.grad(out, (q, k, v), torch.ones_like(out)))
        assert dash_attn.last_result()["schedule"] != "atomic"
    for a in grads[1:]:
        assert all(torch.equal(x, y) for x, y in zip(grads[0], a))


@pytest.mark.parametrize("causal", [False, True])
def test_fa2_packed_forms_equal_the_unpacked_call_and_grad_into_the_pack(causal):
    g = gen(3)
    qkv = torch.randn(2, 45, 3, 4, 32, generator=g).requires_grad_()
    out, lse, _ = flash_attn_qkvpacked_func(qkv, 0.0, causal=causal, return_attn_probs=True)
    q, k, v = (x.detach().clone().requires_grad_() for x in qkv.unbind(2))
    ref_out = flash_attn_func(q, k, v, causal=causal)
    assert torch.equal(out, ref_out)
    gout = torch.randn(out.shape, generator=g)
    (dqkv,) = torch.autograd.grad(out, qkv, gout)
    dq, dk, dv = torch.autograd.grad(ref_out, (q, k, v), gout)
    assert torch.equal(dqkv, torch.stack([dq, dk, dv], dim=2))

    q = torch.randn(2, 30, 6, 32, generator=g).requires_grad_()
    kv = torch.randn(2, 50, 2, 2, 32, generator=g).requires_grad_()  # GQA 6:2
    out = flash_attn_kvpacked_func(q, kv, 0.0, causal=causal)
    k, v = (x.detach().clone().requires_grad_() for x in kv.unbind(2))
    q2 = q.detach().clone().requires_grad_()
    ref_out = flash_attn_func(q2, k, v, causal=causal)
    assert torch.equal(out, ref_out)
    gout = torch.randn(out.shape, generator=g)
    dq, dkv = torch.autograd.grad(out, (q, kv), gout)
    dq2, dk, dv = torch.autograd.grad(ref_out, (q2, k, v), gout)
    assert torch.equal(dq, dq2) and torch.equal(dkv, torch.stack([dk, dv], dim=2))


def test_fa3_softmax_scale_is_the_fourth_positional_and_returns_out_lse():
    g = gen(4)
    q = torch.randn(1, 40, 6, 64, generator=g).requires_grad_()
    k = torch.randn(1, 40, 2, 64, generator=g).requires_grad_()
    v = torch.randn(1, 40, 2, 64, generator=g).requires_grad_()
    # flash-attn 3's tests: everything by keyword, return_attn_probs=True -> (out, lse)
    out, lse = fa3.flash_attn_func(q, k, v, causal=True, qv=None, q_descale=None,
                                   k_descale=None, v_descale=None, window_size=(-1, -1),
                                   attention_chunk=0, softcap=0.0, pack_gqa=None,
                                   num_splits=1, return_attn_probs=True)
    assert lse.shape == (1, 6, 40) and lse.dtype == torch.float32
    assert torch.equal(out, flash_attn_func(q, k, v, causal=True))
    out3 = fa3.flash_attn_func(q, k, v, 0.3, True)  # 4th positional: softmax_scale
    assert torch.equal(out3, flash_attn_func(q, k, v, 0.0, 0.3, True))
    want, _ = ref(q, k, v, True, 0.3)
    assert rel(out3, want) < 1e-5
    dq, dk, dv = torch.autograd.grad(out3, (q, k, v), torch.ones_like(out3))
    assert dk.shape == k.shape


def test_fa3_qkvpacked_takes_5d_and_4d_with_num_heads_q():
    g = gen(5)
    qkv = torch.randn(1, 33, 3, 2, 32, generator=g)
    a = fa3.flash_attn_qkvpacked_func(qkv, causal=True)
    assert torch.equal(a, flash_attn_qkvpacked_func(qkv, causal=True))
    flat = torch.randn(1, 33, 4 + 2 * 2, 32, generator=g)  # 4 query heads, 2 kv heads
    out, lse = fa3.flash_attn_qkvpacked_func(flat, causal=True, num_heads_q=4,
                                             return_attn_probs=True)
    q, k, v = flat.split([4, 2, 2], dim=2)
    assert torch.equal(out, flash_attn_func(q, k, v, causal=True)) and lse.shape == (1, 4, 33)
    with pytest.raises(ValueError, match="num_heads_q"):
        fa3.flash_attn_qkvpacked_func(flat)
    with pytest.raises(ValueError, match="not num_heads_q=3"):
        fa3.flash_attn_qkvpacked_func(flat, num_heads_q=3)
    # a negative count used to pass the check (-2 + 2 * 5 = 8) and fail in torch.split
    for bad in (-2, 0, 8):
        with pytest.raises(ValueError, match=f"num_heads_q={bad}"):
            fa3.flash_attn_qkvpacked_func(flat, num_heads_q=bad)


REFUSED = [
    ("dropout_p", lambda q: flash_attn_func(q, q, q, 0.1)),
    ("dropout_p", lambda q: flash_attn_qkvpacked_func(torch.stack([q] * 3, 2), dropout_p=0.5)),
    ("alibi_slopes", lambda q: flash_attn_func(q, q, q, alibi_slopes=torch.zeros(2))),
    ("qv", lambda q: fa3.flash_attn_func(q, q, q, qv=q)),
    ("q_descale", lambda q: fa3.flash_attn_func(q, q, q, q_descale=torch.ones(1))),
    ("v_descale", lambda q: fa3.flash_attn_qkvpacked_func(torch.stack([q] * 3, 2),
                                                          v_descale=torch.ones(1))),
    ("attention_chunk", lambda q: fa3.flash_attn_func(q, q, q, attention_chunk=128)),
    ("dropout_p", lambda q: dash_attn.flash_attn_func(q, q, q, dropout_p=0.1)),
]


@pytest.mark.parametrize("name,call", REFUSED, ids=[f"{i}-{n}" for i, (n, _) in enumerate(REFUSED)])
def test_what_dashd_cannot_honour_raises_not_implemented_naming_it(name, call):
    q = torch.randn(1, 16, 2, 32)
    with pytest.raises(NotImplementedError, match=name):
        call(q)
    assert torch.isfinite(flash_attn_func(q, q, q)).all()  # and the client goes on


def test_numpy_arrays_and_bad_packs_are_refused_with_a_clear_error():
    import numpy as np
    a = np.zeros((1, 16, 2, 32), np.float32)
    for call in (lambda: flash_attn_func(a, a, a), lambda: fa3.flash_attn_func(a, a, a)):
        with pytest.raises(TypeError, match="torch tensors"):
            call()
    with pytest.raises(ValueError, match="qkv must be 5-D with 3"):
        flash_attn_qkvpacked_func(torch.zeros(1, 16, 2, 2, 32))
    with pytest.raises(ValueError, match="kv must be 5-D with 2"):
        flash_attn_kvpacked_func(torch.zeros(1, 16, 2, 32), torch.zeros(1, 16, 2, 32))
    with pytest.raises(TypeError, match="window_size must be a pair"):
        flash_attn_func(torch.zeros(1, 16, 2, 32), torch.zeros(1, 16, 2, 32),
                        torch.zeros(1, 16, 2, 32), window_size=3)


@pytest.mark.parametrize("window,softcap", [((8, 0), 0.0), ((-1, 4), 5.0), ((3, 3), 30.0)])
def test_window_and_softcap_through_the_drop_ins_match_dash_attns_own_call(window, softcap):
    g = gen(8)
    q, k, v = (torch.randn(1, 40, 2, 32, generator=g).requires_grad_() for _ in range(3))
    want = dash_attn.flash_attn_func(q, k, v, causal=True, window_size=window, softcap=softcap)
    a = flash_attn_func(q, k, v, 0.0, None, True, window, softcap)
    b = fa3.flash_attn_func(q, k, v, None, True, window_size=window, softcap=softcap)
    assert torch.equal(a, want) and torch.equal(b, want)
    ga = torch.autograd.grad(a, (q, k, v), torch.ones_like(a))
    gw = torch.autograd.grad(want, (q, k, v), torch.ones_like(a))
    assert all(torch.equal(x, y) for x, y in zip(ga, gw))
    with pytest.raises(ValueError, match="softcap"):
        flash_attn_func(q, k, v, softcap=-1.0)


def test_tuning_knobs_that_change_no_result_are_accepted():
    q = torch.randn(1, 20, 2, 32, generator=gen(6))
    a = fa3.flash_attn_func(q, q, q, num_splits=4, pack_gqa=True, sm_margin=8,
                            deterministic=True)
    assert torch.equal(a, fa3.flash_attn_func(q, q, q))


def test_drop_in_compiles_fullgraph_to_the_eager_bits():
    g = gen(7)
    q, k, v = (torch.randn(1, 50, 4, 32, generator=g).requires_grad_() for _ in range(3))

    def f(q, k, v):
        out, lse, _ = flash_attn_func(q, k, v, 0.0, None, True, return_attn_probs=True)
        o3 = fa3.flash_attn_func(q, k, v, None, True)
        return out + o3, lse

    torch._dynamo.reset()
    cf = torch.compile(f, fullgraph=True)
    qc, kc, vc = (x.detach().clone().requires_grad_() for x in (q, k, v))
    (oe, le), (oc, lc) = f(q, k, v), cf(qc, kc, vc)
    assert torch.equal(oe, oc) and torch.equal(le, lc)
    oe.sum().backward()
    oc.sum().backward()
    assert all(torch.equal(a.grad, b.grad) for a, b in ((q, qc), (k, kc), (v, vc)))
    assert math.isfinite(float(oc.detach().sum()))


def test_dash_attns_own_call_does_not_drop_flash_attns_positional_window():
    # dash_attn.flash_attn_func's 7th positional is deterministic, flash-attn 2's window_size:
    # code that changed `from flash_attn import flash_attn_func` to `from dash_attn import
    # ...` and passes the window by position ran without it (a tuple is a true
    # `deterministic`). Either the window is honoured or the call is refused naming it.
    g = gen(13)
    q, k, v = (torch.randn(1, 24, 2, 32, generator=g, dtype=torch.float64) for _ in range(3))
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * 32 ** -0.5
    i, j = torch.arange(24).view(-1, 1), torch.arange(24).view(1, -1)
    s = s.masked_fill((j > i) | (j < i - 1), float("-inf"))  # causal, window (1, 0)
    want = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, -1), v)
    assert rel(flash_attn_func(q, k, v, 0.0, None, True, (1, 0)), want) < 1e-6
    try:
        out = dash_attn.flash_attn_func(q, k, v, 0.0, None, True, (1, 0))
    except TypeError as e:
        assert "window_size" in str(e)
    else:
        assert rel(out, want) < 1e-6, f"the window was dropped, seed {SEED}"
    # flash-attn 2's full positional call, return_attn_probs last: refused by name, not
    # "unknown schedule 0.0"
    with pytest.raises(TypeError, match="window_size"):
        dash_attn.flash_attn_func(q, k, v, 0.0, None, False, (-1, -1), 0.0, None, False, True)
