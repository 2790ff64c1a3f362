#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""test_unit_sandbox.py - scripts/unit_sandbox.py's reading of units (make test runs it;
the sandbox itself runs in make test-install and on the GPU node): every directive of the
units we ship has a rule, an unknown one is refused by name, SystemCallFilter= expands as
systemd reads it, drop-ins append and an empty assignment resets, time spans and device
patterns read right. unittest; exit status 0 when every check passed.
"""
import os
import sys
import tempfile
import unittest

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(root, "scripts"))
import unit_sandbox  # noqa: E402

GROUPS = os.path.join(root, "tests", "syscall-groups.txt")


def write(text):
    f = tempfile.NamedTemporaryFile("w", suffix=".service", delete=False)
    f.write(text)
    f.close()
    return f.name


class UnitSandbox(unittest.TestCase):
    def test_every_directive_of_the_shipped_units_has_a_rule(self):
        units = [f for f in os.listdir(os.path.join(root, "systemd")) if f.endswith((".service", ".conf"))
                 and f != "dashd.conf.example"]
        assert {"dashd.service", "dashd@.service", "dashd-mps.service", "dashd-mps.conf"} <= set(units), units
        for f in units:
            unit = unit_sandbox.load(os.path.join(root, "systemd", f), instance="0")
            assert unit, f

    def test_an_unknown_directive_is_refused_by_name(self):
        path = write("[Service]\nExecStart=/bin/true\nMemoryMax=1G\n")
        try:
            with self.assertRaises(SystemExit) as refused:  # MemoryMax= has no rule
                unit_sandbox.load(path)
        finally:
            os.unlink(path)
        self.assertIn("Service.MemoryMax", str(refused.exception))

    def test_the_units_filter_allows_service_calls_and_not_privileged_ones(self):
        unit = unit_sandbox.load(os.path.join(root, "systemd", "dashd@.service"), instance="0")
        allow = set(unit_sandbox.syscall_allow_list(unit, GROUPS))
        for call in ("read", "write", "ioctl", "mmap", "futex", "execve", "socket", "sched_setaffinity"):
            assert call in allow, call
        for call in ("setuid", "chroot", "chown", "clock_settime", "init_module", "mount", "bpf", "reboot"):
            assert call not in allow, call

    def test_a_deny_list_first_is_refused_and_later_lines_add_or_remove(self):
        path = write("[Service]\nSystemCallFilter=~@mount\n")
        try:
            with self.assertRaises(SystemExit):  # not read as an allow list
                unit_sandbox.syscall_allow_list(unit_sandbox.load(path), GROUPS)
        finally:
            os.unlink(path)
        path = write("[Service]\nSystemCallFilter=@basic-io\nSystemCallFilter=mount\nSystemCallFilter=~read\n")
        allow = unit_sandbox.syscall_allow_list(unit_sandbox.load(path), GROUPS)
        os.unlink(path)
        assert "mount" in allow and "read" not in allow and "write" in allow, allow

    def test_dropins_append_and_an_empty_assignment_resets(self):
        unit = write("[Service]\nExecStart=/bin/true\nEnvironment=A=1\nReadWritePaths=/tmp\n")
        drop = write("[Service]\nEnvironment=B=2\nReadWritePaths=\nReadWritePaths=-/run/x\n")
        u = unit_sandbox.load(unit, [drop])
        os.unlink(unit)
        os.unlink(drop)
        assert u["Service.Environment"] == ["A=1", "B=2"], u
        assert u["Service.ReadWritePaths"] == ["-/run/x"], u

    def test_instance_and_time_spans(self):
        u = unit_sandbox.load(os.path.join(root, "systemd", "dashd@.service"), instance="3")
        assert "--device 3" in unit_sandbox.one(u, "Service.ExecStart"), u["Service.ExecStart"]
        assert "gpu3.sock" in unit_sandbox.one(u, "Service.ExecStart")
        for text, want in (("30s", 30), ("5min", 300), ("300", 300), ("1min 30s", 90), ("250ms", 0.25)):
            assert abs(unit_sandbox.seconds(text) - want) < 1e-9, (text, unit_sandbox.seconds(text))

    def test_a_closed_device_policy_keeps_the_pseudo_devices_and_only_matching_drivers(self):
        nodes = {p for p, _, _ in unit_sandbox.device_nodes(["char-nvidia* rw"])}
        assert "/dev/null" in nodes and "/dev/urandom" in nodes, nodes
        assert all(p.startswith("/dev/nvidia") or os.path.basename(p) in unit_sandbox.CLOSED_DEVICES
                   for p in nodes), nodes
        # a pattern that matches the memory devices' driver lets /dev/mem through
        if os.path.exists("/dev/mem"):
            assert "/dev/mem" in {p for p, _, _ in unit_sandbox.device_nodes(["char-mem r"])}
        with self.assertRaises(SystemExit):  # a path pattern is not half read
            unit_sandbox.device_nodes(["/dev/sda rw"])



if __name__ == "__main__":
    unittest.main()
