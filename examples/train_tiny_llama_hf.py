#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""train_tiny_llama_hf.py - a small Llama (Hugging Face transformers) trained through dashd.

    .venv/bin/python examples/train_tiny_llama_hf.py --steps 10                 # attn_implementation="dash"
    .venv/bin/python examples/train_tiny_llama_hf.py --attn eager ...           # transformers' own attention

The model is built from a LlamaConfig with random weights drawn from --seed: nothing is
downloaded. `import dash_attn.hf` registers dashd as the attention implementation "dash",
so every attention layer of the model calls dashd, forward and backward. Every other op is
made deterministic (torch.use_deterministic_algorithms), so two runs with the same
arguments give the same losses and weights bit for bit, and, with dashd keeping an audit
log, the same digests for every attention call: each step runs inside
dash_attn.audit(step=...), and each layer labels its calls "layer<i>.attn".

Data: synthetic and learnable - each sequence counts up from a random start with a random
stride (mod the vocabulary). Prints one JSON line per step and a final JSON summary with
the losses (as float hex, exact) and a SHA-256 of all weights; --out writes the summary.
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
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "client", "python"))
import dash_attn  # noqa: E402

try:
    import transformers  # noqa: E402
except ImportError:
    sys.exit("train_tiny_llama_hf.py needs Hugging Face transformers: pip install transformers")
import dash_attn.hf  # noqa: E402,F401  (registers attn_implementation="dash")


def build_model(args, device, dtype):
    """A LlamaForCausalLM of the given size, weights from torch.manual_seed(args.seed)."""
    config = transformers.LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=2 * args.hidden,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, max_position_embeddings=args.seqlen,
        attention_dropout=0.0, tie_word_embeddings=False)
    torch.manual_seed(args.seed)
    model = transformers.AutoModelForCausalLM.from_config(
        config, attn_implementation=args.attn, dtype=dtype)
    return model.to(device)


def batch(args, step, device, salt=0):
    """Inputs and labels of one step: a function of (seed, salt, step) only."""
    g = torch.Generator().manual_seed((args.seed * 1000003 + salt) * 1000003 + step)
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


def parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--seqlen", type=int, default=256)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2, help="fewer than --heads: GQA")
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--attn", default="dash",
                    help="attn_implementation: dash (dashd), eager or sdpa (transformers')")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch.set_num_threads (0: PyTorch's default)")
    ap.add_argument("--endpoint", default=None, help="dashd endpoint (default: the usual one)")
    ap.add_argument("--client-name", default=None)
    ap.add_argument("--run-tag", default=None)
    ap.add_argument("--out", default=None, help="write the summary JSON here")
    ap.add_argument("--quiet", action="store_true", help="no per-step lines")
    return ap


def train(args):
    """Train as the arguments say; returns the summary (a dict, as --out writes it)."""
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    device = torch.device(args.device)
    # bf16 on the GPU (dashd's kernels); fp32 on the CPU engine
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if args.attn == "dash":
        dash_attn.connect(args.endpoint, client_name=args.client_name or "tiny-llama-hf",
                          run_tag=args.run_tag)
    model = build_model(args, device, dtype)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, foreach=False)
    losses, times = [], []
    for step in range(args.steps):
        x, y = batch(args, step, device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with dash_attn.audit(step=step):
            logits = model(input_ids=x).logits
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
        "attn": args.attn, "seed": args.seed, "steps": args.steps, "seqlen": args.seqlen,
        "device": str(device), "torch": torch.__version__,
        "transformers": transformers.__version__,
        "losses": losses, "losses_hex": [float.hex(v) for v in losses],
        "final_loss": losses[-1] if losses else math.nan,
        "weights_sha256": weights_digest(model),
        "median_step_ms": round(sorted(times)[len(times) // 2] * 1e3, 3) if times else None,
    }
    return summary


def main():
    args = parser().parse_args()
    summary = train(args)
    print(json.dumps(summary), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f)


if __name__ == "__main__":
    main()
