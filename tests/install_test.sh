#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# install_test.sh - `make test-install`: stage `make install DESTDIR=<tmp> PREFIX=/usr`,
# check what it put there (libdash's real name, soname and links, dash.h, dash.pc, the
# proto files, units, sysusers/tmpfiles snippets, man pages), build tests/install_client.c
# against the staged tree with `pkg-config --cflags --libs dash` alone and run it against
# the staged dashd; then, where systemd-analyze exists, `verify` the staged units and
# check that `security --offline=yes` rates each below 5.0.
# Then the units' services run by hand in their sandboxes (scripts/gpu_node_check.py --cpu:
# what a GPU machine without systemd checks with --bundle), where this machine allows it.
#   tests/install_test.sh MAKE [BUILD]   (the make to run, with the caller's BUILD/CUDA
#                                         settings; BUILD: its build folder, default build)
set -euo pipefail
make=${1:-make}
build=${2:-build}
cd "$(dirname "$0")/.."
stage=$(mktemp -d /tmp/dash-install-XXXXXX)
dashd_pid=
cleanup() {
  if [ -n "$dashd_pid" ]; then kill "$dashd_pid" 2>/dev/null || true; wait "$dashd_pid" 2>/dev/null || true; fi
  rm -rf "$stage"
}
trap cleanup EXIT
fail() { echo "test-install: FAILED: $*" >&2; exit 1; }

$make --no-print-directory -s install DESTDIR="$stage/root" PREFIX=/usr >/dev/null
r=$stage/root
for f in usr/bin/dashd usr/bin/dashctl usr/lib/libdash.so.0.1.0 usr/lib/libdash.a \
         usr/include/dash.h usr/lib/pkgconfig/dash.pc usr/share/dashd/proto/dash.proto \
         usr/share/dashd/proto/audit.proto usr/lib/systemd/system/dashd.service \
         usr/lib/systemd/system/dashd@.service usr/lib/systemd/system/dashd-mps.service \
         usr/share/dashd/systemd/dashd-mps.conf usr/lib/sysusers.d/dashd.conf \
         usr/lib/tmpfiles.d/dashd.conf usr/share/man/man8/dashd.8 \
         usr/share/man/man1/dashctl.1 usr/share/man/man3/libdash.3; do
  [ -e "$r/$f" ] || fail "make install did not install /$f"
done
[ "$(readlink "$r/usr/lib/libdash.so.0")" = libdash.so.0.1.0 ] || fail "libdash.so.0 -> libdash.so.0.1.0"
[ "$(readlink "$r/usr/lib/libdash.so")" = libdash.so.0 ] || fail "libdash.so -> libdash.so.0"
soname=$(objdump -p "$r/usr/lib/libdash.so.0.1.0" | awk '$1 == "SONAME" {print $2}')
[ "$soname" = libdash.so.0 ] || fail "the soname is '$soname', not libdash.so.0"
grep -q '^ExecStart=/usr/bin/dashd ' "$r/usr/lib/systemd/system/dashd@.service" ||
  fail "the installed dashd@.service does not run /usr/bin/dashd"
man -l "$r/usr/share/man/man8/dashd.8" 2>/dev/null | grep -q 'dashd - serve' ||
  ! command -v man >/dev/null || fail "dashd.8 does not render"

# A program built with pkg-config's flags and nothing else.
export PKG_CONFIG_SYSROOT_DIR=$r PKG_CONFIG_LIBDIR=$r/usr/lib/pkgconfig
flags=$(pkg-config --cflags --libs dash)
case $flags in *"$r/usr/include"*"$r/usr/lib"*) ;; *) fail "pkg-config gave '$flags'";; esac
cc -std=c11 -Wall -Wextra -Werror -o "$stage/install_client" tests/install_client.c $flags -lm
unset PKG_CONFIG_SYSROOT_DIR PKG_CONFIG_LIBDIR
objdump -p "$stage/install_client" | grep -q 'NEEDED *libdash.so.0' ||
  fail "the program does not load libdash.so.0"

ep="ipc://$stage/dashd.sock"
"$r/usr/bin/dashd" --endpoint "$ep" --backend cpu --threads 1 --log-level warn 2>"$stage/dashd.log" &
dashd_pid=$!
for _ in $(seq 100); do
  [ -S "$stage/dashd.sock" ] && "$r/usr/bin/dashctl" ping --count 1 --endpoint "$ep" >/dev/null 2>&1 && break
  sleep 0.1
done
LD_LIBRARY_PATH=$r/usr/lib "$stage/install_client" "$ep" ||
  { cat "$stage/dashd.log" >&2; fail "the program built against the staged install"; }
kill "$dashd_pid"; wait "$dashd_pid" || fail "dashd did not stop cleanly"; dashd_pid=

if command -v systemd-analyze >/dev/null; then
  # verify looks for ExecStart's program and the Documentation= man pages on this machine:
  # a copy of each unit names the staged dashd, and MANPATH the staged pages
  mkdir "$stage/units"
  for u in dashd.service dashd@.service dashd-mps.service; do
    sed "s|/usr/bin/dashd|$r/usr/bin/dashd|" "$r/usr/lib/systemd/system/$u" > "$stage/units/$u"
  done
  out=$(cd "$stage/units" && MANPATH="$r/usr/share/man" \
        systemd-analyze verify ./dashd.service ./dashd@0.service 2>&1) ||
    fail "systemd-analyze verify: $out"
  [ -z "$out" ] || fail "systemd-analyze verify: $out"
  for u in dashd.service dashd@0.service dashd-mps.service; do
    score=$(cd "$stage/units" && systemd-analyze security --offline=yes "./$u" 2>&1 |
            sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
    [ -n "$score" ] || fail "systemd-analyze security gave no score for $u"
    awk -v s="$score" 'BEGIN { exit !(s < 5.0) }' || fail "$u: exposure $score, not below 5.0"
    echo "test-install: $u: systemd-analyze security exposure $score"
  done
else
  echo "test-install: systemd-analyze not found: units not verified"
fi
echo "test-install: staged install, pkg-config build and run against its dashd: passed"
# where_allowed LABEL WHAT CMD...: a check that prints 'ok   ...' lines and exits 0, fails
# otherwise, or exits 77 where this machine cannot run it (not root, no namespaces...)
where_allowed() {
  local label=$1 what=$2 out rc
  shift 2
  set +e
  out=$("$@" 2>&1)
  rc=$?
  set -e
  case $rc in
    0) echo "$out" | sed -n "s/^ok   /test-install: $label: /p" ;;
    77) echo "test-install: ${out##*$'\n'} - $what: not run here" ;;
    *) echo "$out" >&2; fail "$what ($*)" ;;
  esac
}
# the installed units under a real systemd, booted as PID 1 of private namespaces
where_allowed systemd "the units under a real systemd" bash scripts/systemd_boot_test.sh "$make"
# the same units' services run by hand in their sandboxes (namespaces, setpriv, the seccomp
# filter of tests/unit_seccomp.c), as on a GPU machine that has no systemd
where_allowed "by hand" "the units' services run by hand" \
  python3 scripts/gpu_node_check.py --cpu --build "$build" --out "$stage"
