# SPDX-License-Identifier: BSD-3-Clause
"""dashd_proc.py - the benches' one way to start a dashd of their own: on a private
endpoint in `work` (its log in work/dashd.log), waited for until its socket exists, with
$DASHD_ENDPOINT pointing at it for dash_attn; one that exits first is an error naming its
last log line. Also launch_hops: where a signal-ordered op's time goes on its way to the
GPU, from dashd's debug log, and launch_parts: where its launch went."""
import atexit
import os
import re
import statistics
import subprocess
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


# dispatch_op.c's debug line for a signal-ordered op, written once its kernels are launched
LAUNCHED = re.compile(r"(forward|backward) launched \(signal-ordered\), received at (\d+) ns "
                      r"\(monotonic\); us from receipt: validated (\d+), worker started "
                      r"(\d+), on the device (\d+)")


def launch_hops(log_lines, kind, starts_ns):
    """Where the last len(starts_ns) signal-ordered `kind` ("forward" or "backward") ops of
    a dashd log (run with --log-level debug) spent their way to the GPU, matched in order to
    the calls that sent them (starts_ns: time.monotonic_ns() at each call's entry, the
    clock dashd logs): a list of (what, median us), or a string saying why there is none
    (too few lines, or a receipt before its call: not the same ops)."""
    got = [tuple(int(x) for x in m.groups()[1:]) for m in
           (LAUNCHED.search(line) for line in log_lines) if m and m.group(1) == kind]
    n = len(starts_ns)
    if n == 0 or len(got) < n:
        return f"dashd logged {len(got)} signal-ordered {kind} launches, {n} calls were timed"
    got = got[-n:]
    transit = [(recv - s0) / 1000 for s0, (recv, *_) in zip(starts_ns, got)]
    if min(transit) < 0:
        return f"a {kind} was received before its call started: the lines are not these calls'"
    med = statistics.median
    return [("the call's entry to dashd's receipt (client, ZeroMQ, dashd's loop, decoding)",
             med(transit)),
            ("receipt to validated and queued for the worker", med(g[1] for g in got)),
            ("receipt to the worker starting it", med(g[2] for g in got)),
            ("receipt to its kernels launched", med(g[3] for g in got)),
            ("the call's entry to its kernels launched",
             med(t + g[3] for t, g in zip(transit, got)))]


# backend_cuda.c's debug line for the same launch: its parts, in us
LAUNCH_PARTS = re.compile(r"signal-ordered (forward|backward) launch, us: ((?:[a-z ]+ \d+(?:, )?)+)$")


def launch_parts(log_lines, kind, n):
    """The median us of each part of the last n signal-ordered `kind` launches in a dashd
    debug log (backend_cuda.c's line: the wait for the client's ready word queued, the
    kernels, ...), as a list of (part, us), or a string saying why there is none."""
    got = []
    for line in log_lines:
        m = LAUNCH_PARTS.search(line.rstrip("\n"))
        if m and m.group(1) == kind:
            got.append([(name, int(us)) for name, us in
                        (part.rsplit(" ", 1) for part in m.group(2).split(", "))])
    if n < 1 or len(got) < n:
        return f"dashd logged {len(got)} {kind} launches' parts, {n} calls were timed"
    got = got[-n:]
    return [(name, statistics.median(g[i][1] for g in got)) for i, (name, _) in enumerate(got[0])]
