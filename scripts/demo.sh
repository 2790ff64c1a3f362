#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# demo.sh - what `make demo` runs: start dashd on a private endpoint (the GPU when one is
# usable, else the CPU engine), run the example client against it, stop the daemon.
set -euo pipefail
build=${1:-build}
endpoint="ipc:///tmp/dashd-demo-$$.sock"
log="/tmp/dashd-demo-$$.log"

"$build/dashd" --endpoint "$endpoint" --backend auto --log-level info 2>"$log" &
daemon=$!
stop() { kill -TERM "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null || true; }
trap stop EXIT

for _ in $(seq 100); do
  "$build/dashctl" status --endpoint "$endpoint" --timeout 200 >/dev/null 2>&1 && break
  kill -0 "$daemon" 2>/dev/null || { echo "demo: dashd did not start:"; cat "$log"; exit 1; }
done
echo "demo: dashd (pid $daemon) serving $endpoint"
"$build/dashctl" status --endpoint "$endpoint" | sed 's/^/  /'
"$build/demo_client" "$endpoint"
"$build/dashctl" stats --endpoint "$endpoint" | sed 's/^/  /'
stop
trap - EXIT
echo "demo: dashd stopped; its log:"
sed 's/^/  /' "$log"
rm -f "$log"
