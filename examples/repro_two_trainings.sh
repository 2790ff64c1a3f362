#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# repro_two_trainings.sh - the promise end to end. Two trainings of examples/train_tiny_gpt.py
# share one GPU (or the CPU engine) through one dashd that keeps an audit log; the pair is
# run twice with a deterministic schedule and twice with "atomic". It prints whether each
# training's loss curve and final weights came out identical across the repeats, and what
# `dashctl audit diff` says about the two logs of each pair of repeats.
#
#   examples/repro_two_trainings.sh [STEPS [SEQLEN]]     (default 10 steps, seqlen 4096)
#   MODEL="--dim 128" examples/repro_two_trainings.sh 5 256   (on a CPU: about a minute;
#                                                             the defaults take over an hour)
#
# Why 4096: with the default model (batch 4, 4 heads) at seqlen 1024 a backward is one
# wave of 128 kv-tile jobs whose dQ additions reach memory in the same order every time on
# an idle H200, so even `atomic` repeated its bits there; at 4096 (512 jobs, several
# waves) its additions race and the runs diverge from the first backward.
#
# Environment: BIN (where dashd and dashctl are; default build), PYTHON (default: the
# checkout's .venv/bin/python from `make venv` when there is one, else python3),
# DEVICE (cuda or cpu; default: cuda if torch sees one), MODEL (extra train_tiny_gpt.py
# arguments, e.g. "--dim 256 --layers 2"). Exit status 0 when the deterministic repeats
# are identical (whatever atomic did), 1 otherwise.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-$root/build}
py=${PYTHON:-$( [ -x "$root/.venv/bin/python" ] && echo "$root/.venv/bin/python" || echo python3)}
steps=${1:-10}
seqlen=${2:-4096}
device=${DEVICE:-$($py -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")')}
work=$(mktemp -d /tmp/dash-repro-XXXXXX)
echo "work dir: $work (device $device, $steps steps, seqlen $seqlen)"

# one repeat: a fresh dashd with its own audit log, two trainings at once
repeat() {
  local name=$1 sched=$2
  local sock=$work/$name.sock
  "$bin/dashd" --endpoint "ipc://$sock" --audit "$work/$name.audit" --audit-level all \
    2>"$work/$name.dashd.log" &
  local dpid=$!
  for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
  local pids=()
  for who in a b; do
    local seed=1; [ $who = b ] && seed=2
    $py "$root/examples/train_tiny_gpt.py" --steps "$steps" --seqlen "$seqlen" --device "$device" \
      --endpoint "ipc://$sock" --client-name "trainer-$who" --run-tag "$name" --seed $seed \
      --schedule "$sched" --quiet --out "$work/$name-$who.json" ${MODEL:-} \
      > "$work/$name-$who.log" 2>&1 &
    pids+=($!)
  done
  local ok=0
  for p in "${pids[@]}"; do wait "$p" || ok=1; done
  kill -TERM "$dpid"; wait "$dpid" || true
  [ $ok -eq 0 ] || { echo "$name: a training failed:"; tail -5 "$work/$name"-*.log; exit 1; }
}

compare() { # compare two repeats' summaries, training by training
  $py - "$work" "$1" "$2" <<'PYEOF'
import json, sys
work, x, y = sys.argv[1:]
same_all = True
for who in "ab":
    s = json.load(open(f"{work}/{x}-{who}.json"))
    t = json.load(open(f"{work}/{y}-{who}.json"))
    losses = s["losses_hex"] == t["losses_hex"]
    weights = s["weights_sha256"] == t["weights_sha256"]
    first = next((i for i, (u, v) in enumerate(zip(s["losses_hex"], t["losses_hex"])) if u != v), None)
    print(f"  trainer-{who}: losses {'identical' if losses else 'DIFFER from step %s' % first}, "
          f"weights {'identical' if weights else 'DIFFER'} (final loss {s['final_loss']:.6f} vs "
          f"{t['final_loss']:.6f}; sha256 {s['weights_sha256'][:16]} vs {t['weights_sha256'][:16]})")
    same_all &= losses and weights
sys.exit(0 if same_all else 1)
PYEOF
}

repeat det1 auto
repeat det2 auto
repeat atomic1 atomic
repeat atomic2 atomic

status=0
echo "deterministic schedule (auto), repeat 1 vs repeat 2:"
compare det1 det2 || status=1
"$bin/dashctl" audit diff "$work/det1.audit" "$work/det2.audit" | sed 's/^/  audit: /' || status=1
echo "atomic schedule, repeat 1 vs repeat 2:"
compare atomic1 atomic2 || true
"$bin/dashctl" audit diff "$work/atomic1.audit" "$work/atomic2.audit" | sed 's/^/  audit: /' || true
exit $status
