"""vl_ab.py MAIN.json TRIAL.json - the A/B table of two builds' bench_gpu runs (one JSON
document a line, several rounds each; --window / --lengths cases): per case the forward's and
the backward's TFLOPS of every round, the trial / main ratio of their medians, and whether
every run gave the same backward digest. (call70.sh, which ran before this file, has the
same table inline.)"""
import json
import sys


def load(path):
    out = {}
    for line in open(path):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except ValueError as e:
            print("unreadable line in", path, e)
            continue
        for r in doc["rows"]:
            case = ("packed %d docs" % len(r["lengths"]) if "lengths" in r
                    else "window %d" % r["window"] if "window" in r else "causal")
            out.setdefault(case, []).append(r)
    return out


def med(xs):
    return sorted(xs)[len(xs) // 2]


def ratio(t, m):
    return "%.3f" % (med(t) / med(m)) if t and m else "n/a"


main, trial = load(sys.argv[1]), load(sys.argv[2])
rounds = lambda xs: " ".join("%.1f" % x for x in xs)
print("| case | fwd TFLOPS main / trial (rounds) | fwd trial / main | bwd TFLOPS main / trial (rounds) | bwd trial / main | same digests |")
print("| --- | --- | ---: | --- | ---: | --- |")
for case in main:
    rm, rt = main[case], trial.get(case, [])
    fm, ft = [r["fwd_tflops"] for r in rm], [r["fwd_tflops"] for r in rt]
    bm, bt = [b["tflops"] for r in rm for b in r["bwd"]], [b["tflops"] for r in rt for b in r["bwd"]]
    dg = set(str([b.get("digest") for b in r["bwd"]]) for r in rm + rt)
    print("| %s | %s / %s | %s | %s / %s | %s | %s |" % (case, rounds(fm), rounds(ft), ratio(ft, fm), rounds(bm), rounds(bt),
          ratio(bt, bm), "yes" if len(dg) == 1 else "NO (%d)" % len(dg)))
