#!/usr/bin/env python3
"""The pure parts of bench/side_by_side.py, on the CPU: its arguments, the
bytes it counts per token, the workloads' slots, and the report it writes;
and the order side_by_side_gpu.py's Timer times two launchers in, on a
stand-in for torch. Exits 77 (skipped) where the interpreter cannot import
the script."""

import importlib
import json
import math
import os
import random
import sys
import tempfile
import types
import unittest
from unittest import mock

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                     os.pardir, "bench")
# A script that is not there is a failure, not a skip.
if not os.path.isfile(os.path.join(BENCH, "side_by_side.py")):
    sys.exit("no side_by_side.py in %s" % BENCH)
sys.path.insert(0, BENCH)
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

    def test_prefill_sequential_blocks(self):
        slots = sbs.prefill_slots(1000, 16, 2048, 2, random.Random(2),
                                  "sequential")
        self.assertEqual(len(slots), 4096)
        for s in range(2):
            one = slots[s * 2048:(s + 1) * 2048]
            self.assertEqual(len(set(one)), 2048)
            blocks = []
            for x in one:
                if not blocks or blocks[-1] != x // 16:
                    blocks.append(x // 16)
            # Each block once, each the one after the last: a copy's writes.
            self.assertEqual(blocks, list(range(blocks[0],
                                                blocks[0] + len(blocks))))
        self.assertNotEqual(slots, sbs.prefill_slots(1000, 16, 2048, 2,
                                                     random.Random(2)))
        with self.assertRaises(ValueError):
            sbs.prefill_slots(1000, 16, 1024, 1, random.Random(2), "rows")

    def test_cases_pass_the_block_order(self):
        d = sbs.description_from_manifest(manifest())
        slots = sbs.make_cases(d, [], [2048], 3, "sequential")[0]["slots"]
        blocks = sorted({x // d["block_size"] for x in slots[:2048]})
        self.assertEqual(blocks, list(range(blocks[0],
                                            blocks[0] + len(blocks))))

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


class FakeDevice:
    """Stands in for torch (and the host clock) under side_by_side_gpu's
    Timer: calls run at once, in order, each advancing a clock by its
    launcher's cost, which grows by `drift` per call run before it; a graph
    keeps the calls captured into it and runs them on replay. `log` holds
    the calls run, as (launcher, set)."""

    def __init__(self, costs, drift=0.0):
        self.costs, self.drift = costs, drift
        self.clock = 0.0  # ms
        self.log = []
        self.capturing = None
        self.stream = object()

    def call(self, tag, i):
        if self.capturing is not None:
            self.capturing.calls.append((tag, i))
            return
        self.clock += self.costs[tag] * (1 + self.drift * len(self.log))
        self.log.append((tag, i))

    def perf_counter(self):  # side_by_side_gpu's `time`, in seconds
        return self.clock / 1e3

    def launcher(self, tag):
        return lambda i: self.call(tag, i)

    def torch(self):
        device = self

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self, stream):
                assert stream is device.stream
                self.t = device.clock

            def synchronize(self):
                pass

            def elapsed_time(self, stop):
                return stop.t - self.t

        class CUDAGraph:
            def __init__(self):
                self.calls, self.pool_id = [], None
                self.captured = False

            def capture_begin(self, pool=None):
                assert device.capturing is None
                self.pool_id = pool if pool is not None else object()
                device.capturing = self

            def capture_end(self):
                device.capturing, self.captured = None, True

            def pool(self):
                return self.pool_id

            def replay(self):
                assert self.captured
                for call in self.calls:
                    device.call(*call)

        cuda = types.SimpleNamespace(
            Event=Event, CUDAGraph=CUDAGraph, synchronize=lambda: None,
            current_stream=lambda: device.stream)
        return types.SimpleNamespace(
            cuda=cuda, float32="float32",
            ones=lambda *a, **k: types.SimpleNamespace(sum=lambda: None))


class PairedTimer(unittest.TestCase):
    """kvgen's and the peer's samples interleave in every mode, which goes
    first alternating (docs/dev/TUNING.md, "Reading the numbers")."""

    REPS = {"cold": 4, "graph": 4, "eager_calls": 60, "eager": 4,
            "copy": 1, "max_graphs": 400}

    def timer(self, costs, drift=0.0):
        self.device = FakeDevice(costs, drift)
        capi = types.ModuleType("kvgen.capi")
        for name in ("AUTO", "VECTOR", "WIDE", "SCALAR"):
            setattr(capi, "VARIANT_" + name, name)
        kvgen = types.ModuleType("kvgen")
        kvgen.capi = capi
        with mock.patch.dict(sys.modules, {"torch": self.device.torch(),
                                           "kvgen": kvgen,
                                           "kvgen.capi": capi}):
            sys.modules.pop("side_by_side_gpu", None)
            gpu = importlib.import_module("side_by_side_gpu")
        gpu.time = self.device
        return gpu.Timer(self.device.stream, dict(self.REPS))

    def blocks(self, size, start=0):
        """The launcher of each block of `size` calls of the log from
        `start` on (a block's calls all one launcher's)."""
        log = self.device.log[start:]
        tags = [{tag for tag, _ in log[b:b + size]}
                for b in range(0, len(log), size)]
        self.assertTrue(all(len(t) == 1 for t in tags), tags)
        return "".join(t.pop() for t in tags)

    def test_graph_pair(self):
        timer = self.timer({"k": 0.002, "p": 0.003})
        sets = 2 * sbs.GRAPH_CALLS + 50  # three graphs each
        graphs = []
        real = timer._capture
        timer._capture = lambda *a: graphs.append(real(*a)) or graphs[-1]
        k, p = timer.graph_pair(self.device.launcher("k"),
                                self.device.launcher("p"), sets)
        self.assertEqual([len(g) for g in graphs], [3, 3])
        # Each launcher's graphs share a pool of their own.
        pools = [{g.pool() for g in per} for per in graphs]
        self.assertEqual([len(x) for x in pools], [1, 1])
        self.assertNotEqual(pools[0], pools[1])
        self.assertEqual(graphs[0][2].calls[49:51], [("k", 249), ("k", 0)])
        # Both warmed up, then four samples: k p, p k, k p, p k.
        self.assertEqual(self.blocks(3 * sbs.GRAPH_CALLS), "kp" + "kppkkppk")
        for samples, us in ((k, 2.0), (p, 3.0)):
            self.assertEqual(len(samples), 4)
            for x in samples:
                self.assertAlmostEqual(x, us)
        one = self.timer({"k": 0.002}).graph(self.device.launcher("k"), 10)
        self.assertEqual(len(one), 4)
        self.assertAlmostEqual(one[0], 2.0)

    def test_eager_pair(self):
        timer = self.timer({"k": 0.004, "p": 0.05})
        k, p = timer.eager_pair(self.device.launcher("k"),
                                self.device.launcher("p"), 10)
        # 50 calls at least: 50 of each to warm up, then four samples.
        self.assertEqual(self.blocks(50), "kp" + "kppkkppk")
        self.assertEqual(self.device.log[-50:][:11],
                         [("k", i % 10) for i in range(11)])
        for samples, us in ((k, 4.0), (p, 50.0)):
            self.assertEqual(len(samples), 4)
            for x in samples:
                self.assertAlmostEqual(x, us)
        one = self.timer({"k": 0.004}).eager(self.device.launcher("k"), 100)
        self.assertEqual(len(one), 4)
        self.assertAlmostEqual(one[0], 4.0)
        self.assertEqual(len(self.device.log), 50 + 4 * 60)

    def test_cold_pair(self):
        timer = self.timer({"k": 0.002, "p": 0.003})
        k, p = timer.cold_pair(self.device.launcher("k"),
                               self.device.launcher("p"), 3)
        self.assertEqual(self.blocks(1), "kp" + "kppkkppk")
        self.assertEqual([i for _, i in self.device.log[2:]],
                         [0, 0, 1, 1, 2, 2, 0, 0])
        self.assertEqual((len(k), len(p)), (4, 4))

    def test_drift_hits_both_alike(self):
        # Two equal kernels on a device that slows down over the run: one
        # after the other the second looks slower; interleaved they tie.
        for mode in ("graph", "eager", "cold"):
            timer = self.timer({"k": 0.002, "p": 0.002}, drift=0.05)
            k, p = getattr(timer, mode + "_pair")(
                self.device.launcher("k"), self.device.launcher("p"), 100)
            self.assertAlmostEqual(sbs.median(k) / sbs.median(p), 1.0,
                                   places=6, msg=mode)
            timer = self.timer({"k": 0.002, "p": 0.002}, drift=0.05)
            k = getattr(timer, mode)(self.device.launcher("k"), 100)
            p = getattr(timer, mode)(self.device.launcher("p"), 100)
            self.assertLess(sbs.median(k) / sbs.median(p), 0.9, msg=mode)


if __name__ == "__main__":
    unittest.main()
