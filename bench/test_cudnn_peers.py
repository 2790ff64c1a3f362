#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""test_cudnn_peers.py - what bench/cudnn_peers.py does before it measures: the shapes it
plans (bench_gpu's grid and arguments), its refusals of bad arguments, and its exit where
the cuDNN frontend, PyTorch or a GPU is missing (a JSON note and status 0, so `make bench`
goes on). Runs the script as a process, as scripts/gpu_bench.sh does; needs no GPU. On a
machine where all three are there, the environment case also hides the GPU
(CUDA_VISIBLE_DEVICES=) so that the no-GPU exit is tested there too.

    python3 bench/test_cudnn_peers.py        (make test runs it)
"""
import importlib.util
import json
import os
import subprocess
import sys
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cudnn_peers.py")
NOT_MEASURED = ": cuDNN's own SDPA not measured"


def run(*args, python=(sys.executable,), env=None):
    r = subprocess.run([*python, SCRIPT, *args], capture_output=True, text=True,
                       env=None if env is None else {**os.environ, **env}, timeout=300)
    return r.returncode, r.stdout, r.stderr


def planned(*args):
    rc, out, err = run("--plan", *args)
    if rc != 0:
        raise AssertionError(f"--plan {' '.join(args)} exited {rc}: {err}")
    return [(x["D"], x["S"], x["B"], x["H"], x["causal"]) for x in json.loads(out)["shapes"]]


def expected_note():
    """The reason this interpreter cannot measure, found here without the script's code."""
    if importlib.util.find_spec("cudnn") is None:
        return "cuDNN frontend not installed"
    try:
        import torch
    except ImportError:
        return "PyTorch not importable"
    return None if torch.cuda.is_available() else "no CUDA GPU usable by PyTorch"


class CudnnPeers(unittest.TestCase):
    def test_cudnn_peers_plan_is_bench_gpu_grid_and_the_two_other_head_dims(self):
        shapes = planned()
        self.assertEqual(len(shapes), 4 * 2 * 5)
        self.assertEqual(shapes[0], (64, 1024, 16, 32, False))
        self.assertEqual({x[0] for x in shapes}, {64, 128, 96, 256})
        self.assertEqual({x[1] for x in shapes}, {1024, 2048, 4096, 8192, 16384})
        for d, s, b, h, _ in shapes:
            self.assertEqual(b * s, 16384)
            self.assertEqual(h, 2048 // d)  # 21 heads at 96, as bench_gpu
        self.assertEqual(len(set(shapes)), len(shapes))

    def test_cudnn_peers_quick_plans_seqlens_1k_and_4k(self):
        shapes = planned("--quick")
        self.assertEqual(len(shapes), 4 * 2 * 2)
        self.assertEqual({x[1] for x in shapes}, {1024, 4096})

    def test_cudnn_peers_only_plans_one_shape_and_ignores_our_schedule(self):
        self.assertEqual(planned("--only", "96,4096,causal"), [(96, 4096, 4, 21, True)])
        self.assertEqual(planned("--only", "128,2048,full,shift", "--reps", "3"),
                         [(128, 2048, 8, 16, False)])
        self.assertEqual(planned("--quick", "--only", "256,16384,full"),
                         [(256, 16384, 1, 8, False)])
        # any head dim dashd's kernels serve (multiples of 8 from 32 to 256, widened)
        self.assertEqual(planned("--only", "80,4096,full"), [(80, 4096, 4, 25, False)])
        self.assertEqual(planned("--only", "32,1024,causal"), [(32, 1024, 16, 64, True)])

    def test_cudnn_peers_bad_arguments_exit_2_with_the_reason(self):
        cases = {("--only", "100,4096,full"): "head dim 100 is not a multiple of 8 from 32 to 256",
                 ("--only", "24,4096,full"): "head dim 24 is not a multiple of 8 from 32 to 256",
                 ("--only", "264,4096,full"): "head dim 264 is not a multiple of 8 from 32 to 256",
                 ("--only", "64,0,full"): "seqlen 0 is not in 1..16384",
                 ("--only", "64,32768,full"): "seqlen 32768 is not in 1..16384",
                 ("--only", "64,4096,sideways"): "mask 'sideways' is not full or causal",
                 ("--only", "64,4096"): "want D,S,MASK[,SCHED]",
                 ("--only", "x,4096,full"): "D and S must be integers",
                 ("--reps", "0"): "'0' is not a positive integer",
                 ("--reps", "many"): "'many' is not a positive integer",
                 ("--bogus",): "unrecognized arguments: --bogus"}
        for args, why in cases.items():
            with self.subTest(args=args):
                rc, out, err = run(*args, "--plan")
                self.assertEqual(rc, 2)
                self.assertEqual(out, "")
                self.assertIn(why, err)

    def test_cudnn_peers_without_the_frontend_exits_0_with_a_note(self):
        # -I -S: a Python without site-packages, so without the frontend whatever is installed
        rc, out, err = run("--quick", python=(sys.executable, "-I", "-S"))
        self.assertEqual(rc, 0, err)
        doc = json.loads(out)
        self.assertEqual(doc["rows"], [])
        self.assertTrue(doc["note"].startswith("cuDNN frontend not installed"), doc["note"])
        self.assertTrue(doc["note"].endswith(NOT_MEASURED))

    def test_cudnn_peers_where_it_cannot_measure_exits_0_with_the_reason(self):
        why = expected_note()
        # Where frontend, PyTorch and a GPU are all there, hiding the GPU is the case left.
        env = {"CUDA_VISIBLE_DEVICES": ""} if why is None else None
        why = why or "no CUDA GPU usable by PyTorch"
        rc, out, err = run("--quick", env=env)
        self.assertEqual(rc, 0, err)
        doc = json.loads(out)
        self.assertEqual(doc, {"note": doc["note"], "rows": []})
        self.assertTrue(doc["note"].startswith(why), (why, doc["note"]))
        self.assertTrue(doc["note"].endswith(NOT_MEASURED))


if __name__ == "__main__":
    unittest.main()
