"""Programmatic dependent launch, measured where it matters: a CUDA graph of
layers, each a producer kernel that writes K/V (like a layer's projection)
followed by the append of those K/V into the cache.

Rows, per token count, in microseconds per layer (graph replay, CUDA events):
  producer      the producer alone (its own cost)
  append        the append alone (bench.bundle.json: the plain graph)
  plain         producer + append, bench.bundle.json's kernel
  pdl off       producer + append, bench-pdl.bundle.json's kernel (it waits
                with griddepcontrol), launched plainly
  pdl on        the same with kvrt_bundle_set_programmatic_launch: the
                append's launch may overlap the producer's tail
and the eager (no graph) time of plain and pdl on. After every graph the
caches are compared byte for byte with torch's own indexing of the producer's
output (poisoned cache, every layer's slots): a wrong byte exits 1.

Usage (GPU machine, from the repository root, over a staged build):
  KVGEN_KVRT_LIB=build/gpu-stage/lib/libkvrt.so PYTHONPATH=python \\
    python3 bench/pdl_graph_gpu.py --stage build/gpu-stage [--json out.json]
"""

import argparse
import json
import os
import sys

import torch

import kvgen

H, D, BS = 8, 128, 16
NUM_BLOCKS = 32768  # 1 GiB per bf16 cache, as in docs/PERFORMANCE.md


def _time(fn, reps, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) * 1000.0 / reps  # us per fn()


class Layers:
    """`layers` layers of n tokens: base QKV, per-layer slots, caches."""

    def __init__(self, n, layers, gen):
        self.n, self.layers = n, layers
        self.base = torch.randn(n, 3, H, D, generator=gen,
                                device="cuda").to(torch.bfloat16)
        self.qkv = torch.empty_like(self.base)
        # vLLM's views into the fused projection.
        self.key, self.value = self.qkv[:, 1], self.qkv[:, 2]
        perm = torch.randperm(NUM_BLOCKS * BS, generator=gen, device="cuda")
        self.slots = [perm[l * n:(l + 1) * n].to(torch.int64).contiguous()
                      for l in range(layers)]
        shape = (NUM_BLOCKS, BS, H, D)
        self.kc = torch.empty(shape, dtype=torch.bfloat16, device="cuda")
        self.vc = torch.empty(shape, dtype=torch.bfloat16, device="cuda")

    def poison(self):
        self.kc.view(torch.int16).fill_(-1)  # bf16 NaN bytes: a miss shows
        self.vc.view(torch.int16).fill_(-1)

    def produce(self, layer):
        # The layer's projection: every layer's K/V differ.
        torch.add(self.base, float(layer + 1), out=self.qkv)

    def check(self):
        """The caches against torch's own indexing; the number of wrong
        bytes (0 when right)."""
        want_k = torch.empty_like(self.kc)
        want_v = torch.empty_like(self.vc)
        want_k.view(torch.int16).fill_(-1)
        want_v.view(torch.int16).fill_(-1)
        for layer in range(self.layers):
            rows = torch.add(self.base, float(layer + 1))
            s = self.slots[layer]
            want_k.view(-1, H, D)[s] = rows[:, 1]
            want_v.view(-1, H, D)[s] = rows[:, 2]
        bad = (self.kc.view(torch.uint8) != want_k.view(torch.uint8)).sum()
        bad += (self.vc.view(torch.uint8) != want_v.view(torch.uint8)).sum()
        return int(bad)


def _steps(layers, bundle, name, produce=True, append=True):
    def run():
        for layer in range(layers.layers):
            if produce:
                layers.produce(layer)
            if append:
                bundle.append(layers.key, layers.value, layers.slots[layer],
                              layers.kc, layers.vc, kernel=name,
                              variant="vector")
    return run


def _graph(run):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run()  # warm: modules loaded, allocator settled
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    return graph


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", default="build/gpu-stage")
    parser.add_argument("--tokens", default="1,32,128,512")
    parser.add_argument("--layers", type=int, default=64)
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--json")
    args = parser.parse_args()

    plain = kvgen.Bundle.load(os.path.join(args.stage, "bench",
                                           "bench.bundle.json"))
    pdl = kvgen.Bundle.load(os.path.join(args.stage, "bench",
                                         "bench-pdl.bundle.json"))
    # The headline row (bench.mlir's first kernel) and its twin compiled
    # with --programmatic-launch (bench-pdl.mlir's), as the bundles list them.
    plain_name = plain.kernels[0]["name"]
    pdl_name = pdl.kernels[0]["name"]
    if pdl_name not in pdl.waits_for_producer:
        sys.exit("bench-pdl.bundle.json: %s does not wait (built without "
                 "--programmatic-launch?)" % pdl_name)
    gen = torch.Generator(device="cuda").manual_seed(13)
    rows, wrong = [], 0
    print("%6s %10s %10s %10s %10s %10s %12s %12s  %s" % (
        "tokens", "producer", "append", "plain", "pdl off", "pdl on",
        "eager plain", "eager pdl", "bytes"))
    for n in [int(t) for t in args.tokens.split(",")]:
        layers = Layers(n, args.layers, gen)
        row = {"tokens": n, "layers": args.layers}
        cases = [
            ("producer", plain, plain_name, True, False, False),
            ("append", plain, plain_name, False, True, False),
            ("plain", plain, plain_name, True, True, False),
            ("pdl off", pdl, pdl_name, True, True, False),
            ("pdl on", pdl, pdl_name, True, True, True),
        ]
        status = []
        for label, bundle, name, produce, append, on in cases:
            pdl.set_programmatic_launch(on)
            run = _steps(layers, bundle, name, produce, append)
            layers.poison()
            graph = _graph(run)
            row[label] = _time(graph.replay, args.reps) / args.layers
            if produce and append:
                bad = layers.check()
                status.append("%s:%s" % (label, "ok" if bad == 0 else
                                         "%d WRONG" % bad))
                wrong += bad
            del graph
        for label, on in (("eager plain", False), ("eager pdl", True)):
            pdl.set_programmatic_launch(on)
            bundle, name = (pdl, pdl_name) if on else (plain, plain_name)
            run = _steps(layers, bundle, name)
            layers.poison()
            row[label] = _time(run, max(1, args.reps // 5)) / args.layers
            bad = layers.check()
            status.append("%s:%s" % (label, "ok" if bad == 0 else
                                     "%d WRONG" % bad))
            wrong += bad
        pdl.set_programmatic_launch(False)
        print("%6d %10.2f %10.2f %10.2f %10.2f %10.2f %12.2f %12.2f  %s" % (
            n, row["producer"], row["append"], row["plain"], row["pdl off"],
            row["pdl on"], row["eager plain"], row["eager pdl"],
            " ".join(status)))
        rows.append(row)
        del layers
        torch.cuda.empty_cache()
    print("us per layer (producer + append) in a graph of %d layers; "
          "pdl on / plain shows the overlap" % args.layers)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "wrong_bytes": wrong}, f, indent=1)
    if wrong:
        print("FAIL: %d wrong bytes" % wrong)
        return 1
    print("bytes: all right")
    return 0


if __name__ == "__main__":
    sys.exit(main())
