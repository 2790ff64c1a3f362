#!/usr/bin/env bash
# call 58 (session of 2026-12-07, third): the restore carried through by calls that do not
# need the session (libdash: dash__carry_restore) - the new GPU test alone with the fix
# (.gpu/fix: test_dash_gpu and dashd of the working tree) and without it (.gpu/fixold: the
# same test, libdash before the fix: it must fail, its stream waiting past 20 s), then the
# whole gpu_dashd suite with the fix; beside it nothing (the test times a stream). Then the
# forward's A/B old (ae1566c) / new (1307a54) at 64 and 128 full, 8k and 16k (the peers
# run's 64 full 16k forward read -6.2% against ba46799's run), and bench_audit in turns,
# treepost alone (ea30712, .gpu/tp) against main's bundle (1307a54: with unitlap), as
# the audit's causal cost read +3.2-3.4% in call 57 against treepost's +1.74% in call 49.
# Both new tests: test_dashd_gpu_restart_heard_in_a_ping_resends_stream_ops_before_it_returns
# and test_dashd_gpu_op_released_by_the_watchdog_is_not_sent_to_the_next_daemon.
# Carry: .gpu/bin .gpu/bin.what .gpu/lib .gpu/trial-old .gpu/fix .gpu/fixold .gpu/tp
L=${LIMIT:-330}
. "$(dirname "$0")/common.sh"
for f in .gpu/fix/bin/*.xz .gpu/fixold/bin/*.xz .gpu/tp/*.xz; do [ -e "$f" ] && xz -d -f "$f"; done
for X in test_dashd_gpu_restart_heard_in_a_ping_resends_stream_ops_before_it_returns \
         test_dashd_gpu_op_released_by_the_watchdog_is_not_sent_to_the_next_daemon; do
  for b in fix fixold; do
    (cd .gpu/$b/bin && DASH_GPU_SUITE=gpu_dashd DASH_GPU_TEST=$X timeout 60 ./test_dash_gpu > $W/$b-$X.log 2>&1)
    echo "$b $X rc $?: $(grep -E 'stream (finished|still)|differs|written|^ +(tests|asserts)|FAILED|fail' $W/$b-$X.log | tr -s ' ' | tr '\n' ' ')" >> $W/sum.txt; T "$b $X"
  done
done
(cd .gpu/fix/bin && DASH_GPU_SUITE=gpu_dashd timeout 170 ./test_dash_gpu > $W/fix-dashd.log 2>&1)
echo "fix gpu_dashd rc $?: $(grep -E '^ +(tests|asserts)|FAILED' $W/fix-dashd.log | tr -s ' ' | tr '\n' ' ')" >> $W/sum.txt; T "gpu_dashd"
cat $W/sum.txt > $OUT/summary.txt
for i in 1 2; do for b in tp bin; do
  timeout 25 .gpu/$b/bench_audit --seqlen 4096 --hdim 128 > $W/audit-$b-$i.txt 2>&1; T "audit $b $i rc $?"
  echo "== bench_audit $b run $i"; grep -E "^\| (full|causal)" $W/audit-$b-$i.txt; done; done >> $OUT/summary.txt
left=$(( L - 8 - $(( $(date +%s) - t0 )) ))
if [ $left -gt 40 ]; then
  mkdir -p $W/ab
  OUT=$W/ab REPS=5 timeout $left bash scripts/gpu_ab.sh \
    "64,16384,full,shift 64,8192,full,shift 128,16384,full,shift 64,4096,full,shift" \
    old=.gpu/trial-old/bench_gpu new=.gpu/bin/bench_gpu > $W/ab/log.txt 2>&1; T "ab rc $?"
  { echo "== A/B old (ae1566c) / new (1307a54)"; grep "^|\|exit" $W/ab/ab.md; } >> $OUT/summary.txt
fi
cat $W/times.txt >> $OUT/summary.txt
tar czf $OUT/call58.tgz -C $W .
cat $OUT/summary.txt
