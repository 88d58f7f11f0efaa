#!/usr/bin/env python3
"""What a kernel's parameter block costs a node of a CUDA graph.

    python3 bench/param_block_gpu.py [--json OUT.json]

Kernels that do nothing but read their parameters (a store that never
happens depends on them): one with the Triton append's parameters (7
pointers and 7 32-bit integers, about 100 bytes with Triton's own two
scratch pointers), one with the version-3 generated append's (7 pointers and
16 64-bit integers, 184 bytes), and two with the version-4 bf16 append's:
5 pointers and 16 32-bit integers of which 11 are read, and the same
without the 4 dim strides (12 integers, 11 read). Each is launched 100 times
into a CUDA graph at 1, 32, 128 and 512 blocks of 128 threads (the decode
grids of docs/PERFORMANCE.md); replays are timed with CUDA events, us per
node, median of 15. The differences are what the parameters cost a launch,
with no memory traffic of the kernel's own. Needs torch and Triton
on a CUDA machine; not part of any test.
"""

import argparse
import json
import statistics
import sys

GRAPH_CALLS = 100
REPS = 15


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args(argv)
    try:
        import torch
        import triton
        import triton.language as tl
    except ImportError as e:
        print("param_block_gpu: needs torch and triton: %s" % e,
              file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("param_block_gpu: no CUDA device", file=sys.stderr)
        return 2

    @triton.jit
    def touch(p0, p1, p2, p3, p4, p5, p6, s):
        # Stores that never happen (the integers sum to far more than 7) but
        # that make the kernel read every pointer and integer.
        if s == 7:
            tl.store(p0 + s, 1)
            tl.store(p1 + s, 1)
            tl.store(p2 + s, 1)
            tl.store(p3 + s, 1)
            tl.store(p4 + s, 1)
            tl.store(p5 + s, 1)
            tl.store(p6 + s, 1)

    @triton.jit
    def narrow(p0, p1, p2, p3, p4, p5, p6, a0, a1, a2, a3, a4, a5, a6):
        touch(p0, p1, p2, p3, p4, p5, p6, a0 + a1 + a2 + a3 + a4 + a5 + a6)

    @triton.jit
    def wide(p0, p1, p2, p3, p4, p5, p6, a0, a1, a2, a3, a4, a5, a6, a7, a8,
             a9, a10, a11, a12, a13, a14, a15):
        touch(p0, p1, p2, p3, p4, p5, p6,
              a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11 +
              a12 + a13 + a14 + a15)

    @triton.jit
    def append16(p0, p1, p2, p3, p4, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9,
                 a10, a11, a12, a13, a14, a15):
        # The bf16 append's list (bundle version 4): 5 pointers, 16 x i32,
        # of which it reads 11 (not num_tokens, not the 4 dim strides).
        # The last two of touch's seven pointers repeat two of the five.
        touch(p0, p1, p2, p3, p4, p0, p1,
              a1 + a3 + a4 + a6 + a7 + a9 + a10 + a11 + a13 + a14 + a15)

    @triton.jit
    def append12(p0, p1, p2, p3, p4, a0, a1, a3, a4, a6, a7, a9, a10, a11,
                 a13, a14, a15):
        # The same without the 4 dim strides: 5 pointers, 12 x i32.
        touch(p0, p1, p2, p3, p4, p0, p1,
              a1 + a3 + a4 + a6 + a7 + a9 + a10 + a11 + a13 + a14 + a15)

    bufs = [torch.zeros(1 << 20, dtype=torch.int8, device="cuda")
            for _ in range(7)]
    # Neither 1 nor a multiple of 16, so Triton keeps them as parameters;
    # past 2^31 for the wide kernel, so they are 64-bit.
    narrow_ints = [100003 + 2 * i for i in range(7)]
    wide_ints = [(1 << 33) + 3 + 2 * i for i in range(16)]
    append_ints = [100003 + 2 * i for i in range(16)]
    kernels = {
        "narrow (7 pointers, 7 x i32)":
            lambda grid: narrow[grid](*bufs, *narrow_ints, num_warps=4),
        "wide (7 pointers, 16 x i64)":
            lambda grid: wide[grid](*bufs, *wide_ints, num_warps=4),
        "append (5 pointers, 16 x i32, 11 read)":
            lambda grid: append16[grid](*bufs[:5], *append_ints, num_warps=4),
        "append (5 pointers, 12 x i32, 11 read)":
            lambda grid: append12[grid](*bufs[:5], *append_ints[:12],
                                        num_warps=4),
    }
    stream = torch.cuda.Stream()
    results = []
    with torch.cuda.stream(stream):
        for blocks in (1, 32, 128, 512):
            for name, launch in kernels.items():
                launch((blocks,))  # compile and warm up
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                graph.capture_begin()
                for _ in range(GRAPH_CALLS):
                    launch((blocks,))
                graph.capture_end()
                graph.replay()
                torch.cuda.synchronize()
                samples = []
                for _ in range(REPS):
                    start = torch.cuda.Event(enable_timing=True)
                    stop = torch.cuda.Event(enable_timing=True)
                    start.record(stream)
                    graph.replay()
                    stop.record(stream)
                    stop.synchronize()
                    samples.append(start.elapsed_time(stop) * 1e3 /
                                   GRAPH_CALLS)
                us = statistics.median(samples)
                results.append({"kernel": name, "blocks": blocks,
                                "us_per_node": us, "samples": samples})
                print("%-30s %4d blocks  %.3f us per node" %
                      (name, blocks, us), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(),
                       "triton": triton.__version__, "results": results}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
