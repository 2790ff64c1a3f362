# SPDX-License-Identifier: BSD-3-Clause
"""The one place where flash-attn's arguments are checked and turned into dashd's.

Every entry point on dense batches (dash_attn.flash_attn_func, the flash-attn 2 and 3
drop-ins in flash_attn_interface.py and fa3.py, the torch ops in _ops.py) calls these, so
what dashd cannot honour is refused the same way everywhere.
"""
import math

from . import _client

SCHEDULES = ("auto", "atomic", "ascending", "descending", "spt", "shift")


def refuse_unsupported(dropout_p=0.0, window_size=(-1, -1), softcap=0.0, alibi_slopes=None):
    """NotImplementedError naming the first argument dashd cannot honour (dropout, ALiBi);
    TypeError / ValueError for a window that is not a pair or a softcap that is not finite
    and >= 0. Windows and softcap are served (the CPU engine; the CUDA backend at head
    dims 32 to 128 (multiples of 8))."""
    if dropout_p:
        raise NotImplementedError(
            f"dash_attn: dropout_p={dropout_p!r}: dashd has no attention dropout (pass 0.0; "
            "apply dropout outside attention)")
    if alibi_slopes is not None:
        raise NotImplementedError("dash_attn: alibi_slopes: dashd has no ALiBi bias (pass None)")
    window_pair(window_size)
    # comparisons, not math.isfinite: torch.compile(dynamic=True) may trace the number
    if softcap is None or not (softcap >= 0 and softcap < math.inf):  # NaN fails too
        raise ValueError(f"dash_attn: softcap must be finite and >= 0 (0: off), not {softcap!r}")


def window_pair(window_size):
    """(left, right) ints from flash-attn's window_size; -1 means unbounded."""
    return tuple(_client.window_pair(window_size))


def check_scale(softmax_scale):
    """None (1/sqrt(head_dim)) or a finite float > 0."""
    if softmax_scale is None:
        return None
    if isinstance(softmax_scale, (str, bytes)):  # float() would read "0.1"
        raise TypeError(f"dash_attn: softmax_scale must be a number, got {softmax_scale!r}")
    try:
        s = float(softmax_scale)
    except (TypeError, ValueError):
        raise TypeError(f"dash_attn: softmax_scale must be a number, got {softmax_scale!r}") \
            from None
    if not (s > 0 and s < math.inf):  # NaN fails too
        raise ValueError("dash_attn: softmax_scale must be finite and > 0")
    return s


def schedule_for(deterministic, schedule):
    """The backward schedule dashd is asked for. dash_attn's own API: deterministic=False
    with schedule "auto" asks for "atomic" (fast, not reproducible); a schedule named
    explicitly runs as named; "atomic" with deterministic=True is refused."""
    if schedule not in SCHEDULES:
        raise ValueError(f"dash_attn: unknown schedule {schedule!r}; one of "
                         + ", ".join(SCHEDULES))
    if schedule == "atomic" and deterministic:
        raise ValueError("dash_attn: schedule='atomic' is not deterministic; pass "
                         "deterministic=False to use it")
    if not deterministic and schedule == "auto":
        return "atomic"
    return schedule


def refuse_fa3_only(qv=None, q_descale=None, k_descale=None, v_descale=None,
                    attention_chunk=0):
    """FA3's arguments with no dashd meaning: NotImplementedError naming the first one set.
    (FA3's tuning knobs num_splits, pack_gqa and sm_margin change no result: accepted.)"""
    if qv is not None:
        raise NotImplementedError("dash_attn: qv: dashd has no extra query-value term "
                                  "(pass None)")
    for name, x in (("q_descale", q_descale), ("k_descale", k_descale),
                    ("v_descale", v_descale)):
        if x is not None:
            raise NotImplementedError(f"dash_attn: {name}: dashd serves no FP8 inputs "
                                      "(pass None)")
    if attention_chunk:
        raise NotImplementedError(f"dash_attn: attention_chunk={attention_chunk!r}: chunked "
                                  "attention is not served (pass 0)")


def unpack(packed, n, dim, what):
    """Split a packed tensor (qkv: n=3, kv: n=2) along dim, checking its size there."""
    if packed.dim() != 5 or packed.shape[dim] != n:
        raise ValueError(f"dash_attn: {what} must be 5-D with {n} at dimension {dim % 5} "
                         f"(batch, seqlen, {n}, heads, head_dim); got shape "
                         f"{tuple(packed.shape)}")
    return packed.unbind(dim)
