#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""test_gpu_report.py - bench/gpu_report.py joins bench_gpu's, sdpa_peers.py's and
cudnn_peers.py's JSON into the tables we quote: run on small hand-made inputs (no GPU), the
report's cells are read back and compared with figures computed here from those inputs.

    python3 bench/test_gpu_report.py        (make test runs it)
"""
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEDS = ("atomic", "ascending", "descending", "spt", "shift", "auto")


def ours_row(d, s, causal, fwd, bwd, used="shift", repeat=True):
    """bench_gpu's row: bwd maps schedule -> TFLOPS; auto reports it used `used`."""
    return {"D": d, "S": s, "B": 16384 // s, "H": 2048 // d, "causal": causal, "fwd_ms": 1.0,
            "fwd_tflops": fwd,
            "bwd": [{"schedule": k, "used": used if k == "auto" else k, "ms": 1.0,
                     "tflops": bwd[k], "bitwise_repeat": repeat, "digest": "0"} for k in SCHEDS]}


def fe_row(d, s, causal, det, fwd, bwd, repeat=True, finite=True):
    return {"D": d, "S": s, "B": 16384 // s, "H": 2048 // d, "causal": causal,
            "backend": "cudnn-fe-det" if det else "cudnn-fe", "deterministic": det,
            "fwd_ms": 1.0, "bwd_ms": 1.0, "fwd_tflops": fwd, "bwd_tflops": bwd,
            "bitwise_repeat": repeat, "finite": finite}


OURS = {"device": "Test GPU", "sms": 132, "driver": 13000, "runtime": 13000, "reps": 3, "rows": [
    # auto picked spt (280), not the best deterministic schedule (shift, 305)
    ours_row(64, 1024, False, 200.0, dict(atomic=310.0, ascending=300.0, descending=290.0,
                                          spt=280.0, shift=305.0, auto=280.0), used="spt"),
    ours_row(64, 4096, False, 250.0, dict(atomic=400.0, ascending=390.0, descending=380.0,
                                          spt=370.0, shift=396.0, auto=396.0)),
    ours_row(128, 1024, True, 150.0, dict(atomic=260.0, ascending=250.0, descending=240.0,
                                          spt=255.0, shift=245.0, auto=255.0)),
]}
PEERS = {"torch": "2.11.0+cu130", "cudnn": 91900, "device": "Test GPU", "rows": [
    {"D": 64, "S": 1024, "causal": False, "backend": "flash", "fwd_ms": 1.0, "bwd_ms": 1.0,
     "fwd_tflops": 320.0, "bwd_tflops": 250.0, "bitwise_repeat": False},
    {"D": 64, "S": 1024, "causal": False, "backend": "cudnn", "error": "not supported"},
]}
CUDNN = {"torch": "2.11.0+cu130", "cudnn": 91900, "frontend": "1.32.0", "device": "Test GPU",
         "reps": 10, "repeats": 5,
         "checks": [{"D": 64, "causal": False, "o": 3e-3, "ok": True,
                     "cudnn-fe": {"dq": 2e-3, "dk": 5e-3, "dv": 4e-3},
                     "cudnn-fe-det": {"dq": 2e-3, "dk": 6e-3, "dv": 4e-3}}],
         "rows": [
             fe_row(64, 1024, False, False, 400.0, 500.0, repeat=False),
             fe_row(64, 1024, False, True, 400.0, 250.0),
             fe_row(64, 4096, False, False, 500.0, 440.0, repeat=False),
             {"D": 64, "S": 4096, "causal": False, "backend": "cudnn-fe-det",
              "error": "cudnnGraphNotSupportedError: no engine"},
             fe_row(128, 1024, True, False, 300.0, 400.0, finite=False),
             fe_row(128, 1024, True, True, 300.0, 340.0),
             fe_row(256, 4096, True, False, 560.0, 370.0),
             fe_row(256, 4096, True, True, 560.0, 290.0),
         ]}


def report(ours, peers, cudnn=None):
    """gpu_report.py's Markdown for these inputs (written to files, as gpu_bench.sh does)."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for name, doc in (("ours", ours), ("peers", peers), ("cudnn", cudnn)):
            if doc is not None:
                paths.append(os.path.join(tmp, name + ".json"))
                with open(paths[-1], "w") as f:
                    json.dump(doc, f)
        cmd = [sys.executable, os.path.join(HERE, "gpu_report.py"), paths[0], paths[1],
               "--commit", "abc1234", "--command", "test"]
        if cudnn is not None:
            cmd += ["--cudnn", paths[2]]
        r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"gpu_report.py exited {r.returncode}: {r.stderr}")
    return r.stdout


def sections(md):
    """{heading: [table rows as lists of cells, and other non-empty lines as strings]}"""
    out, cur = {}, None
    for line in md.splitlines():
        if line.startswith("## "):
            cur = out.setdefault(line[3:], [])
        elif cur is not None and line.strip():
            cur.append([c.strip() for c in line.strip("|").split("|")] if line.startswith("|")
                       else line)
    return out


def table_rows(lines, first_header_cell, second):
    """The data rows of the table whose header's second cell is `second`."""
    rows, inside = [], False
    for x in lines:
        if isinstance(x, list) and x[0] == first_header_cell:
            inside = x[1] == second
        elif isinstance(x, list) and inside and not x[0].startswith("---"):
            rows.append(x)
        elif not isinstance(x, list):
            inside = False
    return {int(r[0]): r for r in rows}


class GpuReport(unittest.TestCase):
    def test_gpu_report_cudnn_table_gives_fe_figures_and_ours_over_them(self):
        s = sections(report(OURS, PEERS, CUDNN))
        fe = table_rows(s["hdim 64, full (TFLOPS)"], "seqlen", "FE fwd")
        # seqlen | FE fwd | FE non-det | FE det | repeats | fwd/FE | auto/det | best/det | auto/non-det
        self.assertEqual(fe[1024], ["1024", "400.0", "500.0", "250.0", "no, yes",
                                    f"{200 / 400:.2f}", f"{280 / 250:.2f}", f"{305 / 250:.2f}",
                                    f"{280 / 500:.2f}"])

    def test_gpu_report_cudnn_error_row_gives_na_and_is_listed(self):
        s = sections(report(OURS, PEERS, CUDNN))
        lines = s["hdim 64, full (TFLOPS)"]
        fe = table_rows(lines, "seqlen", "FE fwd")
        self.assertEqual(fe[4096], ["4096", "500.0", "440.0", "n/a", "no, n/a",
                                    f"{250 / 500:.2f}", "n/a", "n/a", f"{396 / 440:.2f}"])
        self.assertIn("- seqlen 4096, cudnn-fe-det: cudnnGraphNotSupportedError: no engine", lines)

    def test_gpu_report_cudnn_unwritten_output_is_flagged(self):
        s = sections(report(OURS, PEERS, CUDNN))
        fe = table_rows(s["hdim 128, causal (TFLOPS)"], "seqlen", "FE fwd")
        self.assertEqual(fe[1024][4], "yes (unwritten), yes")
        self.assertEqual(fe[1024][6], f"{255 / 340:.2f}")

    def test_gpu_report_head_dim_only_cudnn_measured_gets_its_table(self):
        s = sections(report(OURS, PEERS, CUDNN))
        lines = s["hdim 256, causal (TFLOPS)"]
        self.assertTrue(any(isinstance(x, str) and x.startswith("Ours: not measured")
                            for x in lines))
        fe = table_rows(lines, "seqlen", "FE fwd")
        self.assertEqual(fe[4096], ["4096", "560.0", "370.0", "290.0", "yes, yes",
                                    "n/a", "n/a", "n/a", "n/a"])
        self.assertNotIn("hdim 96, full (TFLOPS)", s)

    def test_gpu_report_head_dim_96_gives_ours_beside_cudnn(self):
        # bench_gpu measures 96 in its grid (the 128 kernels on widened copies)
        ours = dict(OURS, rows=OURS["rows"] + [
            ours_row(96, 4096, False, 330.0, dict(atomic=300.0, ascending=280.0, descending=281.0,
                                                  spt=282.0, shift=290.0, auto=290.0))])
        cudnn = dict(CUDNN, rows=CUDNN["rows"] + [fe_row(96, 4096, False, False, 440.0, 380.0),
                                                  fe_row(96, 4096, False, True, 440.0, 320.0)])
        s = sections(report(ours, PEERS, cudnn))
        lines = s["hdim 96, full (TFLOPS)"]
        self.assertEqual(table_rows(lines, "seqlen", "fwd")[4096][1:3], ["330.0", "300.0"])
        self.assertEqual(table_rows(lines, "seqlen", "FE fwd")[4096],
                         ["4096", "440.0", "380.0", "320.0", "yes, yes", f"{330 / 440:.2f}",
                          f"{290 / 320:.2f}", f"{290 / 320:.2f}", f"{290 / 380:.2f}"])

    def test_gpu_report_a_head_dim_outside_the_sweep_gets_its_tables_after_the_sweeps(self):
        # bench_gpu --only 80,... (a widened head dim) and cudnn_peers.py --only at it
        ours = dict(OURS, rows=OURS["rows"] + [
            ours_row(80, 4096, True, 310.0, dict(atomic=260.0, ascending=250.0, descending=251.0,
                                                 spt=252.0, shift=255.0, auto=255.0))])
        cudnn = dict(CUDNN, rows=CUDNN["rows"] + [fe_row(80, 4096, True, False, 400.0, 340.0),
                                                  fe_row(80, 4096, True, True, 400.0, 300.0)])
        md = report(ours, PEERS, cudnn)
        s = sections(md)
        lines = s["hdim 80, causal (TFLOPS)"]
        self.assertEqual(table_rows(lines, "seqlen", "fwd")[4096][1:3], ["310.0", "260.0"])
        self.assertEqual(table_rows(lines, "seqlen", "FE fwd")[4096][5:],
                         [f"{310 / 400:.2f}", f"{255 / 300:.2f}", f"{255 / 300:.2f}",
                          f"{255 / 340:.2f}"])
        self.assertGreater(md.index("## hdim 80, causal"), md.index("## hdim 256, causal"))
        method = next(x for x in md.splitlines() if x.startswith("- method:"))
        self.assertIn("head dim 80: the kernels of the next of 64, 128, 256", method)
        self.assertNotIn("head dim 80", next(x for x in report(OURS, PEERS, CUDNN).splitlines()
                                             if x.startswith("- method:")))
        self.assertNotIn("hdim 80, full (TFLOPS)", s)

    def test_sdpa_peers_only_measures_the_one_shape_at_any_head_dim(self):
        try:
            sys.path.insert(0, HERE)
            import sdpa_peers
        except ImportError as e:  # no PyTorch here
            self.skipTest(str(e))

        def shapes(*argv):
            return sdpa_peers.shapes(sdpa_peers.parse_args(list(argv)))
        self.assertEqual(shapes("--only", "80,4096,causal"), [(80, True, 4096)])
        self.assertEqual(shapes("--only=80,4096,causal"), [(80, True, 4096)])
        self.assertEqual(shapes("--quick", "--only", "192,1024,full,shift", "--reps", "3"),
                         [(192, False, 1024)])
        grid = shapes()
        self.assertEqual(len(grid), 3 * 2 * 5)
        self.assertEqual(grid[0], (64, False, 1024))
        self.assertEqual({s for _, _, s in shapes("--quick")}, {1024, 4096})
        # what cudnn_peers.py refuses, it refuses: usage, exit 2
        for bad in (["--only", "80,4096,sideways"], ["--only", "80,4096"], ["--only"],
                    ["--only", "84,4096,full"], ["--only", "64,32768,full"], ["--bogus"]):
            with self.subTest(argv=bad), self.assertRaises(SystemExit) as e:
                with contextlib.redirect_stderr(io.StringIO()):
                    sdpa_peers.parse_args(bad)
            self.assertEqual(e.exception.code, 2)

    def test_gpu_report_ours_table_unchanged_beside_cudnn(self):
        with_fe = sections(report(OURS, PEERS, CUDNN))
        without = sections(report(OURS, PEERS))
        ours = table_rows(without["hdim 64, full (TFLOPS)"], "seqlen", "fwd")
        self.assertEqual(table_rows(with_fe["hdim 64, full (TFLOPS)"], "seqlen", "fwd"), ours)
        self.assertEqual(ours[1024], ["1024", "200.0", "310.0", "300.0", "290.0", "280.0",
                                      "305.0", "280.0 (spt)", f"{305 / 310:.2f}", "yes",
                                      "320.0 / 250.0", "n/a", "no, n/a"])
        # without --cudnn: no cuDNN frontend table, no section for it alone
        self.assertEqual(table_rows(without["hdim 64, full (TFLOPS)"], "seqlen", "FE fwd"), {})
        self.assertNotIn("hdim 256, causal (TFLOPS)", without)

    def test_gpu_report_header_names_frontend_and_its_check(self):
        md = report(OURS, PEERS, CUDNN)
        self.assertIn("- cuDNN frontend 1.32.0 on cuDNN 91900 (same run); float64 check", md)
        self.assertIn("largest error 6.0e-03", md)
        bad = dict(CUDNN, checks=[{"D": 256, "causal": True, "ok": False,
                                   "error": "RuntimeError: boom"}])
        self.assertIn("FAILED for hdim 256 causal (RuntimeError: boom)", report(OURS, PEERS, bad))

    def test_gpu_report_cudnn_note_is_reported_without_tables(self):
        note = {"note": "cuDNN frontend not installed (pip package nvidia-cudnn-frontend, "
                        "module cudnn): cuDNN's own SDPA not measured", "rows": []}
        md = report(OURS, PEERS, note)
        self.assertIn("- cuDNN frontend: not measured: " + note["note"], md)
        self.assertNotIn("| FE fwd", md)
        self.assertEqual(sorted(sections(md)), sorted(sections(report(OURS, PEERS))))



def bench_row(d, s, causal, tf, norep=(), only=None):
    """bench_gpu's row with per-schedule TFLOPS tf; the schedules in norep did not repeat."""
    bwd = [{"schedule": k, "used": "shift" if k == "auto" else k, "ms": 1.0, "tflops": t,
            "bitwise_repeat": k != "atomic" and k not in norep, "digest": k}
           for k, t in tf.items() if only is None or k in only]
    return {"D": d, "S": s, "B": 16384 // s, "H": 2048 // d, "causal": causal,
            "fwd_ms": 1.0, "fwd_tflops": 300.0, "bwd": bwd}


TF = dict(atomic=400.0, ascending=100.0, descending=200.0, spt=450.0, shift=380.0, auto=380.0)
OURS_NOREP = {"device": "T", "sms": 132, "driver": 1, "runtime": 1, "reps": 3,
              "rows": [bench_row(128, 4096, True, TF, norep=("spt",))]}
CUDNN_DET = {"torch": "t", "cudnn": 1, "frontend": "f", "device": "T", "reps": 10, "repeats": 5,
             "checks": [], "rows": [fe_row(128, 4096, True, False, 500.0, 420.0),
                                    fe_row(128, 4096, True, True, 500.0, 360.0)]}


class BestDetRepeats(unittest.TestCase):
    """'best det' is the fastest deterministic schedule whose bits repeated: one whose two
    identical backwards gave different dQ bits is not deterministic in that run and must not
    stand for ours in 'best det / atomic', 'best det / FE det' or gpu_ab.py's column."""

    def test_report_best_det_leaves_out_a_schedule_whose_bits_did_not_repeat(self):
        s = sections(report(OURS_NOREP, PEERS, CUDNN_DET))["hdim 128, causal (TFLOPS)"]
        ours = table_rows(s, "seqlen", "fwd")[4096]
        self.assertEqual(ours[9], "NO")  # det repeat
        self.assertEqual(ours[8], f"{380 / 400:.2f}")  # shift, not spt's 450 that did not repeat
        fe = table_rows(s, "seqlen", "FE fwd")[4096]
        self.assertEqual(fe[7], f"{380 / 360:.2f}")  # best det / FE det

    def test_report_det_repeat_is_na_when_no_deterministic_schedule_ran(self):
        ours = dict(OURS_NOREP, rows=[bench_row(128, 4096, True, TF, only=("atomic",))])
        s = sections(report(ours, PEERS))["hdim 128, causal (TFLOPS)"]
        self.assertEqual(table_rows(s, "seqlen", "fwd")[4096][9], "n/a")

    def test_gpu_ab_best_det_leaves_out_a_schedule_whose_bits_did_not_repeat(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "a.json")
            with open(p, "w") as f:
                json.dump(OURS_NOREP, f)
            out = subprocess.run([sys.executable, os.path.join(HERE, "gpu_ab.py"), f"a={p}"],
                                 check=True, capture_output=True, text=True).stdout
        cells = [c.strip() for c in out.splitlines()[2].split("|")[1:-1]]
        self.assertEqual(cells[7], "380.0 (shift)")
        self.assertEqual(cells[8], f"{380 / 400:.3f}")
        self.assertTrue(cells[9].startswith("REPEAT DIFFERS"))


# the newest stored run (a report is regenerated by the gpu_report.py of its day: older ones
# keep the method line of theirs)
RUN = os.path.join(HERE, "results", "gpu-bench-9d40c51-2026-12-06-h100")


def regen(*extra):
    cmd = [sys.executable, os.path.join(HERE, "gpu_report.py"), os.path.join(RUN, "ours.json"),
           os.path.join(RUN, "peers.json"), "--cudnn", os.path.join(RUN, "cudnn.json"),
           "--commit", "9d40c51", "--command", "bash scripts/gpu_bench.sh 9d40c51 ", *extra]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


class Regenerates(unittest.TestCase):
    """A stored report is reproducible from its JSON files (--date with the run's date), and
    its method line gives head dim 96 its 21 heads (2016 wide), not heads x head_dim = 2048."""

    def test_date_can_be_given_so_a_report_regenerates_byte_for_byte(self):
        a = regen("--date", "2026-12-06T00:51:23Z")
        self.assertIn("- date: 2026-12-06T00:51:23Z\n", a)
        self.assertEqual(a, regen("--date", "2026-12-06T00:51:23Z"))

    def test_method_line_gives_head_dim_96_its_21_heads(self):
        md = regen("--date", "x")
        method = next(line for line in md.splitlines() if line.startswith("- method:"))
        self.assertNotIn("heads x head_dim = 2048;", method)
        self.assertIn("96: 21 heads", method)

    def test_stored_report_is_what_its_json_gives(self):
        with open(RUN + ".md") as f:
            stored = f.read().split("\n## Reading it")[0]  # then text by hand
        self.assertEqual(regen("--date", "2026-12-06T00:51:23Z").rstrip(), stored.rstrip())

if __name__ == "__main__":
    unittest.main()
