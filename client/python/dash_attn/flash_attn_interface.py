# SPDX-License-Identifier: BSD-3-Clause
"""A drop-in for flash-attn 2's flash_attn.flash_attn_interface, served by dashd:

    from dash_attn.flash_attn_interface import flash_attn_func   # was: from flash_attn import ...

Same signatures, defaults, layouts and return values as flash-attn 2 (2.6+):
flash_attn_func, flash_attn_qkvpacked_func, flash_attn_kvpacked_func and the packed
variable-length batches flash_attn_varlen_func, flash_attn_varlen_qkvpacked_func,
flash_attn_varlen_kvpacked_func. What differs:

- The backward is always deterministic: dashd's schedules give the same bits on every run
  at about the speed of a non-deterministic one, so deterministic=False asks for nothing
  slower and is accepted as is. (dash_attn.flash_attn_func has schedule= to choose.)
- dropout_p > 0 and alibi_slopes raise NotImplementedError. window_size and softcap are
  served by dashd's CPU engine and its CUDA kernels (head dims 32 to 128 (multiples of 8)).
- flash_attn_varlen_func's block_table (paged KV) raises NotImplementedError.
- return_attn_probs=True gives (out, softmax_lse, S_dmask) with S_dmask an empty tensor,
  as flash-attn 2 returns it without dropout; softmax_lse is float32 (batch, heads,
  seqlen_q).
- float32 and float64 tensors are served too, on the CPU engine.

FA3's signatures (softmax_scale 4th) are in dash_attn.fa3; docs/python.md has both side by
side.
"""
from . import _args, _ops, _varlen

__all__ = ["flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
           "flash_attn_varlen_func", "flash_attn_varlen_qkvpacked_func",
           "flash_attn_varlen_kvpacked_func"]


def _run(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
         return_attn_probs):
    _args.refuse_unsupported(dropout_p, window_size, softcap, alibi_slopes)
    out, lse = _ops.attention(q, k, v, _args.check_scale(softmax_scale), causal, window_size,
                              softcap, "auto")
    if return_attn_probs:
        import torch
        return out, lse, torch.empty((0,), dtype=q.dtype, device=q.device)
    return out


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                    deterministic=False, return_attn_probs=False):
    """q: (batch, seqlen_q, heads, head_dim); k, v: (batch, seqlen_k, heads_k, head_dim),
    heads a multiple of heads_k (GQA/MQA). causal is aligned bottom-right. Returns out
    (batch, seqlen_q, heads, head_dim), or (out, softmax_lse, S_dmask) with
    return_attn_probs."""
    return _run(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                return_attn_probs)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                              deterministic=False, return_attn_probs=False):
    """qkv: (batch, seqlen, 3, heads, head_dim). As flash_attn_func."""
    q, k, v = _args.unpack(qkv, 3, 2, "qkv")
    return _run(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                             window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                             deterministic=False, return_attn_probs=False):
    """q: (batch, seqlen_q, heads, head_dim); kv: (batch, seqlen_k, 2, heads_k, head_dim).
    As flash_attn_func."""
    k, v = _args.unpack(kv, 2, 2, "kv")
    return _run(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                return_attn_probs)


def _varlen_result(res, q, return_attn_probs):
    """flash-attn 2's answer: out, or (out, softmax_lse (heads, total_q), empty S_dmask)."""
    if not return_attn_probs:
        return res
    import torch
    out, lse, _ = res
    return out, lse, torch.empty((0,), dtype=q.dtype, device=q.device)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False,
                           window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    """q: (total_q, heads, head_dim); k, v: (total_k, heads_k, head_dim); cu_seqlens_q/k:
    int32 (batch + 1,) offsets (CPU or CUDA); causal aligned to each sequence's bottom
    right. As dash_attn.flash_attn_varlen_func, always deterministic."""
    res = _varlen.flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                         max_seqlen_k, dropout_p, softmax_scale, causal,
                                         window_size, softcap, alibi_slopes, True,
                                         return_attn_probs, block_table)
    return _varlen_result(res, q, return_attn_probs)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0,
                                     softmax_scale=None, causal=False, window_size=(-1, -1),
                                     softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """qkv: (total, 3, heads, head_dim), one set of offsets for q and k."""
    res = _varlen.flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p,
                                                   softmax_scale, causal, window_size,
                                                   softcap, alibi_slopes, True,
                                                   return_attn_probs)
    return _varlen_result(res, qkv, return_attn_probs)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                    max_seqlen_k, dropout_p=0.0, softmax_scale=None,
                                    causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False,
                                    return_attn_probs=False):
    """kv: (total_k, 2, heads_k, head_dim)."""
    res = _varlen.flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k,
                                                  max_seqlen_q, max_seqlen_k, dropout_p,
                                                  softmax_scale, causal, window_size, softcap,
                                                  alibi_slopes, True, return_attn_probs)
    return _varlen_result(res, q, return_attn_probs)
