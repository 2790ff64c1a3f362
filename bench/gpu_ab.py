#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""gpu_ab.py - compare bench_gpu builds measured in one run (scripts/gpu_ab.sh): per shape,
each build's forward (and over the first build's), its atomic backward, its best
deterministic schedule and their ratio, as Markdown,
and whether its deterministic schedules repeated their bits and computed the same bits as
the first build's (bench_gpu's digests: its inputs come from a fixed seed, so builds that
compute the same bits print the same digests).

    python3 bench/gpu_ab.py NAME=FILE [NAME=FILE ...]

Each FILE holds bench_gpu JSON documents, one after another (one per --only shape); rows
of a shape that a build did not report are left out, rows of one shape run once per
schedule are merged, and a document cut short (a shape killed at its timeout) is skipped,
not the documents after it.
"""
import json
import sys

from gpu_report import DET, best_det


def rows_of(path):
    """Every row of every JSON document in the file (documents may simply follow each other)."""
    with open(path) as f:
        text = f.read()
    dec, at, rows = json.JSONDecoder(), 0, []
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at >= len(text):
            return rows
        try:
            doc, at = dec.raw_decode(text, at)
        except ValueError:
            # a document cut short (a shape killed at gpu_ab.sh's timeout): skip to the
            # next document, which starts a line ('{"device": ...'; rows are indented)
            at = text.find("\n{", at)
            if at < 0:
                return rows
            continue
        rows.extend(doc.get("rows", []))


def bits(b, first):
    """'same', or what differs, of build b's deterministic schedules against the first build's."""
    bad = [s for s in DET if s in b and not b[s]["bitwise_repeat"]]
    if bad:
        return "REPEAT DIFFERS: " + ", ".join(bad)
    if first is None or first is b:
        return "repeat"
    other = [s for s in DET if s in b and s in first and b[s]["digest"] != first[s]["digest"]]
    return "DIFFER: " + ", ".join(other) if other else "same"


def main():
    builds = [a.split("=", 1) for a in sys.argv[1:]]
    if not builds or any(len(b) != 2 for b in builds):
        sys.exit(__doc__)
    table = {}
    for name, path in builds:
        for r in rows_of(path):
            key = (r["D"], r["S"], "causal" if r["causal"] else "full")
            # one shape run with two schedules (--only D,S,MASK,shift then ...,atomic) gives
            # two rows: their schedules merge (the later forward counts)
            table.setdefault(key, {}).setdefault(name, {}).update({b["schedule"]: b for b in r["bwd"]})
            table[key][name]["fwd"] = r.get("fwd_tflops")
    print("| hdim | seqlen | mask | build | fwd | fwd / first | atomic | best det (schedule) "
          "| det / atomic | det bits |")
    print("| ---: | ---: | --- | --- | ---: | ---: | ---: | --- | ---: | --- |")
    for key in sorted(table):
        first = table[key].get(builds[0][0])
        for name, _ in builds:
            b = table[key].get(name)
            if not b:
                continue
            # a run of one schedule (--only D,S,MASK,SCHED) lacks atomic or every det one;
            # a schedule whose bits did not repeat is not 'best det' (det bits says so)
            best = best_det(b)
            at = b["atomic"]["tflops"] if "atomic" in b else None
            det = b[best]["tflops"] if best else None
            fwd, f0 = b.get("fwd"), (first or {}).get("fwd")
            rel = f"{fwd / f0:.3f}" if fwd and f0 else "n/a"
            print(f"| {key[0]} | {key[1]} | {key[2]} | {name} | {fwd or 0:.1f} | {rel} | "
                  f"{f'{at:.1f}' if at else 'n/a'} | {f'{det:.1f} ({best})' if best else 'n/a'} | "
                  f"{f'{det / at:.3f}' if at and det else 'n/a'} | {bits(b, first) if any(s in b for s in DET) else 'n/a'} |")


if __name__ == "__main__":
    main()
