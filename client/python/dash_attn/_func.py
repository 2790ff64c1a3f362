# SPDX-License-Identifier: BSD-3-Clause
"""dash_attn.flash_attn_func: flash-attn's call with dashd's choices (deterministic by
default, a schedule, a client), differentiable through the torch ops of _ops.py. The
drop-ins with flash-attn 2's and 3's exact signatures are flash_attn_interface.py and
fa3.py."""
from . import _args, _ops

try:
    import torch
except ImportError:
    torch = None


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    deterministic=True, schedule="auto", return_softmax_lse=False,
                    return_attn_probs=False, client=None, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None):
    """Attention as flash_attn.flash_attn_func computes it, served by dashd.

    q: (batch, seqlen_q, heads_q, head_dim); k, v: (batch, seqlen_k, heads_kv, head_dim)
    with heads_q a multiple of heads_kv (GQA/MQA); float16 or bfloat16 (float32 and float64
    on the CPU engine). causal masks are aligned to the bottom-right corner, as flash-attn
    >= 2.1. softmax_scale None: 1/sqrt(head_dim). deterministic: the backward adds each dQ
    tile's partial sums in a fixed order, so gradients are identical bit for bit on every
    run; schedule picks that order ("auto", "ascending", "descending", "spt", "shift"), or
    "atomic" (fast, not reproducible; also what deterministic=False picks).

    Returns out, or (out, softmax_lse) with return_softmax_lse, or (out, softmax_lse, None)
    with return_attn_probs (probabilities are not kept). softmax_lse is float32 (batch,
    heads_q, seqlen_q). Differentiable in q, k and v; torch.compile(fullgraph=True) traces
    it as one op. window_size (left, right), -1 unbounded, and softcap > 0 (scores become
    softcap * tanh(score / softcap)) are served by dashd's CPU engine and its CUDA kernels
    at head dims 32 to 128 (multiples of 8). dropout_p > 0 and alibi_slopes raise
    NotImplementedError. Errors from dashd raise dash_attn.DashError with the daemon's
    message.
    """
    if isinstance(deterministic, (tuple, list)) or isinstance(schedule, (int, float)):
        # flash-attn's positional window_size (7th) and softcap (8th) land here
        raise TypeError(
            "dash_attn.flash_attn_func: deterministic must be a bool and schedule a name, "
            f"got {deterministic!r} and {schedule!r}: its 7th and 8th positional arguments "
            "are deterministic and schedule, not flash-attn's window_size and softcap. Pass "
            "window_size= and softcap= by keyword, or import flash_attn_func from "
            "dash_attn.flash_attn_interface (flash-attn 2's signature)")
    if not isinstance(schedule, str):
        raise TypeError(f"dash_attn.flash_attn_func: schedule must be a name, one of "
                        f"{', '.join(_args.SCHEDULES)}; not {schedule!r}")
    _args.refuse_unsupported(dropout_p, window_size, softcap, alibi_slopes)
    if torch is None or not isinstance(q, torch.Tensor):
        raise TypeError("dash_attn.flash_attn_func takes torch tensors; for numpy arrays use "
                        "dash_attn.forward / dash_attn.backward")
    scale = _args.check_scale(softmax_scale)
    sched = _args.schedule_for(deterministic, schedule)
    out, lse = _ops.attention(q, k, v, scale, causal, window_size, softcap, sched, client)
    if return_attn_probs:
        return out, lse, None
    if return_softmax_lse:
        return out, lse
    return out
