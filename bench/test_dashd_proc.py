#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""test_dashd_proc.py - bench/dashd_proc.py without a GPU: start_dashd starts a real dashd
(CPU backend) and a script that fails half-way leaves none behind; launch_hops reads
the lines daemon/dispatch_op.c and backend_cuda.c write for a signal-ordered op (their
format strings, taken from the source, filled in), matches each call with the first launch
received after it and refuses calls without one.

    python3 bench/test_dashd_proc.py        (make test runs it)
"""
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import dashd_proc  # noqa: E402

DASHD = os.environ.get("DASHD", os.path.join(ROOT, "build", "dashd"))


def c_format(path, start):
    """The printf format of the log_debug call in daemon/`path` whose format begins with
    `start` (its C string literals joined)."""
    src = open(os.path.join(ROOT, "daemon", path)).read()
    m = re.search(r'log_debug\(("' + re.escape(start) + r'.*?)",\s*[a-z(]', src, re.S)
    assert m, f"{path} has no debug line starting {start!r}"
    return "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(1) + '"'))


def filled(fmt, *values):
    it = iter(values)
    return "2026-12-06T06:00:00.000Z debug " + re.sub(r"%(llu|s)", lambda _: str(next(it)), fmt) + "\n"


def daemon_line(kind, arrived, queued, started, launched, made=2, rid=7):
    """dispatch_op.c's line: arrived (ns), then us from then: the job made, queued, the
    worker started, launched."""
    return filled(c_format("dispatch_op.c", "request %llu of session %llu: %s launched"),
                  rid, 3, kind, arrived, made, queued, started, launched)


def parts_line(kind, *us):
    return filled(c_format("backend_cuda.c", "signal-ordered %s launch"), kind, *us)


class LaunchHops(unittest.TestCase):
    def test_each_call_gets_the_first_launch_received_after_it_with_its_parts(self):
        fmt = c_format("backend_cuda.c", "signal-ordered %s launch")
        self.assertEqual(fmt.count("%llu"), 5, fmt)
        lines = ["2026-12-06T06:00:00.000Z info listening\n",
                 parts_line("forward", 99, 99, 99, 99, 99),
                 daemon_line("forward", 1_000_000, 5, 9, 20),       # before the calls
                 parts_line("backward", 7, 7, 7, 7, 7),
                 daemon_line("backward", 2_010_000, 6, 11, 40),     # another kind
                 parts_line("forward", 1, 10, 3, 2, 5),
                 daemon_line("forward", 2_030_000, 4, 8, 18),
                 parts_line("forward", 3, 30, 5, 4, 5),
                 daemon_line("forward", 3_050_000, 6, 12, 30),
                 parts_line("forward", 9, 9, 9, 9, 9),
                 daemon_line("forward", 3_900_000, 1, 1, 1),        # a second op of call 2
                 parts_line("forward", 2, 20, 4, 3, 5),
                 daemon_line("forward", 5_040_000, 5, 10, 24),
                 daemon_line("forward", 9_000_000, 5, 10, 24)]      # after the calls (profile)
        hops = dashd_proc.launch_hops(lines, "forward", [2_000_000, 3_000_000, 5_000_000])
        self.assertIsInstance(hops, list, hops)
        got = dict(hops)
        self.assertEqual(len(got), 11)
        entry = [v for k, v in got.items() if k.startswith("the call's entry to its arrival")][0]
        self.assertEqual(entry, 40)                                # 30, 50, 40 us
        self.assertEqual(got["arrival to its job made (decoding and validating the request)"], 2)
        self.assertEqual(got["arrival to queued for the worker"], 5)
        self.assertEqual(got["arrival to the worker starting it"], 10)
        self.assertEqual(got["arrival to its kernels launched"], 24)
        self.assertEqual(got["the call's entry to its kernels launched"], 64)  # 48, 80, 64
        self.assertEqual([v for k, v in hops[6:]], [2, 20, 4, 3, 5])
        self.assertEqual(hops[6][0], "of its launch, ready wait")
        b = dashd_proc.launch_hops(lines, "backward", [2_000_000])
        self.assertEqual(dict(b)["of its launch, kernels"], 7)

    def test_a_call_without_a_launch_of_its_own_is_said_not_matched(self):
        lines = [daemon_line("backward", 5_000_000, 1, 2, 3)]
        self.assertIn("call 2 of 2 has no backward launch",
                      dashd_proc.launch_hops(lines, "backward", [4_000_000, 6_000_000]))
        self.assertIn("call 1 of 1 has no forward launch",
                      dashd_proc.launch_hops(lines, "forward", [1]))
        self.assertIn("call 1 of 2 has no backward",  # the launch is call 2's
                      dashd_proc.launch_hops(lines, "backward", [1_000_000, 4_000_000]))
        self.assertIn("no calls", dashd_proc.launch_hops(lines, "backward", []))
        # without the backend's lines there are no parts rows, the hops still
        self.assertEqual(len(dashd_proc.launch_hops(lines, "backward", [4_000_000])), 6)


def holder(work, then):
    """A script that starts a dashd in `work` with start_dashd, prints its pid, then runs
    the statement `then`."""
    return textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {HERE!r})
        import dashd_proc
        p = dashd_proc.start_dashd({DASHD!r}, {work!r})
        print(p.pid, flush=True)
        {then}
    """)


@unittest.skipUnless(os.access(DASHD, os.X_OK), f"no dashd at {DASHD} (make first)")
class StartDashd(unittest.TestCase):
    def test_a_script_that_fails_half_way_leaves_no_dashd_behind(self):
        with tempfile.TemporaryDirectory() as work:
            script = holder(work, 'raise SystemExit("failed half-way")')
            run = subprocess.run([sys.executable, "-c", script], capture_output=True,
                                 text=True, timeout=60)
            self.assertEqual(run.returncode, 1, run.stderr)
            pid = int(run.stdout.split()[0])
            with self.assertRaises(ProcessLookupError):  # stopped and reaped
                os.kill(pid, 0)
            log = open(os.path.join(work, "dashd.log")).read()
            self.assertIn("stopped", log)

    def test_a_script_ended_by_sigterm_leaves_no_dashd_behind(self):
        # as `timeout` ends a bench on the device machine
        import signal
        import time
        with tempfile.TemporaryDirectory() as work:
            script = holder(work, "time.sleep(60)")
            proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                    text=True)
            pid = int(proc.stdout.readline())
            try:
                proc.send_signal(signal.SIGTERM)
                self.assertEqual(proc.wait(timeout=60), 128 + signal.SIGTERM)
                for _ in range(100):  # stopped and reaped by the script's exit
                    try:
                        os.kill(pid, 0)
                    except ProcessLookupError:
                        break
                    time.sleep(0.05)
                else:
                    self.fail("the dashd outlived its script")
            finally:
                try:
                    os.kill(pid, signal.SIGKILL)  # not left behind by a failing check
                except ProcessLookupError:
                    pass

    def test_a_dashd_that_cannot_start_is_an_error_naming_its_last_line(self):
        with tempfile.TemporaryDirectory() as work:
            with self.assertRaises(RuntimeError) as e:
                dashd_proc.start_dashd(DASHD, work, "--no-such-option")
            self.assertIn("dashd did not start", str(e.exception))


if __name__ == "__main__":
    unittest.main()
