#!/usr/bin/env python3
"""kvgen's fp8 e4m3 append, bit for bit against PyTorch.

    torch_fp8_bitexact.py --libkvrt build/lib/libkvrt.so \\
        --bundle build/bin/conformance-matrix.bundle.json \\
        [--kernel gpu_append_paged_nhd_fp8_e4m3] [--seed N]

Loads the bundle with libkvrt through ctypes (kvrt's C API, with the
package's ctypes structs: run it with PYTHONPATH=python),
appends random bf16 K/V into an fp8 e4m3 per-tensor static cache (paged NHD)
on the GPU, and compares every cache byte with what PyTorch computes:

  * a value with |x / s| <= 448 must be stored as
    (x.float() / s).to(torch.float8_e4m3fn) (IEEE fp32 division, round to
    nearest even, the conversion vLLM's reshape_and_cache_flash matches);
  * a value past 448 * s (infinities included) must be the saturated
    largest code, 0x7E or 0xFE (PyTorch's own conversion gives NaN there);
  * a NaN must be a NaN code (0x7F; PyTorch may write 0xFF);
  * rows of padding tokens (slot -1) and every other row stay as poisoned.

Each scale is tried with the cache passed as uint8 and as DLPack's float8
code (10). Exit status: 0 passed, 1 failed, 77 skipped (no torch, no CUDA
device, or a torch without float8).
"""

import argparse
import ctypes
import json
import sys

# kvrt's and DLPack's C structs, from the Python package (PYTHONPATH=python).
from kvgen import capi

SKIP = 77


def load_kvrt(path):
    lib = ctypes.CDLL(path)
    lib.kvrt_last_error.restype = ctypes.c_char_p
    lib.kvrt_bundle_load_file.argtypes = [ctypes.c_char_p,
                                          ctypes.POINTER(ctypes.c_void_p)]
    lib.kvrt_bundle_destroy.argtypes = [ctypes.c_void_p]
    lib.kvrt_bundle_num_kernels.argtypes = [ctypes.c_void_p]
    lib.kvrt_bundle_num_kernels.restype = ctypes.c_size_t
    lib.kvrt_bundle_kernel_manifest.argtypes = [ctypes.c_void_p,
                                                ctypes.c_size_t]
    lib.kvrt_bundle_kernel_manifest.restype = ctypes.c_char_p
    lib.kvrt_append.argtypes = [ctypes.c_void_p] * 3
    return lib


def find_manifest(lib, bundle, name):
    for i in range(lib.kvrt_bundle_num_kernels(bundle)):
        text = lib.kvrt_bundle_kernel_manifest(bundle, i)
        if text is None:
            continue
        entry = json.loads(text.decode())
        if entry.get("name") == name:
            return entry
    return None


def check(torch, lib, bundle, entry, scale, as_float8, gen):
    cache = entry["cache"]
    quant = cache.get("quant", {})
    if (cache.get("layout") != "paged_nhd" or quant.get("kind") != "fp8_e4m3"
            or quant.get("granularity") != "per_tensor"
            or quant.get("mode") != "static" or quant.get("reciprocal")):
        return ["kernel %s is not an fp8_e4m3 per_tensor static paged_nhd "
                "append with IEEE division: %s" % (entry["name"], cache)]
    bs, heads, dim = cache["block_size"], cache["num_kv_heads"], cache["head_dim"]
    dev = torch.device("cuda", 0)
    num_blocks, tokens = 96, 1000

    # bf16 values: most within range for this scale, a share past 448 * s,
    # some far past it, exact ties of the fp8 grid, infinities and NaN.
    def values():
        x = torch.randn(tokens, heads, dim, generator=gen, device=dev) * 60 * scale
        pick = torch.rand(tokens, heads, dim, generator=gen, device=dev)
        past = (448 + torch.rand(tokens, heads, dim, generator=gen, device=dev)
                * 2000) * scale
        sign = torch.where(torch.rand(tokens, heads, dim, generator=gen,
                                      device=dev) < 0.5, -1.0, 1.0)
        x = torch.where(pick < 0.10, past * sign, x)
        x = torch.where((pick >= 0.10) & (pick < 0.11), 1e30 * sign, x)
        ties = torch.tensor([1.0625, 1.1875, 17.0, 464.0], device=dev)
        tie = ties[torch.randint(0, 4, (tokens, heads, dim), generator=gen,
                                 device=dev)] * scale * sign
        x = torch.where((pick >= 0.11) & (pick < 0.15), tie, x)
        x = torch.where((pick >= 0.15) & (pick < 0.152), sign * float("inf"), x)
        x = torch.where((pick >= 0.152) & (pick < 0.154), float("nan"), x)
        return x.to(torch.bfloat16)

    key, value = values(), values()
    # Distinct random slots; every 10th token is padding.
    slots = torch.randperm(num_blocks * bs, generator=gen, device=dev)[:tokens]
    slots = slots.to(torch.int64)
    slots[::10] = -1
    poison = 0xA5
    key_cache = torch.full((num_blocks, bs, heads, dim), poison,
                           dtype=torch.uint8, device=dev)
    value_cache = torch.full_like(key_cache, poison)
    key_scale = torch.tensor([scale], dtype=torch.float32, device=dev)
    value_scale = torch.tensor([scale], dtype=torch.float32, device=dev)

    cache_code = capi.FLOAT8_E4M3FN if as_float8 else capi.UINT
    t_key = capi.torch_tensor(key, capi.BFLOAT, 16)
    t_value = capi.torch_tensor(value, capi.BFLOAT, 16)
    t_slots = capi.torch_tensor(slots, capi.INT, 64)
    t_kc = capi.torch_tensor(key_cache, cache_code, 8)
    t_vc = capi.torch_tensor(value_cache, cache_code, 8)
    t_ks = capi.torch_tensor(key_scale, capi.FLOAT, 32)
    t_vs = capi.torch_tensor(value_scale, capi.FLOAT, 32)
    args = capi.append_args(entry["name"].encode(), t_key, t_value, t_slots,
                            t_kc, t_vc, capi.VARIANT_AUTO, t_ks, t_vs)
    stream = torch.cuda.current_stream().cuda_stream
    status = lib.kvrt_append(bundle, args.address, ctypes.c_void_p(stream))
    if status != 0:
        return ["kvrt_append returned %d: %s" %
                (status, lib.kvrt_last_error().decode())]
    torch.cuda.synchronize()

    failures = []
    valid = slots >= 0
    rows = slots[valid]
    for name, x, c in (("key", key, key_cache), ("value", value, value_cache)):
        got = c.view(num_blocks * bs, heads, dim)[rows]
        y = x[valid].float() / key_scale  # same scale for K and V here
        want = y.to(torch.float8_e4m3fn).view(torch.uint8)
        in_range = y.abs() <= 448
        saturated = torch.where(y > 0, 0x7E, 0xFE).to(torch.uint8)
        want = torch.where(in_range, want, saturated)
        nan = torch.isnan(y)
        want = torch.where(nan, torch.full_like(want, 0x7F), want)
        bad = got != want
        if bad.any():
            idx = bad.nonzero()[:5].tolist()
            failures.append("%s cache: %d of %d bytes differ, e.g. %s" % (
                name, int(bad.sum()), bad.numel(), "; ".join(
                    "token-row %d head %d d %d: x=%r y=%r want 0x%02x got "
                    "0x%02x" % (r, h, d, float(x[valid][r, h, d]),
                                float(y[r, h, d]), int(want[r, h, d]),
                                int(got[r, h, d])) for r, h, d in idx)))
        # Everything else untouched: clear the written rows and compare.
        rest = c.view(num_blocks * bs, heads * dim).clone()
        rest[rows] = poison
        if (rest != poison).any():
            failures.append("%s cache: %d bytes outside the written rows "
                            "changed" % (name, int((rest != poison).sum())))
        counted = (~in_range & ~nan).sum()
        if counted == 0:
            failures.append("%s: no value past 448 * s was tried" % name)
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--libkvrt", required=True)
    parser.add_argument("--bundle", required=True)
    parser.add_argument("--kernel", default="gpu_append_paged_nhd_fp8_e4m3")
    parser.add_argument("--seed", type=int, default=0x6b7667656e)
    opts = parser.parse_args()

    try:
        import torch
    except ImportError as e:
        print("SKIPPED: no torch (%s)" % e)
        return SKIP
    if not torch.cuda.is_available():
        print("SKIPPED: no CUDA device")
        return SKIP
    if not hasattr(torch, "float8_e4m3fn"):
        print("SKIPPED: this torch has no float8_e4m3fn")
        return SKIP
    torch.cuda.init()
    lib = load_kvrt(opts.libkvrt)
    bundle = ctypes.c_void_p()
    if lib.kvrt_bundle_load_file(opts.bundle.encode(), ctypes.byref(bundle)):
        print("error: cannot load %s: %s" %
              (opts.bundle, lib.kvrt_last_error().decode()))
        return 1
    entry = find_manifest(lib, bundle, opts.kernel)
    if entry is None:
        print("error: the bundle has no kernel %s" % opts.kernel)
        return 1

    gen = torch.Generator(device="cuda")
    gen.manual_seed(opts.seed)
    print("torch %s, %s, kernel %s" % (torch.__version__,
                                      torch.cuda.get_device_name(0),
                                      opts.kernel))
    failed = 0
    # A scale that is a power of two (ties stay ties), ones that are not
    # (the division's rounding matters), a tiny one and a large one.
    for scale in (1.0, 0.37, 2.0 ** -5, 3.3, 1.7e-3):
        for as_float8 in (False, True):
            failures = check(torch, lib, bundle, entry, scale, as_float8, gen)
            label = "scale %g, cache as %s" % (
                scale, "float8_e4m3fn" if as_float8 else "uint8")
            if failures:
                failed += 1
                print("FAIL %s:\n  %s" % (label, "\n  ".join(failures)))
            else:
                print("ok   %s" % label)
    lib.kvrt_bundle_destroy(bundle)
    print("torch fp8 bit-exactness: %d of 10 runs failed" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
