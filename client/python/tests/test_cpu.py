# SPDX-License-Identifier: BSD-3-Clause
"""dash_attn on the CPU engine through a real dashd: values against a float64 reference,
gradients against PyTorch autograd of the same attention in float64, bitwise repeats,
numpy and torch inputs, the audit tag, and every error path a user can hit. Inputs are
fresh random draws (seed printed on failure through pytest's output)."""
import ctypes
import math
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import dash_attn
from dash_attn import _client, _lib

from conftest import Daemon, dashctl_path
import random_cases

SEED = int.from_bytes(os.urandom(4), "little")


def rng():
    return np.random.default_rng(SEED)


def ref_attention(q, k, v, causal, scale=None):
    """float64 attention with GQA and bottom-right causal alignment, as torch ops (so that
    autograd gives the reference gradients)."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    g = hq // hkv
    kk = k.repeat_interleave(g, dim=2)
    vv = v.repeat_interleave(g, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) * (scale or 1.0 / math.sqrt(d))
    if causal:
        i = torch.arange(sq).view(-1, 1)
        j = torch.arange(sk).view(1, -1)
        s = s.masked_fill(j > i + (sk - sq), float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.einsum("bhqk,bkhd->bqhd", p, vv)


def rel(a, b):
    a = a.double() if isinstance(a, torch.Tensor) else torch.from_numpy(np.asarray(a, np.float64))
    b = b.double() if isinstance(b, torch.Tensor) else torch.from_numpy(np.asarray(b, np.float64))
    return float((a - b).norm() / b.norm())


SHAPES = [  # batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim
    (2, 100, 100, 4, 4, 64),
    (1, 77, 130, 8, 2, 32),
    (1, 64, 64, 4, 1, 128),
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
def test_fp32_forward_and_gradients_match_float64_autograd(client, shape, causal):
    b, sq, sk, hq, hkv, d = shape
    g = torch.Generator().manual_seed(SEED)
    q = torch.randn(b, sq, hq, d, generator=g, requires_grad=True)
    k = torch.randn(b, sk, hkv, d, generator=g, requires_grad=True)
    v = torch.randn(b, sk, hkv, d, generator=g, requires_grad=True)
    dout = torch.randn(b, sq, hq, d, generator=g)
    out = dash_attn.flash_attn_func(q, k, v, causal=causal)
    out.backward(dout)
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref = ref_attention(q64, k64, v64, causal)
    ref.backward(dout.double())
    assert rel(out.detach(), ref.detach()) < 1e-5, f"seed {SEED}"
    for got, want in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        assert rel(got, want) < 1e-4, f"seed {SEED}"


def test_bf16_values_and_gradients_are_close_and_repeat_bitwise(client):
    g = torch.Generator().manual_seed(SEED ^ 1)
    q, k, v = (torch.randn(1, 96, 4, 64, generator=g).bfloat16().requires_grad_() for _ in range(3))
    dout = torch.randn(1, 96, 4, 64, generator=g).bfloat16()
    grads = []
    for _ in range(2):
        for x in (q, k, v):
            x.grad = None
        out = dash_attn.flash_attn_func(q, k, v, causal=True, schedule="shift")
        out.backward(dout)
        grads.append([x.grad.clone() for x in (q, k, v)])
    for a, b in zip(*grads):
        assert torch.equal(a.view(torch.int16), b.view(torch.int16))  # the same bits
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref = ref_attention(q64, k64, v64, True)
    ref.backward(dout.double())
    assert rel(out.detach(), ref.detach()) < 1e-2
    for got, want in zip(grads[0], (q64.grad, k64.grad, v64.grad)):
        assert rel(got, want) < 2e-2, f"seed {SEED}"
    assert dash_attn.last_result()["schedule"] == "shift"
    assert dash_attn.last_result()["backend"] == "cpu"


def test_backward_makes_no_zero_gradient_for_lse(client):
    """lse is not differentiable: autograd must not allocate and fill a zero gradient for it
    each backward (ctx.set_materialize_grads(False)); the gradients are those of a run
    that returns lse too and backpropagates through out alone."""
    from torch.profiler import profile, ProfilerActivity
    g = torch.Generator().manual_seed(SEED ^ 7)
    cu = torch.tensor([0, 30, 64], dtype=torch.int32)
    for name, shape in (("flash_attn_func", (1, 64, 2, 64)), ("flash_attn_varlen_func", (64, 2, 64))):
        q, k, v = (torch.randn(shape, generator=g).requires_grad_() for _ in range(3))
        dout = torch.randn(shape, generator=g)
        if len(shape) == 4:
            out, lse = dash_attn.flash_attn_func(q, k, v, causal=True, return_softmax_lse=True)
        else:
            out, lse = dash_attn.flash_attn_varlen_func(q, k, v, cu, cu, 34, 34, causal=True,
                                                        return_softmax_lse=True)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            out.backward(dout)
        zeros = [e.key for e in prof.key_averages() if e.key in ("aten::zeros", "aten::zeros_like", "aten::zero_",
                                                                  "aten::fill_")]
        assert not zeros, f"{name}: the backward made a zero gradient ({zeros})"
        assert all(x.grad is not None and torch.isfinite(x.grad).all() for x in (q, k, v)), name


def test_numpy_forward_and_backward(client):
    r = rng()
    q, k, v, dout = (r.standard_normal((1, 50, 2, 32), dtype=np.float32) for _ in range(4))
    out, lse = dash_attn.forward(q, k, v, causal=False)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == q.shape
    assert lse.shape == (1, 2, 50) and lse.dtype == np.float32
    ref = ref_attention(*(torch.from_numpy(x).double() for x in (q, k, v)), False)
    assert rel(out, ref) < 1e-5
    assert dash_attn.last_result()["schedule"] is None  # a forward has none
    dq, dk, dv = dash_attn.backward(dout, q, k, v, out, lse)
    assert dash_attn.last_result()["schedule"] is not None
    q64, k64, v64 = (torch.from_numpy(x).double().requires_grad_() for x in (q, k, v))
    ref_attention(q64, k64, v64, False).backward(torch.from_numpy(dout).double())
    assert rel(dq, q64.grad) < 1e-4 and rel(dk, k64.grad) < 1e-4 and rel(dv, v64.grad) < 1e-4
    # return_softmax_lse gives the same lse through the torch API
    t_out, t_lse = dash_attn.flash_attn_func(*(torch.from_numpy(x) for x in (q, k, v)),
                                             return_softmax_lse=True)
    assert np.array_equal(t_lse.numpy(), lse)


def test_strided_inputs_give_the_same_bits(client):
    g = torch.Generator().manual_seed(SEED ^ 2)
    qkv = torch.randn(1, 64, 3, 4, 32, generator=g)  # packed, as a fused projection makes it
    q, k, v = qkv.unbind(dim=2)
    a = dash_attn.flash_attn_func(q, k, v)
    b = dash_attn.flash_attn_func(q.contiguous(), k.contiguous(), v.contiguous())
    assert torch.equal(a, b)


def _views(r, dtype):
    """(name, a strided view, its dense copy) for the layouts a host input arrives in: the
    columns of a packed projection, a transpose, every other row, a broadcast (stride 0)."""
    base = torch.randn(2, 40, 3, 4, 32, generator=r).to(dtype)
    wide = torch.randn(2, 80, 4, 32, generator=r).to(dtype)
    one = torch.randn(2, 40, 1, 32, generator=r).to(dtype)
    tr = torch.randn(2, 4, 40, 32, generator=r).to(dtype)
    views = {"packed": base[:, :, 1], "every other row": wide[:, ::2],
             "broadcast heads": one.expand(2, 40, 4, 32), "transposed": tr.transpose(1, 2)}
    return [(n, x, x.contiguous()) for n, x in views.items()]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_strided_layout_gives_its_dense_copys_bits_forward_and_backward(client, dtype):
    r = torch.Generator().manual_seed(SEED ^ 3)
    views = _views(r, dtype)
    for name, x, dense in views:
        assert not x.is_contiguous(), name
        # x as q, as k and as v in turn; the other two dense
        for at in range(3):
            args = [torch.randn(2, 40, 4, 32, generator=r).to(dtype) for _ in range(3)]
            strided = list(args)
            strided[at], args[at] = x, dense
            out_a, lse_a = dash_attn.forward(*strided, causal=True)
            out_b, lse_b = dash_attn.forward(*args, causal=True)
            assert torch.equal(out_a, out_b) and torch.equal(lse_a, lse_b), (name, at)
            # the backward's out and dout strided too (dout broadcast is how a sum's
            # gradient arrives)
            dout = torch.randn(2, 40, 1, 32, generator=r).to(dtype).expand(2, 40, 4, 32)
            out_t = out_a.transpose(1, 2).contiguous().transpose(1, 2)
            ga = dash_attn.backward(dout, *strided, out_t, lse_a, causal=True)
            gb = dash_attn.backward(dout.contiguous(), *args, out_b, lse_b, causal=True)
            for i, (a, b) in enumerate(zip(ga, gb)):
                assert a.is_contiguous() and torch.equal(a, b), (name, at, "dq dk dv"[i * 3:])


def test_numpy_views_in_any_order_give_their_dense_copys_bits(client):
    r = rng()
    q, k, v, dout = (r.standard_normal((1, 30, 2, 32), dtype=np.float32) for _ in range(4))
    views = {"reversed rows": lambda x: np.ascontiguousarray(x[:, ::-1])[:, ::-1],
             "Fortran order": np.asfortranarray,
             "broadcast": lambda x: np.broadcast_to(x[:, :1], x.shape)}
    for name, view in views.items():
        sq, sk, sv, sd = (view(x) for x in (q, k, v, dout))
        assert not sq.flags.c_contiguous, name
        dq_, dk_, dv_ = (np.ascontiguousarray(x) for x in (sq, sk, sv))
        out_a, lse_a = dash_attn.forward(sq, sk, sv)
        out_b, lse_b = dash_attn.forward(dq_, dk_, dv_)
        assert np.array_equal(out_a, out_b) and np.array_equal(lse_a, lse_b), name
        ga = dash_attn.backward(sd, sq, sk, sv, np.asfortranarray(out_a), lse_a)
        gb = dash_attn.backward(np.ascontiguousarray(sd), dq_, dk_, dv_, out_b, lse_b)
        assert all(np.array_equal(a, b) for a, b in zip(ga, gb)), name


def test_a_broadcast_input_is_not_made_dense_in_the_callers_memory(client):
    """A stride-0 view of one row is copied once, into the shared buffer, not first made
    into a dense tensor of its full size in this process (torch's profiler would see that
    copy as an aten::contiguous / aten::clone)."""
    r = torch.Generator().manual_seed(SEED ^ 4)
    q, k, v = (torch.randn(1, 1, 2, 32, generator=r).expand(1, 512, 2, 32) for _ in range(3))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out, lse = dash_attn.forward(q, k, v)
    made = [e.key for e in prof.key_averages()
            if e.key in ("aten::contiguous", "aten::clone", "aten::empty_like")]
    assert not made, made
    # every query sees the same keys and values: out is v's row everywhere
    assert torch.allclose(out, v, atol=1e-6)


def test_errors_carry_the_daemons_message(client):
    q = torch.randn(1, 16, 2, 16)  # head dim 16: the CPU engine serves 32..256
    with pytest.raises(dash_attn.DashError) as e:
        dash_attn.flash_attn_func(q, q, q)
    assert e.value.name == "DASH_EHEADDIM"
    assert "head" in str(e.value)
    q = torch.randn(1, 16, 2, 32)
    k = torch.randn(1, 16, 2, 32)
    v = torch.randn(1, 15, 2, 32)
    with pytest.raises(dash_attn.DashError) as e:
        dash_attn.flash_attn_func(q, k, v)
    assert e.value.name == "DASH_ESHAPE" and "v" in e.value.message
    with pytest.raises(dash_attn.DashError) as e:
        dash_attn.flash_attn_func(q, torch.randn(1, 16, 3, 32), torch.randn(1, 16, 3, 32))
    assert e.value.name == "DASH_ESHAPE"
    with pytest.raises(NotImplementedError, match="dropout_p"):
        dash_attn.flash_attn_func(q, k, k, dropout_p=0.1)
    with pytest.raises(ValueError):
        dash_attn.flash_attn_func(q, k, k, schedule="atomic")  # deterministic by default
    with pytest.raises(ValueError):
        dash_attn.flash_attn_func(q, k, k, schedule="fastest")
    with pytest.raises(ValueError):
        dash_attn.flash_attn_func(q, k, k, softmax_scale=-1.0)
    with pytest.raises(TypeError, match="not served"):
        dash_attn.flash_attn_func(q.int(), k.int(), k.int())
    with pytest.raises(TypeError, match="not a mix"):
        dash_attn.flash_attn_func(q, k, k.numpy())
    # the client still works after all that
    out = dash_attn.flash_attn_func(q, k, k)
    assert out.shape == q.shape and torch.isfinite(out).all()


def test_empty_tensors_as_a_fresh_clients_first_op_get_the_daemons_shape_error(daemon):
    # a batch, sequence or packed batch of zero tokens: nothing to copy, so a client with no
    # shared memory yet used to do pointer arithmetic on a NULL buffer (TypeError: NoneType
    # + int) instead of asking dashd, which names the empty dimension
    empties = [lambda c: c.forward(*(torch.randn(0, 5, 2, 32) for _ in range(3))),
               lambda c: c.forward(*(np.zeros((1, 0, 2, 32), np.float32) for _ in range(3))),
               lambda c: dash_attn.varlen_forward(
                   *(torch.randn(0, 2, 32) for _ in range(3)), [0, 0], [0, 0], 1, 1, client=c)]
    for call in empties:
        c = dash_attn.Client(daemon.endpoint, client_name="empty-test")
        try:
            with pytest.raises(dash_attn.DashError) as e:
                call(c)
            assert e.value.name == "DASH_ESHAPE" and "is < 1" in e.value.message
            q = torch.randn(1, 5, 2, 32)  # and the client serves the next op
            assert torch.isfinite(c.forward(q, q, q)[0]).all()
        finally:
            c.close()


def test_inputs_the_request_cannot_describe_are_refused_before_sending(client):
    # the request carries one dtype: a k, v, out or dout of another would be misread
    q = torch.randn(1, 16, 2, 32)
    for k, v in ((q.half(), q), (q, q.bfloat16()), (q.half(), q.half())):
        with pytest.raises(TypeError, match="q is torch.float32"):
            dash_attn.flash_attn_func(q, k, v)
    r = rng()
    qn, kn, vn, dn = (r.standard_normal((1, 20, 2, 32), dtype=np.float32) for _ in range(4))
    out, lse = dash_attn.forward(qn, kn, vn)
    with pytest.raises(TypeError, match="lse must be float32"):
        dash_attn.backward(dn, qn, kn, vn, out, lse.astype(np.float16))
    with pytest.raises(TypeError, match="out is float16"):
        dash_attn.backward(dn, qn, kn, vn, out.astype(np.float16), lse)
    with pytest.raises(ValueError, match="lse must be 3-D"):
        dash_attn.backward(dn, qn, kn, vn, out, lse[0])
    # meta tensors only give shapes (test_torch_op.py); mixed with host tensors, refused
    m = torch.empty(1, 16, 2, 32, device="meta")
    with pytest.raises(ValueError, match="one kind"):
        dash_attn.flash_attn_func(q, q, m)
    with pytest.raises(ValueError, match="meta"):
        dash_attn.forward(m, m, m)  # no autograd op here: no pointer to read
    with pytest.raises(ValueError, match="must be 4-D"):
        dash_attn.flash_attn_func(q[0], q[0], q[0])
    with pytest.raises(TypeError, match="list"):
        dash_attn.forward(q, q, [1.0])
    out = dash_attn.flash_attn_func(q, q, q)  # and the client still works
    assert torch.isfinite(out).all()


def test_a_process_that_exits_after_a_backward_leaves_no_shared_memory(daemon):
    code = ("import torch, dash_attn\n"
            f"dash_attn.connect({daemon.endpoint!r}, client_name='exit-test')\n"
            "q = torch.randn(1, 64, 2, 32, requires_grad=True)\n"
            "dash_attn.flash_attn_func(q, q, q, causal=True).sum().backward()\n"
            "import os; print(os.getpid())\n")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(dash_attn.__file__)))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    pid = done.stdout.split()[-1]
    left = [f for f in os.listdir("/dev/shm") if f.startswith(f"dash-{pid}-")]
    assert left == [], f"left in /dev/shm: {left}"


def test_dash_library_that_cannot_load_is_an_error_not_a_fallback(tmp_path):
    env = dict(os.environ, DASH_LIBRARY=str(tmp_path / "missing" / "libdash.so"),
               PYTHONPATH=os.path.dirname(os.path.dirname(dash_attn.__file__)))
    done = subprocess.run([sys.executable, "-c", "import dash_attn"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert done.returncode != 0 and "DASH_LIBRARY" in done.stderr, done.stderr


def test_non_deterministic_asks_for_atomic(client):
    q = torch.randn(1, 64, 2, 32, requires_grad=True)
    out = dash_attn.flash_attn_func(q, q.detach(), q.detach(), deterministic=False)
    out.sum().backward()
    assert dash_attn.last_result()["schedule"] == "atomic"


def test_audit_tag_reaches_the_log_for_forward_and_backward():
    import tempfile
    log = os.path.join(tempfile.mkdtemp(prefix="dash-py-audit-"), "audit.log")
    d = Daemon(["--audit", log])
    try:
        c = dash_attn.Client(d.endpoint, client_name="py-audit", run_tag="tagged")
        q = torch.randn(1, 32, 2, 32, requires_grad=True)
        with dash_attn.audit(step=7, label="blk3.attn"):
            out = dash_attn.flash_attn_func(q, q.detach(), q.detach(), causal=True, client=c)
        out.sum().backward()  # outside the block: the tag of the forward still applies
        c.close()
    finally:
        assert d.stop() == 0
    text = subprocess.run([dashctl_path(), "audit", "dump", log], capture_output=True,
                          text=True, check=True).stdout
    lines = [l for l in text.splitlines() if l.startswith("#") and "header" not in l]
    assert len(lines) == 2
    assert all("py-audit" in l and "run=tagged" in l and "step=7" in l and "label=blk3.attn" in l
               for l in lines)
    assert "forward" in lines[0] and "backward" in lines[1]
    # a forward has no backward schedule: the record carries none, the summary says "-"
    summary = subprocess.run([dashctl_path(), "audit", "summary", log], capture_output=True,
                             text=True, check=True).stdout
    fwd = [l for l in summary.splitlines() if l.lstrip().startswith("forward")]
    assert fwd and all("ascending" not in l for l in fwd), summary


def test_an_audit_tag_the_record_cannot_carry_is_refused_not_changed(client):
    # libdash takes the step as an int64 (< 0: no step) and the label as a C string: a step
    # of -5 or 2**63 used to be logged as no step, 2**64 + 7 as step 7, 3.7 as 3, True as
    # 1, and the label "a\0b" as "a" - an audit log that silently says something else
    q = torch.randn(1, 32, 2, 32)
    for step, err in ((-5, ValueError), (2**63, ValueError), (2**64 + 7, ValueError),
                      (3.7, TypeError), (True, TypeError), ("7", TypeError)):
        with pytest.raises(err, match="audit step"):
            with dash_attn.audit(step=step):
                client.forward(q, q, q)
        with pytest.raises(err, match="audit step"):
            dash_attn.set_audit(step=step)
    for label, err in (("a\0b", ValueError), (42, TypeError), (b"blk", TypeError)):
        with pytest.raises(err, match="audit label"):
            with dash_attn.audit(step=1, label=label):
                client.forward(q, q, q)
        with pytest.raises(err, match="audit label"):
            dash_attn.set_audit(label=label)
    # what the record can carry goes through: the largest step, an integral float, numpy's
    with dash_attn.audit(step=2**63 - 1, label="caf\u00e9"):
        with dash_attn.audit(step=4.0):
            with dash_attn.audit(step=np.int64(5)):
                out, _ = client.forward(q, q, q)
    assert out.shape == q.shape


def test_a_client_name_or_run_tag_libdash_would_cut_is_refused(daemon):
    # libdash takes them as C strings: run_tag="sweep\0-7" was logged as run "sweep", and
    # a name that is not a str failed with an AttributeError from .encode()
    for kw, err in ((dict(run_tag="sweep\0-7"), ValueError),
                    (dict(client_name="a\0b"), ValueError),
                    (dict(client_name=42), TypeError), (dict(run_tag=b"sweep"), TypeError)):
        with pytest.raises(err, match=next(iter(kw))):
            dash_attn.Client(daemon.endpoint, **kw)
    c = dash_attn.Client(daemon.endpoint, client_name="caf\u00e9", run_tag="sweep-7")
    q = torch.randn(1, 32, 2, 32)
    assert c.forward(q, q, q)[0].shape == q.shape
    c.close()


def test_each_refusal_says_its_own_reason_not_an_earlier_ones(client):
    q = torch.randn(1, 32, 2, 32)
    with pytest.raises(dash_attn.DashError) as e:
        client.forward(q, q, q, window_size=(-7, 3))  # refused: a side below -1
    assert "window" in str(e.value)
    with pytest.raises(dash_attn.DashError) as e:  # refused by libdash, before any request
        with dash_attn.audit(step=1, label="x" * 300):
            client.forward(q, q, q)
    assert "audit label of 300 bytes" in str(e.value) and "window" not in str(e.value), str(e.value)
    out, _ = client.forward(q, q, q)  # and the client goes on
    assert out.shape == q.shape


def test_a_daemon_crash_and_restart_is_transparent():
    d = Daemon()
    try:
        c = dash_attn.Client(d.endpoint, client_name="py-restart", timeout_ms=20000)
        g = torch.Generator().manual_seed(SEED ^ 4)
        q, k, v = (torch.randn(1, 80, 2, 32, generator=g) for _ in range(3))
        before = dash_attn.flash_attn_func(q, k, v, causal=True, client=c)
        d.kill_and_restart()  # the shared-memory buffer and session are gone with it
        after = dash_attn.flash_attn_func(q, k, v, causal=True, client=c)
        assert torch.equal(before, after)
        c.close()
    finally:
        assert d.stop() == 0


def test_struct_layouts_match_dash_h():
    # pointer, u64, i32 (+4 padding), 4 x i64, 4 x i64
    assert ctypes.sizeof(_lib.DashTensor) == 8 + 8 + 8 + 32 + 32
    # 7 x i32-sized, window and softcap (4 x 4), padding to 8, two DashTensors (offsets),
    # max_seqlen_q/k and batch_invariant (3 x 4), padding to 8, the offsets by value (two
    # pointers, n_offsets, padding to 8)
    assert ctypes.sizeof(_lib.DashAttn) == 7 * 4 + 4 * 4 + 4 + 2 * 88 + 3 * 4 + 4 + 2 * 8 + 8
    assert ctypes.sizeof(_lib.DashResult) == 4 * 4 + 8 + 8 + 16
    assert ctypes.sizeof(_lib.DashConnectOpts) == 8 + 8 + 4 + 4 + 4 + 4
    # pointer, i32, i32, 4 x i64, 4 x i64; the binding packs it with struct (_client._REF)
    assert ctypes.sizeof(_lib.DashCudaRef) == 8 + 4 + 4 + 32 + 32
    assert _client.Client._REF.size == ctypes.sizeof(_lib.DashCudaRef)


def test_constants_equal_dash_h():
    # The binding cannot include the C header: its constants are checked against it.
    import re
    header = open(os.path.join(os.path.dirname(__file__), "..", "..", "dash.h")).read()

    def enum(name):
        body = re.search(r"enum " + name + r" \{(.*?)\};", header, re.S).group(1)
        body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
        return {k: int(v) for k, v in re.findall(r"(DASH_\w+)\s*=\s*(\d+)", body)}

    dtypes, masks, scheds = enum("dash_dtype"), enum("dash_mask"), enum("dash_schedule")
    assert (dtypes["DASH_F32"], dtypes["DASH_F16"], dtypes["DASH_BF16"]) == \
        (_lib.DASH_F32, _lib.DASH_F16, _lib.DASH_BF16)
    assert (masks["DASH_MASK_FULL"], masks["DASH_MASK_CAUSAL"]) == \
        (_lib.DASH_MASK_FULL, _lib.DASH_MASK_CAUSAL)
    assert {k[len("DASH_SCHED_"):].lower(): v for k, v in scheds.items()} == _lib.SCHEDULES
    flag = re.search(r"#define DASH_CONNECT_NO_SESSION (\d+)u", header).group(1)
    assert int(flag) == _lib.DASH_CONNECT_NO_SESSION


def test_no_daemon_is_a_clear_error_at_once(tmp_path):
    t0 = time.monotonic()
    with pytest.raises(dash_attn.DashError) as e:
        dash_attn.Client(f"ipc://{tmp_path}/nobody.sock", timeout_ms=5000)
    assert time.monotonic() - t0 < 1.0  # not the 5 s timeout
    assert e.value.name == "DASH_ENOENT"
    assert f"{tmp_path}/nobody.sock does not exist" in str(e.value)


def test_dead_daemons_socket_is_a_clear_error_at_once(tmp_path):
    # what a killed dashd leaves: the socket file, and nothing listening on it
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(tmp_path / "dashd.sock"))
    s.close()
    t0 = time.monotonic()
    with pytest.raises(dash_attn.DashError) as e:
        dash_attn.Client(f"ipc://{tmp_path}/dashd.sock", timeout_ms=5000)
    assert time.monotonic() - t0 < 1.0
    assert e.value.name == "DASH_ECONNREFUSED"
    assert "nothing listens on" in str(e.value)


def test_refused_endpoint_error_says_why(tmp_path):
    # our own socket, but in a directory anyone may write: libdash refuses it, and the error
    # carries libdash's reason
    d = tmp_path / "open"
    d.mkdir()
    d.chmod(0o777)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(str(d / "dashd.sock"))
        s.listen(1)
        with pytest.raises(dash_attn.DashError) as e:
            dash_attn.Client(f"ipc://{d}/dashd.sock", timeout_ms=300)
        assert e.value.name == "DASH_EPERM"
        assert str(d) in str(e.value) and "written by others" in str(e.value)
    finally:
        s.close()
    # no transport at all (DASHD_ENDPOINT=gpu0.sock): said so, with what an endpoint looks
    # like (it was "invalid argument")
    with pytest.raises(dash_attn.DashError) as e:
        dash_attn.Client("gpu0.sock", timeout_ms=300)
    assert e.value.name == "DASH_EINVAL" and "not an endpoint (ipc://PATH" in str(e.value)


def test_random_shapes_layouts_and_schedules_match_float64(client):
    random_cases.check(dash_attn, SEED ^ 5, 12, "cpu", [torch.float32, torch.bfloat16],
                       {torch.float32: 1e-4, torch.bfloat16: 2e-2}, max_seqlen=300)


def test_saturated_softmax_gradients_are_held_to_their_rounding_not_their_size(client):
    # CI's draw that failed (seed 4010325678, case 11: seqlen 2, causal, float32, head dim
    # 256, scale 0.298): one row's probabilities are 1 - 6e-5 and 6e-5, so dq and dk are
    # float32 cancellations of norm 1.3e-2 that rounding leaves off by 2.5e-5 (1.9e-3
    # relative); random_cases allows that rounding (ROUNDING) on top of the relative bound
    random_cases.check(dash_attn, 4010325678, 12, "cpu", [torch.float32, torch.bfloat16],
                       {torch.float32: 1e-4, torch.bfloat16: 2e-2}, max_seqlen=300)


def test_cuda_device_endpoint_keeps_dashd_endpoint_first(monkeypatch, tmp_path):
    # with DASHD_ENDPOINT set, a CUDA device's daemon is that one (libdash asks CUDA nothing)
    monkeypatch.setenv("DASHD_ENDPOINT", f"ipc://{tmp_path}/mine.sock")
    from dash_attn import _client
    assert _client._endpoint_for(3) == f"ipc://{tmp_path}/mine.sock"
    assert _client.device_of(torch.zeros(1)) is None


def test_scale_and_softcap_that_float32_cannot_hold_are_refused_not_replaced(client):
    # the request carries them as float32, where 0 means the default scale (1/sqrt(d)) or
    # no softcap: a softmax_scale of 1e-46 used to run with 1/sqrt(d) - the unscaled
    # attention, silently - and a softcap of 1e-46 ran uncapped
    r = rng()
    q, k, v = (torch.from_numpy(r.standard_normal((1, 8, 2, 32))) for _ in range(3))
    for kw in ({"softmax_scale": 1e-46}, {"softcap": 1e-46}):
        name = next(iter(kw))
        with pytest.raises(ValueError, match=f"{name}=1e-46 is 0 in float32"):
            dash_attn.flash_attn_func(q, k, v, **kw)
        with pytest.raises(ValueError, match=f"{name}=1e-46 is 0 in float32"):
            dash_attn.forward(q.numpy(), k.numpy(), v.numpy(), **kw)
    for kw in ({"softmax_scale": 1e39}, {"softcap": 3e39}):
        with pytest.raises(ValueError, match="beyond float32"):
            dash_attn.flash_attn_func(q, k, v, **kw)
    cu = torch.tensor([0, 8], dtype=torch.int32)
    with pytest.raises(ValueError, match="softmax_scale=1e-46 is 0 in float32"):
        dash_attn.flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, 8, 8, softmax_scale=1e-46)
    # the smallest scale float32 holds is served as that scale: uniform attention over keys
    out = dash_attn.flash_attn_func(q, k, v, softmax_scale=1e-40)
    assert torch.allclose(out, v.mean(1, keepdim=True).expand_as(out), atol=1e-12, rtol=0)


def test_cuda_refs_carry_each_tensors_pointer_shape_and_strides(client):
    # what _cuda_tensors hands libdash for CUDA tensors, packed here from CPU tensors of the
    # same layouts (the packing does not look at the device): 4-D views with odd strides, a
    # packed batch's 3-D tensors and 2-D lse, fp32 and bf16; a wrong rank is refused
    base = torch.zeros(3, 40, 6, 64, dtype=torch.bfloat16)
    views = [(base, 4), (base[:, ::2], 4), (base.transpose(1, 2), 4), (base[1, :, 2:5], 3),
             (torch.zeros(5, 17, dtype=torch.float32), 2), (base[0, :, :, 1:33], 3),
             (base.expand(3, 40, 6, 64), 4), (torch.zeros(2, 7, 3, 32)[:, :, :, ::2], 4),
             (torch.zeros(9, 4, 16, dtype=torch.float16).transpose(0, 1), 3)]
    client._pack_refs(views)
    for i, (t, nd) in enumerate(views):
        r = client._refs[i]
        assert r.ptr == t.data_ptr() and r.ndim == nd and r.elem_size == t.element_size()
        assert list(r.shape) == list(t.shape) + [0] * (4 - nd)
        assert list(r.strides) == list(t.stride()) + [0] * (4 - nd)
    with pytest.raises(ValueError, match="expected a 4-dim tensor, got shape"):
        client._pack_refs([(base[0], 4)])


def test_flags_and_numbers_given_as_strings_are_refused_not_read(client):
    # causal="false" is true to Python and softmax_scale="0.1" is 0.1 to float(): both ran
    # (a new user's walkthrough); flash-attn's compiled ops take a bool and a float there
    r = rng()
    q, k, v = (torch.from_numpy(r.standard_normal((1, 8, 2, 32))) for _ in range(3))
    cu = torch.tensor([0, 8], dtype=torch.int32)
    from dash_attn import flash_attn_interface as fa2

    def dense(**kw):
        return dash_attn.flash_attn_func(q, k, v, **kw)

    def fa2_dense(**kw):
        return fa2.flash_attn_func(q, k, v, **kw)

    def packed(**kw):
        return dash_attn.flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, 8, 8, **kw)

    def arrays(**kw):
        return dash_attn.forward(q.numpy(), k.numpy(), v.numpy(), **kw)

    for bad in ("yes", "false", None, 2, 0.5, torch.tensor(2), np.array([1, 0])):
        for call in (dense, fa2_dense, packed, arrays):
            with pytest.raises(TypeError, match="causal must be a bool"):
                call(causal=bad)
    for bad in ("0.1", b"0.1"):
        for call in (dense, packed, arrays):
            with pytest.raises(TypeError, match="softmax_scale must be a number"):
                call(softmax_scale=bad)
    # what is a bool is served as one: numpy's, 0 / 1, and one-element tensors and arrays of
    # those (flash-attn's compiled ops take them)
    want = dash_attn.flash_attn_func(q, k, v, causal=True)
    for good in (np.bool_(True), 1, np.int64(1), torch.tensor(True), torch.tensor(1),
                 np.array(True)):
        assert torch.equal(dash_attn.flash_attn_func(q, k, v, causal=good), want)
    # a schedule passed by keyword that is no name is said to be that, not a positional slip
    with pytest.raises(TypeError, match="schedule must be a name"):
        dash_attn.flash_attn_func(q, k, v, schedule=None)


def test_a_client_closed_by_a_later_connect_raises_instead_of_crashing(daemon):
    """connect() closes the shared client it replaces; a caller still holding it (or an op
    after close()) used to memmove into the freed shared-memory buffer: a segfault. Run in
    a child so that a crash fails the test instead of killing pytest."""
    code = f"""
import torch, dash_attn
c1 = dash_attn.connect({daemon.endpoint!r})
q = torch.randn(1, 8, 2, 32)
c1.forward(q, q, q)
dash_attn.connect({daemon.endpoint!r})  # replaces, and closes, c1
try:
    c1.forward(q, q, q)
except dash_attn.DashError as e:
    assert e.name == "DASH_EINVAL" and "closed" in str(e), e
    print("raised")
"""
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(dash_attn.__file__)))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=env)
    assert p.returncode == 0 and "raised" in p.stdout, (p.returncode, p.stdout, p.stderr[-2000:])


def test_an_op_that_timed_out_cannot_write_into_the_next_ops_buffer():
    """A daemon silent past the client's timeout (here: stopped) still runs the op when it
    wakes up, writing its outputs into the buffer it was given. The client's next op must not
    share those bytes: op 1's out lies where op 2's (larger) q goes, so a shared buffer would
    hand op 2 a q overwritten by op 1's late output."""
    import signal
    import threading
    from conftest import Daemon
    d = Daemon()
    try:
        g = torch.Generator().manual_seed(11)
        small = [torch.randn(1, 64, 2, 32, generator=g) for _ in range(3)]
        large = [torch.randn(1, 512, 2, 32, generator=g) for _ in range(3)]
        want = dash_attn.Client(endpoint=d.endpoint).forward(*large)[0]
        c = dash_attn.Client(endpoint=d.endpoint, timeout_ms=1000)
        c.forward(*small)  # its buffer exists and holds both ops
        os.kill(d.proc.pid, signal.SIGSTOP)
        try:
            with pytest.raises(dash_attn.DashError) as e:
                c.forward(*small)
            assert e.value.name == "DASH_ETIMEDOUT", e.value
            wake = threading.Timer(0.3, os.kill, (d.proc.pid, signal.SIGCONT))
            wake.start()
            got = c.forward(*large)[0]  # sent while stopped; runs after op 1
            wake.join()
        finally:
            os.kill(d.proc.pid, signal.SIGCONT)
        assert torch.equal(got, want)
        c.close()
    finally:
        assert d.stop() == 0


def test_a_forked_child_exits_although_a_parent_thread_held_the_clients_lock(daemon):
    """A child forked while another thread of the parent held a Client's lock inherits it
    held; when the child lets go of the inherited client (its __del__) it must not wait for
    that lock. In a script of its own, so the child is a plain interpreter's fork."""
    code = f"""
import os, sys, threading, time
import dash_attn
c = dash_attn.Client(endpoint={daemon.endpoint!r})
held, go = threading.Event(), threading.Event()
def hold():
    with c._lock:
        held.set()
        go.wait(60)
t = threading.Thread(target=hold, daemon=True)
t.start()
held.wait(30)
pid = os.fork()
if pid == 0:
    del c  # the child lets go of the inherited client (its last reference)
    sys.exit(0)
for _ in range(400):
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        print("child exit", os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1)
        break
    time.sleep(0.05)
else:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    print("child hung")
go.set()
t.join()
c.close()
"""
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(dash_attn.__file__)))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=env)
    assert p.returncode == 0 and "child exit 0" in p.stdout, (p.returncode, p.stdout,
                                                              p.stderr[-2000:])


def test_a_client_whose_init_never_ran_lets_go_without_calling_into_os(monkeypatch):
    """A Client whose __init__ never ran (bench/py_layers.py's stub; an __init__ that raised
    before it set the pid) has nothing to close: its __del__ returns at once, also at
    interpreter exit, where the module's globals - os among them - may already be None."""
    stub = object.__new__(_client.Client)
    monkeypatch.setattr(_client, "os", None)  # as interpreter shutdown leaves a module
    stub.__del__()
