#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""test_bench_gpu.py - what build/bench_gpu does with its arguments before it looks for a
GPU: a bad --only (a head dim the kernels do not serve, a seqlen past the bench's 16384
tokens, an unknown mask or schedule) gets the usage and exit 2, before any output. Skipped
where the build has no bench_gpu (no nvcc).

    python3 bench/test_bench_gpu.py        (make test runs it)
"""
import os
import subprocess
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "build", "bench_gpu")


def run(*args):
    r = subprocess.run([BENCH, *args], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    return r.returncode, r.stdout, r.stderr


@unittest.skipUnless(os.access(BENCH, os.X_OK), "build/bench_gpu not built (no nvcc)")
class BenchGpu(unittest.TestCase):
    def test_bench_gpu_only_refuses_what_the_kernels_do_not_serve_with_the_usage(self):
        for only in ("84,4096,full", "24,4096,full", "264,4096,full", "0,4096,full",
                     "64,0,full", "64,32768,full", "64,4096,sideways", "64,4096,full,bogus",
                     "64,4096"):
            with self.subTest(only=only):
                rc, out, err = run("--only", only)
                self.assertEqual(rc, 2, err)
                self.assertEqual(out, "")
                self.assertIn("usage: bench_gpu", err)

    def test_bench_gpu_only_takes_a_widened_head_dim_as_far_as_the_gpu(self):
        # arguments accepted: it goes on to look for a GPU (none visible here: exit 1, not 2)
        for only in ("80,4096,full", "200,1024,causal,shift", "32,16384,full"):
            with self.subTest(only=only):
                rc, _, err = run("--only", only)
                self.assertNotEqual(rc, 2, err)
                self.assertNotIn("usage:", err)


if __name__ == "__main__":
    unittest.main()
