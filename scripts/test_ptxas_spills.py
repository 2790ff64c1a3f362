#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""test_ptxas_spills.py - scripts/ptxas_spills.py on hand-made ptxas reports (no nvcc): a
kernel that starts to spill fails; a known spiller within its bytes passes, one over them
(stored or loaded) fails; a known spiller that stops spilling fails until KNOWN forgets it.

    python3 scripts/test_ptxas_spills.py        (make test runs it)
"""
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "ptxas_spills.py")
spec = importlib.util.spec_from_file_location("ptxas_spills", SCRIPT)
ps = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ps)

# KNOWN's kernels as ptxas names them (c++filt gives KNOWN's names back)
MANGLED = {
    "void attn_bwd_tc_persistent_kernel<attn_f16, 64, 128, 3>(attn_bwd_params, bwd_wg_qmaps)":
        "_Z29attn_bwd_tc_persistent_kernelI8attn_f16Li64ELi128ELi3EEv15attn_bwd_params12bwd_wg_qmaps",
    "void attn_bwd_tc_persistent_kernel<attn_bf16, 64, 128, 3>(attn_bwd_params, bwd_wg_qmaps)":
        "_Z29attn_bwd_tc_persistent_kernelI9attn_bf16Li64ELi128ELi3EEv15attn_bwd_params12bwd_wg_qmaps",
}
PROBE = "void attn_bwd_tc_persistent_kernel<attn_bf16, 64, 128, 3>(attn_bwd_params, bwd_wg_qmaps)"
ST, LD = ps.KNOWN[("sm_90a", PROBE)]  # its allowance


def entry(mangled, arch, stores, loads, regs=168):
    return (f"ptxas info    : Compiling entry function '{mangled}' for '{arch}'\n"
            f"ptxas info    : Function properties for {mangled}\n"
            f"    0 bytes stack frame, {stores} bytes spill stores, {loads} bytes spill loads\n"
            f"ptxas info    : Used {regs} registers, used 1 barriers\n")


@unittest.skipUnless(shutil.which("c++filt"), "c++filt (binutils) is not installed")
class SpillCheck(unittest.TestCase):
    def run_on(self, probe, other=(0, 0)):
        """The check over one report: PROBE spilling probe bytes (None: not built), every
        other KNOWN kernel at its allowance, and one plain kernel spilling other."""
        text = entry("_Z5plainv", "sm_90a", *other, regs=32)
        for (arch, name), (st, ld) in ps.KNOWN.items():
            if name != PROBE:
                text += entry(MANGLED[name], arch, st, ld)
            elif probe is not None:
                text += entry(MANGLED[name], arch, *probe)
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "x.cu.o.ptxas"), "w") as f:
                f.write(text)
            r = subprocess.run([sys.executable, SCRIPT, d], capture_output=True, text=True)
        return r.returncode, r.stdout

    def test_the_mangled_names_are_knowns(self):
        self.assertEqual(set(MANGLED), {name for _, name in ps.KNOWN})

    def test_known_spills_within_their_bytes_pass(self):
        for within in ((ST, LD), (ST // 2, LD // 2)):
            rc, out = self.run_on(within)
            self.assertEqual(rc, 0, out)

    def test_a_known_spiller_that_spills_more_fails(self):
        for more in ((ST + 4, LD), (ST, LD + 72)):
            rc, out = self.run_on(more)
            self.assertEqual(rc, 1, out)
            self.assertIn("MORE SPILL", out)

    def test_a_kernel_that_starts_to_spill_fails(self):
        rc, out = self.run_on((ST, LD), other=(8, 12))
        self.assertEqual(rc, 1, out)
        self.assertIn("NEW SPILL", out)

    def test_a_known_spiller_that_no_longer_spills_must_leave_the_list(self):
        rc, out = self.run_on((0, 0))
        self.assertEqual(rc, 1, out)
        self.assertIn("no longer spills", out)
        rc, out = self.run_on(None)
        self.assertEqual(rc, 1, out)
        self.assertIn("is no longer built", out)


if __name__ == "__main__":
    unittest.main()
