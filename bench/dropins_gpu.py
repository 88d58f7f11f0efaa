"""kvgen's drop-in ops beside the ops they replace, on a GPU, in one process.

    PYTHONPATH=python python3 bench/dropins_gpu.py [--tokens 1,8,32,128,512,4096]
        [--vllm-ext LIB.so] [--iters 2000] [--json OUT]

For each op and token count, two figures per system:
  eager   the wall time per call of a Python loop of --iters calls, one
          synchronize at the end: what a serving loop pays per call when the
          GPU keeps up (the host-side cost of the op);
  device  the time per call inside a CUDA graph of --graph-calls calls,
          replayed and timed with events (the kernel's cost, launch
          overheads amortized).
Ops:
  append_paged_kv_cache   FlashInfer's signature: kvgen.ops against
                          flashinfer.page (if flashinfer imports); bf16, NHD,
                          page 16, 8 KV heads x 128; decode batches (one new
                          token per request) up to 512 tokens, then four
                          requests sharing the tokens;
  reshape_and_cache_flash vLLM's signature, scales passed as vLLM passes them
                          (bf16 "auto", and "fp8" with per-tensor scales);
                          against torch.ops._C_cache_ops (--vllm-ext: vLLM's
                          own op built as a torch extension);
  concat_and_cache_mla    vLLM's MLA append (512 + 64, block 64, bf16).
Before a peer is timed, its cache is compared byte for byte with kvgen's on the
same inputs; a mismatch is reported and that peer's row is not timed.
Kernels come from KVGEN_CACHE_DIR (kvgen precompile) or the compiler. The
package launches through its compiled binding (kvgen/_kvext.abi3.so: in the
wheel, or beside $KVGEN_KVRT_LIB / in $KVGEN_BUILD_DIR/lib); each row's
"fast" column is the share of kvgen's eager calls the binding took in C (the
rest ran the package's Python checks).
"""

import argparse
import json
import sys
import time

import torch

import kvgen
from kvgen import _ext

H, D, PAGE = 8, 128, 16
NUM_PAGES = 32768


def eager_us(fn, iters, warmup=50):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / iters * 1e6


def device_us(fn, calls, reps=20):
    """Per call inside a CUDA graph of `calls` calls: the median of `reps`
    replays."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        begin = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        begin.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end) * 1e3 / calls)
    times.sort()
    return times[len(times) // 2]


def same_bytes(a, b):
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))


class Row(dict):
    def show(self):
        cells = ["%s" % self["op"], "%d" % self["tokens"]]
        for key in ("kvgen_eager", "peer_eager", "kvgen_device", "peer_device"):
            v = self.get(key)
            cells.append("-" if v is None else "%.2f" % v)
        ratio = self.get("eager_ratio")
        cells.append("-" if ratio is None else "%.3f" % ratio)
        fast = self.get("fast")
        cells.append("-" if fast is None else "%.0f%%" % (100 * fast))
        cells.append(self.get("note", ""))
        print("| " + " | ".join(cells) + " |", flush=True)


def _fast_calls():
    return sum(_ext.get().stats()[:3])


def time_pair(row, kvgen_fn, peer_fn, args):
    before = _fast_calls()
    row["kvgen_eager"] = eager_us(kvgen_fn, args.iters)
    row["fast"] = (_fast_calls() - before) / (args.iters + 50)
    row["kvgen_device"] = device_us(kvgen_fn, args.graph_calls)
    if peer_fn is not None:
        row["peer_eager"] = eager_us(peer_fn, args.iters)
        row["peer_device"] = device_us(peer_fn, args.graph_calls)
        # The kvgen figure again after the peer, so that drift between the
        # two phases shows.
        again = eager_us(kvgen_fn, args.iters)
        row["kvgen_eager_again"] = again
        row["eager_ratio"] = min(row["kvgen_eager"], again) / row["peer_eager"]


def flashinfer_workload(n, gen):
    """Requests, their pages and their new tokens for n new tokens."""
    if n <= 512:
        reqs, fresh = n, [1] * n
    else:
        reqs = 4
        fresh = [n // 4] * 4
    seq_lens = [int(torch.randint(1, 32 * PAGE, (1,), generator=gen)) + f
                for f in fresh]
    pages = [(s + PAGE - 1) // PAGE for s in seq_lens]
    perm = torch.randperm(NUM_PAGES, generator=gen)
    assert sum(pages) <= NUM_PAGES
    indptr = [0]
    for p in pages:
        indptr.append(indptr[-1] + p)
    batch, pos = [], []
    for r in range(reqs):
        for i in range(fresh[r]):
            batch.append(r)
            pos.append(seq_lens[r] - fresh[r] + i)
    dev = "cuda"
    i32 = torch.int32
    return dict(
        batch_indices=torch.tensor(batch, dtype=i32, device=dev),
        positions=torch.tensor(pos, dtype=i32, device=dev),
        kv_indices=perm[:indptr[-1]].to(i32).to(dev),
        kv_indptr=torch.tensor(indptr, dtype=i32, device=dev),
        kv_last_page_len=torch.tensor(
            [(s - 1) % PAGE + 1 for s in seq_lens], dtype=i32, device=dev))


def bench_flashinfer(args, rows, gen):
    try:
        import flashinfer
        peer = flashinfer.page.append_paged_kv_cache
    except Exception as e:  # the peer is optional
        print("flashinfer: not available (%s: %s)" % (type(e).__name__, e))
        peer = None
    dt = torch.bfloat16
    kc = torch.randn(NUM_PAGES, PAGE, H, D, device="cuda").to(dt)
    vc = torch.randn_like(kc)
    for n in args.tokens:
        w = flashinfer_workload(n, gen)
        key = torch.randn(n, H, D, device="cuda").to(dt)
        value = torch.randn(n, H, D, device="cuda").to(dt)
        row = Row(op="append_paged_kv_cache", tokens=n)

        def ours(kc=kc, vc=vc):
            kvgen.ops.append_paged_kv_cache(
                key, value, w["batch_indices"], w["positions"], (kc, vc),
                w["kv_indices"], w["kv_indptr"], w["kv_last_page_len"], "NHD")

        theirs = None
        if peer is not None:
            kc2, vc2 = kc.clone(), vc.clone()
            ours()
            peer(key, value, w["batch_indices"], w["positions"], (kc2, vc2),
                 w["kv_indices"], w["kv_indptr"], w["kv_last_page_len"], "NHD")
            torch.cuda.synchronize()
            if same_bytes(kc, kc2) and same_bytes(vc, vc2):

                def theirs():
                    peer(key, value, w["batch_indices"], w["positions"],
                         (kc, vc), w["kv_indices"], w["kv_indptr"],
                         w["kv_last_page_len"], "NHD")
            else:
                row["note"] = "FlashInfer's cache differs from kvgen's"
        time_pair(row, ours, theirs, args)
        rows.append(row)
        row.show()


def bench_vllm(args, rows, gen, vllm_ops):
    dt = torch.bfloat16
    blocks = NUM_PAGES
    kc = torch.randn(blocks, PAGE, H, D, device="cuda").to(dt)
    vc = torch.randn_like(kc)
    k8 = torch.zeros(blocks, PAGE, H, D, device="cuda", dtype=torch.uint8)
    v8 = torch.zeros_like(k8)
    scale = torch.tensor([0.05], device="cuda")
    peer = vllm_ops.reshape_and_cache_flash if vllm_ops else None
    for fmt in ("auto", "fp8"):
        for n in args.tokens:
            key = torch.randn(n, H, D, device="cuda").to(dt)
            value = torch.randn(n, H, D, device="cuda").to(dt)
            slots = torch.randperm(blocks * PAGE, generator=gen)[:n].to("cuda")
            cache_k, cache_v = (kc, vc) if fmt == "auto" else (k8, v8)
            row = Row(op="reshape_and_cache_flash/" + fmt, tokens=n)

            def ours(ck=cache_k, cv=cache_v):
                kvgen.ops.reshape_and_cache_flash(key, value, ck, cv, slots,
                                                  fmt, scale, scale)

            theirs = None
            if peer is not None:
                ck2, cv2 = cache_k.clone(), cache_v.clone()
                ours()
                peer(key, value, ck2, cv2, slots, fmt, scale, scale)
                torch.cuda.synchronize()
                if same_bytes(cache_k, ck2) and same_bytes(cache_v, cv2):

                    def theirs(ck=cache_k, cv=cache_v):
                        peer(key, value, ck, cv, slots, fmt, scale, scale)
                else:
                    row["note"] = "vLLM's cache differs from kvgen's"
            time_pair(row, ours, theirs, args)
            rows.append(row)
            row.show()


def bench_mla(args, rows, gen, vllm_ops):
    dt = torch.bfloat16
    blocks, bs, rank, rope = 2048, 64, 512, 64
    cache = torch.randn(blocks, bs, rank + rope, device="cuda").to(dt)
    scale = torch.tensor([1.0], device="cuda")
    peer = vllm_ops.concat_and_cache_mla if vllm_ops else None
    for n in args.tokens:
        kv_c = torch.randn(n, rank, device="cuda").to(dt)
        k_pe = torch.randn(n, rope, device="cuda").to(dt)
        slots = torch.randperm(blocks * bs, generator=gen)[:n].to("cuda")
        row = Row(op="concat_and_cache_mla", tokens=n)

        def ours():
            kvgen.ops.concat_and_cache_mla(kv_c, k_pe, cache, slots, "auto",
                                           scale)

        theirs = None
        if peer is not None:
            other = cache.clone()
            ours()
            peer(kv_c, k_pe, other, slots, "auto", scale)
            torch.cuda.synchronize()
            if same_bytes(cache, other):

                def theirs():
                    peer(kv_c, k_pe, cache, slots, "auto", scale)
            else:
                row["note"] = "vLLM's cache differs from kvgen's"
        time_pair(row, ours, theirs, args)
        rows.append(row)
        row.show()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", default="1,8,32,128,512,4096")
    p.add_argument("--iters", type=int, default=2000)
    p.add_argument("--graph-calls", type=int, default=100)
    p.add_argument("--vllm-ext", help="vLLM's cache ops built as a torch "
                   "extension (registers torch.ops._C_cache_ops)")
    p.add_argument("--ops", default="flashinfer,vllm,mla")
    p.add_argument("--json", help="also write the rows here")
    args = p.parse_args()
    args.tokens = [int(x) for x in args.tokens.split(",")]
    if not torch.cuda.is_available():
        print("dropins_gpu: skipped: no CUDA device")
        return 0
    vllm_ops = None
    if args.vllm_ext:
        torch.ops.load_library(args.vllm_ext)
        vllm_ops = torch.ops._C_cache_ops
    gen = torch.Generator().manual_seed(7919)
    print("device: %s, torch %s" % (torch.cuda.get_device_name(),
                                    torch.__version__))
    print("binding: %s" % _ext.get().__file__)
    print("| op | tokens | kvgen eager us | peer eager us | kvgen device us "
          "| peer device us | eager kvgen/peer | fast | note |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    rows = []
    ops = args.ops.split(",")
    if "flashinfer" in ops:
        bench_flashinfer(args, rows, gen)
    if "vllm" in ops:
        bench_vllm(args, rows, gen, vllm_ops)
    if "mla" in ops:
        bench_mla(args, rows, gen, vllm_ops)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(),
                       "torch": torch.__version__, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
