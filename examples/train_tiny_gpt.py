#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""train_tiny_gpt.py - a small causal transformer whose attention goes through dashd.

    .venv/bin/python examples/train_tiny_gpt.py --steps 20 --seqlen 1024 --device cuda
    .venv/bin/python examples/train_tiny_gpt.py --attn sdpa ...      # the same model, PyTorch SDPA
    .venv/bin/python examples/train_tiny_gpt.py --compile ...        # torch.compile(fullgraph=True)

Every other op is made deterministic (torch.use_deterministic_algorithms), so a run's
losses and final weights are a function of the seed - provided attention is too: with
dash_attn's deterministic schedules they are, bit for bit, across runs and with other
clients sharing the GPU; with schedule "atomic" (or SDPA) they generally are not.

Data: synthetic and learnable - each sequence counts up from a random start with a random
stride (mod the vocabulary), so the loss falls quickly. Each step's attention calls carry
dashd audit tags (step, "layer<i>.attn"), so `dashctl audit diff` can name the first
diverging layer. Prints one JSON line per step and a final JSON summary with the losses
(as float hex, exact) and a SHA-256 of all weights; --out writes the summary to a file.
"""
import argparse
import hashlib
import json
import math
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "client", "python"))
import dash_attn  # noqa: E402


class Block(nn.Module):
    def __init__(self, dim, heads, index, args):
        super().__init__()
        self.heads, self.index, self.args = heads, index, args
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def attention(self, x, step):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).unbind(dim=2)
        if self.args.attn.startswith("sdpa"):
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                               v.transpose(1, 2), is_causal=True)
            o = o.transpose(1, 2)
        else:
            with dash_attn.audit(step=step, label=f"layer{self.index}.attn"):
                o = dash_attn.flash_attn_func(q, k, v, causal=True,
                                              deterministic=self.args.schedule != "atomic",
                                              schedule=self.args.schedule)
        return self.proj(o.reshape(b, s, d))

    def forward(self, x, step):
        x = x + self.attention(self.ln1(x), step)
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.emb = nn.Embedding(args.vocab, args.dim)
        self.pos = nn.Parameter(torch.randn(args.seqlen, args.dim) * 0.02)
        self.blocks = nn.ModuleList(Block(args.dim, args.heads, i, args) for i in range(args.layers))
        self.ln = nn.LayerNorm(args.dim)
        self.head = nn.Linear(args.dim, args.vocab, bias=False)

    def forward(self, tokens, step):
        x = self.emb(tokens) + self.pos[: tokens.shape[1]]
        for blk in self.blocks:
            x = blk(x, step)
        return self.head(self.ln(x))


def batch(args, step, device):
    g = torch.Generator().manual_seed(args.seed * 1000003 + step)
    start = torch.randint(0, args.vocab, (args.batch, 1), generator=g)
    stride = torch.randint(1, 7, (args.batch, 1), generator=g)
    t = (start + stride * torch.arange(args.seqlen + 1)) % args.vocab
    return t[:, :-1].to(device), t[:, 1:].to(device)


def weights_digest(model):
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seqlen", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--attn", choices=["dash", "sdpa", "sdpa-strict"], default="dash",
                    help="dash_attn through dashd; PyTorch SDPA; or SDPA with PyTorch's strict "
                         "deterministic mode (a deterministic FA2 backward)")
    ap.add_argument("--schedule", default="auto",
                    help="dash schedule: auto, ascending, descending, spt, shift, or atomic")
    ap.add_argument("--endpoint", default=None, help="dashd endpoint (default: the usual one)")
    ap.add_argument("--client-name", default=None)
    ap.add_argument("--run-tag", default=None)
    ap.add_argument("--out", default=None, help="write the summary JSON here")
    ap.add_argument("--quiet", action="store_true", help="no per-step lines")
    ap.add_argument("--compile", action="store_true",
                    help="run the model through torch.compile(fullgraph=True) (PyTorch >= 2.4; "
                         "the first steps include the compilation)")
    ap.add_argument("--autograd-threads", choices=["on", "off"], default="on",
                    help="off: backward runs on the calling thread, not on autograd's device "
                         "thread (torch.autograd.set_multithreading_enabled(False)); "
                         "bench/bwd_parts.py found each backward faster there, a whole step's "
                         "effect is not measured yet")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    # SDPA's own backward kernels are not deterministic: let them run (with a warning) so
    # that the same model can be timed against it
    torch.use_deterministic_algorithms(True, warn_only=args.attn == "sdpa")
    if args.attn == "sdpa-strict":
        # no flash_attn deterministic flag short of this in PyTorch: strict mode everywhere
        torch.backends.cuda.enable_cudnn_sdp(False)
    device = torch.device(args.device)
    # bf16 on the GPU (dashd's kernels); fp32 on the CPU engine
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if args.attn == "dash":
        dash_attn.connect(args.endpoint, client_name=args.client_name or f"tiny-gpt-{args.seed}",
                          run_tag=args.run_tag)
    model = TinyGPT(args).to(device=device, dtype=dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, foreach=False)
    run = torch.compile(model, fullgraph=True) if args.compile else model
    losses, times = [], []
    # off: backward on this thread (autograd runs CUDA nodes on a device thread otherwise)
    with torch.autograd.set_multithreading_enabled(args.autograd_threads == "on"):
        for step in range(args.steps):
            x, y = batch(args, step, device)
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            logits = run(x, step)
            loss = F.cross_entropy(logits.float().view(-1, args.vocab), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            lv = loss.item()  # synchronises
            times.append(time.perf_counter() - t0)
            losses.append(lv)
            if not args.quiet:
                print(json.dumps({"step": step, "loss": lv, "loss_hex": float.hex(lv),
                                  "ms": round(times[-1] * 1e3, 3)}), flush=True)
    summary = {
        "attn": args.attn, "schedule": args.schedule, "compile": args.compile,
        "autograd_threads": args.autograd_threads,
        "seed": args.seed, "steps": args.steps,
        "seqlen": args.seqlen, "device": str(device),
        "losses_hex": [float.hex(v) for v in losses],
        "final_loss": losses[-1] if losses else math.nan,
        "weights_sha256": weights_digest(model),
        "median_step_ms": round(sorted(times)[len(times) // 2] * 1e3, 3) if times else None,
    }
    print(json.dumps(summary), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f)


if __name__ == "__main__":
    main()
