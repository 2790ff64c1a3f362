#!/usr/bin/env bash
# call 59: the released-op test again, now with four pings after the restart (in call 58 the
# old library passed it: its single ping returned before the restore ended, and dash_sync's
# take_release failed the op first), with the fix and without (.gpu/fixold: libdash before
# c051d66, the same tests); the tcp:// restart test once more with the fix; then bench_audit
# four more times on main's bundle (the spread of its causal figure).
# Carry: .gpu/bin .gpu/bin.what .gpu/lib .gpu/fix .gpu/fixold
L=${LIMIT:-150}
. "$(dirname "$0")/common.sh"
for f in .gpu/fix/bin/*.xz .gpu/fixold/bin/*.xz; do [ -e "$f" ] && xz -d -f "$f"; done
one() { # BUILD TEST
  (cd .gpu/$1/bin && DASH_GPU_SUITE=gpu_dashd DASH_GPU_TEST=$2 timeout 60 ./test_dash_gpu > $W/$1-$2.log 2>&1)
  echo "$1 $2 rc $?: $(grep -E 'stream (finished|still)|differs|written|^ +(tests|asserts)|FAILED|fail' $W/$1-$2.log | tr -s ' ' | tr '\n' ' ')" >> $W/sum.txt; T "$1 $2"
}
R=test_dashd_gpu_op_released_by_the_watchdog_is_not_sent_to_the_next_daemon
one fix $R; one fixold $R; one fix test_dashd_gpu_restart_heard_in_a_ping_resends_stream_ops_before_it_returns
cat $W/sum.txt > $OUT/summary.txt
for i in 1 2 3 4; do before $((L - 30)) || break
  timeout 25 .gpu/bin/bench_audit --seqlen 4096 --hdim 128 > $W/audit-$i.txt 2>&1; T "audit $i rc $?"
  echo "== bench_audit run $i"; grep -E "^\| (full|causal)" $W/audit-$i.txt; done >> $OUT/summary.txt
cat $W/times.txt >> $OUT/summary.txt
tar czf $OUT/call59.tgz -C $W .
cat $OUT/summary.txt
