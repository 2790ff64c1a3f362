#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""torchrun_ddp.py - data-parallel training (torchrun, DDP) with attention served by dashd.

    .venv/bin/torchrun --standalone --nproc-per-node 2 examples/torchrun_ddp.py --steps 5 --out-dir runs/a
    .venv/bin/torchrun ... examples/torchrun_ddp.py --device cuda --backend gloo        # 2 ranks, 1 GPU
    .venv/bin/torchrun ... examples/torchrun_ddp.py --device cuda --backend nccl        # a dashd per GPU

Each rank trains examples/train_tiny_gpt.py's model on its own shard of synthetic data
(seeded by rank) under DistributedDataParallel, which averages the gradients, so every
rank ends each step with the same weights. Attention goes through dashd: the ranks share
one daemon, or each talks to the daemon of its GPU (without --endpoint, the one dash_attn
picks for the GPU: $DASHD_ENDPOINT, else dashd@N; or --endpoint with {device}). The
Python binding reads RANK and WORLD_SIZE (set by torchrun; DASH_RANK / DASH_WORLD_SIZE
override) and dashd writes them into every audit record, so two runs' logs can be
compared rank by rank: `dashctl audit diff DIR_A DIR_B`.

Every op is deterministic (torch.use_deterministic_algorithms; gloo's and NCCL's
all-reduce add in a fixed order for a fixed world size), so a repeat gives the same bits
on every rank. --perturb RANK:STEP:LAYER adds 0.01 to the input of one attention layer
on one rank at one step, a divergence for the audit diff to find.

Each rank writes OUT_DIR/rank<r>.json: its losses (float hex, exact), the SHA-256 of its
weights, its rank and world size.
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "client", "python"))
import dash_attn  # noqa: E402
from train_tiny_gpt import TinyGPT, weights_digest  # noqa: E402


def shard(args, rank, step, device):
    """This rank's batch at this step: counting sequences, a function of (seed, rank, step)."""
    g = torch.Generator().manual_seed((args.seed * 1000003 + rank) * 1000003 + step)
    start = torch.randint(0, args.vocab, (args.batch, 1), generator=g)
    stride = torch.randint(1, 7, (args.batch, 1), generator=g)
    t = (start + stride * torch.arange(args.seqlen + 1)) % args.vocab
    return t[:, :-1].to(device), t[:, 1:].to(device)


def parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--seqlen", type=int, default=128)
    ap.add_argument("--batch", type=int, default=2, help="per rank")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--heads", type=int, default=2,
                    help="head dim = dim / heads (64: served by the CPU and CUDA backends)")
    ap.add_argument("--vocab", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--schedule", default="auto", help="dash schedule (atomic: not reproducible)")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (rank r on GPU r %% count)")
    ap.add_argument("--backend", default="gloo",
                    help="torch.distributed backend: gloo (CPU, or ranks sharing a GPU), nccl")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads per rank")
    ap.add_argument("--endpoint", default=None,
                    help="dashd endpoint; {device} becomes the rank's GPU index, {rank} its rank "
                         "(default: $DASHD_ENDPOINT or the usual one)")
    ap.add_argument("--run-tag", default=None, help="default: $DASH_RUN_TAG")
    ap.add_argument("--perturb", default=None, metavar="RANK:STEP:LAYER",
                    help="add 0.01 to the input of one attention layer on one rank at one step")
    ap.add_argument("--out-dir", default=None, help="write rank<r>.json here")
    ap.add_argument("--quiet", action="store_true")
    return ap


def main():
    args = parser().parse_args()
    args.attn = "dash"  # for TinyGPT
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.device == "cuda":
        gpu = int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count()
        torch.cuda.set_device(gpu)
        device = torch.device("cuda", gpu)
    else:
        gpu, device = None, torch.device("cpu")
    if args.run_tag:
        os.environ["DASH_RUN_TAG"] = args.run_tag  # also for the clients dash_attn makes
    if args.endpoint or device.type == "cpu":
        endpoint = args.endpoint.format(device=gpu, rank=rank) if args.endpoint else None
        # rank and world size come from torchrun's RANK and WORLD_SIZE anyway; passed here
        # to be explicit
        dash_attn.connect(endpoint, client_name=f"ddp-rank{rank}", run_tag=args.run_tag,
                          rank=rank, world_size=world)
    # else: no connect(), so that dash_attn sends each GPU's tensors to that GPU's daemon
    # ($DASHD_ENDPOINT, a per-user daemon, or dashd@N; docs/python.md), with the rank read
    # from RANK and WORLD_SIZE
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    model = TinyGPT(args).to(device=device, dtype=dtype)
    if args.perturb:
        p_rank, p_step, p_layer = (int(x) for x in args.perturb.split(":"))
        if p_rank == rank:
            def nudge(module, inputs, output):
                return output + 0.01 if model.current_step == p_step else output
            model.blocks[p_layer].ln1.register_forward_hook(nudge)
    ddp = DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, foreach=False)
    losses = []
    for step in range(args.steps):
        x, y = shard(args, rank, step, device)
        t0 = time.perf_counter()
        model.current_step = step
        logits = ddp(x, step)
        loss = F.cross_entropy(logits.float().view(-1, args.vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()  # DDP all-reduces the gradients here
        opt.step()
        lv = loss.item()
        losses.append(lv)
        if not args.quiet:
            print(json.dumps({"rank": rank, "step": step, "loss": lv,
                              "ms": round((time.perf_counter() - t0) * 1e3, 3)}), flush=True)
    summary = {"rank": rank, "world_size": world, "steps": args.steps, "device": str(device),
               "losses_hex": [float.hex(v) for v in losses],
               "weights_sha256": weights_digest(model)}
    if args.out_dir:
        os.makedirs(args.out_dir, exist_ok=True)
        with open(os.path.join(args.out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(summary, f)
    print(json.dumps(summary), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
