"""Eager per-call time of the drop-in op from a Python loop, on a GPU.

    python python/bench_eager.py [--iters 2000] [--tokens 1,8,64,512,4096]

For each token count: kvgen.ops.reshape_and_cache_flash (bf16, paged NHD,
block 16, 8 KV heads, head_dim 128), the Bundle.append binding under it,
torch's index_put_ on cache.view(-1, H, D) (K and V: two calls, as a torch
implementation needs) and, if vLLM is installed, its own op. The time is the
loop's wall time over the iterations, synchronized once at the end: what a
serving loop pays per call when the GPU keeps up. Kernels come from
KVGEN_CACHE_DIR (see docs/PYTHON.md).
"""

import argparse
import json
import time

import torch

import kvgen

H, D, BS = 8, 128, 16


def per_call_us(fn, iters, warmup=50):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / iters * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iters", type=int, default=2000)
    p.add_argument("--tokens", default="1,8,64,512,4096")
    p.add_argument("--num-blocks", type=int, default=4096)
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()

    dev = "cuda"
    dt = torch.bfloat16
    kc = torch.zeros(args.num_blocks, BS, H, D, device=dev, dtype=dt)
    vc = torch.zeros_like(kc)
    scale = torch.ones(1, device=dev)
    vllm_op = None
    try:
        import vllm._custom_ops  # noqa: F401  registers _C_cache_ops

        vllm_op = torch.ops._C_cache_ops.reshape_and_cache_flash
    except Exception:
        pass

    rows = []
    print("| tokens | kvgen.ops (us) | Bundle.append (us) | index_put_ x2 "
          "(us) | vLLM (us) |")
    print("|---:|---:|---:|---:|---:|")
    for n in [int(x) for x in args.tokens.split(",")]:
        key = torch.randn(n, H, D, device=dev).to(dt)
        value = torch.randn(n, H, D, device=dev).to(dt)
        slots = torch.randperm(args.num_blocks * BS, device=dev)[:n]
        kvgen.ops.reshape_and_cache_flash(key, value, kc, vc, slots)
        bundle = next(iter(kvgen.ops._plans.values())).bundle
        flat_k, flat_v = kc.view(-1, H, D), vc.view(-1, H, D)
        r = {"tokens": n}
        r["kvgen_ops"] = per_call_us(
            lambda: kvgen.ops.reshape_and_cache_flash(
                key, value, kc, vc, slots, "auto", scale, scale), args.iters)
        r["bundle_append"] = per_call_us(
            lambda: bundle.append(key, value, slots, kc, vc), args.iters)

        def index_put():
            flat_k.index_put_((slots,), key)
            flat_v.index_put_((slots,), value)

        r["index_put"] = per_call_us(index_put, args.iters)
        if vllm_op is not None:
            r["vllm"] = per_call_us(
                lambda: vllm_op(key, value, kc, vc, slots, "auto", scale,
                                scale), args.iters)
        rows.append(r)
        print("| %d | %.2f | %.2f | %.2f | %s |" % (
            n, r["kvgen_ops"], r["bundle_append"], r["index_put"],
            "%.2f" % r["vllm"] if "vllm" in r else "-"))
    print("device: %s, torch %s" % (torch.cuda.get_device_name(),
                                    torch.__version__))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(),
                       "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
