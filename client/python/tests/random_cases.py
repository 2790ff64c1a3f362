# SPDX-License-Identifier: BSD-3-Clause
"""Random calls of flash_attn_func checked against float64: shapes drawn around the tile
edges (1, 2, 63-65, 127, 129 and anything up to max_seqlen), GQA/MQA, seqlen_q !=
seqlen_k, causal or not, every head dim and deterministic schedule, a softmax scale or
none, and (b, h, s, d) tensors passed as (b, s, h, d) views. Each case also repeats its
backward and wants the same bits. Used by test_cpu.py and test_gpu.py; the seed is in
every message."""
import math
import random

import torch


def probabilities(q, k, causal, scale):
    """float64 softmax probabilities (b, hq, sq, sk), K repeated for GQA; a row that sees no
    key (causal, seqlen_q > seqlen_k) is all zeros, as flash-attn and dashd define it."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    s = torch.einsum("bqhd,bkhd->bhqk", q, k.repeat_interleave(hq // hkv, dim=2)) * scale
    if causal:
        i = torch.arange(sq, device=q.device).view(-1, 1)
        j = torch.arange(sk, device=q.device).view(1, -1)
        s = s.masked_fill(j > i + (sk - sq), float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    e = torch.exp(s - torch.where(torch.isinf(m), torch.zeros_like(m), m))
    den = e.sum(dim=-1, keepdim=True)
    return e / torch.where(den == 0, torch.ones_like(den), den)


def key_grads(p, ds, q, k, dout, scale):
    """(dq, dk, dv) from P and dS (b, hq, sq, sk): flash-attention's formulas, K repeated
    for GQA and each key head's gradients summed over its query heads."""
    hq, hkv = q.shape[2], k.shape[2]
    g = hq // hkv
    dq = torch.einsum("bhqk,bkhd->bqhd", ds, k.repeat_interleave(g, dim=2)) * scale
    b, sk, d = k.shape[0], k.shape[1], k.shape[3]
    dk = (torch.einsum("bhqk,bqhd->bkhd", ds, q) * scale).reshape(b, sk, hkv, g, d).sum(3)
    dv = torch.einsum("bhqk,bqhd->bkhd", p, dout).reshape(b, sk, hkv, g, d).sum(3)
    return dq, dk, dv


def reference(q, k, v, dout, out, causal, scale):
    """out and (dq, dk, dv) in float64, and the sizes of the terms that cancel in the
    gradients. The gradients are flash-attention's formulas, which
    dashd's backward follows: dS = P (dP - D) with D = rowsum(dout * out) taken from the
    output as returned (rounded to the input dtype), not the exact one. Where a row's dS is
    a cancellation (a few visible keys, one of them dominant) that rounding is most of the
    difference from autograd's exact gradient (measured: 2e-1 relative for bf16 at seqlen_k
    2), so the exact gradient would test the rounding of out, not the backward; the fixed
    shapes of test_cpu.py / test_gpu.py compare with autograd's exact gradient.
    The sizes are the same formulas with |P| (|dP| + |D|) for dS and absolute values of
    every factor. Where a row's softmax is saturated (one key takes nearly all of it) dS is
    a difference of nearly equal float32 numbers, so a backward exact to rounding is off by
    float32's rounding of these terms, however small the gradient itself is (measured:
    1.9e-3 relative at seqlen 2, causal, float32, head dim 256: a rounding error of 2.5e-5
    on a gradient of norm 1.3e-2)."""
    q, k, v, dout, out = (x.detach().double() for x in (q, k, v, dout, out))
    g = q.shape[2] // k.shape[2]
    p = probabilities(q, k, causal, scale)
    vr = v.repeat_interleave(g, dim=2)
    ref = torch.einsum("bhqk,bkhd->bqhd", p, vr)
    dp = torch.einsum("bqhd,bkhd->bhqk", dout, vr)
    rowsum = (dout * out).sum(-1).transpose(1, 2).unsqueeze(-1)
    grads = key_grads(p, p * (dp - rowsum), q, k, dout, scale)
    dp_size = torch.einsum("bqhd,bkhd->bhqk", dout.abs(), vr.abs())
    sizes = key_grads(p, p * (dp_size + rowsum.abs()), q.abs(), k.abs(), dout.abs(), scale)
    return ref, grads, sizes


# What float32 rounding may leave of a cancellation, in units of the terms that cancel
# (reference()'s sizes; the backward computes in float32 for every input dtype): 4 unit
# roundoffs. The saturated case above was off by 0.26 of one; at unsaturated shapes this
# adds 0.05-0.2 of the float32 bound, 1e-4 relative, and nothing measurable to bf16's.
ROUNDING = 4 * 2.0 ** -24


def rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def draw(rng, dtypes, max_seqlen):
    """One case: the odd shapes and layouts a user may pass."""
    def seqlen():
        return rng.choice([1, 2, 63, 64, 65, 127, 129, rng.randint(1, max_seqlen)])
    hkv = rng.choice([1, 2, 3])
    return dict(b=rng.choice([1, 2]), sq=seqlen(), sk=seqlen(), hq=hkv * rng.choice([1, 2, 4]),
                hkv=hkv, d=rng.choice([64, 96, 128, 256]), dtype=rng.choice(dtypes),
                causal=rng.random() < 0.5, heads_first=rng.random() < 0.3,
                scale=None if rng.random() < 0.7 else rng.uniform(0.02, 0.3),
                schedule=rng.choice(["auto", "ascending", "descending", "spt", "shift"]))


def check(dash_attn, seed, n, device, dtypes, tol, max_seqlen=600):
    """n cases on device ("cpu" or "cuda"), dtype -> relative-error bound in tol."""
    rng = random.Random(seed)
    g = torch.Generator(device=device).manual_seed(seed)
    for i in range(n):
        c = draw(rng, dtypes, max_seqlen)
        b, d = c["b"], c["d"]

        def make(s, h):
            if c["heads_first"]:  # a (b, h, s, d) tensor seen as (b, s, h, d): not contiguous
                x = torch.randn(b, h, s, d, generator=g, device=device).to(c["dtype"])
                return x.transpose(1, 2)
            return torch.randn(b, s, h, d, generator=g, device=device).to(c["dtype"])

        q, k, v, dout = make(c["sq"], c["hq"]), make(c["sk"], c["hkv"]), make(c["sk"], c["hkv"]), \
            make(c["sq"], c["hq"])
        what = f"case {i} of seed {seed}: {c}"
        q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
        call = dict(softmax_scale=c["scale"], causal=c["causal"], schedule=c["schedule"])
        out = dash_attn.flash_attn_func(q, k, v, **call)
        out.backward(dout)
        grads = [x.grad.clone() for x in (q, k, v)]
        for x in (q, k, v):
            x.grad = None
        dash_attn.flash_attn_func(q, k, v, **call).backward(dout)
        for name, a, x in zip(("dq", "dk", "dv"), grads, (q, k, v)):
            assert torch.equal(a, x.grad) and not a.isnan().any(), f"{name} did not repeat: {what}"
        scale = c["scale"] if c["scale"] is not None else 1 / math.sqrt(d)
        ref, wants, sizes = reference(q, k, v, dout, out, c["causal"], scale)
        bound = tol[c["dtype"]]
        assert rel(out.detach(), ref.detach()) < bound, f"out: {what}"
        for name, got, want, size in zip(("dq", "dk", "dv"), grads, wants, sizes):
            if want.abs().max() < 1e-9:  # every row sees one key at most: zeros (to rounding)
                assert got.abs().max() == 0, f"{name} not zero: {what}"
            else:
                # relative to the gradient, plus what float32 rounding of a cancellation
                # leaves (ROUNDING x the cancelling terms' norm: negligible unless the
                # softmax is saturated)
                err = float((got.double() - want).norm())
                allowed = bound * float(want.norm()) + ROUNDING * float(size.norm())
                assert err < allowed, f"{name} error {err:.2e} (relative {rel(got, want):.2e}), " \
                    f"allowed {allowed:.2e}: {what}"
