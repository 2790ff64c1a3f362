# SPDX-License-Identifier: BSD-3-Clause
"""A drop-in for flash-attn 3's flash_attn_interface (the Hopper build), served by dashd:

    from dash_attn.fa3 import flash_attn_func        # was: from flash_attn_interface import ...

FA3's signatures differ from FA2's (dash_attn.flash_attn_interface): no dropout_p, so
softmax_scale is the 4th positional argument; with return_attn_probs the answer is
(out, softmax_lse), without S_dmask; qkvpacked also takes a 4-D qkv with num_heads_q.

- Always deterministic, as the FA2 drop-in (deterministic=False is accepted).
- qv, q_descale/k_descale/v_descale (FP8) and attention_chunk raise NotImplementedError;
  window_size and softcap are served by dashd's CPU engine and its CUDA kernels (head
  dims 32 to 128 (multiples of 8)).
- num_splits, pack_gqa and sm_margin are tuning knobs that change no result: accepted and
  ignored.
"""
from . import _args, _ops

__all__ = ["flash_attn_func", "flash_attn_qkvpacked_func"]


def _run(q, k, v, softmax_scale, causal, window_size, softcap, return_attn_probs):
    _args.refuse_unsupported(window_size=window_size, softcap=softcap)
    out, lse = _ops.attention(q, k, v, _args.check_scale(softmax_scale), causal, window_size,
                              softcap, "auto")
    return (out, lse) if return_attn_probs else out


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, qv=None, q_descale=None,
                    k_descale=None, v_descale=None, window_size=(-1, -1), attention_chunk=0,
                    softcap=0.0, num_splits=1, pack_gqa=None, deterministic=False,
                    sm_margin=0, return_attn_probs=False):
    """q: (batch, seqlen_q, heads, head_dim); k, v: (batch, seqlen_k, heads_k, head_dim).
    Returns out, or (out, softmax_lse) with return_attn_probs."""
    _args.refuse_fa3_only(qv, q_descale, k_descale, v_descale, attention_chunk)
    return _run(q, k, v, softmax_scale, causal, window_size, softcap, return_attn_probs)


def flash_attn_qkvpacked_func(qkv, softmax_scale=None, causal=False, q_descale=None,
                              k_descale=None, v_descale=None, window_size=(-1, -1),
                              attention_chunk=0, softcap=0.0, deterministic=False,
                              num_heads_q=None, sm_margin=0, return_attn_probs=False):
    """qkv: (batch, seqlen, 3, heads, head_dim), or (batch, seqlen, heads_q + 2 heads_k,
    head_dim) with num_heads_q (GQA). Returns out, or (out, softmax_lse)."""
    _args.refuse_fa3_only(None, q_descale, k_descale, v_descale, attention_chunk)
    if qkv.dim() == 4:
        if num_heads_q is None:
            raise ValueError("dash_attn: a 4-D qkv needs num_heads_q (heads_q + 2 heads_k "
                             "heads along dimension 2)")
        hk = (qkv.shape[2] - num_heads_q) // 2
        if num_heads_q < 1 or hk < 1 or num_heads_q + 2 * hk != qkv.shape[2]:
            raise ValueError(f"dash_attn: qkv has {qkv.shape[2]} heads, which is not "
                             f"num_heads_q={num_heads_q} plus twice a kv head count")
        q, k, v = qkv.split([num_heads_q, hk, hk], dim=2)
    else:
        q, k, v = _args.unpack(qkv, 3, 2, "qkv")
    return _run(q, k, v, softmax_scale, causal, window_size, softcap, return_attn_probs)
