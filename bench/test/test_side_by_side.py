#!/usr/bin/env python3
"""The pure parts of bench/side_by_side.py, on the CPU: its arguments, the
bytes it counts per token, the workloads' slots, and the report it writes.
Exits 77 (skipped) where the interpreter cannot import the script."""

import json
import math
import os
import random
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                os.pardir))
try:
    import side_by_side as sbs
except Exception as e:  # an interpreter too old for the script
    print("skipped: cannot import side_by_side: %s" % e)
    sys.exit(77)


def manifest(dtype="bf16", layout="paged_nhd", block_size=16, quant=None):
    cache = {"layout": layout, "block_size": block_size, "num_kv_heads": 8,
             "head_dim": 128, "dtype": dtype}
    if quant:
        cache["quant"] = quant
    return {"name": "k", "kind": "append", "variant": "vector",
            "cache": cache, "source_dtype": "bf16"}


FP8 = {"kind": "fp8_e4m3", "granularity": "per_tensor", "mode": "static",
       "reciprocal": False}
INT8_DYN = {"kind": "int8", "granularity": "per_token_head",
            "mode": "dynamic"}


class Arguments(unittest.TestCase):
    def test_defaults(self):
        a = sbs.parse_args(["--peer", "p.py", "--bundle", "b.json"])
        self.assertEqual(a.decode, [1, 32, 128, 512])
        self.assertEqual(a.prefill, [4096, 16384, 65536])
        self.assertEqual(a.kernel, ["bench_paged_nhd"])
        self.assertEqual(a.peer_variant, "token")
        self.assertEqual(a.variant, "auto")
        self.assertFalse(a.quick)

    def test_repeated_and_sizes(self):
        a = sbs.parse_args(["--peer", "p", "--bundle", "a", "--bundle", "b",
                            "--kernel", "x", "--kernel", "y",
                            "--decode", "1,8", "--prefill", "2048",
                            "--quick"])
        self.assertEqual(a.bundle, ["a", "b"])
        self.assertEqual(a.kernel, ["x", "y"])
        self.assertEqual(a.decode, [1, 8])
        self.assertEqual(a.prefill, [2048])
        self.assertTrue(a.quick)

    def test_refused(self):
        for argv in (["--bundle", "b"],                       # no peer
                     ["--peer", "p"],                         # no bundle
                     ["--peer", "p", "--bundle", "b", "--decode", "1,x"],
                     ["--peer", "p", "--bundle", "b", "--decode", "0"],
                     ["--peer", "p", "--bundle", "b", "--prefill", "1000"],
                     ["--peer", "p", "--bundle", "b", "--peer-variant", "x"]):
            with self.assertRaises(SystemExit) as e:
                sbs.parse_args(argv)
            self.assertEqual(e.exception.code, 2, argv)


class Inputs(unittest.TestCase):
    def test_missing_peer_and_bundles(self):
        with tempfile.TemporaryDirectory() as d:
            a = sbs.parse_args(["--peer", os.path.join(d, "peer.py"),
                                "--bundle", os.path.join(d, "b.json")])
            problems = sbs.missing_inputs(a)
            self.assertEqual(len(problems), 2)
            self.assertIn("no peer file", problems[0])
            self.assertIn("none of the bundles exists", problems[1])
            # Refused before the GPU half (torch) is imported.
            self.assertEqual(sbs.main(["--peer", os.path.join(d, "peer.py"),
                                       "--bundle", "x"]), 2)
            for name in ("peer.py", "b.json"):
                open(os.path.join(d, name), "w").close()
            self.assertEqual(sbs.missing_inputs(a), [])


class Bytes(unittest.TestCase):
    def test_per_token(self):
        d = sbs.description_from_manifest
        # 4096 read + 8 slot + 4096 written.
        self.assertEqual(sbs.bytes_per_token(d(manifest())), 8200)
        # 4096 read + 8 slot + 2048 written.
        self.assertEqual(sbs.bytes_per_token(d(manifest("f8e4m3",
                                                        quant=FP8))), 6152)
        # ... + a 4-byte scale per head for K and V.
        self.assertEqual(sbs.bytes_per_token(d(manifest("i8",
                                                        quant=INT8_DYN))),
                         6152 + 64)

    def test_blocks_and_sets(self):
        d = sbs.description_from_manifest(manifest())
        self.assertEqual(sbs.num_blocks(d), 32768)
        self.assertEqual(sbs.num_blocks(sbs.description_from_manifest(
            manifest("f8e4m3", quant=FP8))), 65536)
        # One pass over the sets touches >= 256 MiB.
        for tokens in (1, 32, 4096, 65536):
            sets = sbs.sets_for(tokens, 8200)
            self.assertGreaterEqual(sets * tokens * 8200, 256 << 20)
            self.assertLess((sets - 1) * tokens * 8200, 256 << 20)

    def test_fraction(self):
        # 1000 tokens of 8200 B in 2.05 us = 4000 GB/s: all of a 4000 ceiling.
        self.assertAlmostEqual(sbs.fraction_of_copy(1000, 8200, 2.05, 4000),
                               1.0)
        self.assertTrue(math.isnan(sbs.fraction_of_copy(1, 8200,
                                                        float("nan"), 4000)))

    def test_unsupported(self):
        d = sbs.description_from_manifest
        self.assertEqual(sbs.unsupported(d(manifest())), "")
        self.assertEqual(sbs.unsupported(d(manifest("f8e4m3", quant=FP8))),
                         "")
        self.assertIn("paged_nhd",
                      sbs.unsupported(d(manifest(layout="paged_hnd"))))
        self.assertIn("fp8_e4m3 per_tensor static",
                      sbs.unsupported(d(manifest("i8", quant=INT8_DYN))))


class Workloads(unittest.TestCase):
    def test_decode(self):
        slots = sbs.decode_slots(100, 16, 32, 3, random.Random(1))
        self.assertEqual(len(slots), 96)
        for s in range(3):
            blocks = {x // 16 for x in slots[s * 32:(s + 1) * 32]}
            self.assertEqual(len(blocks), 32)  # each token its own block
        self.assertTrue(all(0 <= x < 1600 for x in slots))

    def test_prefill(self):
        slots = sbs.prefill_slots(1000, 16, 2048, 2, random.Random(2))
        self.assertEqual(len(slots), 4096)
        for s in range(2):
            one = slots[s * 2048:(s + 1) * 2048]
            self.assertEqual(len(set(one)), 2048)  # no slot twice in a set
            for r in range(2):
                request = one[r * 1024:(r + 1) * 1024]
                for a, b in zip(request, request[1:]):
                    # Positions follow each other; a block ends, a new begins.
                    self.assertTrue(b == a + 1 or (a % 16 == 15 and
                                                   b % 16 == 0))

    def test_cases(self):
        d = sbs.description_from_manifest(manifest())
        cases = sbs.make_cases(d, [4], [1024], 3)
        self.assertEqual([(c["phase"], c["tokens"]) for c in cases],
                         [("decode", 4), ("prefill", 1024)])
        for c in cases:
            self.assertEqual(len(c["slots"]), c["sets"] * c["tokens"])


class Report(unittest.TestCase):
    def report(self):
        rows = [sbs.make_row("decode", 1, 10, "graph", [1.0, 1.2, 1.1],
                             [1.25], 8200, 4000),
                sbs.make_row("decode", 1, 10, "eager", [6.0], [50.0], 8200,
                             4000),
                sbs.make_row("prefill", 65536, 1, "cold", [140.0],
                             [float("nan")], 8200, 4000)]
        return {"device": "test GPU", "copy_GBps": 4000.0,
                "peer_name": "peer.py, variant token", "quick": False,
                "kernels": [{"name": "bench_paged_nhd", "rows": rows,
                             "checks": ["set 0: agree"]},
                            {"name": "bench_paged_nhd_fp8",
                             "skipped": "no bundle given has it"}]}

    def test_row(self):
        row = sbs.make_row("decode", 1, 10, "graph", [1.0, 1.2, 1.1], [1.25],
                           8200, 4000)
        self.assertEqual(row["kvgen_us"]["median"], 1.1)
        self.assertAlmostEqual(row["ratio"], 1.1 / 1.25)
        self.assertEqual(row["bytes_per_call"], 8200)

    def test_markdown(self):
        text = sbs.markdown(self.report())
        lines = text.splitlines()
        self.assertIn("| size | kvgen | peer | kvgen / peer | kvgen % copy | "
                      "peer % copy |", lines)
        # The headline table has decode's graph row, not its eager row.
        self.assertIn("| decode 1 (us/call in a graph) | 1.100 | 1.250 | "
                      "0.880 | 0.2 | 0.2 |", lines)
        self.assertIn("| prefill 65536 (cold us) | 140.000 | n/a | n/a | "
                      "96.0 | n/a |", lines)
        self.assertIn("| decode 1 | eager | 6.000 | 50.000 | 0.120 |", lines)
        self.assertIn("skipped: no bundle given has it", lines)

    def test_files(self):
        with tempfile.TemporaryDirectory() as out:
            text = sbs.write_report(self.report(), out)
            with open(os.path.join(out, "side_by_side.json")) as f:
                doc = json.load(f)  # strict JSON: NaN became null
            self.assertIsNone(doc["kernels"][0]["rows"][2]["peer_us"]
                              ["median"])
            with open(os.path.join(out, "side_by_side.md")) as f:
                self.assertEqual(f.read(), text)

    def test_kvrt_lib(self):
        with tempfile.TemporaryDirectory() as build:
            os.makedirs(os.path.join(build, "bench"))
            os.makedirs(os.path.join(build, "lib"))
            bundle = os.path.join(build, "bench", "b.bundle.json")
            self.assertIsNone(sbs.default_kvrt_lib(bundle))
            # A dangling soname link is passed over for the real file.
            os.symlink("gone", os.path.join(build, "lib", "libkvrt.so"))
            open(os.path.join(build, "lib", "libkvrt.so.0.1.0"), "w").close()
            self.assertEqual(sbs.default_kvrt_lib(bundle),
                             os.path.join(build, "lib", "libkvrt.so.0.1.0"))


class KvrtCall(unittest.TestCase):
    def test_vector_kernel_takes_the_variant_asked_for(self):
        self.assertEqual(sbs.kvrt_call("k", "vector", "auto"), ("k", "auto"))
        self.assertEqual(sbs.kvrt_call("k", "vector", "vector"),
                         ("k", "vector"))

    def test_wide_and_scalar_kernels_force_their_own(self):
        self.assertEqual(sbs.kvrt_call("k_wide", "wide", "auto"),
                         ("k", "wide"))
        self.assertEqual(sbs.kvrt_call("k_scalar", "scalar", "vector"),
                         ("k", "scalar"))
        with self.assertRaises(ValueError):
            sbs.kvrt_call("k", "wide", "auto")


if __name__ == "__main__":
    unittest.main()
