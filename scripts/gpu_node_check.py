#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""gpu_node_check.py - issue 19's checks on a GPU node that has no systemd: the units'
services run in their sandboxes by hand (scripts/unit_sandbox.py), and an operator's and a
trainer's view of them is checked, one line per check:

  - dashd@0 (systemd/dashd@.service, --backend cuda) becomes READY from its main PID with a
    STATUS line, within TimeoutStartSec, as user dash with no_new_privs, seccomp, no
    capabilities and its own network namespace;
  - the device nodes it holds open are all ones DeviceAllow=char-nvidia* (or the closed
    policy) allows - the node's new /dev holds no others, so CUDA ran with only those;
  - /run/dashd and its socket belong to group dash; a member pings, a non-member is told
    "permission denied";
  - a member's shared-memory forward and backward (build/demo_client: float64 check,
    repeated bits) and a member's CUDA-tensor training call with no DASHD_ENDPOINT
    (scripts/gpu_node_client.py: libdash finds /run/dashd/gpu0.sock; float64, repeat bits);
  - the watchdog pings at half its period, SIGHUP (ExecReload) reloads and it serves on,
    KillSignal stops it with STOPPING=1 and exit status 0;
  - with --mps: dashd-mps.service's control daemon (user dash) first, then dashd@0 with the
    dashd-mps.conf drop-in: dashd says `GPU sharing: mps`, and the two clients above again
    (the CUDA one as user dash, as docs/mps.md says MPS needs), then ExecStop quits MPS.

    sudo python3 scripts/gpu_node_check.py [--bundle .gpu] [--mps] [--cpu] [--trial DROPIN]...

--bundle: a folder of bin/ (dashd, dashctl, demo_client, unit_seccomp) and lib/ (from
../shared/gpu/bundle.sh) staged into /opt/dashd-node (the units' /usr/local there), the
bundle's libraries found through LD_LIBRARY_PATH; --cpu: dashd.service (CPU engine) with
the programs of --build (default build/), for a machine without a GPU (make test-install). The users dash (from systemd/dashd.sysusers),
dashnode-member (in group dash) and dashnode-other are made when missing. Needs root,
unshare, setpriv, useradd. Exit status 0 when every check passed, 77 when this machine
cannot run it.
"""
import argparse
import atexit
import glob
import os
import pwd
import grp
import shlex
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import time

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(root, 'scripts'))
import unit_sandbox  # noqa: E402

STAGE = '/opt/dashd-node'
# the system's Python, which every user may run (a user's own may not be readable by dash)
PYTHON = shutil.which('python3', path='/usr/bin:/bin') or 'python3'
# the trainers' Python: the one running this check, which has PyTorch (the GPU machine's
# /opt/torch/.venv); it must be readable by the users it runs as
TORCH_PYTHON = sys.executable
NOTIFY = '/run/dashd-node-notify.sock'
GROUPS = os.path.join(root, 'tests', 'syscall-groups.txt')
MEMBER, OTHER = 'dashnode-member', 'dashnode-other'
results = []


def report(ok, what):
    results.append(ok)
    print(('ok   ' if ok else 'FAIL ') + what, flush=True)


def note(what):
    print('note ' + what, flush=True)


def sh(cmd, user=None, env=None, timeout=120):
    """Runs cmd (a list) as user with a login-free clean environment plus env."""
    e = {'PATH': '/usr/local/bin:/usr/bin:/bin', 'LANG': 'C.UTF-8'}
    e.update(env or {})
    if user:
        pw = pwd.getpwnam(user)
        e.update(HOME='/tmp', USER=user, LOGNAME=user)
        cmd = ['setpriv', f'--reuid={pw.pw_uid}', f'--regid={pw.pw_gid}', '--init-groups', '--'] + cmd
    try:
        p = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=timeout)
        return p.returncode, (p.stdout + p.stderr).strip()
    except subprocess.TimeoutExpired as t:
        return 124, f'timed out after {timeout} s: {(t.stdout or b"")[-300:]!r}'


def users():
    for line in open(os.path.join(root, 'systemd', 'dashd.sysusers')):
        if line.startswith('u '):
            parts = shlex.split(line)
            name, desc, home, shell = parts[1], parts[3], parts[4], parts[5]
            try:
                pwd.getpwnam(name)
            except KeyError:
                subprocess.run(['useradd', '--system', '--user-group', '-c', desc, '-d', home,
                                '-s', shell, name], check=True)
    for name, groups in ((MEMBER, ['-G', 'dash']), (OTHER, [])):
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(['useradd', '-M', '-N', *groups, name], check=True)


def stage(bundle, cpu, build):
    if os.path.exists(STAGE):
        shutil.rmtree(STAGE)
    os.makedirs(STAGE + '/bin')
    for p in ('dashd', 'dashctl', 'demo_client', 'unit_seccomp'):
        shutil.copy2(os.path.join(build if cpu else os.path.join(bundle, 'bin'), p), STAGE + '/bin/')
    if cpu:  # the machine's own libraries, and build's libdash
        os.makedirs(STAGE + '/lib')
        for p in glob.glob(os.path.join(build, 'libdash.so*')):
            shutil.copy2(p, STAGE + '/lib/', follow_symlinks=False)
    else:  # the bundle's, libdash among them
        shutil.copytree(os.path.join(bundle, 'lib'), STAGE + '/lib', symlinks=True)
    shutil.copytree(os.path.join(root, 'client', 'python'), STAGE + '/python',
                    ignore=shutil.ignore_patterns('tests', '__pycache__', '*.egg-info'))
    shutil.copy2(os.path.join(root, 'scripts', 'gpu_node_client.py'), STAGE + '/')
    for dirpath, dirs, files in os.walk(STAGE):
        os.chmod(dirpath, 0o755)
        for f in files:
            p = os.path.join(dirpath, f)
            if not os.path.islink(p):
                os.chmod(p, 0o755 if os.access(p, os.X_OK) else 0o644)


class Notify:
    """NOTIFY_SOCKET's listener: datagrams with their sender's PID."""

    def __init__(self):
        if os.path.exists(NOTIFY):
            os.unlink(NOTIFY)
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.s.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.s.bind(NOTIFY)
        os.chmod(NOTIFY, 0o666)  # systemd's notify socket is writable by services

    def wait(self, pred, timeout):
        """Messages (pid, {key: value}) until pred(pid, fields) or timeout; all of them."""
        got, end = [], time.time() + timeout
        while time.time() < end:
            self.s.settimeout(max(0.01, end - time.time()))
            try:
                data, anc, _, _ = self.s.recvmsg(4096, socket.CMSG_SPACE(12))
            except socket.timeout:
                break
            pid = -1
            for level, typ, d in anc:
                if level == socket.SOL_SOCKET and typ == socket.SCM_CREDENTIALS:
                    pid = struct.unpack('iII', d[:12])[0]
            fields = dict(l.split('=', 1) for l in data.decode().splitlines() if '=' in l)
            got.append((pid, fields))
            if pred(pid, fields):
                break
        return got


class Service:
    def __init__(self, unit_file, instance=None, dropins=(), log=None, watchdog_usec=0):
        self.unit = unit_sandbox.load(unit_file, dropins, instance)
        self.name = os.path.basename(unit_file).replace('@', f'@{instance}' if instance else '@')
        self.log = open(log, 'w')
        cmd = [sys.executable, os.path.join(root, 'scripts', 'unit_sandbox.py'), unit_file,
               '--prefix-map', f'/usr/local={STAGE}', '--seccomp', STAGE + '/bin/unit_seccomp',
               '--allow-out', f'{STAGE}/{self.name}.syscalls',
               '--env', f'LD_LIBRARY_PATH={STAGE}/lib', '--notify-socket', NOTIFY]
        if instance is not None:
            cmd += ['--instance', instance]
        for d in dropins:
            cmd += ['--dropin', d]
        if watchdog_usec:
            cmd += ['--watchdog-usec', str(watchdog_usec)]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.pid = self.proc.pid
        # a check that dies half way leaves no service running
        atexit.register(lambda p=self.proc: p.poll() is None and p.kill())

    def one(self, key, default=None):
        return unit_sandbox.one(self.unit, key, default)

    def journal(self):
        self.log.flush()
        return open(self.log.name).read()


def status_of(pid):
    f = {}
    for line in open(f'/proc/{pid}/status'):
        k, _, v = line.partition(':')
        f[k] = v.strip()
    return f


def open_devices(pid):
    """(path, major, minor) of the character devices the process holds open or mapped."""
    seen = set()
    paths = []
    for fd in glob.glob(f'/proc/{pid}/fd/*'):
        try:
            paths.append(os.readlink(fd))
        except OSError:
            pass
    for line in open(f'/proc/{pid}/maps'):
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].strip().startswith('/dev/'):
            paths.append(parts[5].strip())
    out = []
    for p in paths:
        # the service's /dev is its own: read the node through its root
        try:
            st = os.stat(f'/proc/{pid}/root{p}')
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode) and p not in seen:
            seen.add(p)
            out.append((p, os.major(st.st_rdev), os.minor(st.st_rdev)))
    return sorted(out)


def dashd_unit(args):
    """The unit this check runs dashd by, and its instance: dashd.service on the CPU,
    dashd@0 on a GPU."""
    return os.path.join(root, 'systemd', 'dashd.service' if args.cpu else 'dashd@.service'), \
        None if args.cpu else '0'


def run_dashd(args, notify, dropins=(), label='dashd', cuda_user=MEMBER):
    unit, instance = dashd_unit(args)
    svc = Service(unit, instance, [*dropins, *args.trial],
                  log=os.path.join(args.out, f'{label}.log'), watchdog_usec=4_000_000)
    limit = unit_sandbox.seconds(svc.one('Service.TimeoutStartSec', '90s'))
    t0 = time.time()
    msgs = notify.wait(lambda pid, f: f.get('READY') == '1', limit)
    ready = [p for p, f in msgs if f.get('READY') == '1']
    status = [f['STATUS'] for p, f in msgs if 'STATUS' in f]
    report(ready == [svc.pid], f'{label}: READY=1 from the main PID {svc.pid} after {time.time() - t0:.1f} s '
           f'(TimeoutStartSec {limit:.0f} s; senders {ready}); STATUS: {status[-1] if status else None}')
    if not ready:
        print(svc.journal()[-3000:])
        svc.proc.kill()
        return None
    st = status_of(svc.pid)
    dash = pwd.getpwnam('dash')
    uids = st['Uid'].split()
    report(uids[0] == uids[1] == str(dash.pw_uid) and st['NoNewPrivs'] == '1' and st['Seccomp'] == '2'
           and int(st['CapBnd'], 16) == 0 and int(st['CapEff'], 16) == 0,
           f'{label}: runs as dash (uid {uids[0]}), NoNewPrivs {st["NoNewPrivs"]}, Seccomp {st["Seccomp"]}, '
           f'CapBnd {st["CapBnd"]}, CapEff {st["CapEff"]}')
    own = [ns for ns in ('mnt', 'net', 'uts', 'ipc')
           if os.readlink(f'/proc/{svc.pid}/ns/{ns}') != os.readlink(f'/proc/self/ns/{ns}')]
    want = ['mnt', 'uts'] + ['net'] * unit_sandbox.yes(svc.unit, 'Service.PrivateNetwork') + \
        ['ipc'] * unit_sandbox.yes(svc.unit, 'Service.PrivateIPC')
    report(set(want) <= set(own), f'{label}: in namespaces of its own: {" ".join(own)}')
    devs = open_devices(svc.pid)
    allowed = unit_sandbox.device_nodes(svc.unit.get('Service.DeviceAllow', []))
    allowed_ids = {(m, n) for _, m, n in allowed}
    names = ', '.join(p for p, _, _ in devs)
    report(all((m, n) in allowed_ids for _, m, n in devs) and (args.cpu or any('nvidia' in p for p, _, _ in devs)),
           f'{label}: device nodes held open ({names or "none"}) are all allowed by DevicePolicy=closed, '
           f'DeviceAllow={" ".join(svc.unit.get("Service.DeviceAllow", []))}')
    endpoint = [a for a in shlex.split(svc.one('Service.ExecStart')) if a.startswith('ipc://')][0]
    sock = endpoint[len('ipc://'):]
    for _ in range(50):
        if os.path.exists(sock):
            break
        time.sleep(0.1)
    d, s = os.stat(os.path.dirname(sock)), os.stat(sock)
    report(grp.getgrgid(d.st_gid).gr_name == 'dash' and stat.S_IMODE(d.st_mode) == 0o750
           and grp.getgrgid(s.st_gid).gr_name == 'dash' and stat.S_IMODE(s.st_mode) & 0o060 == 0o060
           and stat.S_IMODE(s.st_mode) & 0o007 == 0,
           f'{label}: {os.path.dirname(sock)} {stat.filemode(d.st_mode)} :{grp.getgrgid(d.st_gid).gr_name}, '
           f'socket {stat.filemode(s.st_mode)} {pwd.getpwuid(s.st_uid).pw_name}:{grp.getgrgid(s.st_gid).gr_name}')
    cenv = {'LD_LIBRARY_PATH': STAGE + '/lib'}
    rc, out = sh([STAGE + '/bin/dashctl', 'ping', '--endpoint', endpoint, '--count', '3'], MEMBER, cenv)
    report(rc == 0, f'{label}: a member of group dash pings: {out.splitlines()[-1] if out else ""}')
    rc, out = sh([STAGE + '/bin/dashctl', 'ping', '--endpoint', endpoint, '--count', '1'], OTHER, cenv)
    report(rc != 0 and 'permission denied' in out.lower(),
           f'{label}: a non-member is told: {out.splitlines()[0] if out else ""}')
    rc, out = sh([STAGE + '/bin/demo_client', endpoint], MEMBER, cenv, timeout=300)
    report(rc == 0, f'{label}: a member\'s shared-memory forward and backward (demo_client): '
           f'{out.splitlines()[-1] if out else ""}')
    if not args.cpu:
        penv = dict(cenv, PYTHONPATH=STAGE + '/python', DASH_LIBRARY=STAGE + '/lib/libdash.so')
        if cuda_user == 'dash':
            penv['CUDA_MPS_PIPE_DIRECTORY'] = '/run/nvidia-mps'
        rc, out = sh([TORCH_PYTHON, STAGE + '/gpu_node_client.py'], cuda_user, penv, timeout=300)
        report(rc == 0, f'{label}: CUDA tensors as {cuda_user}, no DASHD_ENDPOINT: {out.splitlines()[-1] if out else ""}')
        if cuda_user != MEMBER:
            # a trainer of another user, outside MPS (no pipe directory), beside an MPS dashd:
            # recorded, not required (docs/mps.md: MPS serves dashd's user)
            del penv['CUDA_MPS_PIPE_DIRECTORY']
            rc, out = sh([TORCH_PYTHON, STAGE + '/gpu_node_client.py'], MEMBER, penv, timeout=120)
            note(f'{label}: CUDA tensors as {MEMBER}, outside MPS: rc {rc}: {out.splitlines()[-1] if out else ""}')
    rc, out = sh([STAGE + '/bin/dashctl', 'stats', '--endpoint', endpoint], MEMBER, cenv)
    sharing = [l.strip() for l in out.splitlines() if 'GPU sharing' in l]
    note(f'{label}: dashctl stats: {sharing[0] if sharing else out.splitlines()[:2]}')
    svc.sharing = sharing[0] if sharing else ''
    # the watchdog: WATCHDOG_USEC is 4 s here (the unit's 30 s, shortened as
    # systemd_boot_test.sh does); dashd pings every half period
    msgs = notify.wait(lambda pid, f: False, 9)
    pings = [p for p, f in msgs if f.get('WATCHDOG') == '1']
    report(len(pings) >= 3 and set(pings) == {svc.pid} and svc.proc.poll() is None,
           f'{label}: {len(pings)} watchdog pings in 9 s from the main PID (period 4 s; senders {sorted(set(pings))})')
    reload = svc.one('Service.ExecReload').replace('$MAINPID', str(svc.pid))
    subprocess.run(shlex.split(reload), check=False)
    time.sleep(1.5)
    rc, out = sh([STAGE + '/bin/dashctl', 'ping', '--endpoint', endpoint, '--count', '2'], MEMBER, cenv)
    line = [l for l in svc.journal().splitlines() if 'SIGHUP' in l]
    report(rc == 0 and svc.proc.poll() is None and bool(line),
           f'{label}: ExecReload ({reload}) logged "{line[-1].strip() if line else ""}", still serving')
    return svc


def stop(svc, notify, label):
    sig = getattr(signal, svc.one('Service.KillSignal', 'SIGTERM'))
    limit = unit_sandbox.seconds(svc.one('Service.TimeoutStopSec', '90s'))
    os.kill(svc.pid, sig)
    msgs = notify.wait(lambda pid, f: f.get('STOPPING') == '1', limit)
    try:
        rc = svc.proc.wait(limit)
    except subprocess.TimeoutExpired:
        svc.proc.kill()
        rc = 'killed after TimeoutStopSec'
    report(rc == 0 and any(f.get('STOPPING') == '1' for _, f in msgs),
           f'{label}: {signal.Signals(sig).name} -> STOPPING=1, exit status {rc}')
    writable = [l for l in svc.journal().splitlines() if 'stays writable' in l]
    if writable:
        note(f'{label}: mounts ProtectSystem could not make read-only here: {"; ".join(writable)}')


PROBE = '''
import ctypes, errno, os, socket
libc = ctypes.CDLL(None, use_errno=True)
def c(rc):
    if rc < 0:
        raise OSError(ctypes.get_errno(), '')
def tr(f):
    try:
        f()
        return 'ok'
    except OSError as e:
        return errno.errorcode[e.errno]
print(' '.join(f'{k}={tr(f)}' for k, f in (
    ('inet', lambda: socket.socket(socket.AF_INET)), ('unix', lambda: socket.socket(socket.AF_UNIX)),
    ('unshare', lambda: c(libc.unshare(0x40000000))), ('chroot', lambda: os.chroot('/')),
    ('fifo', lambda: os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))),
    ('personality', lambda: c(libc.personality(0x0040000))))))
'''


def filter_probe(args):
    """The seccomp filter dashd's unit gets, checked to bite: calls the unit forbids fail
    with the unit's errors, an AF_UNIX socket works."""
    unit_file, instance = dashd_unit(args)
    unit = unit_sandbox.load(unit_file, (), instance)
    listfile = STAGE + '/probe.syscalls'
    argv = unit_sandbox.seccomp_argv(unit, STAGE + '/bin/unit_seccomp', listfile, GROUPS)
    rc, out = sh(argv + [PYTHON, '-c', PROBE], 'dash')
    want = 'inet=EAFNOSUPPORT unix=ok unshare=EPERM chroot=EPERM fifo=EPERM personality=EPERM'
    allowed = sum(1 for _ in open(listfile))
    report(rc == 0 and out == want, f'the units\' seccomp filter bites ({allowed} calls allowed): {out}')


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--bundle', default=os.path.join(root, '.gpu'))
    ap.add_argument('--cpu', action='store_true')
    ap.add_argument('--build', default=os.path.join(root, 'build'), help="--cpu's programs")
    ap.add_argument('--mps', action='store_true')
    ap.add_argument('--trial', action='append', default=[],
                    help='a drop-in of directives to try, applied to every dashd run after the units\' own')
    ap.add_argument('--out', default=os.environ.get('OUT', '/tmp'))
    args = ap.parse_args()
    args.out, args.build = os.path.abspath(args.out), os.path.abspath(args.build)
    if os.getuid() != 0 or not all(shutil.which(t) for t in ('unshare', 'setpriv', 'useradd', 'mount')):
        print('gpu_node_check: needs root, unshare, setpriv, useradd and mount')
        sys.exit(77)
    taken = [d for d in ('/run/dashd', STAGE) if os.path.lexists(d)]
    if taken and not os.environ.get('GPU_NODE_CHECK_INNER'):
        # a dashd installed and running here owns them: this check would collide with it
        print(f'gpu_node_check: {", ".join(taken)} already there (a dashd installed on this machine?)')
        sys.exit(77)
    if not os.environ.get('GPU_NODE_CHECK_INNER'):
        # the users this makes live in a copy of /etc, in a mount namespace of this run's
        # own, which the services' namespaces inherit; the machine's /etc is left alone
        made = [d for d in ('/run/dashd', '/run/nvidia-mps', '/var/log/dashd', '/var/log/nvidia-mps',
                            STAGE, NOTIFY) if not os.path.lexists(d)]
        etc = subprocess.run(['mktemp', '-d', '/tmp/node-etc-XXXXXX'], capture_output=True,
                             text=True, check=True).stdout.strip()
        try:
            subprocess.run(['cp', '-a', '/etc/.', etc], check=True)
            inner = f'mount --bind {shlex.quote(etc)} /etc && exec ' + ' '.join(
                shlex.quote(a) for a in [sys.executable, *sys.argv])
            rc = subprocess.run(['unshare', '--mount', '--propagation', 'private', 'bash', '-c', inner],
                                env=dict(os.environ, GPU_NODE_CHECK_INNER='1')).returncode
        except (OSError, subprocess.CalledProcessError) as e:
            print(f'gpu_node_check: a private /etc: {e}')
            rc = 77
        finally:
            shutil.rmtree(etc, ignore_errors=True)
            for d in made:  # what this run made, and only that
                if os.path.isdir(d):
                    shutil.rmtree(d, ignore_errors=True)
                elif os.path.lexists(d):
                    os.unlink(d)
        sys.exit(rc)
    if os.path.exists('/run/systemd/system'):
        note('this machine runs systemd: scripts/systemd_boot_test.sh checks the units for real')
    users()
    stage(args.bundle, args.cpu, args.build)
    notify = Notify()
    filter_probe(args)
    svc = run_dashd(args, notify)
    if svc:
        stop(svc, notify, 'dashd')
    if args.mps and not args.cpu:
        mps_unit = os.path.join(root, 'systemd', 'dashd-mps.service')
        mps = Service(mps_unit, log=os.path.join(args.out, 'mps.log'))
        rc = mps.proc.wait(60)  # Type=forking: the control daemon forked and the start exits 0
        report(rc == 0, f'dashd-mps: nvidia-cuda-mps-control -d in its sandbox as dash, start exit status {rc}')
        svc = run_dashd(args, notify, [os.path.join(root, 'systemd', 'dashd-mps.conf')], 'dashd-under-mps',
                        cuda_user='dash')
        if svc:
            report('mps' in svc.sharing, f'dashd-under-mps: {svc.sharing or "no GPU sharing line"}')
            stop(svc, notify, 'dashd-under-mps')
        rc, out = sh(shlex.split(mps.one('Service.ExecStop')), mps.one('Service.User'),
                     unit_sandbox.environment(mps.unit))
        for _ in range(100):  # the server finishes its clients' teardown first
            left = subprocess.run(['pgrep', '-a', '-u', 'dash', '-f', 'nvidia-cuda-mps'], capture_output=True,
                                  text=True).stdout
            if not left.strip():
                break
            time.sleep(0.2)
        report(rc == 0 and not left.strip(), f'dashd-mps: ExecStop quit the control daemon and server (rc {rc}; left: {left.strip() or "none"})')
    print(f'gpu_node_check: {sum(results)} of {len(results)} checks passed')
    sys.exit(0 if results and all(results) else 1)


if __name__ == '__main__':
    main()
