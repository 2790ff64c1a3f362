# SPDX-License-Identifier: BSD-3-Clause
"""Packed variable-length batches (flash-attn's varlen), sliding windows and softcap, and
the qkv-packed / kv-packed forms of flash-attn's functions, computed by dashd.

A packed batch is (total_tokens, heads, head_dim) with int32 offsets cu_seqlens_q and
cu_seqlens_k of batch + 1 entries: sequence b is rows cu_seqlens[b]:cu_seqlens[b+1]. dashd
checks the offsets (from 0, never decreasing, ending at the token count, no sequence
longer than max_seqlen) before it touches a tensor, and computes every sequence alone, so a
sequence's outputs and gradients do not depend on what it is packed with (with a
deterministic schedule; `auto` too when batch_invariant=True). Host tensors go through
shared memory with their offsets; CUDA tensors are used in place, ordered on the current
stream like flash_attn_func's, with the offsets sent by value inside the request (a CUDA
cu_seqlens is copied to the host first, which waits for the stream). dashd's CUDA kernels
serve packed batches at head dims 32 to 128 (multiples of 8) (kernels/cuda/attn_vl.cu).

flash_attn_varlen_func is, like flash_attn_func, a pair of PyTorch custom ops for
torch.compile (fullgraph), export and fake tensors:

    torch.ops.dash_attn.varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                   max_seqlen_k, softmax_scale, causal, window_left,
                                   window_right, softcap, schedule, batch_invariant, client,
                                   audit_given, audit_step, audit_label) -> (out, lse, tag)
    torch.ops.dash_attn.varlen_bwd(dout, q, k, v, out, lse, tag, cu_seqlens_q, cu_seqlens_k,
                                   max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                                   window_left, window_right, softcap, schedule,
                                   batch_invariant, client) -> (dq, dk, dv)

with the dense ops' conventions (_ops.py: client ids, the audit tag tensor); eager calls on
plain tensors run the same code through DashVarlenFunction without the ops' dispatch - on
CUDA tensors, where the native op is loaded, as one C++ autograd node instead
(_native.varlen_attention: DashVarlenFunction's checks and requests, the same bits, the
backward without Python). The custom ops keep the ctypes path.
"""
import ctypes

from . import _args, _client, _native, _ops

try:
    import torch
except ImportError:
    torch = None
try:
    import numpy as np
except ImportError:
    np = None


def _offsets(name, cu):
    """A contiguous int32 host copy of cu_seqlens (torch int32/int64 or numpy), 1-D. A CUDA
    tensor is copied to the host, which waits for the stream to reach it (dashd checks the
    offsets before it touches a tensor: pass CPU offsets to avoid the wait)."""
    if torch is not None and isinstance(cu, torch.Tensor):
        if cu.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"dash_attn: {name} must be int32 (flash-attn's) or int64, "
                            f"not {cu.dtype}")
        if cu.device.type not in ("cpu", "cuda"):
            raise ValueError(f"dash_attn: {name} is on device '{cu.device}'; the offsets must "
                             "be on the CPU or a CUDA device (their values are read)")
        # .numpy() of a CUDA tensor is a TypeError: the copy to the host comes first
        a = cu.detach().to("cpu", torch.int64).numpy()
    else:
        a = np.asarray(cu)
        if a.dtype.kind not in "iu":
            raise TypeError(f"dash_attn: {name} must be an integer array, not {a.dtype}")
    if a.ndim != 1 or a.shape[0] < 2:
        raise ValueError(f"dash_attn: {name} must be 1-D with batch + 1 >= 2 entries; got "
                         f"shape {tuple(a.shape)}")
    if a.min() < -2**31 or a.max() >= 2**31:
        raise ValueError(f"dash_attn: {name} has offsets beyond int32")
    return np.ascontiguousarray(a, dtype=np.int32)


def _check_packed(named, lse=None):
    """3-D tensors of one dtype and one kind (q first: all on one CUDA device, or all on the
    host), lse 2-D float32."""
    cuda = {torch is not None and isinstance(x, torch.Tensor) and x.is_cuda for _, x in named}
    if len(cuda) != 1:
        raise ValueError("dash_attn: all tensors must be of one kind (all CUDA, or all host)")
    for name, x in named:
        if x.ndim != 3:
            raise ValueError(f"dash_attn: {name} must be 3-D (total_tokens, heads, head_dim) "
                             f"in a packed batch; got shape {tuple(x.shape)}")
    want = named[0][1].dtype
    for name, x in named[1:]:
        if x.dtype != want:
            raise TypeError(f"dash_attn: {name} is {x.dtype} but q is {want}")
    if lse is not None and (lse.ndim != 2 or str(lse.dtype).split(".")[-1] != "float32"):
        raise ValueError("dash_attn: lse must be float32 (heads_q, total_q) in a packed batch; "
                         f"got {lse.dtype} {tuple(lse.shape)}")


def _is_cuda(x):
    return torch is not None and isinstance(x, torch.Tensor) and x.is_cuda


def _same_batch(cq, ck):
    """Offsets by value come as one count for both (dash_attn.n_offsets)."""
    if len(cq) != len(ck):
        raise ValueError(f"dash_attn: cu_seqlens_q has {len(cq)} entries and cu_seqlens_k "
                         f"{len(ck)}; both are batch + 1")


def _by_value(attn, cq, ck):
    """Put the offsets in the request itself (dash_attn.offsets_q/k): a call on CUDA tensors
    returns before dashd reads anything, and libdash copies them into the request (the
    native op sends them the same way: _native.varlen_attention)."""
    _same_batch(cq, ck)
    attn.offsets_q = cq.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
    attn.offsets_k = ck.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
    attn.n_offsets = len(cq)


def _attn(client, q, causal, scale, schedule, wave, window_size, softcap, max_q, max_k,
          batch_invariant):
    a = client._attn(_client._dtype_code(q), causal, scale, schedule, wave, window_size,
                     softcap)
    a.max_seqlen_q = _client.int32_arg("max_seqlen_q", max_q)
    a.max_seqlen_k = _client.int32_arg("max_seqlen_k", max_k)
    a.batch_invariant = 1 if batch_invariant else 0
    return a


def _prepare(c, q, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal,
             softmax_scale, window_size, softcap, schedule, batch_invariant):
    """The request's parameters and the offsets as checked int32 host arrays: what a forward
    and its backward share."""
    # float64 is the CPU engine's: refused here as the dense calls refuse it, not left to a
    # stream-ordered op's later failure (outputs poisoned, the error at the next call)
    _client._refuse_cuda_f64(q)
    cq, ck = _offsets("cu_seqlens_q", cu_seqlens_q), _offsets("cu_seqlens_k", cu_seqlens_k)
    attn = _attn(c, q, causal, softmax_scale, schedule, 0, window_size, softcap, max_seqlen_q,
                 max_seqlen_k, batch_invariant)
    return attn, cq, ck


def _run_forward(c, q, k, v, attn, cq, ck):
    if _is_cuda(q):
        _by_value(attn, cq, ck)
        return c._forward_cuda(q, k, v, attn)
    out = c._empty_like(q, q.shape)
    lse = c._empty_like(q, (q.shape[1], q.shape[0]), float32=True)
    return tuple(c._host_op([q, k, v], [out, lse], False, attn, (cq, ck)))


def _run_backward(c, dout, q, k, v, out, lse, attn, cq, ck):
    if _is_cuda(q):
        _by_value(attn, cq, ck)
        return c._backward_cuda(dout, q, k, v, out, lse, attn)
    ins = [q, k, v, out, lse, dout]
    dq = c._empty_like(ins[0], ins[0].shape)
    dk = c._empty_like(ins[1], ins[1].shape)
    dv = c._empty_like(ins[2], ins[2].shape)
    return tuple(c._host_op(ins, [dq, dk, dv], True, attn, (cq, ck)))


def varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                   causal=False, softmax_scale=None, window_size=(-1, -1), softcap=0.0,
                   schedule="auto", batch_invariant=False, client=None):
    """(out, lse) of a packed batch: q (total_q, heads_q, d), k, v (total_k, heads_kv, d),
    torch CPU tensors or numpy arrays; lse float32 (heads_q, total_q). No autograd."""
    c = client or _client.default_client(_client.device_of(q))
    _check_packed([("q", q), ("k", k), ("v", v)])
    attn, cq, ck = _prepare(c, q, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                            causal, softmax_scale, window_size, softcap, schedule,
                            batch_invariant)
    return _run_forward(c, q, k, v, attn, cq, ck)


def varlen_backward(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                    max_seqlen_k, causal=False, softmax_scale=None, window_size=(-1, -1),
                    softcap=0.0, schedule="auto", batch_invariant=False, client=None):
    """(dq, dk, dv) of a packed batch from its forward's out and lse."""
    c = client or _client.default_client(_client.device_of(q))
    _check_packed([("q", q), ("k", k), ("v", v), ("out", out), ("dout", dout)], lse)
    attn, cq, ck = _prepare(c, q, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                            causal, softmax_scale, window_size, softcap, schedule,
                            batch_invariant)
    return _run_backward(c, dout, q, k, v, out, lse, attn, cq, ck)


def _schedule(deterministic, schedule):
    if schedule == "atomic" and deterministic:
        raise ValueError("dash_attn: schedule='atomic' is not deterministic; pass "
                         "deterministic=False to use it")
    if not deterministic and schedule == "auto":
        return "atomic"
    return schedule


def _common(dropout_p, softmax_scale, alibi_slopes, window_size, softcap):
    """The dense calls' checks (_args: comparisons, not math.isfinite, which torch.compile
    cannot trace on a symbolic float); returns softmax_scale as a float (or None)."""
    _args.refuse_unsupported(dropout_p, window_size, softcap, alibi_slopes)
    return _args.check_scale(softmax_scale)


if torch is not None:

    class DashVarlenFunction(torch.autograd.Function):
        """out, lse = f(q, k, v) of a packed batch; the backward runs in dashd too."""

        @staticmethod
        def forward(ctx, q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, window, softcap,
                    schedule, batch_invariant, client):
            c = client or _client.default_client(_client.device_of(q))
            _check_packed([("q", q), ("k", k), ("v", v)])
            # the offsets' values on the host once, for the forward and its backward: a CUDA
            # cu_seqlens costs a wait for the stream each time it is read (_offsets), and the
            # backward needs the offsets the forward ran with
            cu_q, cu_k = _host_offsets(cu_q, cu_k)
            attn, cq, ck = _prepare(c, q, cu_q, cu_k, max_q, max_k, causal, scale, window,
                                    softcap, schedule, batch_invariant)
            out, lse = _run_forward(c, q, k, v, attn, cq, ck)
            ctx.save_for_backward(q, k, v, out, lse)
            # the backward's request is the forward's: its parameters and offsets, checked
            # once (varlen_backward's checks again would only cost host time)
            ctx.request = (c, attn, cq, ck)
            ctx.audit = _client.current_audit()
            ctx.mark_non_differentiable(lse)
            ctx.set_materialize_grads(False)  # no zero gradient made for lse (_ops._Eager)
            return out, lse

        @staticmethod
        def backward(ctx, dout, dlse):
            if dout is None:
                return (None,) * 14
            q, k, v, out, lse = ctx.saved_tensors
            c, attn, cq, ck = ctx.request
            _client.push_audit(*ctx.audit)
            try:
                # q, k, v, out and lse are the forward's, checked then; dout is what autograd
                # checked against out (its shape, dtype and device)
                dq, dk, dv = _run_backward(c, dout, q, k, v, out, lse, attn, cq, ck)
            finally:
                _client.pop_audit()
            if _ops.available:
                dq, dk, dv = _ops.first_order_only((dq, dk, dv), q, k, v, dout)
            return (dq, dk, dv) + (None,) * 11


if torch is not None and _ops.available:
    from typing import Optional, Tuple
    from torch import Tensor

    @_ops._custom_op("dash_attn::varlen_fwd")
    def varlen_fwd(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                   max_seqlen_q: int, max_seqlen_k: int, softmax_scale: Optional[float],
                   causal: bool, window_left: int, window_right: int, softcap: float,
                   schedule: str, batch_invariant: bool, client: int, audit_given: bool,
                   audit_step: Optional[int],
                   audit_label: Optional[str]) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """out, lse, the audit tag, and the offsets' int32 host copies, which the backward
        takes (as DashVarlenFunction's does): CUDA offsets are read once, here."""
        step, label = (audit_step, audit_label) if audit_given else _client.current_audit()
        hq, hk = _host_offsets(cu_seqlens_q, cu_seqlens_k)
        # checked and made int32 once; varlen_forward takes these arrays as they are
        cq = _offsets("cu_seqlens_q", hq)
        ck = cq.copy() if cu_seqlens_k is cu_seqlens_q else _offsets("cu_seqlens_k", hk)
        _client.push_audit(step, label)
        try:
            out, lse = varlen_forward(q, k, v, cq, ck, max_seqlen_q,
                                      max_seqlen_k, causal=causal, softmax_scale=softmax_scale,
                                      window_size=(window_left, window_right), softcap=softcap,
                                      schedule=schedule, batch_invariant=batch_invariant,
                                      client=_client.client_by_id(client, q))
        finally:
            _client.pop_audit()
        return out, lse, _ops._tag_tensor(step, label), torch.from_numpy(cq), torch.from_numpy(ck)

    @varlen_fwd.register_fake
    def _varlen_fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                         softmax_scale, causal, window_left, window_right, softcap, schedule,
                         batch_invariant, client, audit_given, audit_step, audit_label):
        _check_packed([("q", q), ("k", k), ("v", v)])
        _client._dtype_code(q)
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
        lse = q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
        return (out, lse, torch.empty(3, dtype=torch.int64),
                torch.empty(cu_seqlens_q.shape, dtype=torch.int32),
                torch.empty(cu_seqlens_k.shape, dtype=torch.int32))

    @_ops._custom_op("dash_attn::varlen_bwd")
    def varlen_bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                   tag: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, max_seqlen_q: int,
                   max_seqlen_k: int, softmax_scale: Optional[float], causal: bool,
                   window_left: int, window_right: int, softcap: float, schedule: str,
                   batch_invariant: bool, client: int) -> Tuple[Tensor, Tensor, Tensor]:
        _client.push_audit(*_ops._tag_of(tag))
        try:
            return tuple(varlen_backward(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k,
                                         max_seqlen_q, max_seqlen_k, causal=causal,
                                         softmax_scale=softmax_scale,
                                         window_size=(window_left, window_right),
                                         softcap=softcap, schedule=schedule,
                                         batch_invariant=batch_invariant,
                                         client=_client.client_by_id(client, q)))
        finally:
            _client.pop_audit()

    @varlen_bwd.register_fake
    def _varlen_bwd_fake(dout, q, k, v, out, lse, tag, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                         max_seqlen_k, softmax_scale, causal, window_left, window_right, softcap,
                         schedule, batch_invariant, client):
        _check_packed([("q", q), ("k", k), ("v", v), ("out", out), ("dout", dout)], lse)
        return tuple(torch.empty_like(x, memory_format=torch.contiguous_format)
                     for x in (q, k, v))

    def _varlen_setup_context(ctx, inputs, output):
        q, k, v = inputs[:3]
        out, lse, tag, host_q, host_k = output  # the offsets the forward ran with, on the host
        ctx.save_for_backward(q, k, v, out, lse, tag, host_q, host_k)
        ctx.params = inputs[5:15]  # max_seqlen_q .. client: the bwd's, in its order
        ctx.n_inputs = len(inputs)
        ctx.mark_non_differentiable(lse, tag, host_q, host_k)

    def _varlen_backward(ctx, dout, dlse, dtag, dhost_q, dhost_k):
        q, k, v, out, lse, tag, cu_q, cu_k = ctx.saved_tensors
        dq, dk, dv = varlen_bwd(dout, q, k, v, out, lse, tag, cu_q, cu_k, *ctx.params)
        return (dq, dk, dv) + (None,) * (ctx.n_inputs - 3)

    torch.library.register_autograd("dash_attn::varlen_fwd", _varlen_backward,
                                    setup_context=_varlen_setup_context)


def _host_offsets(cu_q, cu_k):
    """cu_q, cu_k with CUDA tensors copied to the host: both copies queued, then one wait for
    the stream (the same tensor for both, as the qkvpacked calls pass, is copied once).
    Host tensors and arrays are returned as they are; _offsets checks them all."""
    def cuda(x):
        return isinstance(x, torch.Tensor) and x.is_cuda
    if not cuda(cu_q) and not cuda(cu_k):
        return cu_q, cu_k
    same = cu_k is cu_q
    hq = cu_q.detach().to("cpu", non_blocking=True) if cuda(cu_q) else cu_q
    hk = hq if same else cu_k.detach().to("cpu", non_blocking=True) if cuda(cu_k) else cu_k
    # each copy is queued on the current stream of its tensor's device: wait for every one
    # of them (offsets on two GPUs are two streams; one wait would leave the other copy in
    # flight, its pinned buffer read before it lands)
    for device in {x.device for x in (cu_q, cu_k) if cuda(x)}:
        torch.cuda.current_stream(device).synchronize()  # the copies have landed
    return hq, hk


def _as_offsets_tensor(cu):
    return cu if isinstance(cu, torch.Tensor) else torch.as_tensor(np.asarray(cu), dtype=torch.int32)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                           softcap=0.0, alibi_slopes=None, deterministic=True,
                           return_attn_probs=False, block_table=None, *, schedule="auto",
                           batch_invariant=False, return_softmax_lse=False, client=None):
    """flash_attn.flash_attn_varlen_func, served by dashd (its CPU engine, or its CUDA
    kernels at head dims 32 to 128 (multiples of 8) for CUDA tensors).

    q: (total_q, heads_q, head_dim); k, v: (total_k, heads_kv, head_dim); cu_seqlens_q/k:
    int32 (batch + 1,) offsets; max_seqlen_q/k: bounds on the sequences' lengths. causal is
    aligned to each sequence's bottom-right corner; window_size (left, right) with -1
    unbounded (causal forces right = 0); softcap > 0 caps scores at softcap * tanh(s /
    softcap). deterministic / schedule as in flash_attn_func; batch_invariant=True makes
    `auto` ignore the other sequences, so a sequence's bits never depend on its packing.
    Returns out, or (out, softmax_lse (heads_q, total_q)) with return_softmax_lse, or
    (out, softmax_lse, None) with return_attn_probs. Differentiable in q, k and v."""
    softmax_scale = _common(dropout_p, softmax_scale, alibi_slopes, window_size, softcap)
    if block_table is not None:
        raise NotImplementedError("dash_attn: block_table (paged KV) is not supported")
    if torch is None or not isinstance(q, torch.Tensor):
        raise TypeError("dash_attn.flash_attn_varlen_func takes torch tensors; for numpy "
                        "arrays use dash_attn.varlen_forward / varlen_backward")
    cu_q, cu_k = _as_offsets_tensor(cu_seqlens_q), _as_offsets_tensor(cu_seqlens_k)
    left, right = _client.window_pair(window_size)
    max_q = _client.int32_arg("max_seqlen_q", max_seqlen_q)
    max_k = _client.int32_arg("max_seqlen_k", max_seqlen_k)
    causal = _client.bool_arg("causal", causal)
    sched = _schedule(deterministic, schedule)
    given = len(_client.traced_audit) > 0
    if not _ops.available or (not given and _ops.eager_ok(q, k, v)):
        # eager: the same code as the ops, without their dispatch (_ops._Eager's reason)
        c = client or _client.default_client(_client.device_of(q))
        if _ops.available and _native.varlen_ok(c, q):
            # CUDA tensors: one C++ autograd node, DashVarlenFunction's requests (_native.py)
            out, lse = _native.varlen_attention(
                c, q, k, v, cu_q, cu_k, max_q, max_k, softmax_scale, bool(causal),
                (left, right), float(softcap), sched, bool(batch_invariant))
        else:
            out, lse = DashVarlenFunction.apply(
                q, k, v, cu_q, cu_k, max_q, max_k, softmax_scale,
                bool(causal), (left, right), float(softcap), sched, bool(batch_invariant), c)
    else:
        step, label = _client.traced_audit[-1] if given else (None, None)
        out, lse = torch.ops.dash_attn.varlen_fwd(
            q, k, v, cu_q, cu_k, max_q, max_k, softmax_scale,
            bool(causal), left, right, float(softcap), sched, bool(batch_invariant),
            client.id if client is not None else 0, given, step, label)[:2]
    if return_attn_probs:
        return out, lse, None
    if return_softmax_lse:
        return out, lse
    return out


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0,
                                     softmax_scale=None, causal=False, window_size=(-1, -1),
                                     softcap=0.0, alibi_slopes=None, deterministic=True,
                                     return_attn_probs=False, **kw):
    """qkv: (total, 3, heads, head_dim); one set of offsets for q and k."""
    if qkv.ndim != 4 or qkv.shape[1] != 3:
        raise ValueError(f"dash_attn: qkv must be (total, 3, heads, head_dim); got {tuple(qkv.shape)}")
    return flash_attn_varlen_func(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens, cu_seqlens,
                                  max_seqlen, max_seqlen, dropout_p, softmax_scale, causal,
                                  window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs, **kw)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                    max_seqlen_k, dropout_p=0.0, softmax_scale=None,
                                    causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=True,
                                    return_attn_probs=False, **kw):
    """kv: (total_k, 2, heads_kv, head_dim)."""
    if kv.ndim != 4 or kv.shape[1] != 2:
        raise ValueError(f"dash_attn: kv must be (total_k, 2, heads_kv, head_dim); got {tuple(kv.shape)}")
    return flash_attn_varlen_func(q, kv[:, 0], kv[:, 1], cu_seqlens_q, cu_seqlens_k,
                                  max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
                                  window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs, **kw)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                              deterministic=True, return_attn_probs=False, **kw):
    """qkv: (batch, seqlen, 3, heads, head_dim)."""
    from ._func import flash_attn_func
    if qkv.ndim != 5 or qkv.shape[2] != 3:
        raise ValueError(f"dash_attn: qkv must be (batch, seqlen, 3, heads, head_dim); got "
                         f"{tuple(qkv.shape)}")
    return flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p, softmax_scale,
                           causal, deterministic=deterministic, return_attn_probs=return_attn_probs,
                           window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                           **kw)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                             window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                             deterministic=True, return_attn_probs=False, **kw):
    """kv: (batch, seqlen_k, 2, heads_kv, head_dim)."""
    from ._func import flash_attn_func
    if kv.ndim != 5 or kv.shape[2] != 2:
        raise ValueError(f"dash_attn: kv must be (batch, seqlen_k, 2, heads_kv, head_dim); got "
                         f"{tuple(kv.shape)}")
    return flash_attn_func(q, kv[:, :, 0], kv[:, :, 1], dropout_p, softmax_scale, causal,
                           deterministic=deterministic, return_attn_probs=return_attn_probs,
                           window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                           **kw)
