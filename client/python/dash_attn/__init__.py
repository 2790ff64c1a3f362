# SPDX-License-Identifier: BSD-3-Clause
"""dash_attn - deterministic attention served by dashd, for PyTorch and NumPy.

    import dash_attn
    out = dash_attn.flash_attn_func(q, k, v, causal=True)     # torch, differentiable
    out.sum().backward()                                      # the backward runs in dashd

    with dash_attn.audit(step=step, label="layer3.attn"):     # fields of dashd's audit log
        out = dash_attn.flash_attn_func(q, k, v, causal=True)

    out = dash_attn.flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k,
                                           max_seqlen_q, max_seqlen_k, causal=True,
                                           window_size=(1024, 0), softcap=30.0)  # packed

    out, lse = dash_attn.forward(q, k, v, causal=True)        # numpy or torch, no autograd
    dq, dk, dv = dash_attn.backward(dout, q, k, v, out, lse, causal=True)

Drop-ins with flash-attn's exact signatures: dash_attn.flash_attn_interface (flash-attn 2)
and dash_attn.fa3 (flash-attn 3). The attention is a PyTorch custom op
(torch.ops.dash_attn.fwd / .bwd, _ops.py), so torch.compile(fullgraph=True) traces it.

The process talks to one dashd (dash_attn.connect(endpoint, client_name, run_tag) to
choose; by default $DASHD_ENDPOINT or the per-user socket, run tag $DASH_RUN_TAG).
"""
import contextlib

from . import _client
from ._client import Client, DashError, connect, default_client
from ._func import flash_attn_func
from ._varlen import (flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
                      flash_attn_varlen_func, flash_attn_varlen_kvpacked_func,
                      flash_attn_varlen_qkvpacked_func, varlen_backward, varlen_forward)
from . import _ops  # noqa: F401  (registers torch.ops.dash_attn.*)
from . import fa3, flash_attn_interface  # noqa: F401  (dash_attn.fa3, .flash_attn_interface)

__all__ = ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_qkvpacked_func",
           "flash_attn_kvpacked_func", "flash_attn_varlen_qkvpacked_func",
           "flash_attn_varlen_kvpacked_func", "varlen_forward", "varlen_backward", "forward",
           "backward", "audit", "set_audit", "connect", "Client", "DashError",
           "default_client", "last_result", "synchronize"]
__version__ = "0.1.0"


def forward(q, k, v, causal=False, softmax_scale=None, schedule="auto", client=None,
            window_size=(-1, -1), softcap=0.0):
    """(out, lse) for torch tensors or numpy arrays (batch, seqlen, heads, head_dim)."""
    c = client or default_client(_client.device_of(q))
    return c.forward(q, k, v, causal=causal, scale=softmax_scale, schedule=schedule,
                     window_size=window_size, softcap=softcap)


def backward(dout, q, k, v, out, lse, causal=False, softmax_scale=None, schedule="auto",
             client=None, window_size=(-1, -1), softcap=0.0):
    """(dq, dk, dv) from the forward's out and lse and the output gradient dout."""
    c = client or default_client(_client.device_of(q))
    return c.backward(dout, q, k, v, out, lse, causal=causal, scale=softmax_scale,
                      schedule=schedule, window_size=window_size, softcap=softcap)


@contextlib.contextmanager
def audit(step=None, label=None):
    """Ops inside the block (on this thread) carry this step and label into dashd's audit
    log; blocks nest, the innermost wins. Works around and inside torch.compile'd code
    (inside, the traced ops get the tag as arguments). step: None or an integer
    0..2**63-1; label: None or a str (at most 127 bytes of UTF-8, no NUL)."""
    step, label = _client.audit_tag(step, label)
    if _client.compiling():
        _client.traced_audit.append((step, label))
        try:
            yield
        finally:
            _client.traced_audit.pop()
        return
    _client.push_audit(step, label)
    try:
        yield
    finally:
        _client.pop_audit()


def set_audit(step=None, label=None):
    """Set this thread's step and label for the ops that follow (outside any audit block).
    Call it outside torch.compile'd code (inside, use an audit block)."""
    _client._audit.stack[0] = _client.audit_tag(step, label)


def synchronize(client=None):
    """Wait for dashd's answers to every op on CUDA tensors so far; raise DashError for the
    first that failed (without this, the next call raises it)."""
    if client is not None:
        client.synchronize()
    else:
        _client.synchronize_shared()


def last_result(client=None):
    """What the last op of the client ran with: schedule, wave, tile sizes, backend, times."""
    return (client or _client.last_shared_client() or default_client()).last_result
