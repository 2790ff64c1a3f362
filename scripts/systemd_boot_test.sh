#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# systemd_boot_test.sh - dashd's units under a real systemd, on a machine whose PID 1 is
# not systemd (a container, CI): boots /lib/systemd/systemd as PID 1 of a private PID and
# mount namespace (unshare) over this machine's root, with private copies or tmpfs over
# everything it may write (/etc, /run, /tmp, /var/tmp, /var/log, /var/lib/systemd,
# /usr/local), installs dashd there (`make install PREFIX=/usr/local`), and runs a probe
# unit that checks what an operator relies on, then powers the namespace off:
#   - systemd-sysusers made the dash user and group; the runtime directory and socket are
#     the group's (a member pings, a non-member is told "permission denied")
#   - Type=notify: the unit is active once dashd says READY, with a STATUS line
#   - WatchdogSec: still active after more than one watchdog period (shortened to 4 s by a
#     drop-in, so the check takes seconds)
#   - the template dashd@0 (--backend cuda) on a machine without a GPU: not started, and
#     the journal says why
#   - ExecReload (SIGHUP): still active, the reload logged
#   - `systemd-analyze security` of the loaded unit: its exposure, recorded
#   - a clean stop: exit status 0
# Needs root, unshare and systemd installed (not running). Prints one line per check
# and the journal of dashd.service; exit status 0 when every check passed, 77 when this
# machine cannot run it (not root, no systemd or unshare, namespaces not allowed).
#   bash scripts/systemd_boot_test.sh [MAKE]   (MAKE: the make to install with, with the
#                                              caller's BUILD/CUDA settings; default make)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ "${1:-}" = --inner ]; then
  # ---- PID 1's parent side, inside the namespaces: private mounts, then exec systemd ----
  set -e  # a mount or copy that fails stops here, not after a 120 s boot
  mount --make-rprivate /
  # the work directory may lie under a path masked below (a checkout in /tmp): reach it
  # through a bind mount on /mnt made before the masks, which they do not cover
  mount --bind "$2" /mnt
  w=/mnt
  cp -a /etc "$w/etc"
  mount --bind "$w/etc" /etc
  # /run root's and 0755 as on a real system (a tmpfs defaults to 1777, under which
  # libdash rightly refuses to trust /run/dashd); the scratch ones sticky as usual
  mount -t tmpfs -o mode=0755 tmpfs /run
  for d in /tmp /var/tmp; do mount -t tmpfs -o mode=1777 tmpfs "$d"; done
  for d in /var/log /var/lib/systemd /usr/local; do
    mkdir -p "$d" && mount -t tmpfs -o mode=0755 tmpfs "$d"
  done
  cp -a "$w/stage/usr/local/." /usr/local/
  mkdir -p /run/systemd/system /etc/systemd/system
  # the units this boot runs: nothing of the host's but what dashd.service pulls in
  cat > /etc/systemd/system/dashtest.target <<'UNIT'
[Unit]
Description=dashd under systemd: the test's target
Wants=dashd.service dash-probe.service
UNIT
  cat > /etc/systemd/system/dash-probe.service <<UNIT
[Unit]
Description=checks of dashd.service
After=dashd.service
[Service]
Type=oneshot
ExecStart=/bin/bash $w/probe.sh $w
UNIT
  # a boot that only reaches dashtest.target, and masks (in the private /etc) every early
  # unit that would touch what this machine shares with the namespace: kernel settings,
  # modules, binfmt, /dev, udev; no logind, no dbus
  for u in systemd-sysctl.service systemd-modules-load.service kmod-static-nodes.service \
           systemd-binfmt.service proc-sys-fs-binfmt_misc.automount systemd-remount-fs.service \
           systemd-udevd.service systemd-udev-trigger.service systemd-hwdb-update.service \
           systemd-firstboot.service systemd-machine-id-commit.service systemd-logind.service \
           dbus.service dbus.socket systemd-pstore.service systemd-boot-update.service \
           sys-kernel-debug.mount sys-kernel-tracing.mount sys-kernel-config.mount \
           sys-fs-fuse-connections.mount dev-hugepages.mount dev-mqueue.mount; do
    ln -sf /dev/null "/etc/systemd/system/$u"
  done
  # the watchdog's period shortened so that the check below takes seconds (the pinging is
  # the same at any period: half of WATCHDOG_USEC)
  mkdir -p /etc/systemd/system/dashd.service.d
  printf '[Service]\nWatchdogSec=4s\n' > /etc/systemd/system/dashd.service.d/test.conf
  ldconfig
  exec env container=unshare /lib/systemd/systemd --system --unit=dashtest.target \
    --log-target=console --log-level=warning
fi

# ---- the outer side -------------------------------------------------------------------
[ "$(id -u)" = 0 ] || { echo "systemd_boot_test: needs root (unshare, mounts)"; exit 77; }
[ -x /lib/systemd/systemd ] && command -v unshare >/dev/null ||
  { echo "systemd_boot_test: needs systemd installed and unshare"; exit 77; }
unshare --pid --fork --mount true 2>/dev/null ||
  { echo "systemd_boot_test: this machine does not allow new PID and mount namespaces"; exit 77; }
make=${1:-make}
w=$(mktemp -d "$root/.sdboot-XXXXXX")  # the boot reaches it as /mnt (--inner)
trap 'rm -rf "$w"' EXIT
(cd "$root" && $make --no-print-directory -s install DESTDIR="$w/stage" PREFIX=/usr/local) \
  >/dev/null || { echo "systemd_boot_test: make install failed"; exit 1; }
cat > "$w/probe.sh" <<'PROBE'
# runs inside the booted namespace as a oneshot unit; writes $1/results
w=$1
out=$w/results
ok() { echo "ok   $*" >> "$out"; }
bad() { echo "FAIL $*" >> "$out"; }
check() { local what=$1; shift; if "$@" >/dev/null 2>&1; then ok "$what"; else bad "$what"; fi; }
sock=/run/dashd/dashd.sock
check "systemd-sysusers made the dash user and group" getent passwd dash
check "dashd.service is active (READY sent, Type=notify)" systemctl is-active dashd.service
st=$(systemctl show -p StatusText --value dashd.service)
[ -n "$st" ] && ok "STATUS line: $st" || bad "no STATUS line"
[ "$(stat -c %G /run/dashd)" = dash ] && ok "/run/dashd belongs to group dash ($(stat -c %A /run/dashd))" \
  || bad "/run/dashd group $(stat -c %G /run/dashd)"
for _ in $(seq 50); do [ -S $sock ] && break; sleep 0.1; done
[ -S $sock ] && ok "socket $(stat -c '%A %U:%G' $sock)" || bad "no socket at $sock"
useradd -M -N -G dash alice && useradd -M -N bob
if runuser -u alice -- /usr/local/bin/dashctl ping --endpoint ipc://$sock --count 3 > $w/alice.txt 2>&1; then
  ok "a member of group dash pings: $(tail -1 $w/alice.txt)"
else bad "member cannot ping: $(cat $w/alice.txt)"; fi
if runuser -u bob -- /usr/local/bin/dashctl ping --endpoint ipc://$sock --count 1 > $w/bob.txt 2>&1; then
  bad "a non-member could ping"
else
  grep -qi "permission denied" $w/bob.txt && ok "a non-member is told: $(head -1 $w/bob.txt)" \
    || bad "a non-member is told something else: $(cat $w/bob.txt)"
fi
wd=$(systemctl show -p WatchdogUSec --value dashd.service)
sleep 10
check "still active after 10 s with WatchdogSec=$wd (the unit ships 30s)" systemctl is-active dashd.service
systemctl reload dashd.service
sleep 1
check "still active after a reload (SIGHUP)" systemctl is-active dashd.service
line=$(journalctl -u dashd.service --no-pager | grep "SIGHUP: configuration read again")
[ -n "$line" ] && ok "the reload is in the journal: ${line#*]: }" || bad "no reload line in the journal"
systemd-analyze security dashd.service --no-pager > $w/security.txt 2>&1
ok "systemd-analyze security: $(grep -i 'overall exposure' $w/security.txt)"
systemctl start dashd@0.service >/dev/null 2>&1
sleep 1
state=$(systemctl is-active dashd@0.service)
why=$(journalctl -u dashd@0.service --no-pager | grep -i "gpu\|cuda" | tail -1)
if [ "$state" != active ] && [ -n "$why" ]; then
  ok "dashd@0 (--backend cuda) on a machine without a GPU does not start ($state) and says why: ${why#*]: }"
else
  bad "dashd@0 without a GPU: $state, journal: $why"
fi
systemctl stop dashd@0.service >/dev/null 2>&1
systemctl stop dashd.service
st=$(systemctl show -p ExecMainStatus --value dashd.service)
[ "$st" = 0 ] && ok "clean stop (exit status 0)" || bad "stop: exit status $st"
journalctl -u dashd.service --no-pager > $w/journal.txt 2>&1
systemctl poweroff --no-block
PROBE
mkdir -p "$w"
timeout -k 5 120 unshare --pid --fork --mount --propagation private \
  bash "$0" --inner "$w" > "$w/boot.log" 2>&1
if [ ! -s "$w/results" ]; then
  echo "systemd_boot_test: no results; the boot's log:"; tail -30 "$w/boot.log"; exit 1
fi
cat "$w/results"
echo "--- journal of dashd.service"; tail -15 "$w/journal.txt" 2>/dev/null
! grep -q '^FAIL' "$w/results"
