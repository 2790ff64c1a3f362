#!/usr/bin/env bash
# call 8 (2026-12-06, second session): where the small model's training step loses ~12 ms to
# PyTorch's strict-deterministic SDPA (call 6: 48.65 / 36.69 ms without MPS, 45.30 / 34.30
# with) - bench/step_profile.py (torch.profiler, CPU and CUDA: the caller's GPU busy and idle
# time, its longest gaps, the attention calls' host time) for dash and sdpa-strict, without
# and with MPS, both models; first bench/bwd_thread.py (why Client.backward costs more on
# autograd's device thread); last the audit's cost at 4k head dim 128 (bench_audit)
L=${LIMIT:-300}
. "$(dirname "$0")/common.sh"
export DASH_LIBRARY=$PWD/.gpu/lib/libdash.so PYTHONPATH=$PWD/client/python PYTHONUNBUFFERED=1
small="--layers 12 --dim 768 --heads 12 --seqlen 1024 --batch 8"
large="--layers 8 --dim 2048 --heads 16 --seqlen 4096 --batch 2"
profiles() { # NAME: both attentions, the small model, then the large one's dash
  local d=$W/$1 work; mkdir -p $d; work=$(mktemp -d /tmp/dash-sp-XXXXXX)
  .gpu/bin/dashd --endpoint ipc://$work/d.sock 2>$d/dashd.log & local dpid=$!
  for _ in $(seq 200); do [ -S $work/d.sock ] && break; sleep 0.05; done
  for a in dash sdpa-strict; do
    before $((L - 30)) && timeout 60 python3 bench/step_profile.py --attn $a --endpoint ipc://$work/d.sock $small \
      --trace $d/small-$a.json.gz > $d/small-$a.md 2>&1; T "$1 small $a rc $?"
  done
  for a in dash sdpa-strict; do
    before $((L - 90)) && timeout 60 python3 bench/step_profile.py --attn $a --endpoint ipc://$work/d.sock $large \
      --steps 2 --trace $d/large-$a.json.gz > $d/large-$a.md 2>&1; T "$1 large $a rc $?"
  done
  kill -TERM $dpid; wait $dpid
}
timeout 60 python3 bench/bwd_thread.py --dashd .gpu/bin/dashd > $W/bwd_thread.md 2>&1; T "bwd_thread rc $?"
profiles contexts
t=$(mktemp -d); export CUDA_MPS_PIPE_DIRECTORY=$t/p CUDA_MPS_LOG_DIRECTORY=$t/l; mkdir -p $t/p $t/l
before $((L - 40)) && nvidia-cuda-mps-control -d && sleep 1 && profiles mps
echo quit | nvidia-cuda-mps-control; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY; sleep 1
before $((L - 60)) && timeout 50 .gpu/bin/bench_audit --seqlen 4096 --hdim 128 > $W/audit.txt 2>&1; T "audit rc $?"
{ cat $W/times.txt; echo "== bwd_thread"; cat $W/bwd_thread.md; for m in contexts mps; do for f in $W/$m/*.md; do echo "== $m $(basename $f)"; sed -n '1,40p' $f | grep -v "^USDT\|^ERROR\|^---\|^ *Name"; done; done
  echo "== audit"; cat $W/audit.txt; } > $OUT/summary.txt
tar czf $OUT/call8.tgz -C $W .
head -c 11500 $OUT/summary.txt
