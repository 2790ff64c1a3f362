#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""gpu_plots.py - the pictures of a `scripts/gpu_bench.sh` run: TFLOPS against seqlen, one
panel per head dim and mask, ours beside every peer measured in that run (PyTorch SDPA's
flash and cuDNN backends, cuDNN's own SDPA through its frontend, deterministic and not).
Two PNGs: PREFIX-fwd.png and PREFIX-bwd.png. Reads the same JSON files as gpu_report.py
(the run leaves them in $OUT: ours.json, peers.json, cudnn.json); needs matplotlib, which
the GPU machine may lack: plot here from the files that came back.

    python3 bench/gpu_plots.py OURS.json PEERS.json [--cudnn CUDNN.json] \\
        --prefix bench/results/NAME --title "H200, commit abc1234"
"""
import argparse
import json

DIMS = (64, 128, 96, 256)

# label -> line style; ours solid and thick, peers thinner
STYLE = {
    "ours": dict(color="black", lw=2.2, marker="o"),
    "ours, det (auto)": dict(color="black", lw=2.2, marker="o"),
    "ours, non-det (atomic)": dict(color="black", lw=1.2, ls="--", marker="."),
    "PyTorch SDPA flash (FA2)": dict(color="tab:blue", lw=1.2, marker="s"),
    "PyTorch SDPA cuDNN": dict(color="tab:orange", lw=1.2, marker="^"),
    "cuDNN frontend": dict(color="tab:green", lw=1.2, marker="v"),
    "cuDNN frontend, non-det": dict(color="tab:green", lw=1.2, ls="--", marker="v"),
    "cuDNN frontend, det": dict(color="tab:green", lw=1.6, marker="D"),
}


def series(ours, peers, cudnn=None):
    """{(pass, D, causal): {label: [(seqlen, TFLOPS), ...] sorted by seqlen}} for the head
    dims and masks that ours measured; pass is "fwd" or "bwd"."""
    out = {}

    def add(key, label, s, tf):
        if tf is not None:
            out.setdefault(key, {}).setdefault(label, []).append((s, tf))

    have = {(r["D"], r["causal"]) for r in ours["rows"]}
    for r in ours["rows"]:
        d, c, s = r["D"], r["causal"], r["S"]
        add(("fwd", d, c), "ours", s, r["fwd_tflops"])
        b = {x["schedule"]: x["tflops"] for x in r["bwd"]}
        add(("bwd", d, c), "ours, det (auto)", s, b.get("auto"))
        add(("bwd", d, c), "ours, non-det (atomic)", s, b.get("atomic"))
    for r in peers["rows"]:
        if (r["D"], r["causal"]) not in have or "error" in r:
            continue
        name = {"flash": "PyTorch SDPA flash (FA2)", "cudnn": "PyTorch SDPA cuDNN"}.get(r["backend"])
        if name:
            add(("fwd", r["D"], r["causal"]), name, r["S"], r["fwd_tflops"])
            add(("bwd", r["D"], r["causal"]), name, r["S"], r["bwd_tflops"])
    for r in (cudnn or {}).get("rows", []):
        if (r["D"], r["causal"]) not in have or "error" in r:
            continue
        det = r["backend"] == "cudnn-fe-det"
        if not det:  # the forward is the same graph either way: plotted once
            add(("fwd", r["D"], r["causal"]), "cuDNN frontend", r["S"], r["fwd_tflops"])
        add(("bwd", r["D"], r["causal"]), "cuDNN frontend, " + ("det" if det else "non-det"),
            r["S"], r["bwd_tflops"])
    for lines in out.values():
        for pts in lines.values():
            pts.sort()
    return out


def plot(data, prefix, title):
    """Writes PREFIX-fwd.png and PREFIX-bwd.png; returns their paths."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for ps, what in (("fwd", "forward"), ("bwd", "backward")):
        panels = sorted(k for k in data if k[0] == ps)
        panels.sort(key=lambda k: (DIMS.index(k[1]) if k[1] in DIMS else 99, k[2]))
        if not panels:
            continue
        cols = 2
        rows = (len(panels) + 1) // 2
        fig, axes = plt.subplots(rows, cols, figsize=(6.2 * cols, 4.2 * rows), squeeze=False)
        for ax, key in zip(axes.flat, panels):
            for label, pts in data[key].items():
                xs, ys = zip(*pts)
                ax.plot(xs, ys, label=label, **STYLE.get(label, {}))
            ax.set_xscale("log", base=2)
            xs = sorted({s for pts in data[key].values() for s, _ in pts})
            ax.set_xticks(xs)
            ax.set_xticklabels([f"{s // 1024}k" if s % 1024 == 0 else str(s) for s in xs])
            ax.set_ylim(bottom=0)
            ax.set_xlabel("seqlen (16k tokens per batch)")
            ax.set_ylabel("TFLOPS")
            ax.set_title(f"hdim {key[1]}, {'causal' if key[2] else 'full'}")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8, loc="lower right")
        for ax in list(axes.flat)[len(panels):]:
            ax.axis("off")
        fig.suptitle(f"attention {what}, bf16 - {title}")
        fig.tight_layout()
        path = f"{prefix}-{ps}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    return paths


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ours")
    ap.add_argument("peers")
    ap.add_argument("--cudnn", help="cudnn_peers.py's JSON of the same run")
    ap.add_argument("--prefix", required=True, help="output path without -fwd.png / -bwd.png")
    ap.add_argument("--title", required=True, help="device and commit, for the figure")
    a = ap.parse_args()
    cudnn = json.load(open(a.cudnn)) if a.cudnn else None
    data = series(json.load(open(a.ours)), json.load(open(a.peers)), cudnn)
    for p in plot(data, a.prefix, a.title):
        print(p)


if __name__ == "__main__":
    main()
