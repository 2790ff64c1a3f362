# SPDX-License-Identifier: BSD-3-Clause
"""flash_attn_func: flash-attn's call, differentiable, computed by dashd."""
import math

from . import _client

try:
    import torch
except ImportError:
    torch = None


def _schedule(deterministic, schedule):
    if schedule == "atomic" and deterministic:
        raise ValueError("dash_attn: schedule='atomic' is not deterministic; pass "
                         "deterministic=False to use it")
    if not deterministic and schedule == "auto":
        return "atomic"
    return schedule


if torch is not None:

    class DashAttnFunction(torch.autograd.Function):
        """out, lse = f(q, k, v); the backward of out goes to dashd too (lse gets none)."""

        @staticmethod
        def forward(ctx, q, k, v, scale, causal, schedule, client, window_size, softcap):
            out, lse = client.forward(q, k, v, causal=causal, scale=scale, schedule=schedule,
                                      window_size=window_size, softcap=softcap)
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.scale, ctx.causal, ctx.schedule, ctx.client = scale, causal, schedule, client
            ctx.window_size, ctx.softcap = window_size, softcap
            # autograd may run the backward on another thread: carry the audit tag over
            ctx.audit = _client.current_audit()
            ctx.mark_non_differentiable(lse)
            return out, lse

        @staticmethod
        def backward(ctx, dout, dlse):
            q, k, v, out, lse = ctx.saved_tensors
            _client.push_audit(*ctx.audit)
            try:
                dq, dk, dv = ctx.client.backward(dout, q, k, v, out, lse, causal=ctx.causal,
                                                 scale=ctx.scale, schedule=ctx.schedule,
                                                 window_size=ctx.window_size,
                                                 softcap=ctx.softcap)
            finally:
                _client.pop_audit()
            return dq, dk, dv, None, None, None, None, None, None


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    deterministic=True, schedule="auto", return_softmax_lse=False,
                    return_attn_probs=False, client=None, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None):
    """Attention as flash_attn.flash_attn_func computes it, served by dashd.

    q: (batch, seqlen_q, heads_q, head_dim); k, v: (batch, seqlen_k, heads_kv, head_dim)
    with heads_q a multiple of heads_kv (GQA/MQA); float16 or bfloat16 (float32 on the CPU
    engine). causal masks are aligned to the bottom-right corner, as flash-attn >= 2.1.
    softmax_scale None: 1/sqrt(head_dim). deterministic: the backward adds each dQ tile's
    partial sums in a fixed order, so gradients are identical bit for bit on every run;
    schedule picks that order ("auto", "ascending", "descending", "spt", "shift"), or
    "atomic" (fast, not reproducible; also what deterministic=False picks).

    Returns out, or (out, softmax_lse) with return_softmax_lse, or (out, softmax_lse, None)
    with return_attn_probs (flash-attn's shape of answer; probabilities are not kept).
    softmax_lse is float32 (batch, heads_q, seqlen_q). CUDA tensors are computed in place
    on the GPU, ordered on the current stream; CPU tensors through shared memory.
    Differentiable in q, k and v. Errors from dashd raise dash_attn.DashError with the
    daemon's message. window_size (left, right): flash-attn's sliding window, -1 unbounded
    (causal forces right = 0); softcap > 0: scores become softcap * tanh(score / softcap)
    (Gemma 2) - both on dashd's CPU engine for now (issue 17).
    """
    if dropout_p:
        raise ValueError("dash_attn: dropout is not supported (dropout_p must be 0.0)")
    if alibi_slopes is not None:
        raise NotImplementedError("dash_attn: alibi_slopes: dashd has no ALiBi bias (pass None)")
    window_size = tuple(_client.window_pair(window_size))
    if softcap is None or not (softcap >= 0 and math.isfinite(softcap)):
        raise ValueError(f"dash_attn: softcap must be finite and >= 0 (0: off), not {softcap!r}")
    if torch is None or not isinstance(q, torch.Tensor):
        raise TypeError("dash_attn.flash_attn_func takes torch tensors; for numpy arrays use "
                        "dash_attn.forward / dash_attn.backward")
    if softmax_scale is not None and not (softmax_scale > 0 and math.isfinite(softmax_scale)):
        raise ValueError("dash_attn: softmax_scale must be finite and > 0")
    sched = _schedule(deterministic, schedule)
    c = client or _client.default_client(_client.device_of(q))
    out, lse = DashAttnFunction.apply(q, k, v, softmax_scale, bool(causal), sched, c,
                                      window_size, float(softcap))
    if return_attn_probs:
        return out, lse, None
    if return_softmax_lse:
        return out, lse
    return out
