#!/usr/bin/env python3
"""plot.py --print-summary on made-up kvbench JSONs, on the CPU (no
matplotlib needed): the table of every kernel and the comparisons between
kernels that bench/targets.json lists. Exits 77 where Python cannot run it."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, os.pardir, os.pardir, "bench")
PLOT = os.path.join(BENCH, "plot.py")


def doc(tag, decode_us, prefill_us):
    rows = [{"impl": "generated", "phase": "decode", "tokens": t,
             "headline_us": us, "fraction_of_copy": 0.1}
            for t, us in decode_us.items()]
    rows += [{"impl": "generated", "phase": "prefill", "tokens": t,
              "headline_us": us, "fraction_of_copy": 0.9}
             for t, us in prefill_us.items()]
    return {"tag": tag, "rows": rows, "description": {"layout": "paged_nhd"},
            "device": {"name": "test"}, "ceilings": {"copy_GBps": 4000.0},
            "launch": {}, "targets": []}


class Judged(unittest.TestCase):
    def test_targets_and_peers_from_the_json(self):
        sys.path.insert(0, BENCH)
        import plot
        doc = {"targets": [
            {"target": "decode 1: graph_us", "limit": 1.1},
            {"target": "prefill 65536: fraction_of_copy", "limit": 0.95},
            {"target": "prefill 65536: cold_us vs best peer", "limit": 135},
            {"target": "decode 512: graph_us vs best peer", "limit": 3.13},
            {"target": "kvrt_over_empty_eager", "limit": 1.1}]}
        self.assertEqual(plot.judged(doc, "decode", "graph_us", False),
                         {1: 1.1})
        self.assertEqual(plot.judged(doc, "decode", "graph_us", True),
                         {512: 3.13})
        self.assertEqual(plot.judged(doc, "prefill", "fraction_of_copy",
                                     False), {65536: 0.95})
        self.assertEqual(plot.judged(doc, "prefill", "cold_us", True),
                         {65536: 135.0})


class Summary(unittest.TestCase):
    def run_plot(self, docs):
        with tempfile.TemporaryDirectory() as out:
            names = []
            for d in docs:
                names.append(os.path.join(out, "kvbench-%s.json" % d["tag"]))
                with open(names[-1], "w") as f:
                    json.dump(d, f)
            env = dict(os.environ, MPLBACKEND="Agg")
            result = subprocess.run(
                [sys.executable, PLOT, "--print-summary"] + names,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                universal_newlines=True)
            return result.returncode, result.stdout

    def test_block_528_against_512(self):
        rc, out = self.run_plot([
            doc("bench_paged_nhd_bs512", {1: 1.00}, {65536: 100.0}),
            # 2% slower in decode (within 3%), 5% slower in prefill (not).
            doc("bench_paged_nhd_bs528", {1: 1.02}, {65536: 105.0})])
        self.assertEqual(rc, 0, out)
        self.assertIn("bench_paged_nhd_bs528", out)
        self.assertIn("MET  bench_paged_nhd_bs528 / bench_paged_nhd_bs512 "
                      "decode 1: ratio 1.020 (at most 1.03)", out)
        self.assertIn("MISS bench_paged_nhd_bs528 / bench_paged_nhd_bs512 "
                      "prefill 65536: ratio 1.050 (at most 1.03)", out)
        # The fp8 comparison's kernels were not run: said so.
        self.assertIn("bench_paged_nhd_fp8 against bench_paged_nhd: not both "
                      "measured", out)

    def test_mla_prefill_target(self):
        met = doc("bench_mla", {1: 1.0}, {65536: 40.0})
        met["targets"] = [{"target": "prefill 65536: fraction_of_copy",
                           "value": 0.93, "limit": 0.9, "at_most": False,
                           "pass": True}]
        missed = doc("bench_mla_fp8", {1: 1.0}, {65536: 40.0})
        missed["targets"] = [{"target": "prefill 65536: fraction_of_copy",
                              "value": 0.85, "limit": 0.9, "at_most": False,
                              "pass": False}]
        rc, out = self.run_plot([met, missed])
        self.assertEqual(rc, 0, out)
        self.assertIn("bench_mla: 1/1 met", out)
        self.assertIn("bench_mla_fp8: 0/1 met", out)
        self.assertIn("MISS prefill 65536: fraction_of_copy: 0.850 (>= 0.9)",
                      out)

    def test_fp8_decode_within_a_tenth(self):
        rc, out = self.run_plot([
            doc("bench_paged_nhd", {1: 1.40, 512: 3.0}, {}),
            doc("bench_paged_nhd_fp8", {1: 1.45, 512: 3.2}, {})])
        self.assertEqual(rc, 0, out)
        self.assertIn("MET  bench_paged_nhd_fp8 / bench_paged_nhd decode 1: "
                      "difference_us 0.050", out)
        self.assertIn("MISS bench_paged_nhd_fp8 / bench_paged_nhd decode 512: "
                      "difference_us 0.200", out)


if __name__ == "__main__":
    if sys.version_info < (3, 6):
        print("skipped: Python 3.6 or newer runs plot.py")
        sys.exit(77)
    unittest.main()
