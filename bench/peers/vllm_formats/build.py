#!/usr/bin/env python3
"""Builds vLLM's cache ops of kvgen's new formats as a torch extension: reshape_and_cache_flash
(per-head fp8 scales), concat_and_cache_mla (fp8_ds_mla), gather_and_maybe_dequant_cache,
cp_gather_cache, convert_fp8 and swap_blocks.

Sources: vLLM 0.26's csrc/libtorch_stable/cache_kernels.cu and the headers it includes, extracted
from vLLM's release sdist (`pip download --no-deps --no-binary :all: vllm==0.26.0`) into a
folder that git ignores (third-party code never enters the repository), plus bindings.cpp beside
this file, which registers the six ops as torch.ops._C_cache_ops.* with vLLM's schemas and
vLLM's macros. Compiled with the flags vLLM's
CMake gives its _C_stable_libtorch target (TORCH_TARGET_VERSION, USE_CUDA, ENABLE_FP8, torch's
nvcc flags minus the no-half-conversion defines), for sm_90 only.

    python3 bench/peers/vllm_formats/build.py --src VLLM_SRC_DIR [--build-dir DIR]
        [--status FILE] [--no-load]

Prints the build log; --status writes a JSON {"ok", "so", "seconds", "error"}. Loading the
library (torch.ops.load_library) registers the ops; no GPU is needed to build it, and loading
it needs the driver's libcuda. --no-load compiles and links only (a check of the sources on a
machine with nvcc and no driver). It defines the same ops as the two-op peer of
the peers' vllm_ext: one of the two per process.
"""
import argparse
import glob
import json
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "vllm_formats_peer"
OPS = ("reshape_and_cache_flash", "concat_and_cache_mla", "gather_and_maybe_dequant_cache",
       "cp_gather_cache", "convert_fp8", "swap_blocks")

# vLLM's CMakeLists.txt, target _C_stable_libtorch: TORCH_TARGET_VERSION (ABI-compatible with
# torch >= 2.11), USE_CUDA (CUDA entry points of the C shim); cmake/utils.cmake: ENABLE_FP8 and
# torch's COMMON_NVCC_FLAGS without the four __CUDA_NO_HALF*/BFLOAT16 defines (CUDA >= 12).
DEFINES = ["-DTORCH_TARGET_VERSION=0x020B000000000000ULL", "-DUSE_CUDA", "-DENABLE_FP8"]
UNDEFINES = ["-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
             "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__"]


def _libcuda_ldflags():
    """Linker flags for the driver API: cache_kernels.cu's swap_blocks_batch calls
    cuGetProcAddress, so the library needs libcuda (the toolkit's stub to link, the driver's
    libcuda.so.1 at load time)."""
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    for d in (os.path.join(cuda_home, "lib64", "stubs"),
              os.path.join(cuda_home, "targets", "x86_64-linux", "lib", "stubs"),
              os.path.join(cuda_home, "lib64"), "/usr/lib/x86_64-linux-gnu", "/usr/lib64"):
        if os.path.exists(os.path.join(d, "libcuda.so")):
            return [f"-L{d}", "-lcuda"]
    for f in ("/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib64/libcuda.so.1"):
        if os.path.exists(f):
            return [f]
    return ["-lcuda"]


def build(src, build_dir=None, verbose=True, arch="9.0", load=True):
    """Compiles and loads the extension; returns the path of the shared object."""
    import torch  # noqa: F401  (load() needs it; importing it first keeps errors readable)
    from torch.utils import cpp_extension

    src = os.path.abspath(src)
    kernels = os.path.join(src, "csrc", "libtorch_stable", "cache_kernels.cu")
    if not os.path.isfile(kernels):
        raise FileNotFoundError(f"{kernels} not found: --src names the folder holding vLLM "
                                "0.26's csrc/ (extracted from its sdist)")
    build_dir = build_dir or os.path.join(
        os.environ.get("KVBENCH_BUILD") or "/tmp/kvbench_build", "vllm_formats")
    os.makedirs(build_dir, exist_ok=True)
    if not load:
        # Compile and link only: load() would open the library, which needs the driver.
        from torch.utils import cpp_extension as ext
        real = ext._import_module_from_library
        ext._import_module_from_library = lambda *a, **k: None
        real_ops = torch.ops.load_library
        torch.ops.load_library = lambda *a, **k: None
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", arch)
    os.environ.setdefault("MAX_JOBS", str(min(8, os.cpu_count() or 2)))
    cpp_extension.load(
        name=NAME,
        sources=[os.path.join(HERE, "bindings.cpp"), kernels],
        extra_include_paths=[os.path.join(src, "csrc")],
        extra_cflags=["-O3", "-std=c++17", *DEFINES],
        extra_cuda_cflags=["-O3", "-std=c++17", *DEFINES, *UNDEFINES, "--threads=4",
                           "-Xptxas=-warn-spills"],
        extra_ldflags=_libcuda_ldflags(),
        build_directory=build_dir,
        is_python_module=False,
        verbose=verbose,
    )
    if not load:
        ext._import_module_from_library = real
        torch.ops.load_library = real_ops
    sos = glob.glob(os.path.join(build_dir, NAME + "*.so"))
    if not sos:
        raise RuntimeError(f"no {NAME}*.so in {build_dir} after the build")
    return sos[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True, help="the folder holding vLLM 0.26's csrc/")
    ap.add_argument("--build-dir", default=None)
    ap.add_argument("--status", default=None, help="write a JSON status here")
    ap.add_argument("--arch", default="9.0", help="TORCH_CUDA_ARCH_LIST when unset")
    ap.add_argument("--no-load", action="store_true", help="compile and link, do not load")
    args = ap.parse_args()
    t0 = time.time()
    status = {"ok": False, "so": None, "seconds": None, "error": None}
    try:
        so = build(args.src, args.build_dir, arch=args.arch, load=not args.no_load)
        schemas = []
        if not args.no_load:
            import torch
            ops = torch.ops._C_cache_ops
            schemas = [str(getattr(ops, n).default._schema) for n in OPS]
        status.update(ok=True, so=so, schemas=schemas)
        print(f"vllm_formats: built {so} in {time.time() - t0:.1f}s")
        for s in schemas:
            print("  " + s)
    except Exception as e:  # reported to the caller, which skips the peer
        traceback.print_exc()
        status["error"] = f"{type(e).__name__}: {str(e)[-2000:]}"
        print(f"vllm_formats: FAILED after {time.time() - t0:.1f}s: {status['error'][:500]}")
    status["seconds"] = round(time.time() - t0, 1)
    if args.status:
        os.makedirs(os.path.dirname(os.path.abspath(args.status)), exist_ok=True)
        with open(args.status, "w") as f:
            json.dump(status, f, indent=1)
    return 0 if status["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
