# SPDX-License-Identifier: BSD-3-Clause
"""dashd_proc.py - the benches' one way to start a dashd of their own: on a private
endpoint in `work` (its log in work/dashd.log), waited for until its socket exists, with
$DASHD_ENDPOINT pointing at it for dash_attn; one that exits first is an error naming its
last log line. Also launch_hops: where a signal-ordered op's time goes on its way to the
GPU, from dashd's debug log (launches: the lines themselves)."""
import atexit
import os
import re
import signal
import statistics
import subprocess
import sys
import time


def start_dashd(path, work, *args):
    """The dashd at `path` started with `args` (e.g. "--backend", "cuda"); returns its
    process, which is also stopped when Python exits (a script that fails half-way must not
    leave a daemon behind: an MPS control daemon's quit waits for it)."""
    endpoint = f"ipc://{work}/d.sock"
    log = os.path.join(work, "dashd.log")
    with open(log, "w") as f:
        proc = subprocess.Popen([path, "--endpoint", endpoint, *args], stderr=f)
    for _ in range(400):
        if os.path.exists(f"{work}/d.sock") or proc.poll() is not None:
            break
        time.sleep(0.05)
    if not os.path.exists(f"{work}/d.sock"):
        proc.kill()
        proc.wait()
        with open(log) as f:
            last = (f.read().strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"dashd did not start: {last[:200]}")
    os.environ["DASHD_ENDPOINT"] = endpoint
    atexit.register(stop, proc)
    # `timeout` (the device calls' scripts) ends a bench with SIGTERM, which skips atexit
    # unless it is turned into an exit: then the dashd goes too
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    return proc


def stop(proc):
    """Stops a dashd start_dashd started, if it still runs."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# backend_cuda.c's debug line for a signal-ordered op's launch (its parts, in us), written
# on the worker thread just before dispatch_op.c's line for the same op
LAUNCH_PARTS = re.compile(r"signal-ordered (forward|backward) launch, us: "
                          r"((?:[a-z ]+ \d+(?:, )?)+)$")
# dispatch_op.c's line for it, once its kernels are launched
LAUNCHED = re.compile(r"(forward|backward) launched \(signal-ordered\), arrived at (\d+) ns "
                      r"\(monotonic\); us from then: job made (\d+), queued (\d+), worker "
                      r"started (\d+), on the device (\d+)")


def launches(log_lines, kind):
    """The signal-ordered `kind` ("forward" or "backward") launches of a dashd debug log:
    (arrived ns, job made us, queued us, worker started us, launched us, parts), the us from
    the request's arrival, parts a list of (name, us) from the backend's line just before
    (empty if there was none)."""
    out, parts = [], []
    for line in log_lines:
        line = line.rstrip("\n")
        m = LAUNCH_PARTS.search(line)
        if m:
            parts = ([(name, int(us)) for name, us in
                      (part.rsplit(" ", 1) for part in m.group(2).split(", "))]
                     if m.group(1) == kind else [])
            continue
        m = LAUNCHED.search(line)
        if m and m.group(1) == kind:
            out.append((*(int(x) for x in m.groups()[1:]), parts))
        if m:
            parts = []
    return out


def launch_hops(log_lines, kind, starts_ns):
    """Where the signal-ordered `kind` ops a bench timed spent their way to the GPU: each
    call (starts_ns: time.monotonic_ns() at each call's entry, ascending, the clock dashd
    logs) is matched with the first launch dashd received after it and before the next
    call; every call must have one. A list of (what, median us) - the hops, then the
    parts of the launch - or a string saying why there is none."""
    got = sorted(launches(log_lines, kind))
    if not starts_ns:
        return "no calls were timed"
    matched, j = [], 0
    for i, s0 in enumerate(starts_ns):
        end = starts_ns[i + 1] if i + 1 < len(starts_ns) else None
        while j < len(got) and got[j][0] < s0:
            j += 1
        if j == len(got) or (end is not None and got[j][0] >= end):
            return (f"call {i + 1} of {len(starts_ns)} has no {kind} launch in dashd's log "
                    f"({len(got)} logged)")
        matched.append(got[j])
        j += 1
    med = statistics.median
    transit = [(g[0] - s0) / 1000 for s0, g in zip(starts_ns, matched)]
    # "arrived": dashd's loop has read and parsed the request's frame off the connection;
    # its launch stamp is taken after the backend's own debug line (~1-2 us)
    rows = [("the call's entry to its arrival in dashd (the client, ZeroMQ, the socket, "
             "dashd's loop)", med(transit)),
            ("arrival to its job made (decoding and validating the request)",
             med(g[1] for g in matched)),
            ("arrival to queued for the worker", med(g[2] for g in matched)),
            ("arrival to the worker starting it", med(g[3] for g in matched)),
            ("arrival to its kernels launched", med(g[4] for g in matched)),
            ("the call's entry to its kernels launched",
             med(t + g[4] for t, g in zip(transit, matched)))]
    names = [name for name, _ in matched[0][5]]
    if names and all([n for n, _ in g[5]] == names for g in matched):
        rows += [(f"of its launch, {name}", med(g[5][k][1] for g in matched))
                 for k, name in enumerate(names)]
    return rows
