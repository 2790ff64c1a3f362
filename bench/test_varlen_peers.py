#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""test_varlen_peers.py - what bench/varlen_peers.py counts and draws, checked on the CPU:
the pairs inside a mask (hand-counted small cases: windows near the edges, ragged causal
batches, lengths 1, queries and keys of different lengths) against closed forms and a
pair-by-pair count; the document lengths against bench_varlen.c's draws; the planned cases;
the issue-17 checks computed from rows; bad arguments; and that without a GPU it writes a
report saying so and exits 0. Needs no GPU.

    python3 bench/test_varlen_peers.py        (make test runs it)
"""
import json
import os
import random
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import varlen_peers as vp  # noqa: E402

SCRIPT = os.path.join(HERE, "varlen_peers.py")


def brute_pairs(sq, sk, window, causal):
    """Every (i, j) tested against the rule, independently of mask_pairs' row intervals."""
    left, right = window
    if causal:
        right = 0
    off = sk - sq
    return sum(1 for i in range(sq) for j in range(sk)
               if (left < 0 or j >= i + off - left) and (right < 0 or j <= i + off + right))


def run(*args, env=None, python=(sys.executable,)):
    r = subprocess.run([*python, SCRIPT, *args], capture_output=True, text=True, timeout=600,
                       env=None if env is None else {**os.environ, **env})
    return r.returncode, r.stdout, r.stderr


class MaskPairs(unittest.TestCase):
    def test_mask_pairs_hand_counted_small_cases(self):
        cases = [  # (sq, sk, window, causal) -> pairs, counted by hand row by row
            ((1, 1, (-1, -1), True), 1),     # a document of length 1
            ((1, 1, (-1, -1), False), 1),
            ((1, 1, (0, 0), True), 1),
            ((4, 4, (-1, -1), True), 10),    # 1 + 2 + 3 + 4
            ((4, 4, (-1, -1), False), 16),
            ((5, 5, (0, 0), True), 5),       # the diagonal only
            ((5, 5, (1, 0), True), 9),       # 1 + 2 + 2 + 2 + 2: the first row at the edge
            ((5, 5, (2, 0), True), 12),      # 1 + 2 + 3 + 3 + 3
            ((5, 5, (4, 0), True), 15),      # the window reaches every key: causal
            ((5, 5, (100, 0), True), 15),    # past the length: causal too
            ((4, 4, (1, 1), False), 10),     # 2 + 3 + 3 + 2: both edges cut
            ((4, 4, (0, 2), False), 9),      # 3 + 3 + 2 + 1: the right edge cuts
            ((4, 4, (-1, 1), False), 13),    # 2 + 3 + 4 + 4
            ((2, 5, (-1, -1), True), 9),     # bottom-right: rows see 4 and 5 keys
            ((5, 2, (-1, -1), True), 3),     # rows 0..2 see no key, row 3 one, row 4 two
            ((5, 2, (0, 0), True), 2),       # rows 3 and 4 see their diagonal key
            ((3, 3, (1, 5), True), 5),       # causal forces right to 0: 1 + 2 + 2
        ]
        for (sq, sk, window, causal), want in cases:
            with self.subTest(sq=sq, sk=sk, window=window, causal=causal):
                self.assertEqual(vp.mask_pairs(sq, sk, window, causal), want)
                self.assertEqual(brute_pairs(sq, sk, window, causal), want)

    def test_mask_pairs_agrees_with_a_pair_by_pair_count_on_random_shapes(self):
        rng = random.Random(17)
        for _ in range(300):
            sq, sk = rng.randint(1, 40), rng.randint(1, 40)
            window = (rng.choice([-1, 0, 1, 3, 7, 50]), rng.choice([-1, 0, 1, 3, 7, 50]))
            causal = rng.random() < 0.5
            with self.subTest(sq=sq, sk=sk, window=window, causal=causal):
                self.assertEqual(vp.mask_pairs(sq, sk, window, causal),
                                 brute_pairs(sq, sk, window, causal))

    def test_mask_pairs_of_a_causal_window_is_the_band_closed_form(self):
        # S rows; the first W rows see 1..W keys, the others W + 1: S(W+1) - W(W+1)/2
        for s, w in ((16384, 1024), (16384, 4096), (4096, 4095), (1000, 1), (7, 3)):
            with self.subTest(s=s, w=w):
                self.assertEqual(vp.mask_pairs(s, s, (w, 0), True), s * (w + 1) - w * (w + 1) // 2)
        self.assertEqual(vp.mask_pairs(16384, 16384, (-1, 0), True), 16384 * 16385 // 2)
        self.assertEqual(vp.mask_pairs(16384, 16384, (16383, 0), True), 16384 * 16385 // 2)

    def test_varlen_pairs_sums_ragged_causal_sequences(self):
        self.assertEqual(vp.varlen_pairs([0, 1, 4, 6], [0, 1, 4, 6], causal=True), 1 + 6 + 3)
        self.assertEqual(vp.varlen_pairs([0, 1, 2, 3], [0, 1, 2, 3], causal=True), 3)  # all 1s
        self.assertEqual(vp.varlen_pairs([0, 5], [0, 5], (1, 0), True), 9)
        # different q and k lengths per sequence, bottom-right aligned in each
        self.assertEqual(vp.varlen_pairs([0, 2, 7], [0, 5, 7], causal=True), 9 + 3)
        self.assertEqual(vp.varlen_pairs([0], [0], causal=True), 0)  # no sequence
        with self.assertRaises(ValueError):
            vp.varlen_pairs([0, 1], [0, 1, 2])

    def test_attention_flops_are_four_per_pair_element_and_bwd_two_and_a_half(self):
        fwd = 4.0 * 10 * 16 * 128
        self.assertEqual(vp.attention_flops(10, 16, 128), (fwd, 2.5 * fwd))
        self.assertEqual(vp.attention_flops(0, 16, 128), (0.0, 0.0))
        self.assertAlmostEqual(vp.tflops(2e12, 1000.0), 2.0)
        self.assertIsNone(vp.tflops(1e12, 0))


class Lengths(unittest.TestCase):
    def test_draw_lengths_are_bench_varlen_c_draws(self):
        # bench/results/cpu-varlen-2026-12-01.md: 9 documents, 8192 tokens, longest 2219;
        # the values are bench_varlen.c's draw_docs (its code compiled here) at that seed
        self.assertEqual(vp.draw_lengths(8192), [2219, 141, 168, 260, 797, 703, 1947, 1341, 616])
        self.assertEqual(vp.draw_lengths(4096), [2219, 141, 168, 260, 797, 511])

    def test_draw_lengths_fill_16k_tokens_with_a_spread_of_documents(self):
        ls = vp.draw_lengths(16384)
        self.assertEqual(ls, [2219, 141, 168, 260, 797, 703, 1947, 1341, 779, 484, 687, 31, 77,
                              1649, 1066, 1244, 1714, 565, 512])
        self.assertEqual(sum(ls), 16384)
        self.assertEqual(vp.cu_seqlens(ls)[-1], 16384)
        self.assertEqual(ls[:8], vp.draw_lengths(8192)[:8])  # one stream of draws, cut

    def test_draw_lengths_clip_to_1_and_max_len_and_cut_the_last(self):
        self.assertEqual(vp.draw_lengths(1), [1])
        self.assertEqual(vp.draw_lengths(10000, median=1e9), [4096, 4096, 1808])
        self.assertEqual(vp.draw_lengths(5, median=1e-9), [1] * 5)
        self.assertEqual(vp.draw_lengths(7, max_len=1), [1] * 7)
        for seed in range(20):
            ls = vp.draw_lengths(3000, seed=seed, max_len=300)
            self.assertEqual(sum(ls), 3000)
            self.assertTrue(all(1 <= n <= 300 for n in ls), ls)
        self.assertNotEqual(vp.draw_lengths(16384, seed=1), vp.draw_lengths(16384))
        with self.assertRaises(ValueError):
            vp.draw_lengths(0)

    def test_cu_seqlens_are_the_running_sums(self):
        self.assertEqual(vp.cu_seqlens([1, 3, 2]), [0, 1, 4, 6])
        self.assertEqual(vp.cu_seqlens([]), [0])


class Plan(unittest.TestCase):
    def test_plan_has_the_issue_17_cases_and_their_exact_flops(self):
        rc, out, err = run("--plan", "--dims", "128,64")
        self.assertEqual(rc, 0, err)
        cases = {(c["case"], c["D"]): c for c in json.loads(out)["cases"]}
        self.assertEqual(set(cases), {(n, d) for n in vp.CASES for d in (128, 64)})
        s = 16384
        want = {"varlen": sum(n * (n + 1) // 2 for n in vp.draw_lengths(s)),
                "causal": s * (s + 1) // 2,
                "window-1k": s * 1025 - 1024 * 1025 // 2,
                "window-4k": s * 4097 - 4096 * 4097 // 2}
        for (name, d), c in cases.items():
            with self.subTest(case=name, d=d):
                self.assertEqual(c["H"], 2048 // d)
                self.assertEqual(c["pairs"], want[name])
                self.assertEqual(c["fwd_flops"], 4.0 * want[name] * 2048)
                self.assertEqual(c["bwd_flops"], 2.5 * c["fwd_flops"])
                self.assertEqual(c["cu"][-1], s)
        self.assertEqual(cases[("window-1k", 128)]["window"], [1024, 0])
        self.assertEqual(cases[("varlen", 128)]["window"], [-1, 0])
        self.assertEqual(len(cases[("varlen", 128)]["lengths"]), 19)

    def test_packed_lengths_are_the_plans_varlen_lengths(self):
        rc, out, err = run("--packed-lengths")
        self.assertEqual(rc, 0, err)
        rc, plan, err = run("--plan", "--cases", "varlen")
        want = json.loads(plan)["cases"][0]["lengths"]
        self.assertEqual(out.strip(), ",".join(map(str, want)))
        self.assertEqual(sum(map(int, out.split(","))), 16384)

    def test_plan_only_the_cases_asked_for(self):
        rc, out, err = run("--plan", "--cases", "window-4k")
        self.assertEqual(rc, 0, err)
        self.assertEqual([(c["case"], c["D"]) for c in json.loads(out)["cases"]],
                         [("window-4k", 128)])

    def test_bad_arguments_exit_2_with_the_reason(self):
        cases = {("--cases", "varlen,sideways"): "unknown case 'sideways'",
                 ("--dims", "96"): "head dim 96 is not one of",
                 ("--dims", "x"): "head dims are integers",
                 ("--reps", "0"): "'0' is not a positive integer",
                 ("--bogus",): "unrecognized arguments: --bogus"}
        for args, why in cases.items():
            with self.subTest(args=args):
                rc, out, err = run(*args, "--plan")
                self.assertEqual(rc, 2)
                self.assertEqual(out, "")
                self.assertIn(why, err)


class Checks(unittest.TestCase):
    def row(self, case, peer, fwd, bwd, d=128):
        return {"case": case, "D": d, "peer": peer, "fwd_ms": 1.0, "fwd_tflops": fwd,
                "bwd_ms": 2.0, "bwd_tflops": bwd, "bitwise_repeat": True}

    def test_criteria_compare_dashd_to_cudnn_and_windows_to_causal(self):
        rows = [self.row("varlen", "dashd", 300, 400), self.row("varlen", "cudnn-fe", 350, 380),
                self.row("causal", "dashd", 500, 450), self.row("window-1k", "dashd", 430, 350),
                self.row("window-4k", "dashd", 480, 440),
                {"case": "window-1k", "D": 128, "peer": "cudnn-fe", "error": "x"},
                self.row("causal", "cudnn-fe", 600, 500)]
        got = {(k["check"], k.get("peer")): k for k in vp.criteria(rows)}
        v = got[("varlen det bwd >= cudnn-fe bwd", None)]
        self.assertAlmostEqual(v["ratio"], 400 / 380)
        self.assertTrue(v["ok"])
        self.assertAlmostEqual(got[("window-1k fwd TFLOPS / causal", "dashd")]["ratio"], 0.86)
        self.assertTrue(got[("window-1k fwd TFLOPS / causal", "dashd")]["ok"])
        self.assertFalse(got[("window-1k bwd TFLOPS / causal", "dashd")]["ok"])  # 0.78
        self.assertTrue(got[("window-4k bwd TFLOPS / causal", "dashd")]["ok"])
        self.assertNotIn(("window-1k fwd TFLOPS / causal", "cudnn-fe"), got)  # its error
        self.assertNotIn(("varlen det bwd >= cudnn-fe bwd (streamed)", None), got)  # no such rows

    def test_streamed_checks_use_the_streamed_figures(self):
        rows = [self.row("varlen", "dashd", 300, 200), self.row("varlen", "cudnn-fe", 350, 380),
                self.row("causal", "dashd", 500, 450), self.row("window-1k", "dashd", 200, 300)]
        streamed = {("varlen", "dashd"): (320, 400), ("varlen", "cudnn-fe"): (350, 390),
                    ("causal", "dashd"): (520, 460), ("window-1k", "dashd"): (450, 420)}
        for r in rows:
            f, b = streamed[(r["case"], r["peer"])]
            r.update(fwd_stream_tflops=f, bwd_stream_tflops=b)
        got = {(k["check"], k.get("peer")): k for k in vp.criteria(rows)}
        self.assertFalse(got[("varlen det bwd >= cudnn-fe bwd", None)]["ok"])  # 200 / 380
        v = got[("varlen det bwd >= cudnn-fe bwd (streamed)", None)]
        self.assertAlmostEqual(v["ratio"], 400 / 390)
        self.assertTrue(v["ok"])
        self.assertFalse(got[("window-1k fwd TFLOPS / causal", "dashd")]["ok"])  # 0.4
        w = got[("window-1k fwd TFLOPS / causal (streamed)", "dashd")]
        self.assertAlmostEqual(w["ratio"], 450 / 520)
        self.assertTrue(w["ok"])
        case = vp.make_case("window-1k", 128)
        text = vp.report({"date": "2026-12-02 03:00 UTC", "device": "d", "commit": "c",
                          "command": "x", "reps": 1, "cases": [case], "rows": rows})
        self.assertIn("| dashd | 1.000 | 200.0 | 450.0 | 2.000 | 300.0 | 420.0 | yes | n/a |  |",
                      text)

    def test_criteria_say_not_measured_when_dashd_was_refused(self):
        rows = [{"case": "varlen", "D": 128, "peer": "dashd", "error": "refused: x"},
                self.row("varlen", "cudnn-fe", 350, 380)]
        v = vp.criteria(rows)[0]
        self.assertIsNone(v["ratio"])
        self.assertIsNone(v["ok"])
        case = vp.make_case("varlen", 128)
        rows[0]["error"] = "refused: DASH_ENOTSUP: a | b"
        text = vp.report({"date": "2026-12-02 03:00 UTC", "device": "d", "commit": "c",
                          "command": "x", "reps": 1, "cases": [case], "rows": rows})
        self.assertIn("| dashd | | | | | | | | | refused: DASH_ENOTSUP: a / b |", text)
        self.assertIn("| cudnn-fe | 1.000 | 350.0 | n/a | 2.000 | 380.0 | n/a | yes | n/a |  |", text)
        self.assertIn("| varlen det bwd >= cudnn-fe bwd | 128 | dashd / cudnn-fe | n/a | n/a |",
                      text)


class WithoutGpu(unittest.TestCase):
    def test_without_torch_or_gpu_it_writes_a_report_saying_so_and_exits_0(self):
        with tempfile.TemporaryDirectory() as out:
            # -I -S: no site-packages, so no PyTorch; else hide any GPU
            for python, env in (((sys.executable, "-I", "-S"), None),
                                ((sys.executable,), {"CUDA_VISIBLE_DEVICES": ""})):
                with self.subTest(python=python):
                    rc, stdout, err = run("--cases", "window-1k", "--out", out, "--commit",
                                          "abc1234", python=python, env=env)
                    self.assertEqual(rc, 0, err)
                    with open(os.path.join(out, "varlen-report.md")) as f:
                        text = f.read()
                    self.assertEqual(stdout.strip(), text.strip())
                    self.assertRegex(text, r"\*\*Not measured:\*\* (PyTorch not importable|"
                                           r"no CUDA GPU usable by PyTorch)")
                    self.assertIn("commit: abc1234", text)
                    self.assertIn("16268800 pairs", text)  # the case is described anyway
                    with open(os.path.join(out, "varlen.json")) as f:
                        doc = json.load(f)
                    self.assertEqual(doc["rows"], [])

    def test_report_says_how_the_gpu_is_shared(self):
        with tempfile.TemporaryDirectory() as out:
            for sharing, want in ((None, "GPU sharing: not stated"),
                                  ("MPS (a control daemon started by gpu_bench.sh)",
                                   "GPU sharing: MPS (a control daemon started by gpu_bench.sh)")):
                with self.subTest(sharing=sharing):
                    args = ["--cases", "window-1k", "--out", out] + (["--sharing", sharing] if sharing else [])
                    rc, stdout, err = run(*args, python=(sys.executable, "-I", "-S"))
                    self.assertEqual(rc, 0, err)
                    self.assertIn(want, stdout)
                    with open(os.path.join(out, "varlen.json")) as f:
                        self.assertEqual(json.load(f)["sharing"], sharing)


if __name__ == "__main__":
    unittest.main()
