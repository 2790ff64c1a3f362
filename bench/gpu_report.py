#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""gpu_report.py - join bench_gpu's JSON (ours) and sdpa_peers.py's JSON (PyTorch, same
run, same GPU) into the Markdown report kept in bench/results/.

    python3 bench/gpu_report.py OURS.json PEERS.json --commit C --command "..." > report.md
"""
import argparse
import datetime
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ours")
    ap.add_argument("peers")
    ap.add_argument("--commit", required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("--note", default="")
    a = ap.parse_args()
    ours = json.load(open(a.ours))
    peers = json.load(open(a.peers))
    peer = {(r["D"], r["S"], r["causal"], r["backend"]): r for r in peers["rows"]}
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    print("# GPU attention benchmark: dashd kernels vs PyTorch SDPA, same run\n")
    print(f"- date: {now}")
    print(f"- device: {ours['device']}, {ours['sms']} SMs; CUDA driver {ours['driver']}, "
          f"runtime {ours['runtime']}")
    print(f"- peers: torch {peers['torch']}, cuDNN {peers['cudnn']} (same machine, same run)")
    print(f"- commit: {a.commit}")
    print(f"- command: `{a.command}`")
    print("- method: bf16, 16384 tokens per batch, heads x head_dim = 2048; TFLOPS with "
          "fwd = 4*B*H*S*S*D (halved when causal), bwd = 2.5*fwd. Ours: synchronous calls "
          f"timed on the host, median of {ours['reps']} after a warm-up, backward including "
          "its pre/post kernels. PyTorch: CUDA events, median of 10 after 3 warm-ups. "
          "'repeat' = two identical backwards gave identical dQ bits.")
    if a.note:
        print(f"- note: {a.note}")
    print()
    for d in (64, 128):
        for causal in (False, True):
            rows = [r for r in ours["rows"] if r["D"] == d and r["causal"] == causal]
            if not rows:
                continue
            print(f"## hdim {d}, {'causal' if causal else 'full'} (TFLOPS)\n")
            print("| seqlen | fwd | bwd atomic | ascending | descending | spt | shift | auto | "
                  "best det / atomic | det repeat | FA2 fwd / bwd | cuDNN fwd / bwd | FA2, cuDNN repeat |")
            print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- | --- | --- | --- |")
            for r in rows:
                b = {x["schedule"]: x for x in r["bwd"]}
                det = [b[k] for k in ("ascending", "descending", "spt", "shift")]
                best = max(x["tflops"] for x in det)
                rep = all(x["bitwise_repeat"] for x in det + [b["auto"]])
                cells = []
                reps = []
                for be in ("flash", "cudnn"):
                    p = peer.get((d, r["S"], causal, be))
                    if not p or "error" in p:
                        cells.append("n/a")
                        reps.append("n/a")
                    else:
                        cells.append(f"{p['fwd_tflops']:.1f} / {p['bwd_tflops']:.1f}")
                        reps.append("yes" if p["bitwise_repeat"] else "no")
                print(f"| {r['S']} | {r['fwd_tflops']:.1f} | {b['atomic']['tflops']:.1f} | "
                      + " | ".join(f"{b[k]['tflops']:.1f}" for k in ("ascending", "descending", "spt", "shift"))
                      + f" | {b['auto']['tflops']:.1f} ({b['auto']['used']}) | "
                      f"{best / b['atomic']['tflops']:.2f} | {'yes' if rep else 'NO'} | "
                      f"{cells[0]} | {cells[1]} | {reps[0]}, {reps[1]} |")
            print()


if __name__ == "__main__":
    main()
