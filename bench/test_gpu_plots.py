#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""test_gpu_plots.py - bench/gpu_plots.py on the hand-made run of test_gpu_report.py (no
GPU): the plotted series carry the inputs' figures under the right labels, peers and head
dims that ours did not measure are left out, error rows are skipped, and the two PNGs are
written (when matplotlib is installed, as in `make test`'s .venv).

    python3 bench/test_gpu_plots.py        (make test runs it)
"""
import importlib.util
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_plots  # noqa: E402
from test_gpu_report import CUDNN, OURS, PEERS  # noqa: E402


class GpuPlots(unittest.TestCase):
    def test_gpu_plots_series_carry_each_runs_figures(self):
        d = gpu_plots.series(OURS, PEERS, CUDNN)
        f64 = d[("fwd", 64, False)]
        self.assertEqual(f64["ours"], [(1024, 200.0), (4096, 250.0)])
        self.assertEqual(f64["PyTorch SDPA flash (FA2)"], [(1024, 320.0)])
        self.assertNotIn("PyTorch SDPA cuDNN", f64)  # its only row is an error
        self.assertEqual(f64["cuDNN frontend"], [(1024, 400.0), (4096, 500.0)])
        b64 = d[("bwd", 64, False)]
        self.assertEqual(b64["ours, det (auto)"], [(1024, 280.0), (4096, 396.0)])
        self.assertEqual(b64["ours, non-det (atomic)"], [(1024, 310.0), (4096, 400.0)])
        self.assertEqual(b64["cuDNN frontend, non-det"], [(1024, 500.0), (4096, 440.0)])
        self.assertEqual(b64["cuDNN frontend, det"], [(1024, 250.0)])  # 4096: an error row
        b128 = d[("bwd", 128, True)]
        self.assertEqual(b128["cuDNN frontend, det"], [(1024, 340.0)])
        self.assertEqual(b128["ours, det (auto)"], [(1024, 255.0)])

    def test_gpu_plots_leave_out_what_ours_did_not_measure(self):
        d = gpu_plots.series(OURS, PEERS, CUDNN)
        self.assertEqual(sorted(d), [("bwd", 64, False), ("bwd", 128, True),
                                     ("fwd", 64, False), ("fwd", 128, True)])
        # without the frontend's run, only ours and PyTorch's
        d = gpu_plots.series(OURS, PEERS)
        self.assertEqual(sorted(d[("bwd", 64, False)]), ["PyTorch SDPA flash (FA2)",
                                                         "ours, det (auto)",
                                                         "ours, non-det (atomic)"])

    @unittest.skipUnless(importlib.util.find_spec("matplotlib"),
                         "matplotlib not installed (make test's .venv has it)")
    def test_gpu_plots_write_a_forward_and_a_backward_png(self):
        with tempfile.TemporaryDirectory() as tmp:
            prefix = os.path.join(tmp, "run")
            paths = gpu_plots.plot(gpu_plots.series(OURS, PEERS, CUDNN), prefix, "test")
            self.assertEqual(paths, [prefix + "-fwd.png", prefix + "-bwd.png"])
            for p in paths:
                with open(p, "rb") as f:
                    head = f.read(8)
                self.assertEqual(head, b"\x89PNG\r\n\x1a\n")
                self.assertGreater(os.path.getsize(p), 10000)


if __name__ == "__main__":
    unittest.main()
