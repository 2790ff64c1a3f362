#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""test_dashd_proc.py - bench/dashd_proc.py without a GPU: start_dashd starts a real dashd
(CPU backend) and a script that fails half-way leaves none behind; launch_hops and
launch_parts read the lines daemon/dispatch_op.c and backend_cuda.c write for a
signal-ordered op (their format strings, taken from the source, filled in), match lines to
calls in order and refuse lines that cannot be them.

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


def daemon_line(kind, received, validated, started, launched, rid=7):
    return filled(c_format("dispatch_op.c", "request %llu of session %llu: %s launched"),
                  rid, 3, kind, received, validated, started, launched)


def parts_line(kind, *us):
    return filled(c_format("backend_cuda.c", "signal-ordered %s launch"), kind, *us)


class LaunchHops(unittest.TestCase):
    def test_the_daemons_line_is_read_and_matched_to_calls_in_order(self):
        lines = ["2026-12-06T06:00:00.000Z info listening\n",
                 daemon_line("forward", 1_000_000, 5, 9, 20),      # an earlier call's
                 daemon_line("backward", 1_500_000, 6, 11, 40),
                 daemon_line("forward", 2_030_000, 4, 8, 18),
                 daemon_line("forward", 3_050_000, 6, 12, 30)]
        hops = dashd_proc.launch_hops(lines, "forward", [2_000_000, 3_000_000])
        self.assertIsInstance(hops, list, hops)
        got = dict(hops)
        self.assertEqual(len(got), 5)
        entry = [v for k, v in got.items() if k.startswith("the call's entry to dashd")][0]
        self.assertEqual(entry, 40)                                # (30 + 50) / 2 us
        self.assertEqual(got["receipt to validated and queued for the worker"], 5)
        self.assertEqual(got["receipt to the worker starting it"], 10)
        self.assertEqual(got["receipt to its kernels launched"], 24)
        self.assertEqual(got["the call's entry to its kernels launched"], 64)  # (48 + 80) / 2

    def test_too_few_lines_or_lines_before_their_calls_are_said_not_used(self):
        lines = [daemon_line("backward", 5_000_000, 1, 2, 3)]
        self.assertIn("1 signal-ordered backward launches, 2 calls",
                      dashd_proc.launch_hops(lines, "backward", [1, 2]))
        self.assertIn("0 signal-ordered forward", dashd_proc.launch_hops(lines, "forward", [1]))
        self.assertIn("received before its call",
                      dashd_proc.launch_hops(lines, "backward", [6_000_000]))


class LaunchParts(unittest.TestCase):
    def test_the_backends_line_gives_each_parts_median_for_the_last_calls(self):
        fmt = c_format("backend_cuda.c", "signal-ordered %s launch")
        self.assertEqual(fmt.count("%llu"), 5, fmt)
        lines = [parts_line("forward", 99, 99, 99, 99, 99),             # an earlier call's
                 parts_line("backward", 7, 7, 7, 7, 7),
                 parts_line("forward", 1, 10, 3, 2, 5),
                 parts_line("forward", 3, 30, 5, 4, 5),
                 parts_line("forward", 2, 20, 4, 3, 5)]
        got = dashd_proc.launch_parts(lines, "forward", 3)
        self.assertIsInstance(got, list, got)
        self.assertEqual([us for _, us in got], [2, 20, 4, 3, 5])
        self.assertEqual(got[0][0], "ready wait")
        self.assertEqual(dashd_proc.launch_parts(lines, "backward", 1)[1][1], 7)
        self.assertIn("1 backward launches' parts, 2 calls",
                      dashd_proc.launch_parts(lines, "backward", 2))


@unittest.skipUnless(os.access(DASHD, os.X_OK), f"no dashd at {DASHD} (make first)")
class StartDashd(unittest.TestCase):
    def test_a_script_that_fails_half_way_leaves_no_dashd_behind(self):
        with tempfile.TemporaryDirectory() as work:
            script = textwrap.dedent(f"""
                import sys
                sys.path.insert(0, {HERE!r})
                import dashd_proc
                p = dashd_proc.start_dashd({DASHD!r}, {work!r})
                print(p.pid, flush=True)
                raise SystemExit("failed half-way")
            """)
            run = subprocess.run([sys.executable, "-c", script], capture_output=True,
                                 text=True, timeout=60)
            self.assertEqual(run.returncode, 1, run.stderr)
            pid = int(run.stdout.split()[0])
            with self.assertRaises(ProcessLookupError):  # stopped and reaped
                os.kill(pid, 0)
            log = open(os.path.join(work, "dashd.log")).read()
            self.assertIn("stopped", log)

    def test_a_dashd_that_cannot_start_is_an_error_naming_its_last_line(self):
        with tempfile.TemporaryDirectory() as work:
            with self.assertRaises(RuntimeError) as e:
                dashd_proc.start_dashd(DASHD, work, "--no-such-option")
            self.assertIn("dashd did not start", str(e.exception))


if __name__ == "__main__":
    unittest.main()
