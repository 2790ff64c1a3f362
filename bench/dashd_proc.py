# SPDX-License-Identifier: BSD-3-Clause
"""dashd_proc.py - the benches' one way to start a dashd of their own: on a private
endpoint in `work` (its log in work/dashd.log), waited for until its socket exists, with
$DASHD_ENDPOINT pointing at it for dash_attn; one that exits first is an error naming its
last log line."""
import atexit
import os
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
