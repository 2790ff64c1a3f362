#!/usr/bin/env bash
# call 70 (2026-12-07, fifth session): trial window (9608507: the window/softcap forward of a
# dense batch persistent). First, alone on the GPU: the forward A/B, main's bundle and the
# trial's taking turns (bench_gpu --only 128,16384,causal,auto with --window 1024 / 4096 and
# the packed batch's --lengths: the forward's TFLOPS and auto's backward, which the trial
# does not touch, and the digests), ROUNDS rounds. Then the trial's gpu_attn_vl and
# gpu_attn_fwd, and the window/packed sanitizer targets (racecheck, synccheck, memcheck).
# If trial d256 is carried (.gpu/trial-d256), its A/B runs after the window A/B (alone too),
# and its gpu_attn beside the window's suites (its racecheck, ~220 s alone, does not fit).
# Carry: .gpu/bin .gpu/bin.what .gpu/lib .gpu/trial-window [.gpu/trial-d256]
L=${LIMIT:-380}
. "$(dirname "$0")/common.sh"
lengths=$(python3 bench/varlen_peers.py --packed-lengths)
for r in $(seq 1 ${ROUNDS:-2}); do
  for b in bin trial-window; do
    for c in "--window 1024" "--window 4096" "--lengths $lengths"; do
      timeout 60 .gpu/$b/bench_gpu --reps 5 --only 128,16384,causal,auto $c | tr -d '\n' >> $W/ab-$b.json; echo >> $W/ab-$b.json
    done
  done
  T "window A/B round $r"
done
if [ -d .gpu/trial-d256 ]; then
  REPS=5 OUT=$W/d256 timeout 120 bash scripts/gpu_ab.sh "256,1024,causal 256,1024,full 256,4096,causal 256,16384,causal 256,4096,full" \
    main=.gpu/bin/bench_gpu d256=.gpu/trial-d256/bench_gpu > $W/d256.log 2>&1; T "d256 A/B rc $?"
fi
left=$(( L - 15 - $(( $(date +%s) - t0 )) ))
lane twv CHECKS="gpu_attn_vl" TRIALS=window MAIN_CHECKS=none AB_TRIALS=none SUITE_TIMEOUT=$left OUT=$W/tw bash scripts/gpu_trials.sh
lane twf CHECKS="gpu_attn_fwd" TRIALS=window MAIN_CHECKS=none AB_TRIALS=none SUITE_TIMEOUT=$left OUT=$W/tf bash scripts/gpu_trials.sh
lane san SANITIZE_ONLY='_vl_' SANITIZER_TIMEOUT=$(( left / 3 )) BIN=.gpu/trial-window OUT=$W/san bash scripts/gpu_sanitize.sh
if [ -d .gpu/trial-d256 ]; then
  lane d256a CHECKS="gpu_attn" TRIALS=d256 MAIN_CHECKS=none AB_TRIALS=none SUITE_TIMEOUT=$left OUT=$W/td bash scripts/gpu_trials.sh
fi
wait; T "lanes done"
python3 - $W/ab-bin.json $W/ab-trial-window.json > $W/ab.txt <<'PY'
import json, sys
def load(path):
    out = {}
    for line in open(path):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except ValueError as e:
            print("unreadable line in", path, e); continue
        for r in doc["rows"]:
            case = ("packed %d docs" % len(r["lengths"]) if "lengths" in r
                    else "window %d" % r["window"] if "window" in r else "causal")
            out.setdefault(case, []).append(r)
    return out
main, trial = (load(p) for p in sys.argv[1:3])
print("| case | fwd TFLOPS main (each round) | trial | trial / main (medians) | bwd auto main / trial | same digests |")
print("| --- | --- | --- | ---: | --- | --- |")
med = lambda xs: sorted(xs)[len(xs) // 2]
for case in main:
    fm = [r["fwd_tflops"] for r in main[case]]; ft = [r["fwd_tflops"] for r in trial.get(case, [])]
    bm = [b["tflops"] for r in main[case] for b in r["bwd"]]; bt = [b["tflops"] for r in trial.get(case, []) for b in r["bwd"]]
    dg = set(str(r.get("fwd_digest", r.get("digest"))) + str([b.get("digest") for b in r["bwd"]]) for r in main[case] + trial.get(case, []))
    print("| %s | %s | %s | %.3f | %s / %s | %s |" % (case, " ".join("%.1f" % x for x in fm), " ".join("%.1f" % x for x in ft),
          med(ft) / med(fm) if ft else 0, " ".join("%.1f" % x for x in bm), " ".join("%.1f" % x for x in bt), "yes" if len(dg) == 1 else "NO (%d)" % len(dg)))
PY
{ echo "== window A/B"; cat $W/ab.txt; [ -f $W/d256/ab.md ] && { echo "== d256"; grep -E "^\|" $W/d256/ab.md; }
  echo "== suites"; cat $W/tw/trials.log $W/tf/trials.log $W/td/trials.log $W/tr/trials.log 2>/dev/null; echo "== sanitizers"; cat $W/lane-san.out; cat $W/times.txt; } > $OUT/summary.txt
tar czf $OUT/call70.tgz -C $W .
cat $OUT/summary.txt
