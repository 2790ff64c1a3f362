# SPDX-License-Identifier: BSD-3-Clause
"""dash_attn.hf - dashd as a Hugging Face transformers attention implementation.

    import dash_attn.hf                      # registers attn_implementation="dash"
    model = AutoModelForCausalLM.from_config(config, attn_implementation="dash")

Importing this module registers `attention_forward` under the name "dash" in
transformers' AttentionInterface, and transformers' SDPA mask builder under the same name
in its AttentionMaskInterface (a model asks that interface for the mask of its attention
implementation, and the SDPA builder returns None when the mask is plain causal or full,
which is what dashd computes). Every attention layer of a model built with
attn_implementation="dash" then calls attention_forward, which hands the call to
dash_attn.flash_attn_func: differentiable, deterministic backward, audit-tagged.

What transformers asks and how it maps:
- query (batch, heads, seqlen_q, head_dim), key and value (batch, heads_kv, seqlen_k,
  head_dim): transposed (views, no copy) into flash-attn's (batch, seqlen, heads,
  head_dim). GQA (module.num_key_value_groups > 1) is passed as it is: dashd serves
  heads_q a multiple of heads_kv without repeating k and v.
- scaling: softmax_scale (None: 1/sqrt(head_dim)).
- causal: the call's is_causal, else module.is_causal (True when the module does not say);
  aligned bottom-right, as transformers' masks are when a cache holds earlier tokens.
- sliding_window (Mistral, Gemma 2/3, ...: a query sees the last `sliding_window` keys,
  itself included): window_size=(sliding_window - 1, sliding_window - 1), as transformers'
  flash-attn integration passes it (the right side only matters for a non-causal module).
- softcap (Gemma 2's attn_logit_softcapping): softcap, cap tanh(scores / cap).
- attention_mask: None, or a mask that is exactly what the call computes - causal (or
  all-true for a non-causal module), within the sliding window when there is one -
  boolean or additive (0 / -inf). Anything else - padding, packed sequences, a bias -
  raises NotImplementedError: dashd would compute a different attention, so it is
  refused rather than ignored.
- cu_seq_lens_q / cu_seq_lens_k (max_length_q / max_length_k): padding-free batches
  (transformers' DataCollatorWithFlattening(return_flash_attn_kwargs=True)): batch 1, the
  sequences packed along seqlen; served by dash_attn.flash_attn_varlen_func, each
  sequence alone (causal and the window per sequence). As in transformers' flash-attn
  path the offsets decide: a mask beside them is accepted when it is the sequences'
  block-diagonal one or the whole row's plain causal (windowed) one, which transformers
  builds where it does not see the packing; padding or a bias is refused.
- dropout > 0, attention sinks (s_aux) and position_bias raise NotImplementedError naming
  the argument.
- Returns (out (batch, seqlen_q, heads, head_dim), None): attention weights are never
  formed, so output_attentions gets None.
- Audit: the op carries the step of the enclosing dash_attn.audit() block and, unless
  that block set a label, the label "layer<module.layer_idx>.attn".
"""
from transformers import AttentionInterface

from . import _client
from ._func import flash_attn_func
from ._varlen import _host_offsets, flash_attn_varlen_func

try:  # transformers >= 4.53 builds masks per attention implementation
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
except ImportError:  # older ones have no such interface: their SDPA-style mask is used
    AttentionMaskInterface = sdpa_mask = None

import torch
from torch.utils.weak import WeakIdKeyDictionary

NAME = "dash"

# keyword arguments transformers may pass that ask for something dashd does not compute
_REFUSED = {
    "s_aux": "attention sinks",
    "sinks": "attention sinks",
}


def _refuse(what, fix=""):
    raise NotImplementedError(f"dash_attn ({NAME!r} attention): {what} is not supported{fix}")


def _allowed(m):
    """Where a transformers mask lets a query attend: a boolean mask as it is, an additive
    one (0: attend, -inf or the dtype's minimum: not) where it is 0; None for anything else
    (another integer type, or an additive bias rather than a mask)."""
    if m.dtype == torch.bool:
        return m
    if not m.is_floating_point():
        return None
    allowed = m == 0
    blocked = (m == float("-inf")) | (m == torch.finfo(m.dtype).min)
    return allowed if bool((allowed | blocked).all()) else None


def _want(cu_q, cu_k, causal, sliding_window, device):
    """What dashd computes for the sequences the offsets cu_q, cu_k delimit, as a (total_q,
    total_k) boolean mask on device: each query sees its own sequence's keys, causal
    bottom-right per sequence, within sliding_window keys of the query's position (either
    side) when given."""
    cu_q, cu_k = cu_q.to(device, torch.int64), cu_k.to(device, torch.int64)
    tq, tk = int(cu_q[-1]), int(cu_k[-1])
    lq, lk = cu_q[1:] - cu_q[:-1], cu_k[1:] - cu_k[:-1]
    sq = torch.repeat_interleave(torch.arange(len(lq), device=device), lq)  # a query's sequence
    sk = torch.repeat_interleave(torch.arange(len(lk), device=device), lk)
    iq = torch.arange(tq, device=device) - cu_q[:-1][sq] + (lk - lq)[sq]  # bottom-right position
    jk = torch.arange(tk, device=device) - cu_k[:-1][sk]
    want = sq[:, None] == sk[None, :]
    if causal:
        want &= jk[None, :] <= iq[:, None]
    if sliding_window is not None:
        want &= (jk[None, :] > iq[:, None] - sliding_window) & \
            (jk[None, :] < iq[:, None] + sliding_window)
    return want


def _mask_is(attention_mask, causal, q_len, kv_len, sliding_window=None):
    """Whether a transformers attention mask (batch, 1 or heads, q_len, kv_len), boolean
    (True: attend) or additive (0: attend, -inf or the dtype's minimum: not), allows exactly
    what dashd computes: bottom-right causal, or everything, and within sliding_window
    keys of the query's position (either side) when given."""
    m = attention_mask
    if m.dim() != 4 or m.shape[-2] != q_len or m.shape[-1] != kv_len:
        return False
    allowed = _allowed(m)
    if allowed is None:
        return False
    one = (torch.tensor([0, q_len]), torch.tensor([0, kv_len]))  # a single sequence
    return bool((allowed == _want(*one, causal, sliding_window, m.device)).all())


# A padding-free batch's CUDA offsets, copied to the host: tensor -> (version, data_ptr, copy).
# transformers passes the same cu_seq_lens tensors to every layer of a forward, and each
# copy is a wait for the stream (the host stops running ahead of the GPU), so the copy is
# kept while the tensor lives with the same storage and version (an in-place change bumps
# it; a new batch's offsets are new tensors). Keyed by identity: a tensor freed and another
# allocated at its address is another key.
_host_copies = WeakIdKeyDictionary()


def _cached_host_offsets(cu_q, cu_k, copy=None, device=lambda t: t.is_cuda):
    """cu_q, cu_k on the host (_host_offsets: one wait for both), from _host_copies where
    both device tensors are there unchanged."""
    def key(t):
        return (t._version, t.data_ptr())

    got = [(_host_copies.get(t) if device(t) else (key(t), t)) for t in (cu_q, cu_k)]
    if all(g is not None and g[0] == key(t) for g, t in zip(got, (cu_q, cu_k))):
        return got[0][1], got[1][1]
    hq, hk = (copy or _host_offsets)(cu_q, cu_k)
    for t, h in ((cu_q, hq), (cu_k, hk)):
        if device(t):
            _host_copies[t] = (key(t), h)
    return hq, hk


def _offsets(name, cu, n):
    """cu_seq_lens_* as int32 offsets on the CPU, checked against the packed length n."""
    if not isinstance(cu, torch.Tensor) or cu.dim() != 1 or cu.numel() < 2 or \
            cu.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"dash_attn ({NAME!r} attention): {name}: a 1-D int32/int64 tensor of "
                         "batch + 1 offsets")
    cu = cu.detach().to("cpu", torch.int64)
    if int(cu[0]) != 0 or int(cu[-1]) != n or bool((cu[1:] < cu[:-1]).any()):
        raise ValueError(f"dash_attn ({NAME!r} attention): {name} = {cu.tolist()}: offsets from 0 "
                         f"rising to the packed length {n}")
    return cu.to(torch.int32)


def _packed_mask_is(m, cu_q, cu_k, causal, sliding_window):
    """Whether a (1, 1 or heads, total_q, total_k) mask is the block-diagonal one of these
    sequences (_want)."""
    tq, tk = int(cu_q[-1]), int(cu_k[-1])
    if m.dim() != 4 or m.shape[0] != 1 or m.shape[-2] != tq or m.shape[-1] != tk:
        return False
    allowed = _allowed(m)
    if allowed is None:
        return False
    return bool((allowed.cpu() == _want(cu_q, cu_k, causal, sliding_window, "cpu")).all())


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                      is_causal=None, **kwargs):
    """transformers' attention-function contract, computed by dashd (module docstring)."""
    if dropout:
        _refuse(f"dropout={dropout}", "; set the config's attention_dropout to 0.0")
    for name, what in _REFUSED.items():
        if kwargs.get(name) is not None:
            _refuse(f"{what} ({name}=...)")
    if kwargs.get("position_bias") is not None:
        _refuse("an additive position bias (position_bias=...)")
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    sw = kwargs.get("sliding_window")
    if sw is not None and (isinstance(sw, bool) or not isinstance(sw, int) or sw < 1):
        raise ValueError(f"dash_attn ({NAME!r} attention): sliding_window={sw!r}: a number of "
                         "keys, 1 or more")
    softcap = kwargs.get("softcap")
    softcap = 0.0 if softcap is None else float(softcap)
    q_len, kv_len = query.shape[2], key.shape[2]
    window = (sw - 1, sw - 1) if sw else (-1, -1)
    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if cu_q is not None or cu_k is not None:
        return _packed(module, query, key, value, attention_mask, scaling, causal, sw, window,
                       softcap, cu_q if cu_q is not None else cu_k,
                       cu_k if cu_k is not None else cu_q, kwargs)
    if attention_mask is not None and not _mask_is(attention_mask, causal, q_len, kv_len, sw):
        _refuse("an attention mask other than plain " + ("causal" if causal else "full")
                + " attention" + (f" within a sliding window of {sw}" if sw else "")
                + " (padding, packed sequences or a bias)",
                "; pass batches without padding (attention_mask None or all ones)")
    with _layer_audit(module):
        out = flash_attn_func(query.transpose(1, 2), key.transpose(1, 2),
                              value.transpose(1, 2), softmax_scale=scaling,
                              causal=bool(causal), window_size=window, softcap=softcap)
    return out, None


class _layer_audit:
    """The audit tag of a layer's call: the enclosing dash_attn.audit() block's step and,
    unless that block set a label, "layer<module.layer_idx>.attn"."""

    def __init__(self, module):
        self.module = module

    def __enter__(self):
        step, label = _client.current_audit()
        idx = getattr(self.module, "layer_idx", None)
        if label is None and idx is not None:
            label = f"layer{idx}.attn"
        _client.push_audit(step, label)

    def __exit__(self, *exc):
        _client.pop_audit()
        return False


def _packed(module, query, key, value, attention_mask, scaling, causal, sw, window, softcap,
            cu_q, cu_k, kwargs):
    """A padding-free batch: (1, heads, total, head_dim) holding the sequences cu_seq_lens
    delimit, served sequence by sequence by flash_attn_varlen_func."""
    if query.shape[0] != 1:
        raise ValueError(f"dash_attn ({NAME!r} attention): cu_seq_lens_q/k describe sequences "
                         f"packed into batch 1; the query has batch {query.shape[0]}")
    if isinstance(cu_q, torch.Tensor) and isinstance(cu_k, torch.Tensor):
        cu_q, cu_k = _cached_host_offsets(cu_q, cu_k)
    cu_q = _offsets("cu_seq_lens_q", cu_q, query.shape[2])
    cu_k = _offsets("cu_seq_lens_k", cu_k, key.shape[2])
    if cu_q.numel() != cu_k.numel():
        raise ValueError(f"dash_attn ({NAME!r} attention): cu_seq_lens_q has "
                         f"{cu_q.numel() - 1} sequences, cu_seq_lens_k {cu_k.numel() - 1}")
    # transformers' flash-attn path follows the offsets and ignores the mask; a mask here is
    # served when it is the sequences' own (block-diagonal), or the whole row's plain one,
    # which transformers builds where it does not see the packing (Gemma 2's sliding layers)
    if attention_mask is not None and not (
            _packed_mask_is(attention_mask, cu_q, cu_k, causal, sw)
            or _mask_is(attention_mask, causal, query.shape[2], key.shape[2], sw)):
        _refuse("an attention mask other than the packed sequences' own (block-diagonal"
                + (", causal" if causal else "") + (f", within a window of {sw}" if sw else "")
                + ") or the row's plain one beside cu_seq_lens_q/k (padding or a bias)")
    max_q = kwargs.get("max_length_q") or int((cu_q[1:] - cu_q[:-1]).max())
    max_k = kwargs.get("max_length_k") or int((cu_k[1:] - cu_k[:-1]).max())
    with _layer_audit(module):
        out = flash_attn_varlen_func(query[0].transpose(0, 1), key[0].transpose(0, 1),
                                     value[0].transpose(0, 1), cu_q, cu_k, int(max_q),
                                     int(max_k), softmax_scale=scaling, causal=bool(causal),
                                     window_size=window, softcap=softcap)
    return out.unsqueeze(0), None


def register(name=NAME):
    """Register attention_forward (and the SDPA mask builder) under name; done for "dash"
    when this module is imported. Returns name."""
    AttentionInterface.register(name, attention_forward)
    if AttentionMaskInterface is not None:
        AttentionMaskInterface.register(name, sdpa_mask)
    return name


register()

__all__ = ["attention_forward", "register", "NAME"]
