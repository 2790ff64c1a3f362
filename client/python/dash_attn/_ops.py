# SPDX-License-Identifier: BSD-3-Clause
"""dashd's attention as PyTorch custom ops (torch.library), so that torch.compile sees one
opaque op instead of ctypes calls it cannot trace:

    torch.ops.dash_attn.fwd(q, k, v, softmax_scale, causal, window_left, window_right,
                            softcap, schedule, client, audit_given, audit_step,
                            audit_label) -> (out, lse, tag)
    torch.ops.dash_attn.bwd(dout, q, k, v, out, lse, tag, softmax_scale, causal,
                            window_left, window_right, softcap, schedule, client)
                            -> (dq, dk, dv)

fwd's autograd formula (register_autograd) calls bwd; both have fake implementations that
give shapes, dtypes and strides (outputs are contiguous), so compile, meta tensors and
torch.library.opcheck work. An eager call on plain tensors (attention(), what
flash_attn_func and the drop-ins call) skips the ops' dispatch and runs the same client code
through an autograd.Function (_Eager): same arguments, same audit tags, same bits, a
fraction of the host time; torch.compile, export and fake/meta tensors see the ops. CPU tensors go through shared memory, CUDA tensors are used in
place, ordered on the current stream (_client.py).

- client is an int: 0 is the process's shared client for the tensors' device (a CUDA
  device's own dashd, or the one connect() chose), else a Client's .id (an op cannot take
  a Python object).
- audit_given False: the forward takes the thread's audit tag (dash_attn.audit) when it
  runs, so blocks around compiled code work; True: audit_step and audit_label are the tag
  (what an audit block inside compiled code gives, through _client.traced_audit).
- tag is a small int64 CPU tensor [has_step, step, label] holding the audit tag the
  forward ran with; the backward op reads it, so
  the backward carries its forward's tag whatever thread autograd runs it on, and also
  under torch.compile (where a tag read while tracing would be frozen into the graph).
  Labels are interned per process (a label's number only means something here).
- lse and tag are not differentiable: as flash-attn, a gradient into lse is ignored.
- window_left/right (-1: unbounded) and softcap (0: off) are flash-attn's; dashd's CPU
  engine serves them, its CUDA backend at head dims 32 to 128 (multiples of 8).
- The ops need PyTorch >= 2.4 (torch.library.custom_op); `available` says whether they
  were registered.
"""
import threading

from . import _args, _client, _native

try:
    import torch
except ImportError:  # numpy-only use
    torch = None

available = torch is not None and hasattr(torch.library, "custom_op") and \
    hasattr(torch.library, "register_autograd")

_labels = {}       # label -> number (>= 0), for the tag tensor
_label_names = []  # number -> label
_labels_lock = threading.Lock()


def _label_id(label):
    if label is None:
        return -1
    with _labels_lock:
        n = _labels.get(label)
        if n is None:
            n = _labels[label] = len(_label_names)
            _label_names.append(label)
        return n


def _tag_tensor(step, label):
    return torch.tensor([step is not None, step or 0, _label_id(label)], dtype=torch.int64)


def _tag_of(tag):
    has_step, step, label = tag.tolist()
    return (step if has_step else None), (_label_names[label] if label >= 0 else None)


def require():
    """Raise unless the ops are registered (torch missing or older than 2.4)."""
    if not available:
        have = torch.__version__ if torch is not None else "none"
        raise RuntimeError("dash_attn.flash_attn_func needs PyTorch >= 2.4 (torch.library "
                           f"custom ops); this process has {have}. dash_attn.forward and "
                           "dash_attn.backward work without it.")


if available:
    from torch import Tensor
    from typing import Optional, Tuple

    # Inductor's CUDA-graph trees (torch.compile mode="reduce-overhead") leave ops with this
    # tag out of their graphs; a capture of ours could not work (_client._refuse_capture).
    _unsafe = getattr(torch._C.Tag, "cudagraph_unsafe", None)
    _tags = (_unsafe,) if _unsafe is not None else ()

    def _custom_op(name):
        def wrap(fn):
            try:
                return torch.library.custom_op(name, mutates_args=(), tags=_tags)(fn)
            except TypeError:  # a PyTorch without custom_op(tags=)
                return torch.library.custom_op(name, mutates_args=())(fn)
        return wrap

    @_custom_op("dash_attn::fwd")
    def fwd(q: Tensor, k: Tensor, v: Tensor, softmax_scale: Optional[float], causal: bool,
            window_left: int, window_right: int, softcap: float, schedule: str, client: int,
            audit_given: bool, audit_step: Optional[int],
            audit_label: Optional[str]) -> Tuple[Tensor, Tensor, Tensor]:
        step, label = (audit_step, audit_label) if audit_given else _client.current_audit()
        c = _client.client_by_id(client, q)
        if c._native and q.is_cuda:  # the native op's request, without its autograd node
            _client._check_inputs([("q", q), ("k", k), ("v", v)])
            c._refuse_capture(q.device)  # in the ctypes path's words (the native op refuses it too)
            out, lse = _native.forward(c, q, k, v, softmax_scale, causal, window_left,
                                       window_right, softcap, schedule, step, label)
            return out, lse, _tag_tensor(step, label)
        _client.push_audit(step, label)
        try:
            out, lse = c.forward(q, k, v, causal=causal, scale=softmax_scale,
                                 schedule=schedule, window_size=(window_left, window_right),
                                 softcap=softcap)
        finally:
            _client.pop_audit()
        return out, lse, _tag_tensor(step, label)

    @fwd.register_fake
    def _fwd_fake(q, k, v, softmax_scale, causal, window_left, window_right, softcap,
                  schedule, client, audit_given, audit_step, audit_label):
        _args.refuse_unsupported(window_size=(window_left, window_right), softcap=softcap)
        _client._check_inputs([("q", q), ("k", k), ("v", v)], devices=("cpu", "cuda", "meta"))
        _client._dtype_code(q)
        b, s, h, _ = q.shape
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
        lse = q.new_empty((b, h, s), dtype=torch.float32)
        return out, lse, torch.empty(3, dtype=torch.int64)

    @_custom_op("dash_attn::bwd")
    def bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
            tag: Tensor, softmax_scale: Optional[float], causal: bool, window_left: int,
            window_right: int, softcap: float, schedule: str,
            client: int) -> Tuple[Tensor, Tensor, Tensor]:
        step, label = _tag_of(tag)
        c = _client.client_by_id(client, q)
        if c._native and q.is_cuda:
            _client._check_inputs([("q", q), ("k", k), ("v", v), ("out", out), ("dout", dout)],
                                  lse)
            c._refuse_capture(q.device)
            return _native.backward(c, dout, q, k, v, out, lse, softmax_scale, causal,
                                    window_left, window_right, softcap, schedule, step, label)
        _client.push_audit(step, label)
        try:
            return c.backward(dout, q, k, v, out, lse, causal=causal, scale=softmax_scale,
                              schedule=schedule, window_size=(window_left, window_right),
                              softcap=softcap)
        finally:
            _client.pop_audit()

    @bwd.register_fake
    def _bwd_fake(dout, q, k, v, out, lse, tag, softmax_scale, causal, window_left,
                  window_right, softcap, schedule, client):
        _client._check_inputs([("q", q), ("k", k), ("v", v), ("out", out), ("dout", dout)],
                              lse, devices=("cpu", "cuda", "meta"))
        _client._dtype_code(q)
        return tuple(torch.empty_like(x, memory_format=torch.contiguous_format)
                     for x in (q, k, v))

    def _setup_context(ctx, inputs, output):
        q, k, v = inputs[:3]
        out, lse, tag = output
        ctx.save_for_backward(q, k, v, out, lse, tag)
        ctx.params = inputs[3:10]  # the bwd's: the audit tag travels in the tag tensor
        ctx.n_inputs = len(inputs)
        ctx.mark_non_differentiable(lse, tag)

    def _backward(ctx, dout, dlse, dtag):
        q, k, v, out, lse, tag = ctx.saved_tensors
        dq, dk, dv = bwd(dout, q, k, v, out, lse, tag, *ctx.params)
        return (dq, dk, dv) + (None,) * (ctx.n_inputs - 3)

    torch.library.register_autograd("dash_attn::fwd", _backward, setup_context=_setup_context)

    class _NoSecondOrder(torch.autograd.Function):
        """dq, dk, dv as they are, tied to the backward's inputs: dashd computes first
        derivatives only, so a gradient of these gradients (create_graph=True, then a
        Hessian-vector product) raises here instead of silently leaving attention's
        second-order terms out. (autograd.function.once_differentiable is not enough: its
        error node has no edges to the inputs, and torch.autograd.grad prunes it.)"""

        @staticmethod
        def forward(ctx, dq, dk, dv, *inputs):
            return dq.view_as(dq), dk.view_as(dk), dv.view_as(dv)

        @staticmethod
        def backward(ctx, *grads):
            raise RuntimeError(
                "dash_attn: second-order gradients through attention are not supported "
                "(a gradient of a gradient, after create_graph=True): dashd computes first "
                "derivatives only")

    def first_order_only(grads, *inputs):
        """The backward's (dq, dk, dv), marked so that differentiating them raises
        (_NoSecondOrder) when the backward runs with create_graph=True."""
        if not torch.is_grad_enabled():
            return grads
        return _NoSecondOrder.apply(*grads, *inputs)

    class _Eager(torch.autograd.Function):
        """What an eager call runs: the same Client.forward / Client.backward as the ops'
        implementations, with the same arguments and the same audit tags, without the
        custom-op dispatch around them (torch.library's Python dispatch and its autograd
        wrapper cost a GPU call 130-250 us of host time on the H200 machine, more than the
        call itself: bench/results/percall-host-2026-12-02.md). torch.compile, export and
        fake or meta tensors go through the ops (attention() below), which give the same
        bits (test_torch_op.py: the compiled model against eager)."""

        @staticmethod
        def forward(ctx, q, k, v, softmax_scale, causal, left, right, softcap, schedule,
                    client):
            tag = _client.current_audit()
            c = _client.client_by_id(client, q)
            # attention() has checked the inputs
            out, lse = c._forward_checked(q, k, v, causal, softmax_scale, schedule, 0,
                                          (left, right), softcap)
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.params = (softmax_scale, causal, left, right, softcap, schedule, client)
            ctx.tag = tag  # the backward carries its forward's tag, on whatever thread
            ctx.mark_non_differentiable(lse)
            # lse has no gradient: without this autograd would allocate and zero one for every
            # backward (a fill kernel on the caller's stream) only for it to be ignored
            ctx.set_materialize_grads(False)
            return out, lse

        @staticmethod
        def backward(ctx, dout, dlse):
            if dout is None:  # (out took no part in what was differentiated)
                return (None,) * 10
            q, k, v, out, lse = ctx.saved_tensors
            scale, causal, left, right, softcap, schedule, client = ctx.params
            _client.push_audit(*ctx.tag)
            try:
                # the inputs are the forward's (checked then) and dout is what autograd
                # checked against out: Client.backward's checks again would only cost time
                dq, dk, dv = _client.client_by_id(client, q)._backward_checked(
                    dout, q, k, v, out, lse, causal, scale, schedule, 0, (left, right),
                    softcap)
            finally:
                _client.pop_audit()
            return first_order_only((dq, dk, dv), q, k, v, dout) + (None,) * 7

    # plain tensors only: subclasses (FakeTensor, FunctionalTensor, DTensor...) take the ops
    _PLAIN = (torch.Tensor, torch.nn.Parameter)
    _functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)

    def eager_ok(*tensors):
        """Whether a call on these tensors may take the eager path (_Eager): plain tensors
        on a real device, not under torch.compile or export. Inside torch.func transforms
        neither path works (dashd needs the tensors' memory, which functorch's wrappers do
        not expose): refused with words saying so."""
        if _functorch_active():
            raise NotImplementedError(
                "dash_attn: torch.func transforms (grad, vjp, jacrev, vmap) are not supported: "
                "dashd computes on the tensors' memory, which functorch's wrapped tensors do not "
                "expose; use loss.backward() / torch.autograd.grad")
        return all(type(t) in _PLAIN for t in tensors) and tensors[0].device.type != "meta" \
            and not _client.compiling()


def attention(q, k, v, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
              schedule="auto", client=None):
    """(out, lse) through the ops: differentiable in q, k, v. Arguments are checked by the
    caller (_args); client None is the default client."""
    require()
    # the op's schema would refuse a numpy array with a message about positions; this says
    # what is wrong in dash_attn's words (the fake implementation checks the same again)
    _client._check_inputs([("q", q), ("k", k), ("v", v)], devices=("cpu", "cuda", "meta"))
    if not isinstance(q, torch.Tensor):
        raise TypeError("dash_attn: flash_attn_func takes torch tensors; for numpy arrays use "
                        "dash_attn.forward / dash_attn.backward")
    left, right = _args.window_pair(window_size)
    causal = _client.bool_arg("causal", causal)
    # an audit block inside compiled code: its tag as arguments (_client.traced_audit);
    # otherwise the op reads the thread's tag when it runs
    given = len(_client.traced_audit) > 0  # (torch 2.11 dynamo cannot trace bool(list))
    cid = client.id if client is not None else 0
    if not given and eager_ok(q, k, v):
        if q.is_cuda and q.dim() == 4:
            c = _client.client_by_id(cid, q)
            if c._native:  # one C++ autograd node: _native.py
                return _native.attention(c, q, k, v, softmax_scale, bool(causal), left, right,
                                         softcap, schedule)
        return _Eager.apply(q, k, v, softmax_scale, bool(causal), left, right, float(softcap),
                            schedule, cid)
    step, label = _client.traced_audit[-1] if given else (None, None)
    out, lse, _ = torch.ops.dash_attn.fwd(q, k, v, softmax_scale, bool(causal), left, right,
                                          float(softcap), schedule,
                                          cid, given, step, label)
    return out, lse
