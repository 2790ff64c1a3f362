#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""unit_sandbox.py - run a service of one of our systemd units the way systemd would, on a
machine that has no systemd (the GPU machine: PID 1 is not systemd and none is installed),
so that the unit's directives are exercised by hand (issue 19: "otherwise the unit is
verified and its directives exercised by hand in a test").

    unit_sandbox.py UNIT [--dropin F]... [--instance I] [--prefix-map FROM=TO]...
                    [--seccomp PATH] [--groups FILE] [--env K=V]...
                    [--watchdog-usec N] [--notify-socket PATH] [--dry-run]

Reads UNIT (and its drop-ins, in order), refuses any directive it does not know how to
stand for, prepares what systemd prepares (runtime and logs directories with their
owner and mode), then execs ExecStart in the unit's sandbox, keeping this process's PID
(the service's main PID): a private mount, network and UTS namespace (unshare) with the
file-system directives as mounts, the user, group, no_new_privs and empty capability
sets through setpriv, and the system-call directives as a seccomp filter
(tests/unit_seccomp.c). --prefix-map rewrites ExecStart's program path (a bundle that is
not installed under /usr/local); --env adds variables systemd would not set (a bundle's
LD_LIBRARY_PATH). Each directive is mapped by a rule at least as strict as systemd's, so
a service that works here works under the unit; the one looser rule is named in RULES.
Needs root, unshare, setpriv and mount; --dry-run prints the plan and runs nothing.

As a module: load(path, dropins, instance) gives the parsed unit (a dict of lists), and
RULES says what stands for each directive.
"""
import argparse
import errno
import fnmatch
import os
import pwd
import grp
import re
import shlex
import stat

# Every directive of our units and what stands for it here. 'n/a' ones are about when or
# whether systemd starts the service, not how it runs; the orchestrator (gpu_node_check.py)
# applies Type, ExecReload, KillSignal and the timeouts itself.
RULES = {
    'Unit.Description': 'n/a', 'Unit.Documentation': 'n/a', 'Unit.After': 'n/a (start order)',
    'Unit.Before': 'n/a (start order)', 'Unit.Requires': 'the caller starts that unit first',
    'Install.WantedBy': 'n/a',
    'Service.Type': 'the caller: notify waits for READY=1 on NOTIFY_SOCKET, forking for exit 0',
    'Service.NotifyAccess': 'the caller checks the sender PID of READY (main)',
    'Service.WatchdogSec': 'WATCHDOG_USEC and WATCHDOG_PID in the environment',
    'Service.TimeoutStartSec': 'the caller waits that long for READY',
    'Service.Environment': 'the environment (systemd\'s clean one plus these)',
    'Service.ExecStart': 'exec\'d last, keeping the main PID',
    'Service.ExecReload': 'the caller runs it with $MAINPID', 'Service.ExecStop': 'the caller runs it',
    'Service.KillSignal': 'the caller stops with it', 'Service.TimeoutStopSec': 'the caller waits that long',
    'Service.Restart': 'n/a (not restarted here)', 'Service.RestartSec': 'n/a',
    'Service.User': 'setpriv --reuid', 'Service.Group': 'setpriv --regid, --init-groups',
    'Service.UMask': 'umask', 'Service.RuntimeDirectory': '/run/NAME made, owned by User:Group',
    'Service.RuntimeDirectoryMode': 'its mode', 'Service.RuntimeDirectoryPreserve': 'n/a (left in place)',
    'Service.LogsDirectory': '/var/log/NAME made, owned by User:Group', 'Service.LogsDirectoryMode': 'its mode',
    'Service.ReadWritePaths': 'kept writable under ProtectSystem (a leading - : if it exists)',
    'Service.NoNewPrivileges': 'setpriv --no-new-privs',
    'Service.CapabilityBoundingSet': 'setpriv --bounding-set=-all (the units set it empty)',
    'Service.AmbientCapabilities': 'setpriv --ambient-caps=-all --inh-caps=-all',
    'Service.ProtectSystem': 'every mount but /dev, /proc, /sys remounted read-only (strict)',
    'Service.ProtectHome': '/home, /root, /run/user covered by empty mode-000 tmpfs',
    'Service.PrivateTmp': 'tmpfs on /tmp and /var/tmp', 'Service.PrivateMounts': 'a mount namespace',
    'Service.PrivateNetwork': 'a network namespace (loopback down)',
    'Service.IPAddressDeny': 'no interface but a down loopback in the network namespace',
    'Service.RestrictAddressFamilies': 'seccomp: socket()/socketpair() of another family -> EAFNOSUPPORT',
    'Service.DevicePolicy': 'a new /dev holding only the allowed device nodes '
                            '(closed: null zero full random urandom tty ptmx, pts)',
    'Service.DeviceAllow': 'the character devices whose driver name (/proc/devices) matches',
    'Service.ProtectKernelTunables': '/proc/sys, /proc/sysrq-trigger and /sys read-only',
    'Service.ProtectKernelModules': '/usr/lib/modules and /lib/modules hidden; @module not allowed',
    'Service.ProtectKernelLogs': '/proc/kmsg hidden, no /dev/kmsg; syslog() not allowed',
    'Service.ProtectControlGroups': '/sys/fs/cgroup read-only (with /sys)',
    'Service.ProtectClock': 'no /dev/rtc*; @clock not allowed',
    'Service.ProtectHostname': 'a UTS namespace',
    'Service.ProtectProc': 'proc mounted with hidepid=invisible',
    'Service.RestrictNamespaces': 'seccomp --restrict-namespaces',
    'Service.RestrictRealtime': 'seccomp --restrict-realtime',
    'Service.RestrictSUIDSGID': 'seccomp --restrict-suid-sgid (LOOSER: open(O_CREAT) with a '
                                'set-id mode is not caught)',
    'Service.LockPersonality': 'seccomp --lock-personality',
    'Service.MemoryDenyWriteExecute': 'seccomp --memory-deny-write-execute',
    'Service.PrivateIPC': 'an IPC namespace (System V IPC and POSIX message queues)',
    'Service.SystemCallArchitectures': 'seccomp: other architectures kill the process',
    'Service.SystemCallFilter': 'seccomp allow list, @groups expanded from tests/syscall-groups.txt',
    'Service.SystemCallErrorNumber': 'seccomp default errno',
}

# The directories systemd makes for a service: (name key, mode key, base, environment variable).
STATE_DIRS = (('Service.RuntimeDirectory', 'Service.RuntimeDirectoryMode', '/run', 'RUNTIME_DIRECTORY'),
              ('Service.LogsDirectory', 'Service.LogsDirectoryMode', '/var/log', 'LOGS_DIRECTORY'))

# The seccomp options of tests/unit_seccomp.c that stand for boolean directives.
SECCOMP_FLAGS = (('Service.RestrictNamespaces', '--restrict-namespaces'),
                 ('Service.RestrictRealtime', '--restrict-realtime'),
                 ('Service.RestrictSUIDSGID', '--restrict-suid-sgid'),
                 ('Service.LockPersonality', '--lock-personality'),
                 ('Service.MemoryDenyWriteExecute', '--memory-deny-write-execute'))

# DevicePolicy=closed's pseudo devices (systemd.resource-control(5)).
CLOSED_DEVICES = ['null', 'zero', 'full', 'random', 'urandom', 'tty', 'ptmx']


def load(path, dropins=(), instance=None):
    """The unit's directives as {'Section.Key': [values...]}, drop-ins appended in order;
    %i replaced by instance. An empty assignment resets the list, as systemd does."""
    unit = {}
    for p in [path, *dropins]:
        section = None
        text = open(p).read().replace('\\\n', ' ')
        for line in text.splitlines():
            line = line.strip()
            if not line or line[0] in '#;':
                continue
            m = re.fullmatch(r'\[(\w+)\]', line)
            if m:
                section = m.group(1)
                continue
            key, _, value = line.partition('=')
            if instance is not None:
                value = value.replace('%i', instance)
            name = f'{section}.{key.strip()}'
            value = value.strip()
            if value == '' and name not in ('Service.CapabilityBoundingSet', 'Service.AmbientCapabilities'):
                unit[name] = []
            else:
                unit.setdefault(name, []).append(value)
    unknown = sorted(k for k in unit if k not in RULES)
    if unknown:
        raise SystemExit(f'unit_sandbox: {path}: no rule stands for {", ".join(unknown)}')
    return unit


def one(unit, key, default=None):
    v = unit.get(key)
    return v[-1] if v else default


def yes(unit, key):
    return one(unit, key, 'no').lower() in ('yes', 'true', '1', 'on', 'strict', 'invisible')


def seconds(text):
    """systemd's time span ('30s', '5min', '300') in seconds."""
    total = 0.0
    for num, unit in re.findall(r'([\d.]+)\s*([a-z]*)', text):
        total += float(num) * {'': 1, 's': 1, 'sec': 1, 'ms': 1e-3, 'min': 60, 'm': 60, 'h': 3600}[unit]
    return total


def syscall_allow_list(unit, groups_file):
    """SystemCallFilter= lines as systemd reads them: the first one, if not '~', is an allow
    list; each later '~' line removes from it. Returns sorted names."""
    groups, cur = {}, None
    for line in open(groups_file):
        if line.startswith('#') or not line.strip():
            continue
        if not line[0].isspace():
            cur = line.strip()
            groups[cur] = []
        elif not line.strip().startswith('#'):
            groups[cur].append(line.strip())

    def expand(names):
        out = set()
        for n in names:
            out |= expand(groups[n]) if n.startswith('@') else {n}
        return out

    allowed = None
    for value in unit.get('Service.SystemCallFilter', []):
        deny = value.startswith('~')
        names = expand(value.lstrip('~').split())
        if allowed is None:
            if deny:
                raise SystemExit('unit_sandbox: a deny-list filter first is not emulated')
            allowed = names
        elif deny:
            allowed -= names
        else:
            allowed |= names
    return sorted(allowed) if allowed is not None else None


def state_dirs(unit):
    """(path, mode, environment variable) of each directory the unit asks systemd for."""
    return [(f'{base}/{name}', int(one(unit, mode_key, '0755'), 8), var)
            for key, mode_key, base, var in STATE_DIRS for name in one(unit, key, '').split()]


def environment(unit):
    """The variables of the unit's Environment= lines, in order."""
    env = {}
    for value in unit.get('Service.Environment', []):
        for item in shlex.split(value):
            k, _, v = item.partition('=')
            env[k] = v
    return env


def seccomp_argv(unit, seccomp, listfile, groups):
    """unit_seccomp's command line (up to and including its '--') for the unit's system-call
    directives, the allow list written to listfile; [] when the unit has no
    SystemCallFilter=."""
    allow = syscall_allow_list(unit, groups)
    if allow is None:
        if one(unit, 'Service.RestrictAddressFamilies') or any(yes(unit, k) for k, _ in SECCOMP_FLAGS):
            raise SystemExit('unit_sandbox: seccomp options without SystemCallFilter= are not emulated')
        return []
    with open(listfile, 'w') as f:
        f.write('\n'.join(allow) + '\n')
    os.chmod(listfile, 0o644)
    err = one(unit, 'Service.SystemCallErrorNumber', 'EPERM')
    argv = [seccomp, '--errno', str(getattr(errno, err)), '--allow-file', listfile]
    families = one(unit, 'Service.RestrictAddressFamilies')
    if families:
        if families.split() != ['AF_UNIX']:
            raise SystemExit('unit_sandbox: only RestrictAddressFamilies=AF_UNIX is emulated')
        argv.append('--af-unix')
    argv += [opt for key, opt in SECCOMP_FLAGS if yes(unit, key)]
    return argv + ['--']


def device_nodes(allow_patterns):
    """The /dev character nodes a closed policy with these DeviceAllow= patterns lets
    through: (path, major, minor). A 'char-GLOB' pattern matches the driver names of
    /proc/devices' character section (the only form our units use)."""
    majors = {}
    section = None
    for line in open('/proc/devices'):
        if line.startswith('Character'):
            section = 'c'
        elif line.startswith('Block'):
            section = 'b'
        elif section == 'c' and line.strip():
            num, name = line.split()
            majors.setdefault(int(num), []).append(name)
    if any(not p.startswith('char-') for p in allow_patterns):
        raise SystemExit(f'unit_sandbox: DeviceAllow {allow_patterns}: only char-GLOB is emulated')
    globs = [p.split()[0][len('char-'):] for p in allow_patterns]
    nodes = []
    for dirpath, _, files in os.walk('/dev'):
        if dirpath.startswith(('/dev/shm', '/dev/mqueue', '/dev/pts')):
            continue
        for f in files:
            path = os.path.join(dirpath, f)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISCHR(st.st_mode):
                continue
            maj, mnr = os.major(st.st_rdev), os.minor(st.st_rdev)
            closed = dirpath == '/dev' and f in CLOSED_DEVICES
            allowed = any(fnmatch.fnmatchcase(name, g) for g in globs for name in majors.get(maj, []))
            if closed or allowed:
                nodes.append((path, maj, mnr))
    return sorted(nodes)


def plan(unit, args):
    """The service's (uid, gid), and the shell text run inside the new namespaces (as root,
    before dropping to User=) that ends by exec'ing ExecStart."""
    user, group = one(unit, 'Service.User', 'root'), one(unit, 'Service.Group')
    pw = pwd.getpwnam(user)
    gid = grp.getgrnam(group).gr_gid if group else pw.pw_gid
    sh = ['set -e', 'mount --make-rprivate /']
    rw = [path for path, _, _ in state_dirs(unit)]
    for p in ' '.join(unit.get('Service.ReadWritePaths', [])).split():
        optional = p.startswith('-')
        p = p.lstrip('-')
        if os.path.exists(p):
            rw.append(p)
        elif not optional:
            raise SystemExit(f'unit_sandbox: ReadWritePaths {p} does not exist')
    # DevicePolicy=closed / DeviceAllow: a /dev of the allowed nodes only, built first (the
    # mounts below hide the old /dev's shm and mqueue, moved over from a staging point)
    if one(unit, 'Service.DevicePolicy') == 'closed':
        allow = unit.get('Service.DeviceAllow', [])
        nodes = device_nodes(allow)
        # the nodes are bind mounts of the old ones (the same inodes, owners and modes; a
        # container may not allow mknod); /dev/ptmx becomes the link to the new pts
        # instance's; a container may have no /dev/mqueue
        sh += ['stage=$(mktemp -d /tmp/.unitdev-XXXXXX)', 'mkdir $stage/dev $stage/shm $stage/mqueue',
               'mount --rbind /dev $stage/dev', 'mount --bind /dev/shm $stage/shm',
               'mq=0; if mountpoint -q /dev/mqueue; then mount --bind /dev/mqueue $stage/mqueue; mq=1; fi',
               'mount -t tmpfs -o mode=0755,nosuid,noexec tmpfs /dev']
        for path, _, _ in nodes:
            if path == '/dev/ptmx':
                continue
            q = shlex.quote(path)
            sh.append(f'mkdir -p {shlex.quote(os.path.dirname(path))} && touch {q} && '
                      f'mount --bind $stage{q} {q}')
        sh += ['umount -l $stage/dev',
               'mkdir -m 1777 /dev/shm && mount --move $stage/shm /dev/shm',
               'if [ $mq = 1 ]; then mkdir /dev/mqueue && mount --move $stage/mqueue /dev/mqueue; fi',
               'mkdir /dev/pts && mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts /dev/pts',
               'ln -s pts/ptmx /dev/ptmx',
               'ln -s /proc/self/fd /dev/fd', 'ln -s /proc/self/fd/0 /dev/stdin',
               'ln -s /proc/self/fd/1 /dev/stdout', 'ln -s /proc/self/fd/2 /dev/stderr',
               'rmdir $stage/dev $stage/shm $stage/mqueue $stage']
    if yes(unit, 'Service.ProtectProc'):
        sh.append('mount -t proc -o nosuid,nodev,noexec,hidepid=invisible proc /proc')
    if one(unit, 'Service.ProtectSystem') == 'strict':
        # rw paths become mounts of their own first, then every other mount outside /dev,
        # /proc and /sys goes read-only
        for p in rw:
            sh.append(f'mount --bind {shlex.quote(p)} {shlex.quote(p)}')
        sh.append('rw=" ' + ' '.join(rw) + ' "')
        sh.append("awk '{print $5}' /proc/self/mountinfo | sort -u | while read -r m; do "
                  'case "$m" in /dev|/dev/*|/proc|/proc/*|/sys|/sys/*) continue;; esac; '
                  'case "$rw" in *" $m "*) continue;; esac; '
                  'mount -o remount,bind,ro "$m" 2>/dev/null || echo "unit_sandbox: $m stays writable" >&2; done')
    elif one(unit, 'Service.ProtectSystem'):
        raise SystemExit('unit_sandbox: only ProtectSystem=strict is emulated')
    if yes(unit, 'Service.ProtectKernelTunables') or yes(unit, 'Service.ProtectControlGroups'):
        sh.append("awk '{print $5}' /proc/self/mountinfo | grep -E '^/sys(/|$)' | sort -u | while read -r m; do "
                  'mount -o remount,bind,ro "$m" 2>/dev/null || echo "unit_sandbox: $m stays writable" >&2; done')
    if yes(unit, 'Service.ProtectKernelTunables'):
        for p in ('/proc/sys', '/proc/sysrq-trigger'):  # (a container may have no sysrq-trigger)
            sh.append(f'if [ -e {p} ]; then mount --bind {p} {p}; mount -o remount,bind,ro {p}; fi')
    if yes(unit, 'Service.ProtectKernelLogs'):
        sh.append('mount --bind /dev/null /proc/kmsg')
    hidden = []
    if yes(unit, 'Service.ProtectHome'):
        hidden += ['/home', '/root', '/run/user']
    if yes(unit, 'Service.ProtectKernelModules'):
        hidden += ['/usr/lib/modules', '/lib/modules']
    for p in hidden:
        sh.append(f'[ ! -d {p} ] || [ -L {p} ] || mount -t tmpfs -o mode=000,ro,nosuid,nodev,noexec tmpfs {p}')
    if yes(unit, 'Service.PrivateTmp'):
        sh += ['mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp',
               'mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /var/tmp']
    um = one(unit, 'Service.UMask')
    if um:
        sh.append(f'umask {um}')

    env = {'PATH': '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
           'LANG': 'C.UTF-8', 'USER': user, 'LOGNAME': user, 'HOME': pw.pw_dir, 'SHELL': pw.pw_shell}
    for path, _, var in state_dirs(unit):
        env[var] = f'{env[var]}:{path}' if var in env else path
    env.update(environment(unit))
    if args.notify_socket:
        env['NOTIFY_SOCKET'] = args.notify_socket
    wd = one(unit, 'Service.WatchdogSec')
    usec = args.watchdog_usec if args.watchdog_usec else (int(seconds(wd) * 1e6) if wd else 0)
    for item in args.env:
        k, _, v = item.partition('=')
        env[k] = v

    exe = shlex.split(one(unit, 'Service.ExecStart'))
    for m in args.prefix_map:
        src, _, dst = m.partition('=')
        if exe[0].startswith(src + '/'):
            exe[0] = dst + exe[0][len(src):]
    cmd = ['setpriv', f'--reuid={pw.pw_uid}', f'--regid={gid}']
    cmd += ['--init-groups'] if user != 'root' else ['--keep-groups']
    if yes(unit, 'Service.NoNewPrivileges'):
        cmd.append('--no-new-privs')
    if 'Service.CapabilityBoundingSet' in unit:
        if any(unit['Service.CapabilityBoundingSet']):
            raise SystemExit('unit_sandbox: only an empty CapabilityBoundingSet= is emulated')
        cmd.append('--bounding-set=-all')
    if 'Service.AmbientCapabilities' in unit:
        cmd += ['--inh-caps=-all', '--ambient-caps=-all']
    cmd.append('--')
    cmd += seccomp_argv(unit, args.seccomp, args.allow_out, args.groups)
    envargs = ['env', '-i'] + [f'{k}={v}' for k, v in sorted(env.items())]
    # WATCHDOG_PID is the main PID: this shell's, which every exec below keeps
    if usec:
        envargs += [f'WATCHDOG_USEC={usec}', 'WATCHDOG_PID=$$']
    line = ' '.join(shlex.quote(c) for c in cmd + envargs + exe)
    line = line.replace(shlex.quote('WATCHDOG_PID=$$'), '"WATCHDOG_PID=$$"')
    sh.append('exec ' + line)
    return (pw.pw_uid, gid), '\n'.join(sh)


def prepare(unit, owner):
    """What systemd makes before starting: the runtime and logs directories."""
    for path, mode, _ in state_dirs(unit):
        os.makedirs(path, exist_ok=True)
        os.chown(path, *owner)
        os.chmod(path, mode)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('unit')
    ap.add_argument('--dropin', action='append', default=[])
    ap.add_argument('--instance')
    ap.add_argument('--prefix-map', action='append', default=[])
    ap.add_argument('--seccomp', default='unit_seccomp')
    ap.add_argument('--groups', default=os.path.join(os.path.dirname(__file__), '..', 'tests',
                                                     'syscall-groups.txt'))
    ap.add_argument('--allow-out', default='/run/unit_sandbox.syscalls')
    ap.add_argument('--env', action='append', default=[])
    ap.add_argument('--watchdog-usec', type=int, default=0)
    ap.add_argument('--notify-socket')
    ap.add_argument('--dry-run', action='store_true')
    args = ap.parse_args()
    unit = load(args.unit, args.dropin, args.instance)
    owner, script = plan(unit, args)
    if args.dry_run:
        for k in sorted(unit):
            print(f'# {k}={" | ".join(unit[k])}: {RULES[k]}')
        print(script)
        return
    prepare(unit, owner)
    ns = ['unshare', '--mount', '--uts']
    if yes(unit, 'Service.PrivateNetwork'):
        ns.append('--net')
    if yes(unit, 'Service.PrivateIPC'):
        ns.append('--ipc')
    os.execvp(ns[0], ns + ['--', 'bash', '-c', script])


if __name__ == '__main__':
    main()
