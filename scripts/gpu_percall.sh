#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# gpu_percall.sh - on the GPU machine (device tool, carrying .gpu): what a call costs the
# caller (bench/percall.py: dash_attn beside PyTorch SDPA in process, host-bound loop) and
# a training step of examples/train_tiny_gpt.py at the two models of issue 20, attention
# through dashd against SDPA - with separate GPU contexts, then (where
# nvidia-cuda-mps-control exists) under an MPS control daemon this script starts in a
# private pipe directory. Reports under $OUT (default /tmp): percall-contexts.md,
# percall-mps.md, steps.md.
#   bash scripts/gpu_percall.sh [STEPS]     (NO_MPS=1: contexts only; ATTNS: the attentions
#                                            of the steps, default "sdpa sdpa-strict dash
#                                            dash-compile"; NAME-compile runs NAME's model
#                                            under torch.compile, NAME-1thread with autograd's
#                                            multithreading off, NAME-ctypes dash_attn's
#                                            ctypes path (DASH_NATIVE=0); MODELS: "small large",
#                                            or tiny (a smoke run); REPS: rounds, each
#                                            attention once a round in turn, default 1;
#                                            STEPS_ONLY=1: no percall.py; MPS_ONLY=1:
#                                            no pass with separate contexts; PIN=1: the
#                                            steps' dashd and trainers on disjoint CPUs)
# steps.md: | sharing | model | attention | median of the rounds' median step (ms) |
# range over the rounds | rounds |
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp}
steps=${1:-20}
# the bundle (.gpu) by default; make bench passes its own build (DASHD_BIN, DASH_LIBRARY)
export LD_LIBRARY_PATH=$root/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
dashd=${DASHD_BIN:-$root/.gpu/bin/dashd}
dashctl=$(dirname "$dashd")/dashctl
export DASH_LIBRARY=${DASH_LIBRARY:-$root/.gpu/lib/libdash.so}
export PYTHONPATH=$root/client/python PYTHONUNBUFFERED=1
status=0
for m in ${MODELS:-small large}; do # checked before anything starts
  case $m in small | large | tiny) ;; *) echo "gpu_percall.sh: MODELS: unknown model $m" >&2; exit 2 ;; esac
done
[ "${REPS:-1}" -ge 1 ] 2>/dev/null || { echo "gpu_percall.sh: REPS must be >= 1" >&2; exit 2; }
# PIN=1: the steps' dashd on CPUs 0-3 and the trainers on the others (taskset), so that the
# host-bound small model's rounds do not share cores with the daemon's threads
pin_dashd= pin_steps=
if [ "${PIN:-0}" = 1 ]; then
  n=$(nproc)
  [ "$n" -ge 8 ] || { echo "gpu_percall.sh: PIN=1 needs 8 CPUs or more, this host has $n" >&2; exit 2; }
  pin_dashd="taskset -c 0-3" pin_steps="taskset -c 4-$((n - 1))"
fi

pass() { # name
  local name=$1 work
  if [ -z "${STEPS_ONLY:-}" ]; then
    python3 "$root/bench/percall.py" --dashd "$dashd" --out "$out/percall-$name.md" \
      > "$out/percall-$name.log" 2>&1 || status=1
    cat "$out/percall-$name.log"
  fi
  work=$(mktemp -d /tmp/dash-step-XXXXXX)
  $pin_dashd "$dashd" --endpoint "ipc://$work/d.sock" 2>"$work/dashd.log" &
  local dpid=$!
  for _ in $(seq 200); do [ -S "$work/d.sock" ] && break; sleep 0.05; done
  local models=() m
  for m in ${MODELS:-small large}; do
    case $m in
      small) models+=("--layers 12 --dim 768 --heads 12 --seqlen 1024 --batch 8") ;;
      large) models+=("--layers 8 --dim 2048 --heads 16 --seqlen 4096 --batch 2") ;;
      tiny) models+=("--layers 2 --dim 64 --heads 2 --seqlen 64 --batch 2") ;; # a smoke run
    esac
  done
  # REPS rounds; in each, every attention once in turn, so a slow minute of the host falls
  # on all of them alike; each (model, attention) reports the median of its rounds' median
  # steps and their range
  : > "$work/runs.txt"
  for model in "${models[@]}"; do
    for r in $(seq "${REPS:-1}"); do
      for a in ${ATTNS:-sdpa sdpa-strict dash dash-compile}; do
        local how="--attn $a" env=""  # NAME-compile: the model under torch.compile(fullgraph=True)
        case $a in
          *-ctypes) how="--attn ${a%-ctypes}" env="DASH_NATIVE=0" ;; # dash_attn's ctypes path
          *-compile) how="--attn ${a%-compile} --compile" ;;
          *-1thread) how="--attn ${a%-1thread} --autograd-threads off" ;; # backward on this thread
        esac
        env $env $pin_steps python3 "$root/examples/train_tiny_gpt.py" --steps "$steps" $model $how --quiet \
          --endpoint "ipc://$work/d.sock" --out "$work/$a.json" > "$work/$a.log" 2>&1 || status=1
        python3 -c "import json; print('%s\t%s\t%.3f' % ('$model', '$a', json.load(open('$work/$a.json'))['median_step_ms']))" \
          >> "$work/runs.txt" 2>/dev/null || { echo "$model / $a failed:"; tail -5 "$work/$a.log"; } >&2
        rm -f "$work/$a.json"
      done
    done
  done
  python3 - "$name" "$work/runs.txt" <<'PY' | tee -a "$out/steps.md"
import statistics, sys
name, runs = sys.argv[1], {}
for line in open(sys.argv[2]):
    model, attn, ms = line.rstrip("\n").split("\t")
    runs.setdefault((model, attn), []).append(float(ms))
for (model, attn), ms in runs.items():  # in the order first run
    spread = f"{min(ms):.2f}-{max(ms):.2f}" if len(ms) > 1 else ""
    print(f"| {name} | {model} | {attn} | {statistics.median(ms):.2f} | {spread} | {len(ms)} |")
PY
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  "$dashctl" stats --endpoint "ipc://$work/d.sock" > "$out/stats-$name.txt" 2>&1
  kill -TERM $dpid; wait $dpid
  cp "$work/dashd.log" "$out/dashd-steps-$name.log"
}

[ -n "${MPS_ONLY:-}" ] || pass contexts
mps=$(command -v nvidia-cuda-mps-control || true)
if [ -n "$mps" ] && [ -z "${NO_MPS:-}" ]; then
  export CUDA_MPS_PIPE_DIRECTORY=$(mktemp -d /tmp/dash-mps-pipe-XXXXXX)
  export CUDA_MPS_LOG_DIRECTORY=$(mktemp -d /tmp/dash-mps-log-XXXXXX)
  "$mps" -d && sleep 1
  pass mps
  echo quit | "$mps"
  sleep 1
fi
# the device tool brings back at most 8 files: the reports stay, the logs go into one archive
(cd "$out" && tar czf percall-logs.tgz percall-*.log stats-*.txt dashd-steps-*.log 2>/dev/null &&
  rm -f percall-*.log stats-*.txt dashd-steps-*.log)
exit $status
