"""The package's own cost per eager call, kvrt's launch replaced by a no-op
(docs/dev/BINDING.md): CPU tensors, host kernels, us per call, the minimum
of timeit.repeat(call, number=1000, repeat=REPEAT).

    KVGEN_BUILD_DIR=build KVGEN_COMPILER=build/bin/kvgen \\
        python python/bench_noop.py [--repeat 30] [--tokens 1,16,512]

Needs torch (CPU) and a C compiler (cc) for the no-op. Runs against the
package it imports: this tree's (the extension) or an older one's (ctypes).
"""

import argparse
import ctypes
import os
import subprocess
import tempfile
import timeit

import torch

import kvgen
from kvgen import _kvrt

H, D, BS, NB = 8, 128, 16, 64
RANK, ROPE = 512, 64


def _noop():
    d = tempfile.mkdtemp()
    src, lib = os.path.join(d, "noop.c"), os.path.join(d, "libnoop.so")
    with open(src, "w") as f:
        f.write("int kvgen_noop(void *a, void *b, void *c) "
                "{ (void)a; (void)b; (void)c; return 0; }\n")
    subprocess.check_call(["cc", "-O2", "-shared", "-fPIC", src, "-o", lib])
    fn = ctypes.CDLL(lib).kvgen_noop
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p] * 3
    return fn


def _use_noop(fn):
    """Every launch entry point becomes the no-op."""
    try:
        from kvgen import _ext
    except ImportError:
        _ext = None
    if _ext is not None:
        address = ctypes.cast(fn, ctypes.c_void_p).value
        _ext.get().init(*[address] * len(_ext.get().KINDS))
        return "extension"
    k = _kvrt.lib()
    for name in ("append", "paged_kv_append", "mla_append"):
        setattr(k, name, fn)
    import gc

    for obj in gc.get_objects():
        if isinstance(obj, kvgen.Bundle):
            obj._lib_append = fn
    return "ctypes"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--tokens", default="1,16,512")
    args = p.parse_args()
    tokens = [int(t) for t in args.tokens.split(",")]
    bf16 = torch.bfloat16
    kc = torch.zeros(NB, BS, H, D, dtype=bf16)
    vc = torch.zeros_like(kc)
    kc8 = torch.zeros(NB, BS, H, D, dtype=torch.uint8)
    vc8 = torch.zeros_like(kc8)
    scale = torch.ones(1)
    mla = torch.zeros(NB, BS, RANK + ROPE, dtype=bf16)
    idx = dict(dtype=torch.int32)
    calls = {}
    for t in tokens:
        key = torch.randn(t, H, D, dtype=bf16)
        slots = torch.arange(t, dtype=torch.int64)
        latent = torch.randn(t, RANK + ROPE, dtype=bf16)
        kv_c, k_pe = latent[:, :RANK], latent[:, RANK:]
        pages = (t + BS - 1) // BS
        batch = torch.zeros(t, **idx)
        pos = torch.arange(t, **idx)
        kv_indices = torch.arange(pages, **idx)
        kv_indptr = torch.tensor([0, pages], **idx)
        last = torch.tensor([t - (pages - 1) * BS], **idx)
        flash = kvgen.ops.reshape_and_cache_flash
        calls[("reshape_and_cache_flash bf16, scales None", t)] = (
            lambda key=key, slots=slots: flash(key, key, kc, vc, slots,
                                               "auto", None, None))
        calls[("reshape_and_cache_flash bf16, vLLM's scales", t)] = (
            lambda key=key, slots=slots: flash(key, key, kc, vc, slots,
                                               "auto", scale, scale))
        calls[("reshape_and_cache_flash fp8", t)] = (
            lambda key=key, slots=slots: flash(key, key, kc8, vc8, slots,
                                               "fp8", scale, scale))
        calls[("append_paged_kv_cache bf16", t)] = (
            lambda key=key, a=(batch, pos), b=(kv_indices, kv_indptr, last):
            kvgen.ops.append_paged_kv_cache(key, key, a[0], a[1], (kc, vc),
                                            *b))
        calls[("concat_and_cache_mla bf16", t)] = (
            lambda c=kv_c, p=k_pe, slots=slots: kvgen.ops.concat_and_cache_mla(
                c, p, mla, slots, "auto", scale))
    for call in calls.values():  # the real kernels once: plans, compiles
        call()
    path = _use_noop(_noop())
    names = list(dict.fromkeys(n for n, _ in calls))
    print("launches through: %s; us per call, no-op launch" % path)
    print("| op | " + " | ".join("T=%d" % t for t in tokens) + " |")
    print("|---|" + "---|" * len(tokens))
    for name in names:
        row = []
        for t in tokens:
            call = calls[(name, t)]
            call()
            best = min(timeit.repeat(call, number=1000, repeat=args.repeat))
            row.append("%.2f" % (best * 1e3))
        print("| %s | %s |" % (name, " | ".join(row)))


if __name__ == "__main__":
    main()
