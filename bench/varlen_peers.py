#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""varlen_peers.py - issue 17's H200 benchmark: a packed batch and sliding windows, dashd
beside cuDNN's SDPA (through its frontend) and PyTorch's flash kernels, forward and backward
time and TFLOPS counted on the work inside the mask, written up as a Markdown report.

    python3 bench/varlen_peers.py [--dashd PATH] [--out DIR] [--dims 128[,64]]
        [--reps N] [--cases varlen,causal,window-1k,window-4k] [--kernels auto|v2|v3] [--commit C]
        [--command TEXT] [--plan] [--packed-lengths]

scripts/gpu_bench.sh COMMIT --varlen runs it on the GPU machine (the cuDNN frontend from
the offline wheel, the bundle's dashd). --plan prints the cases, their mask pairs and
FLOPs as JSON and exits without touching a GPU (make test checks it).

The cases (bf16, heads = 2048 / head_dim, layout (tokens, heads, head_dim)):
  varlen      16384 tokens packed from documents whose lengths are drawn as in
              bench/bench_varlen.c: log-normal, median 512, sigma 1.0, clipped to 1..4096,
              drawn until the tokens are filled (the last one cut to fit), splitmix64 seed
              0x76617231 - the same draws as the CPU bench (its 8192-token batch is this
              batch's first 8 documents and the 9th cut to fit): 19 documents, 31 to 2219
              tokens, many short and a few long, as packed pre-training data looks;
              causal per document.
  causal      one sequence of 16384 tokens, causal: the figure windows are judged against.
  window-1k   one sequence of 16384 tokens, causal with a sliding window of 1024:
  window-4k   flash-attn's window_size (W, 0): a query sees itself and the W keys before
              it (cuDNN: diagonal band, top-left aligned, left bound W + 1, right bound 0).

FLOPs are counted on the (query, key) pairs the mask lets through, exactly: fwd = 4 * pairs
* heads * head_dim, bwd = 2.5 * fwd (bench_gpu's ratio). A causal sequence of S tokens has
S(S+1)/2 pairs (bench_gpu counts S^2/2: 0.006% less at 16k, half as much at length 1).

Peers, each in its own try/except (a failure is a line in the report, never a lost run):
  cudnn-fe / cudnn-fe-det   cuDNN SDPA through the frontend (module `cudnn`), backward with
                            use_deterministic_algorithm False / True (one forward); the
                            packed batch as ragged offsets with a padding mask
  torch-varlen-flash        torch.nn.attention.varlen.varlen_attn under the flash backend
                            (causal as is_causal or window_size (-1, 0); windows only where
                            this PyTorch's varlen_attn takes window_size)
  torch-sdpa-flash          F.scaled_dot_product_attention, flash backend: the causal case;
                            windows tried with a band attn_mask (the error is reported)
  dashd / dashd-batch-inv / dashd-atomic
                            dash_attn.flash_attn_varlen_func / flash_attn_func(window_size=)
                            through a dashd this script starts (--backend cuda): the
                            deterministic schedule `auto`, the batch-invariant mode (varlen),
                            and deterministic=False; cu_seqlens on the host (dash_attn's
                            advice). A refusal reads "refused: <message>".
Timing: bench/cudatime.py (CUDA events, median of --reps calls after 3 warm-ups). 'repeat':
3 backwards gave identical dQ, dK, dV bits. 'O err': head 0's output against a float32
reference computed sequence by sequence, relative to the largest reference element.
"""
import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)  # also under python -I
import cudatime  # noqa: E402
import cudnn_peers  # noqa: E402  (its Frontend: handle, graph settings, build-and-run)
import dashd_proc  # noqa: E402

TOKENS, HIDDEN = 16384, 2048
SEED = 0x76617231
MEDIAN, SIGMA, MAX_LEN = 512.0, 1.0, 4096
WINDOWS = {"window-1k": 1024, "window-4k": 4096}
CASES = ("varlen", "causal", "window-1k", "window-4k")
DIMS = (64, 128)
WARMUPS, REPEATS = 3, 3
O_TOLERANCE = 2e-2  # bf16 in and out
MASK64 = (1 << 64) - 1


# ---- what is measured: pure functions, tested on the CPU (bench/test_varlen_peers.py) ----

def splitmix_uniform(state):
    """(u, state'): bench_varlen.c's uniform(): splitmix64, then a double in (0, 1)."""
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    z ^= z >> 31
    return ((z >> 11) + 0.5) / 9007199254740992.0, state


def draw_lengths(total, seed=SEED, median=MEDIAN, sigma=SIGMA, max_len=MAX_LEN):
    """Document lengths filling `total` tokens, as bench_varlen.c's draw_docs: each
    round(exp(ln median + sigma * z)) with z standard normal (Box-Muller on two uniforms),
    clipped to 1..max_len, the last one cut so that the lengths sum to total."""
    if total < 1 or max_len < 1:
        raise ValueError(f"total {total} and max_len {max_len} must be >= 1")
    lengths, state, filled = [], seed, 0
    while filled < total:
        u1, state = splitmix_uniform(state)
        u2, state = splitmix_uniform(state)
        z = math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2)
        n = int(round_half_away(math.exp(math.log(median) + sigma * z)))
        n = min(max(n, 1), max_len, total - filled)
        lengths.append(n)
        filled += n
    return lengths


def round_half_away(x):
    """C's lround for x >= 0 (Python's round() rounds half to even)."""
    return math.floor(x + 0.5)


def cu_seqlens(lengths):
    """Offsets 0, l0, l0+l1, ..., the total (flash-attn's cu_seqlens)."""
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    return cu


def window_bounds(window, causal):
    """(left, right) of flash-attn's window_size, -1 unbounded; causal forces right 0."""
    left, right = window
    if causal:
        right = 0
    return left, right


def visible(i, j, sq, sk, left, right):
    """Whether query i sees key j (flash-attn's rule, bottom-right aligned): ints or
    tensors (then elementwise)."""
    off = sk - sq
    ok = (j >= 0) & (j < sk)
    if left >= 0:
        ok = ok & (j >= i + off - left)
    if right >= 0:
        ok = ok & (j <= i + off + right)
    return ok


def mask_pairs(sq, sk, window=(-1, -1), causal=False):
    """The number of (query, key) pairs a sequence's mask lets through, row by row."""
    left, right = window_bounds(window, causal)
    off, pairs = sk - sq, 0
    for i in range(sq):
        lo = max(0, i + off - left) if left >= 0 else 0
        hi = min(sk - 1, i + off + right) if right >= 0 else sk - 1
        pairs += max(0, hi - lo + 1)
    return pairs


def varlen_pairs(cu_q, cu_k, window=(-1, -1), causal=False):
    """mask_pairs summed over the sequences of a packed batch."""
    if len(cu_q) != len(cu_k):
        raise ValueError("cu_seqlens_q and cu_seqlens_k differ in length")
    return sum(mask_pairs(cu_q[b + 1] - cu_q[b], cu_k[b + 1] - cu_k[b], window, causal)
               for b in range(len(cu_q) - 1))


def attention_flops(pairs, heads, head_dim):
    """(forward, backward) FLOPs: 4 per pair and head element (QK^T and PV), bwd 2.5x."""
    fwd = 4.0 * pairs * heads * head_dim
    return fwd, 2.5 * fwd


def make_case(name, head_dim, tokens=TOKENS):
    """A case: its lengths (one per sequence), window, pairs and FLOPs."""
    if name == "varlen":
        lengths, window = draw_lengths(tokens), (-1, 0)
    elif name == "causal":
        lengths, window = [tokens], (-1, 0)
    elif name in WINDOWS:
        lengths, window = [tokens], (WINDOWS[name], 0)
    else:
        raise ValueError(f"unknown case '{name}' (one of {', '.join(CASES)})")
    heads = HIDDEN // head_dim
    cu = cu_seqlens(lengths)
    pairs = varlen_pairs(cu, cu, window, causal=True)
    fwd, bwd = attention_flops(pairs, heads, head_dim)
    return {"case": name, "D": head_dim, "H": heads, "lengths": lengths, "cu": cu,
            "window": list(window), "causal": True, "pairs": pairs,
            "fwd_flops": fwd, "bwd_flops": bwd}


def tflops(flops, ms):
    return flops / ms / 1e9 if ms else None


def criteria(rows):
    """Issue 17's two checks from the rows (None where a side was not measured):
    dashd's deterministic varlen backward over cuDNN's non-deterministic one, and each
    peer's window TFLOPS over its causal TFLOPS at the same length (0.85 or more); each
    on the calls timed alone and, where the rows have them, on the streamed calls (the
    ' (streamed)' checks: the work's cost without the launch latency of one call)."""
    by = {(r["case"], r["D"], r["peer"]): r for r in rows if "error" not in r}
    out = []
    for d in sorted({r["D"] for r in rows}):
        for how, key in (("", "_tflops"), (" (streamed)", "_stream_tflops")):
            ours, fe = by.get(("varlen", d, "dashd")), by.get(("varlen", d, "cudnn-fe"))
            if how and not (ours or fe or {}).get("bwd" + key):
                continue  # rows from before the streamed timing
            ratio = (ours["bwd" + key] / fe["bwd" + key]
                     if ours and fe and ours.get("bwd" + key) and fe.get("bwd" + key) else None)
            out.append({"check": "varlen det bwd >= cudnn-fe bwd" + how, "D": d, "ratio": ratio,
                        "ok": None if ratio is None else ratio >= 1.0})
            for case in WINDOWS:
                for peer in sorted({r["peer"] for r in rows}):
                    w, c = by.get((case, d, peer)), by.get(("causal", d, peer))
                    if not w or not c:
                        continue
                    for part in ("fwd", "bwd"):
                        if not (w.get(part + key) and c.get(part + key)):
                            continue
                        ratio = w[part + key] / c[part + key]
                        out.append({"check": f"{case} {part} TFLOPS / causal{how}", "D": d,
                                    "peer": peer, "ratio": ratio, "ok": ratio >= 0.85})
    return out


# ---- the GPU side: each peer in its own try/except --------------------------------------

describe = cudnn_peers.describe  # an exception as one line


class NotServed(Exception):
    """A peer that cannot express the case: the row says why instead of measuring."""


class Inputs:
    """q, k, v, dO (tokens, heads, head_dim) bf16, and the offsets, on the GPU."""

    def __init__(self, torch, case, seed):
        t, h, d = case["cu"][-1], case["H"], case["D"]
        gen = torch.Generator(device="cuda").manual_seed(seed)
        self.q, self.k, self.v, self.do = (
            torch.randn(t, h, d, device="cuda", dtype=torch.bfloat16, generator=gen)
            for _ in range(4))
        self.cu = torch.tensor(case["cu"], dtype=torch.int32, device="cuda")
        self.max_len = max(case["lengths"])


def repeat_bits(torch, grads_fn):
    """Whether REPEATS backwards (grads_fn() -> dq, dk, dv) give identical bits."""
    first, same = None, True
    for _ in range(REPEATS):
        bits = [g.view(torch.int16).clone() for g in grads_fn()]
        torch.cuda.synchronize()
        if first is None:
            first = bits
        else:
            same = same and all(torch.equal(a, b) for a, b in zip(first, bits))
    return same


def reference_head0(torch, case, x):
    """Head 0's output in float32, sequence by sequence, with the case's mask."""
    left, right = window_bounds(case["window"], case["causal"])
    out = torch.zeros(case["cu"][-1], case["D"], device="cuda", dtype=torch.float32)
    for b in range(len(case["lengths"])):
        s, e = case["cu"][b], case["cu"][b + 1]
        q, k, v = (t[s:e, 0].float() for t in (x.q, x.k, x.v))
        scores = (q @ k.T) * case["D"] ** -0.5
        i = torch.arange(e - s, device="cuda")[:, None]
        j = torch.arange(e - s, device="cuda")[None, :]
        scores.masked_fill_(~visible(i, j, e - s, e - s, left, right), float("-inf"))
        out[s:e] = torch.nan_to_num(torch.softmax(scores, dim=-1)) @ v
        del scores
    return out


def o_error(torch, o, ref):
    return float((o[:, 0].float() - ref).abs().max() / ref.abs().max())


def measure(torch, case, peer, fwd, make_bwd, reps, ref):
    """A row: fwd() returns the output (tokens, heads, head_dim); make_bwd() returns a call
    giving (dq, dk, dv). Times, TFLOPS, the repeat check and O's error."""
    row = {"case": case["case"], "D": case["D"], "peer": peer}
    fwd_ms = cudatime.median_ms(torch, fwd, reps, WARMUPS)
    fwd_st = cudatime.streamed_ms(torch, fwd, reps, 1)
    o = fwd()
    torch.cuda.synchronize()
    row.update(fwd_ms=fwd_ms, fwd_tflops=tflops(case["fwd_flops"], fwd_ms),
               fwd_stream_ms=fwd_st, fwd_stream_tflops=tflops(case["fwd_flops"], fwd_st))
    if ref is not None:
        row["o_err"] = o_error(torch, o, ref)
    bwd = make_bwd()
    bwd_ms = cudatime.median_ms(torch, bwd, reps, WARMUPS)
    bwd_st = cudatime.streamed_ms(torch, bwd, reps, 1)
    row.update(bwd_ms=bwd_ms, bwd_tflops=tflops(case["bwd_flops"], bwd_ms),
               bwd_stream_ms=bwd_st, bwd_stream_tflops=tflops(case["bwd_flops"], bwd_st),
               bitwise_repeat=repeat_bits(torch, bwd))
    return row


class CudnnFrontend(cudnn_peers.Frontend):
    """cuDNN SDPA graphs for a case on PyTorch's current stream: the packed batch as
    (B, H, max_len, D) with ragged offsets (element offsets of each sequence) and a padding
    mask (seq_len_q/kv); one sequence as (1, H, S, D); strides of the (tokens, heads, D)
    storage; windows as a top-left diagonal band (left bound W + 1, right bound 0). The
    handle, the graphs' data types and their build-and-run are cudnn_peers.Frontend's."""

    def prepare(self, case, x, ragged_stats):
        torch, dt = self.torch, self.cudnn.data_type
        b, h, d = len(case["lengths"]), case["H"], case["D"]
        s = x.max_len
        self.dims, self.strides = [b, h, s, d], [s * h * d, d, h * d, 1]
        self.varlen = case["case"] == "varlen"
        self.ragged_stats = ragged_stats and self.varlen
        t = case["cu"][-1]
        if self.ragged_stats:  # stored (tokens, heads), as the packed tensors
            self.stats = torch.empty(t, h, 1, device="cuda", dtype=torch.float32)
            self.stats_dims, self.stats_strides = [b, h, s, 1], [s * h, 1, h, 1]
        else:
            self.stats = torch.empty(b, h, s, 1, device="cuda", dtype=torch.float32)
            self.stats_dims, self.stats_strides = [b, h, s, 1], [h * s, s, 1, 1]
        if self.varlen:
            cu = x.cu.to(torch.int64).view(-1, 1, 1, 1)
            self.offsets = (cu * h * d).contiguous()
            self.stats_offsets = (cu * h).contiguous()
            lens = torch.tensor(case["lengths"], dtype=torch.int32, device="cuda")
            self.seqlens = lens.view(-1, 1, 1, 1).contiguous()
        left, right = window_bounds(case["window"], case["causal"])
        self.mask = {}
        if left >= 0:
            self.mask = dict(diagonal_alignment=self.cudnn.diagonal_alignment.TOP_LEFT,
                             diagonal_band_left_bound=left + 1,
                             diagonal_band_right_bound=right)
        elif case["causal"]:
            self.mask = dict(use_causal_mask=True)
        self.dt = dt

    def _extras(self, g, pack):
        """The padding-mask and ragged-offset graph tensors of a packed batch."""
        if not self.varlen:
            return {}, None, None

        def mk(t, ty):
            node = g.tensor(dim=list(t.shape), stride=list(t.stride()), data_type=ty)
            pack[node] = t
            return node
        sq, skv = mk(self.seqlens, self.dt.INT32), mk(self.seqlens, self.dt.INT32)
        off = mk(self.offsets, self.dt.INT64)
        soff = mk(self.stats_offsets, self.dt.INT64) if self.ragged_stats else None
        return dict(use_padding_mask=True, seq_len_q=sq, seq_len_kv=skv), off, soff

    def _io(self, g, pack, t, off, output=None):
        """A (B, H, S, D) view of storage t: an input, or output node `output`."""
        if output is None:
            node = g.tensor(dim=self.dims, stride=self.strides, data_type=self.dt.BFLOAT16)
        else:
            node = output.set_output(True).set_dim(self.dims).set_stride(self.strides)
        if off is not None:
            node.set_ragged_offset(off)
        pack[node] = t
        return node

    def _stats(self, g, pack, soff, output=None):
        if output is None:
            node = g.tensor(dim=self.stats_dims, stride=self.stats_strides,
                            data_type=self.dt.FLOAT)
        else:
            node = output.set_output(True).set_dim(self.stats_dims)
            node.set_stride(self.stats_strides).set_data_type(self.dt.FLOAT)
        if self.ragged_stats:
            node.set_ragged_offset(soff)
        pack[node] = self.stats
        return node

    def forward(self, x, o):
        g, pack = self._graph(), {}
        extra, off, soff = self._extras(g, pack)
        q, k, v = (self._io(g, pack, t, off) for t in (x.q, x.k, x.v))
        go, gst = g.sdpa(name="sdpa", q=q, k=k, v=v, generate_stats=True,
                         attn_scale=x.q.shape[-1] ** -0.5, **extra, **self.mask)
        self._io(g, pack, o, off, output=go)
        self._stats(g, pack, soff, output=gst)
        run = self._finish(g, pack)

        def call():
            run()
            return o
        return call

    def backward(self, x, o, grads, deterministic):
        g, pack = self._graph(), {}
        extra, off, soff = self._extras(g, pack)
        q, k, v, go, gdo = (self._io(g, pack, t, off) for t in (x.q, x.k, x.v, o, x.do))
        gst = self._stats(g, pack, soff)
        if self.varlen:
            extra.update(max_total_seq_len_q=x.q.shape[0], max_total_seq_len_kv=x.k.shape[0])
        outs = g.sdpa_backward(name="sdpa_backward", q=q, k=k, v=v, o=go, dO=gdo, stats=gst,
                               attn_scale=x.q.shape[-1] ** -0.5,
                               use_deterministic_algorithm=deterministic, **extra, **self.mask)
        for node, t in zip(outs, grads):
            self._io(g, pack, t, off, output=node)
        run = self._finish(g, pack)

        def call():
            run()
            return grads
        return call


def cudnn_rows(torch, cudnn, case, x, reps, ref):
    """cudnn-fe and cudnn-fe-det rows (cudnn: the module, or why it is missing); a packed
    batch tries ragged statistics first, then padded ones, and says which it used."""
    names = {False: "cudnn-fe", True: "cudnn-fe-det"}
    if isinstance(cudnn, str):  # why the frontend is not there
        return [error_row(case, n, cudnn) for n in names.values()]
    fe = CudnnFrontend(torch, cudnn)
    o = torch.empty_like(x.q)
    grads = [torch.empty_like(t) for t in (x.q, x.k, x.v)]
    first_error = None
    for ragged_stats in ((True, False) if case["case"] == "varlen" else (False,)):
        try:  # both graphs build and run with this layout of the statistics
            fe.prepare(case, x, ragged_stats)
            fwd = fe.forward(x, o)
            fwd()
            fe.backward(x, o, grads, False)()
            torch.cuda.synchronize()
            break
        except Exception as e:
            first_error = first_error or describe(e)
    else:
        return [error_row(case, n, first_error) for n in names.values()]
    rows = []
    for det, name in names.items():
        try:
            row = measure(torch, case, name, fwd, lambda: fe.backward(x, o, grads, det), reps,
                          ref)
            if fe.varlen:
                row["note"] = "ragged stats" if fe.ragged_stats else \
                    f"padded stats (ragged: {first_error})"
            rows.append(row)
        except Exception as e:
            rows.append(error_row(case, name, describe(e)))
    return rows


def error_row(case, peer, why):
    return {"case": case["case"], "D": case["D"], "peer": peer, "error": why}


def autograd_bwd(torch, f, x):
    """A backward call of f(q, k, v) -> out, by torch.autograd.grad on a retained graph."""
    q, k, v = (t.detach().requires_grad_(True) for t in (x.q, x.k, x.v))
    out = f(q, k, v)
    return lambda: torch.autograd.grad(out, (q, k, v), x.do, retain_graph=True)


def torch_varlen(torch, case, x):
    """(f(q, k, v), how) calling torch.nn.attention.varlen.varlen_attn (public since
    PyTorch 2.10) with the case's mask: the window as window_size where this PyTorch's
    varlen_attn has it, else causal as is_causal (and a window is not served)."""
    import inspect
    try:
        from torch.nn.attention import varlen as tv
    except ImportError as e:
        raise NotServed(f"torch {torch.__version__} has no varlen_attn ({describe(e)})")
    left, right = window_bounds(case["window"], case["causal"])
    params = inspect.signature(tv.varlen_attn).parameters
    if "window_size" in params:
        kw = {"window_size": (left, right)}
    elif left >= 0:
        raise NotServed(f"torch {torch.__version__}'s varlen_attn has no window_size")
    else:
        kw = {"is_causal": True}
    f = lambda q, k, v: tv.varlen_attn(q, k, v, x.cu, x.cu, x.max_len, x.max_len, **kw)
    return f, "varlen_attn(" + ", ".join(f"{k}={v}" for k, v in kw.items()) + ")"


def torch_sdpa(torch, case, x):
    """(f(q, k, v), how) calling F.scaled_dot_product_attention on (1, H, S, D) views:
    causal as is_causal; a window as a band attn_mask (SDPA has no window argument)."""
    import torch.nn.functional as F
    if case["case"] == "varlen":
        raise NotServed("SDPA takes no cu_seqlens (padded batches only): "
                        "torch-varlen-flash is PyTorch's packed-batch entry point")
    left, right = window_bounds(case["window"], case["causal"])
    mask, n = None, x.q.shape[0]
    if left >= 0:
        i = torch.arange(n, device="cuda")[:, None]
        j = torch.arange(n, device="cuda")[None, :]
        mask = visible(i, j, n, n, left, right)

    def f(q, k, v):
        qs, ks, vs = (t.unsqueeze(0).transpose(1, 2) for t in (q, k, v))
        o = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, is_causal=mask is None)
        return o.transpose(1, 2).squeeze(0)
    return f, "is_causal" if mask is None else "band attn_mask"


def torch_rows(torch, case, x, reps, ref):
    """PyTorch's flash kernels, forced with sdpa_kernel(FLASH_ATTENTION)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    rows = []
    for name, make in (("torch-varlen-flash", torch_varlen), ("torch-sdpa-flash", torch_sdpa)):
        try:
            f, note = make(torch, case, x)

            def flash(q, k, v, f=f):
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    return f(q, k, v)

            def fwd(f=flash):
                with torch.no_grad():
                    return f(x.q, x.k, x.v)
            row = measure(torch, case, name, fwd, lambda f=flash: autograd_bwd(torch, f, x),
                          reps, ref)
            rows.append(dict(row, note=note))
        except NotServed as e:
            rows.append(error_row(case, name, f"not served: {e}"))
        except Exception as e:
            rows.append(error_row(case, name, describe(e)))
    return rows


def dashd_rows(torch, dash_attn, case, x, reps, ref):
    """dashd's rows (dash_attn: the module, or why there is none). A refusal - DashError
    (DASH_ENOTSUP from a CUDA backend without these kernels) or the binding's
    NotImplementedError - reads 'refused: <its message>'. A packed batch passes cu_seqlens
    on the host (dash_attn copies a CUDA one to the host first, which waits)."""
    left, right = window_bounds(case["window"], case["causal"])
    variants = [("dashd", dict(deterministic=True)),
                ("dashd-atomic", dict(deterministic=False))]
    if case["case"] == "varlen":
        variants.insert(1, ("dashd-batch-inv", dict(deterministic=True, batch_invariant=True)))
    rows = []
    for name, kw in variants:
        if isinstance(dash_attn, str):  # why there is no dashd to ask
            rows.append(error_row(case, name, dash_attn))
            continue
        if left >= 0:  # a plain causal case asks for no window, as a plain caller does
            kw = dict(kw, window_size=(left, right))
        try:
            row = dashd_row(torch, dash_attn, case, x, reps, ref, name, kw)
        except Exception as e:
            refused = isinstance(e, (dash_attn.DashError, NotImplementedError))
            row = error_row(case, name, f"refused: {e}" if refused else describe(e))
            try:  # an answer still on its way would fail the next variant's first call
                dash_attn.synchronize()
            except Exception:
                pass
        rows.append(row)
    return rows


def dashd_row(torch, dash_attn, case, x, reps, ref, name, kw):
    cu = x.cu.cpu()  # on the host, as dash_attn advises: a CUDA one is copied, a wait

    def f(q, k, v):
        if case["case"] == "varlen":
            return dash_attn.flash_attn_varlen_func(
                q, k, v, cu, cu, x.max_len, x.max_len, causal=True, **kw)
        return dash_attn.flash_attn_func(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0),
                                         causal=True, **kw).squeeze(0)

    def fwd():
        with torch.no_grad():
            return f(x.q, x.k, x.v)

    def make_bwd():
        bwd = autograd_bwd(torch, f, x)
        bwd()
        dash_attn.synchronize()  # a refusal of the backward surfaces here
        return bwd
    fwd()
    dash_attn.synchronize()  # a refusal of the forward surfaces here
    row = measure(torch, case, name, fwd, make_bwd, reps, ref)
    dash_attn.synchronize()
    return row


def start_dashd(path, work, kernels="auto"):
    """A dashd on a private endpoint (CUDA backend, dashd's --kernels): dashd_proc's."""
    return dashd_proc.start_dashd(path, work, "--backend", "cuda", "--kernels", kernels)


# ---- the report --------------------------------------------------------------------------

def fmt(x, spec):
    return format(x, spec) if x is not None else "n/a"


def report(doc):
    lines = [f"# Packed batches and sliding windows: dashd beside cuDNN and PyTorch "
             f"({doc['date'][:10]})", "",
             f"- date: {doc['date']}; device: {doc['device']}",
             f"- commit: {doc['commit']}; command: `{doc['command']}`",
             f"- GPU sharing: {doc.get('sharing') or 'not stated'} (dashd is another process: "
             f"without MPS each of its calls costs the GPU two context switches, docs/mps.md)",
             f"- torch {doc.get('torch', 'n/a')}; cuDNN {doc.get('cudnn', 'n/a')}; "
             f"cuDNN frontend {doc.get('frontend', 'n/a')}; dashd: {doc.get('dashd', 'n/a')}"
             f" (--kernels {doc.get('dashd_kernels', 'auto')}); dash_attn: "
             f"{doc.get('binding', 'not stated')}",
             f"- bf16, heads = 2048 / head_dim, layout (tokens, heads, head_dim); timing: "
             f"CUDA events, median of {doc['reps']} calls after {WARMUPS} warm-ups, each call "
             f"alone (its launch latency included: for dashd the daemon's round trip); "
             f"'streamed': {doc['reps']} calls back to back between two events, per call (the "
             f"host ahead of the GPU, as in a training step)",
             "- TFLOPS on the pairs inside the mask: fwd = 4 * pairs * heads * head_dim, "
             "bwd = 2.5 * fwd; 'repeat': 3 backwards gave identical dQ, dK, dV bits; "
             "'O err': head 0 against float32, relative to its largest element", ""]
    if doc.get("note"):
        lines += [f"**Not measured:** {doc['note']}", ""]
    for c in doc["cases"]:
        ls = c["lengths"]
        what = (f"{len(ls)} documents, {c['cu'][-1]} tokens (lengths {', '.join(map(str, ls))};"
                f" longest {max(ls)}), causal" if c["case"] == "varlen" else
                f"1 sequence of {ls[0]} tokens, causal" +
                (f", window ({c['window'][0]}, 0)" if c["window"][0] >= 0 else ""))
        lines += [f"## {c['case']}, head dim {c['D']} ({c['H']} heads)", "",
                  f"{what}; {c['pairs']} pairs, fwd {c['fwd_flops'] / 1e12:.3f} TFLOP, "
                  f"bwd {c['bwd_flops'] / 1e12:.3f} TFLOP", "",
                  "| peer | fwd ms | fwd TFLOPS | fwd TFLOPS streamed | bwd ms | bwd TFLOPS | "
                  "bwd TFLOPS streamed | repeat | O err | note |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |"]
        for r in doc["rows"]:
            if r["case"] != c["case"] or r["D"] != c["D"]:
                continue
            if "error" in r:  # a '|' in the text would end the cell
                lines.append(f"| {r['peer']} | | | | | | | | | {r['error'].replace('|', '/')} |")
                continue
            err = r.get("o_err")
            err_cell = (fmt(err, ".1e") + ("" if err is not None and err <= O_TOLERANCE
                                           else " (!)")) if "o_err" in r else "n/a"
            lines.append(f"| {r['peer']} | {r['fwd_ms']:.3f} | {fmt(r['fwd_tflops'], '.1f')} | "
                         f"{fmt(r.get('fwd_stream_tflops'), '.1f')} | "
                         f"{r['bwd_ms']:.3f} | {fmt(r['bwd_tflops'], '.1f')} | "
                         f"{fmt(r.get('bwd_stream_tflops'), '.1f')} | "
                         f"{'yes' if r['bitwise_repeat'] else 'no'} | {err_cell} | "
                         f"{r.get('note', '').replace('|', '/')} |")
        lines.append("")
    checks = criteria(doc["rows"])
    if checks:
        lines += ["## Issue 17's checks", "", "| check | head dim | peer | ratio | met |",
                  "| --- | ---: | --- | ---: | --- |"]
        for k in checks:
            met = "n/a" if k["ok"] is None else ("yes" if k["ok"] else "NO")
            lines.append(f"| {k['check']} | {k['D']} | {k.get('peer', 'dashd / cudnn-fe')} | "
                         f"{fmt(k['ratio'], '.2f')} | {met} |")
        lines.append("")
    return "\n".join(lines)


def parse_args(argv):
    def names(text):
        xs = text.split(",")
        bad = [x for x in xs if x not in CASES]
        if bad:
            raise argparse.ArgumentTypeError(
                f"unknown case '{bad[0]}' (one of {', '.join(CASES)})")
        return xs

    def dims(text):
        try:
            xs = [int(x) for x in text.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}': head dims are integers") from None
        bad = [x for x in xs if x not in DIMS]
        if bad:
            raise argparse.ArgumentTypeError(f"head dim {bad[0]} is not one of {DIMS}")
        return xs

    def positive(text):
        n = int(text) if text.isdigit() else 0
        if n < 1:
            raise argparse.ArgumentTypeError(f"'{text}' is not a positive integer")
        return n

    ap = argparse.ArgumentParser(prog="varlen_peers.py", description=__doc__.splitlines()[0])
    ap.add_argument("--dashd", help="dashd binary to start (CUDA backend); none: not measured")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"),
                    help="where varlen-report.md and varlen.json go (default $OUT or /tmp)")
    ap.add_argument("--dims", type=dims, default=[128], help="head dims (64, 128)")
    ap.add_argument("--cases", type=names, default=list(CASES), help=",".join(CASES))
    ap.add_argument("--reps", type=positive, default=10, help="timed calls per figure")
    ap.add_argument("--kernels", choices=["auto", "v2", "v3"], default="auto",
                    help="dashd's --kernels (auto: v3 on sm_90, whose backward serves these "
                         "cases on its wgmma step; v2: the mma.sync kernels)")
    ap.add_argument("--sharing", default=None,
                    help="how the processes share the GPU, for the report (gpu_bench.sh says "
                         "'MPS' or 'separate contexts')")
    ap.add_argument("--commit", default=None, help="for the report (default: git's HEAD)")
    ap.add_argument("--command", default=None, help="for the report (default: this one)")
    ap.add_argument("--plan", action="store_true", help="print the cases as JSON and exit")
    ap.add_argument("--packed-lengths", action="store_true",
                    help="print the packed batch's document lengths (N,N,...: bench_gpu "
                         "--lengths) and exit")
    return ap.parse_args(argv)


def git_commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip() or "unknown"
    except Exception:
        return "unknown"


def main(argv=None):
    args = parse_args(argv)
    cases = [make_case(n, d) for d in args.dims for n in args.cases]
    if args.plan:
        json.dump({"cases": cases}, sys.stdout)
        print()
        return 0
    if args.packed_lengths:
        print(",".join(map(str, make_case("varlen", args.dims[0])["lengths"])))
        return 0
    doc = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "commit": args.commit or git_commit(),
           "command": args.command or " ".join(["python3 bench/varlen_peers.py"]
                                               + (sys.argv[1:] if argv is None else argv)),
           "reps": args.reps, "cases": cases, "rows": [], "device": "n/a", "sharing": args.sharing}
    os.makedirs(args.out, exist_ok=True)
    try:
        doc.update(run(args, cases, doc))
    except Exception as e:  # whatever stopped the whole run: said in the report
        doc["note"] = describe(e)
    text = report(doc)
    with open(os.path.join(args.out, "varlen-report.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(args.out, "varlen.json"), "w") as f:
        json.dump(doc, f)
    print(text)
    return 0


def run(args, cases, doc):
    """Measures every case; returns what goes into the report."""
    try:
        import torch
    except ImportError as e:
        return {"note": f"PyTorch not importable ({e})"}
    if not torch.cuda.is_available():
        return {"note": "no CUDA GPU usable by PyTorch", "torch": torch.__version__}
    got = {"torch": torch.__version__, "device": torch.cuda.get_device_name(),
           "cudnn": torch.backends.cudnn.version()}
    try:  # after torch, so that the frontend finds torch's libcudnn
        import cudnn
        got["frontend"] = getattr(cudnn, "__version__", "unknown")
        got["cudnn"] = cudnn.backend_version()
    except Exception as e:  # not installed, or built for another Python, CUDA or libcudnn
        cudnn = f"cuDNN frontend not importable ({describe(e)})"
    proc, dash_attn = None, "not measured: no --dashd given"
    work = tempfile.mkdtemp(prefix="dash-varlen-")
    if args.dashd:
        try:
            proc = start_dashd(args.dashd, work, args.kernels)
            sys.path.insert(0, os.path.join(ROOT, "client", "python"))
            import dash_attn
            from dash_attn import _native
            got["dashd"] = args.dashd
            got["dashd_kernels"] = args.kernels
            # which binding served the calls: the native op (dense CUDA calls, where it is
            # built for this torch) or the ctypes path - a call's host time differs by ~2x
            got["binding"] = ("native op loaded" if _native.load() else
                              f"ctypes path only (native op: {_native.why_not})")
        except Exception as e:
            dash_attn = f"dashd not started: {describe(e)}"
    got["dashd"] = got.get("dashd", dash_attn)
    rows = []
    try:
        for i, case in enumerate(cases):
            x = Inputs(torch, case, 1234 + i)
            try:
                ref = reference_head0(torch, case, x)
            except Exception:  # the check is a column, not a reason to stop
                ref = None
            rows += cudnn_rows(torch, cudnn, case, x, args.reps, ref)
            rows += torch_rows(torch, case, x, args.reps, ref)
            rows += dashd_rows(torch, dash_attn, case, x, args.reps, ref)
            del x, ref
            torch.cuda.empty_cache()
    finally:
        if proc is not None:
            dashd_proc.stop(proc)
    got["rows"] = rows
    return got


if __name__ == "__main__":
    sys.exit(main())
