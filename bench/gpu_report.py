#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""gpu_report.py - join bench_gpu's JSON (ours), sdpa_peers.py's JSON (PyTorch) and, when
given, cudnn_peers.py's JSON (cuDNN's own SDPA through its frontend), all measured in the
same run on the same GPU, into the Markdown report kept in bench/results/.

    python3 bench/gpu_report.py OURS.json PEERS.json [--cudnn CUDNN.json] \\
        --commit C --command "..." [--date YYYY-MM-DDTHH:MM:SSZ] > report.md

--date is the run's (default: now); with a stored report's date line the same JSON files
give the same report again, byte for byte.

Per head dim and mask, the first table is ours beside PyTorch SDPA; with --cudnn a second
one gives cuDNN's forward, its non-deterministic and deterministic backward, and ours over
them: 'auto / FE det' is the issue-16 ratio (the schedule auto picks over cuDNN's
deterministic backward). Head dims that only cuDNN measured (a bench_gpu run under
--only, or one from before its sweep had head dim 256) get the cuDNN table with ours 'n/a'.
"""
import argparse
import datetime
import json

DIMS = (64, 128, 96, 256)
DET = ("ascending", "descending", "spt", "shift")
FE, FE_DET = "cudnn-fe", "cudnn-fe-det"



def ours_timing(ours):
    """How bench_gpu timed our calls: CUDA events like the peers (since 2026-12-06), or, in
    older JSON files, synchronous calls on the host clock."""
    if ours.get("timing") == "events":
        return (f"CUDA events around each call on its stream, median of {ours['reps']} after "
                f"{ours.get('warmups', 3)} warm-ups (as the peers)")
    return f"synchronous calls timed on the host, median of {ours['reps']} after a warm-up"

def widened_note(ours):
    """The method line's words for head dims bench_gpu --only ran outside its sweep."""
    dims = sorted({r["D"] for r in ours["rows"]} - {64, 96, 128, 256})
    if not dims:
        return ""
    return ("; head dim " + ", ".join(map(str, dims)) + ": the kernels of the next of 64, 128, "
            "256 on the caller's columns or on copies widened by zero columns (since 91a0d96), "
            "its TFLOPS counted at its own head dim")


def best_det(b):
    """The fastest deterministic schedule among those in b (schedule -> bench_gpu's entry)
    whose bits repeated (one whose two backwards differed is not deterministic in this
    run), or None. gpu_ab.py's 'best det' too."""
    return max((k for k in DET if k in b and b[k]["bitwise_repeat"]),
               key=lambda k: b[k]["tflops"], default=None)


def best_det_tflops(b):
    k = best_det(b)
    return b[k]["tflops"] if k else None


def ratio(num, den):
    return f"{num / den:.2f}" if num is not None and den else "n/a"


def fe_repeat(r):
    if not r:
        return "n/a"
    text = "yes" if r["bitwise_repeat"] else "no"
    return text if r.get("finite", True) else text + " (unwritten)"


def ours_table(d, causal, rows, peer):
    print("| seqlen | fwd | bwd atomic | ascending | descending | spt | shift | auto | "
          "best det / atomic | det repeat | FA2 fwd / bwd | cuDNN fwd / bwd | FA2, cuDNN repeat |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- | --- | --- | --- |")
    for r in rows:
        b = {x["schedule"]: x for x in r["bwd"]}  # one schedule only under --only D,S,MASK,SCHED
        tf = lambda k: f"{b[k]['tflops']:.1f}" if k in b else "n/a"
        det = [b[k] for k in DET + ("auto",) if k in b]
        best = best_det_tflops(b)
        rep = "n/a" if not det else "yes" if all(x["bitwise_repeat"] for x in det) else "NO"
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
        auto = f"{tf('auto')} ({b['auto']['used']})" if "auto" in b else "n/a"
        print(f"| {r['S']} | {r['fwd_tflops']:.1f} | {tf('atomic')} | "
              + " | ".join(tf(k) for k in DET)
              + f" | {auto} | {ratio(best, b.get('atomic', {}).get('tflops'))} | "
              f"{rep} | "
              f"{cells[0]} | {cells[1]} | {reps[0]}, {reps[1]} |")
    print()


def cudnn_table(d, causal, rows, fe):
    """cuDNN's own SDPA at every seqlen either side measured, ours over it."""
    ours = {r["S"]: r for r in rows}
    seqlens = sorted(set(ours) | {s for (dd, s, c, _) in fe if dd == d and c == causal})
    print("| seqlen | FE fwd | FE bwd non-det | FE bwd det | FE repeat non-det, det | "
          "fwd / FE fwd | auto / FE det | best det / FE det | auto / FE non-det |")
    print("| ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |")
    errors = []
    for s in seqlens:
        got = {}
        for be in (FE, FE_DET):
            r = fe.get((d, s, causal, be))
            if r and "error" in r:
                errors.append(f"- seqlen {s}, {be}: {r['error']}")
            got[be] = r if r and "error" not in r else None
        nd, det = got[FE], got[FE_DET]
        fwd = (nd or det or {}).get("fwd_tflops")
        auto = best = ours_fwd = None
        if s in ours:
            b = {x["schedule"]: x for x in ours[s]["bwd"]}
            auto = b.get("auto", {}).get("tflops")
            best = best_det_tflops(b)
            ours_fwd = ours[s]["fwd_tflops"]
        tf = lambda r: f"{r['bwd_tflops']:.1f}" if r else "n/a"
        det_tf = det["bwd_tflops"] if det else None
        nd_tf = nd["bwd_tflops"] if nd else None
        print(f"| {s} | {f'{fwd:.1f}' if fwd else 'n/a'} | {tf(nd)} | {tf(det)} | "
              f"{fe_repeat(nd)}, {fe_repeat(det)} | {ratio(ours_fwd, fwd)} | "
              f"{ratio(auto, det_tf)} | {ratio(best, det_tf)} | {ratio(auto, nd_tf)} |")
    print()
    for line in errors:
        print(line)
    if errors:
        print()


def checks_line(cudnn):
    """One line on the frontend's float64 check: its largest error, and any failure."""
    checks = cudnn.get("checks", [])
    if not checks:
        return "no float64 check"
    errs = [e for c in checks if "error" not in c
            for e in [c["o"]] + [v for be in (FE, FE_DET) for v in c[be].values()]]
    text = "float64 check"
    if errs:
        text += (" at seqlen 512 of O, dQ, dK, dV, every head dim and mask: largest error "
                 f"{max(errs):.1e} of the largest reference element")
    bad = [c for c in checks if not c.get("ok")]
    if bad:
        text += "; FAILED for " + ", ".join(
            f"hdim {c['D']} {'causal' if c['causal'] else 'full'}"
            + (f" ({c['error']})" if "error" in c else "") for c in bad)
    return text


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ours")
    ap.add_argument("peers")
    ap.add_argument("--cudnn", help="cudnn_peers.py's JSON of the same run")
    ap.add_argument("--commit", required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("--note", default="")
    ap.add_argument("--date", default=None, help="the run's UTC date (default: now)")
    a = ap.parse_args()
    ours = json.load(open(a.ours))
    peers = json.load(open(a.peers))
    cudnn = json.load(open(a.cudnn)) if a.cudnn else None
    peer = {(r["D"], r["S"], r["causal"], r["backend"]): r for r in peers["rows"]}
    fe = {(r["D"], r["S"], r["causal"], r["backend"]): r for r in (cudnn or {"rows": []})["rows"]}
    now = a.date or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    print("# GPU attention benchmark: dashd kernels vs PyTorch SDPA"
          + (" and cuDNN's own SDPA" if cudnn else "") + ", same run\n")
    print(f"- date: {now}")
    print(f"- device: {ours['device']}, {ours['sms']} SMs; CUDA driver {ours['driver']}, "
          f"runtime {ours['runtime']}")
    print(f"- peers: torch {peers['torch']}, cuDNN {peers['cudnn']} (same machine, same run)")
    if cudnn and "note" in cudnn:
        print(f"- cuDNN frontend: not measured: {cudnn['note']}")
    elif cudnn:
        print(f"- cuDNN frontend {cudnn['frontend']} on cuDNN {cudnn['cudnn']} (same run); "
              f"{checks_line(cudnn)}")
    print(f"- commit: {a.commit}")
    print(f"- command: `{a.command}`")
    print("- method: bf16, 16384 tokens per batch, heads = 2048 / head_dim rounded down "
          "(hdim 96: 21 heads, 2016 wide; ours runs it on the 128 kernels - on sm_90 reading "
          "and writing its 96 columns since b46a0eb, before that on widened copies, timed "
          f"with them{widened_note(ours)}); TFLOPS with "
          "fwd = 4*B*H*S*S*D (halved when causal), bwd = 2.5*fwd. Ours: "
          f"{ours_timing(ours)}, backward including "
          "its pre/post kernels. PyTorch: CUDA events, median of 10 after 3 warm-ups. "
          "'repeat' = two identical backwards gave identical dQ bits.")
    if cudnn and "note" not in cudnn:
        print(f"- cuDNN frontend (FE): its graphs called directly, CUDA events, median of "
              f"{cudnn['reps']} after 3 warm-ups; 'non-det' and 'det' = sdpa_backward with "
              f"use_deterministic_algorithm False and True; its 'repeat' = {cudnn['repeats']} "
              "identical backwards, outputs poisoned with NaN before each, gave identical "
              "dQ, dK and dV bits ('unwritten': some output kept its NaN).")
    if a.note:
        print(f"- note: {a.note}")
    print()
    others = {r["D"] for r in ours["rows"]} | {k[0] for k in fe}  # --only's head dims
    for d in DIMS + tuple(sorted(others - set(DIMS))):
        for causal in (False, True):
            rows = [r for r in ours["rows"] if r["D"] == d and r["causal"] == causal]
            fe_here = any(k[0] == d and k[2] == causal for k in fe)
            if not rows and not fe_here:
                continue
            print(f"## hdim {d}, {'causal' if causal else 'full'} (TFLOPS)\n")
            if rows:
                ours_table(d, causal, rows, peer)
            else:
                print("Ours: not measured in this run (bench_gpu ran other shapes).\n")
            if fe_here:
                print("cuDNN's own SDPA through its frontend, and ours over it:\n")
                cudnn_table(d, causal, rows, fe)


if __name__ == "__main__":
    main()
