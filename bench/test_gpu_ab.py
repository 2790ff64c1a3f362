#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""test_gpu_ab.py - bench/gpu_ab.py's table from two hand-made bench_gpu files (no GPU):
each build's forward and its ratio to the first build's, the best deterministic schedule,
and whether the deterministic digests repeat and match the first build's.

    python3 bench/test_gpu_ab.py        (make test runs it)
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def doc(fwd, shift, digest, repeat=True):
    bwd = [{"schedule": "atomic", "used": "atomic", "ms": 1.0, "tflops": 300.0,
            "bitwise_repeat": False, "digest": "a"}]
    for k, t in (("ascending", 100.0), ("descending", 200.0), ("spt", 250.0), ("shift", shift)):
        bwd.append({"schedule": k, "used": k, "ms": 1.0, "tflops": t, "bitwise_repeat": repeat,
                    "digest": digest + k})
    return {"rows": [{"D": 128, "S": 4096, "B": 4, "H": 16, "causal": True, "fwd_ms": 1.0,
                      "fwd_tflops": fwd, "bwd": bwd}]}


class GpuAbTable(unittest.TestCase):
    def table(self, *docs):
        with tempfile.TemporaryDirectory() as tmp:
            args = []
            for i, (name, d) in enumerate(docs):
                path = os.path.join(tmp, "%d.json" % i)
                with open(path, "w") as f:
                    f.write(json.dumps(d))
                args.append("%s=%s" % (name, path))
            out = subprocess.run([sys.executable, os.path.join(HERE, "gpu_ab.py")] + args,
                                 check=True, capture_output=True, text=True).stdout
        rows = [line.split("|")[1:-1] for line in out.splitlines()[2:]]
        return {r[3].strip(): [c.strip() for c in r] for r in rows}

    def test_forward_and_its_ratio_to_the_first_build(self):
        t = self.table(("base", doc(400.0, 280.0, "x")), ("new", doc(500.0, 290.0, "x")))
        self.assertEqual(t["base"][4:6], ["400.0", "1.000"])
        self.assertEqual(t["new"][4:6], ["500.0", "1.250"])

    def test_best_deterministic_schedule_and_its_share_of_atomic(self):
        t = self.table(("base", doc(400.0, 280.0, "x")), ("new", doc(400.0, 240.0, "x")))
        self.assertEqual(t["base"][7:9], ["280.0 (shift)", "0.933"])
        self.assertEqual(t["new"][7:9], ["250.0 (spt)", "0.833"])

    def test_digests_same_differ_or_not_repeated(self):
        t = self.table(("base", doc(1.0, 280.0, "x")), ("same", doc(1.0, 280.0, "x")),
                       ("other", doc(1.0, 280.0, "y")), ("norep", doc(1.0, 280.0, "x", repeat=False)))
        self.assertEqual(t["base"][9], "repeat")
        self.assertEqual(t["same"][9], "same")
        self.assertTrue(t["other"][9].startswith("DIFFER"))
        self.assertTrue(t["norep"][9].startswith("REPEAT DIFFERS"))

    def test_a_run_of_one_schedule_still_gives_its_row(self):
        # bench_gpu --only D,S,MASK,shift: no atomic; the forward and shift still count
        one = doc(400.0, 280.0, "x")
        one["rows"][0]["bwd"] = [b for b in one["rows"][0]["bwd"] if b["schedule"] == "shift"]
        fwd_only = doc(500.0, 280.0, "x")
        fwd_only["rows"][0]["bwd"] = []
        t = self.table(("base", one), ("new", fwd_only))
        self.assertEqual(t["base"][4:10], ["400.0", "1.000", "n/a", "280.0 (shift)", "n/a", "repeat"])
        self.assertEqual(t["new"][4:10], ["500.0", "1.250", "n/a", "n/a", "n/a", "n/a"])

    def test_one_shape_run_once_per_schedule_keeps_both(self):
        # gpu_ab.sh "256,4096,full,shift 256,4096,full,atomic": two documents of one shape
        # in a build's file; the second once replaced the first's row (2026-12-06h's A/B)
        shift, atomic = doc(400.0, 280.0, "x"), doc(410.0, 280.0, "x")
        shift["rows"][0]["bwd"] = [b for b in shift["rows"][0]["bwd"] if b["schedule"] == "shift"]
        atomic["rows"][0]["bwd"] = [b for b in atomic["rows"][0]["bwd"] if b["schedule"] == "atomic"]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "b.json")
            with open(path, "w") as f:
                f.write(json.dumps(shift) + "\n" + json.dumps(atomic) + "\n")
            out = subprocess.run([sys.executable, os.path.join(HERE, "gpu_ab.py"), "b=" + path],
                                 check=True, capture_output=True, text=True).stdout
        rows = [[c.strip() for c in line.split("|")[1:-1]] for line in out.splitlines()[2:]]
        self.assertEqual(len(rows), 1)
        self.assertEqual(rows[0][6:10], ["300.0", "280.0 (shift)", "0.933", "repeat"])


class TruncatedDocuments(unittest.TestCase):
    """gpu_ab.sh appends one bench_gpu document per shape to a build's file, each under
    `timeout 120`: a shape killed at its limit leaves a document cut short, and the next
    shapes' documents follow it. gpu_ab.py must keep the rows of those later documents."""

    @staticmethod
    def one(d, s):
        return {"device": "T", "reps": 5, "rows": [
            {"D": d, "S": s, "B": 16384 // s, "H": 2048 // d, "causal": True, "fwd_ms": 1.0,
             "fwd_tflops": 300.0,
             "bwd": [{"schedule": "shift", "used": "shift", "ms": 1.0, "tflops": 280.0,
                      "bitwise_repeat": True, "digest": "x"}]}]}

    def test_rows_after_a_document_cut_short_are_kept(self):
        sys.path.insert(0, HERE)
        import gpu_ab
        cut = json.dumps(self.one(256, 16384))
        cut = cut[:cut.index('"bwd": [') + 60]  # bench_gpu prints as it goes
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "b.json")
            with open(p, "w") as f:
                f.write(json.dumps(self.one(64, 4096)) + "\n" + cut + "\n" +
                        json.dumps(self.one(128, 4096)) + "\n")
            got = [(r["D"], r["S"]) for r in gpu_ab.rows_of(p)]
        self.assertEqual(got, [(64, 4096), (128, 4096)])

if __name__ == "__main__":
    unittest.main()
