#!/usr/bin/env python3
"""The FlashInfer drop-in's cost: kvgen.ops.append_paged_kv_cache beside
flashinfer.page.append_paged_kv_cache (when FlashInfer is installed).

    PYTHONPATH=python python3 bench/flashinfer_dropin_gpu.py \\
        [--tokens 1,32,512] [--layout NHD] [--calls 2000]

For each token count (decode: one token a request, each request's pages
drawn at random from a cache of 1 GiB; bf16, 8 KV heads, head_dim 128, page
16): the eager call's host cost (us per call, back to back, the stream
drained once at the end: what the Python call and the launch cost the
CPU), and the device time per call (us, CUDA events around a graph of 100
calls, median of 15 replays). Before timing, both ops' caches are compared
byte for byte (exit 1 on a difference). Needs torch on a CUDA device.
"""

import argparse
import statistics
import sys
import time

import torch

import kvgen


def inputs(tokens, layout, pages_per_req=4, page=16, heads=8, dim=128):
    dev = torch.device("cuda")
    num_pages = (1 << 30) // (2 * page * heads * dim * 2)
    shape = ((num_pages, 2, page, heads, dim) if layout == "NHD" else
             (num_pages, 2, heads, page, dim))
    cache = torch.zeros(shape, dtype=torch.bfloat16, device=dev)
    perm = torch.randperm(num_pages, device=dev)[:tokens * pages_per_req]
    kv_indices = perm.to(torch.int32)
    kv_indptr = torch.arange(0, tokens * pages_per_req + 1, pages_per_req,
                             dtype=torch.int32, device=dev)
    batch = torch.arange(tokens, dtype=torch.int32, device=dev)
    positions = torch.randint(0, pages_per_req * page, (tokens,),
                              dtype=torch.int32, device=dev)
    last = ((positions % page) + 1).to(torch.int32)
    key = torch.randn(tokens, heads, dim, dtype=torch.bfloat16, device=dev)
    value = torch.randn_like(key)
    return (key, value, batch, positions, cache, kv_indices, kv_indptr, last)


def eager_us(fn, args, calls):
    fn(*args)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    host = time.perf_counter() - start
    torch.cuda.synchronize()
    return host / calls * 1e6


def device_us(fn, args, per_graph=100, reps=15):
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        fn(*args)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(per_graph):
            fn(*args)
    times = []
    for _ in range(reps):
        begin = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        begin.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end) * 1e3 / per_graph)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", default="1,32,512")
    parser.add_argument("--layout", default="NHD", choices=("NHD", "HND"))
    parser.add_argument("--calls", type=int, default=2000)
    opts = parser.parse_args()
    try:
        import flashinfer
        peer = flashinfer.page.append_paged_kv_cache
    except Exception as e:  # noqa: BLE001 - any import failure: no peer
        print("flashinfer not available (%s): kvgen alone" % e)
        peer = None

    def ours(k, v, b, p, cache, idx, ptr, last):
        kvgen.ops.append_paged_kv_cache(k, v, b, p, cache, idx, ptr, last,
                                        opts.layout)

    def theirs(k, v, b, p, cache, idx, ptr, last):
        peer(k, v, b, p, cache, idx, ptr, last, kv_layout=opts.layout)

    failed = False
    for tokens in [int(t) for t in opts.tokens.split(",")]:
        args = inputs(tokens, opts.layout)
        rows = [("kvgen", ours)] + ([("flashinfer", theirs)] if peer else [])
        if peer:
            mine = args[4].clone()
            ours(*args[:4], mine, *args[5:])
            other = args[4].clone()
            theirs(*args[:4], other, *args[5:])
            torch.cuda.synchronize()
            if not torch.equal(mine.view(torch.int16),
                               other.view(torch.int16)):
                print("tokens %d: the caches differ" % tokens)
                failed = True
        for name, fn in rows:
            print("tokens %5d  %-10s eager %7.2f us/call  device %6.2f us"
                  % (tokens, name, eager_us(fn, args, opts.calls),
                     device_us(fn, args)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
