#!/usr/bin/env python3
"""vLLM's QK-norm + RoPE kernels as a torch extension: the fused prologue's peers.

Two steps, the first on the build machine, the second on the GPU machine:

    python3 bench/peers/build_vllm_prologue.py --extract SDIST --src DIR
    python3 bench/peers/build_vllm_prologue.py --src DIR [--build-dir D]
        [--status FILE] [--arch 9.0] [--check]

--extract copies from vLLM's release sdist (vllm-X.tar.gz) the two kernels,
csrc/fused_qknorm_rope_kernel.cu (vLLM's fused_qk_norm_rope, the in-place
QK-norm and RoPE that vLLM runs before reshape_and_cache_flash) and, where the
release has it, csrc/fused_qknorm_rope_cache_kernel.cu (fused_qknorm_rope_cache:
norm, RoPE and the cache write in one kernel), every header of the sdist they
include, and LICENSE, into DIR, a folder git ignores (build/peers/...): vLLM's
code never enters the repository.

The build compiles them with vllm_prologue_bindings.cpp beside this file,
which registers torch.ops._C.fused_qk_norm_rope and
torch.ops._C.fused_qknorm_rope_cache with vLLM's schemas through the libtorch
stable ABI, with the flags vLLM's CMake gives its _C_stable_libtorch target
(TORCH_TARGET_VERSION 2.11, USE_CUDA, ENABLE_FP8, torch's nvcc flags without
the no-half-conversion defines), for one architecture. When the cache kernel
does not compile, the norm + RoPE kernel is built alone (the status says
which ops the library has). Loading the library (torch.ops.load_library)
registers the ops; building and loading need no GPU. --check compiles the
kernels to objects with nvcc and loads nothing (what a machine without a GPU
can check).

--status writes a JSON {"ok", "so", "ops", "schemas", "seconds", "error"}.
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "vllm_prologue_peer"
NORM_ROPE = "csrc/fused_qknorm_rope_kernel.cu"
NORM_ROPE_CACHE = "csrc/fused_qknorm_rope_cache_kernel.cu"
KERNELS = (NORM_ROPE, NORM_ROPE_CACHE)

# vLLM's CMakeLists.txt, target _C_stable_libtorch: TORCH_TARGET_VERSION (ABI-compatible with
# torch >= 2.11), USE_CUDA (CUDA entry points of the C shim); cmake/utils.cmake: ENABLE_FP8 and
# torch's nvcc flags without the four __CUDA_NO_HALF*/BFLOAT16 defines (CUDA >= 12).
DEFINES = ["-DTORCH_TARGET_VERSION=0x020B000000000000ULL", "-DUSE_CUDA", "-DENABLE_FP8"]
UNDEFINES = ["-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
             "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__"]
INCLUDE = re.compile(r'\s*#\s*include\s*[<"]([^">]+)[">]')


# ------------------------------------------------------------------------------------------------
# Extraction (build machine)
# ------------------------------------------------------------------------------------------------

def _closure(members, roots):
    """The sdist's csrc files that `roots` include, transitively: an include is resolved
    relative to the including file, then to csrc/ (vLLM's include path); what resolves to
    neither (system, CUDA and torch headers) is not vLLM's."""
    found, todo = [], list(roots)
    while todo:
        path = todo.pop()
        if path in found:
            continue
        found.append(path)
        for line in members[path].decode(errors="replace").splitlines():
            m = INCLUDE.match(line)
            if not m:
                continue
            for cand in (os.path.normpath(os.path.join(os.path.dirname(path), m.group(1))),
                         os.path.normpath(os.path.join("csrc", m.group(1)))):
                if cand in members:
                    todo.append(cand)
                    break
    return sorted(found)


def extract(sdist, dst):
    with tarfile.open(sdist) as tar:
        members = {}
        for m in tar.getmembers():
            if not m.isfile():
                continue
            parts = m.name.split("/", 1)
            if len(parts) != 2:
                continue
            rel = parts[1]
            if rel == "LICENSE" or (rel.startswith("csrc/") and
                                    rel.endswith((".h", ".cuh", ".cu", ".hpp"))):
                members[rel] = tar.extractfile(m).read()
    if NORM_ROPE not in members:
        raise SystemExit("build_vllm_prologue: %s has no %s" % (sdist, NORM_ROPE))
    if "LICENSE" not in members:
        raise SystemExit("build_vllm_prologue: %s has no LICENSE" % sdist)
    roots = [k for k in KERNELS if k in members]
    files = _closure(members, roots) + ["LICENSE"]
    if os.path.isdir(dst):
        shutil.rmtree(dst)
    for rel in files:
        path = os.path.join(dst, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(members[rel])
    with open(os.path.join(dst, "SOURCE.txt"), "w") as f:
        f.write("extracted from %s by bench/peers/build_vllm_prologue.py\n"
                % os.path.basename(sdist))
    print("build_vllm_prologue: %d files of %s into %s" % (len(files), os.path.basename(sdist),
                                                          dst))
    for rel in files:
        print("  " + rel)
    if NORM_ROPE_CACHE not in members:
        print("build_vllm_prologue: this release has no %s: fused_qknorm_rope_cache will be "
              "missing" % NORM_ROPE_CACHE)
    return files


# ------------------------------------------------------------------------------------------------
# Build (GPU machine; --check on any machine with nvcc)
# ------------------------------------------------------------------------------------------------

def _torch_headers_missing(src):
    """The torch headers the kernels include that this torch does not have (a vLLM that
    needs a newer torch than the one installed fails here, with the names)."""
    from torch.utils import cpp_extension

    roots = cpp_extension.include_paths()
    missing = []
    for dirpath, _, names in os.walk(os.path.join(src, "csrc")):
        for n in names:
            with open(os.path.join(dirpath, n), errors="replace") as f:
                for line in f:
                    m = INCLUDE.match(line)
                    if m and m.group(1).startswith("torch/") and not any(
                            os.path.isfile(os.path.join(r, m.group(1))) for r in roots):
                        missing.append(m.group(1))
    return sorted(set(missing))


def _sources(src, with_cache):
    kernels = [os.path.join(src, NORM_ROPE)]
    if with_cache:
        kernels.append(os.path.join(src, NORM_ROPE_CACHE))
    return kernels


def _cuda_flags(with_cache):
    return (["-O3", "-std=c++17", *DEFINES, *UNDEFINES, "--threads=4",
             "--expt-relaxed-constexpr"] +
            (["-DKVBENCH_VLLM_QKNORM_ROPE_CACHE"] if with_cache else []))


def check(src, arch):
    """nvcc -c of each kernel, with the extension's include paths and flags: no library, no
    load. Returns the failures."""
    from torch.utils import cpp_extension

    nvcc = os.path.join(cpp_extension.CUDA_HOME or "/usr/local/cuda", "bin", "nvcc")
    incs = ["-I" + p for p in cpp_extension.include_paths(device_type="cuda")]
    incs.append("-I" + os.path.join(src, "csrc"))
    sm = arch.replace(".", "")
    failures = []
    for kernel in _sources(src, os.path.isfile(os.path.join(src, NORM_ROPE_CACHE))):
        out = os.path.join("/tmp", os.path.basename(kernel) + ".o")
        cmd = [nvcc, "-c", kernel, "-o", out, "-gencode",
               "arch=compute_%s,code=sm_%s" % (sm, sm), "-Xcompiler", "-fPIC",
               *_cuda_flags(True), *incs]
        t0 = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        print("build_vllm_prologue: nvcc -c %s: %s in %.0f s" % (
            os.path.basename(kernel), "ok" if proc.returncode == 0 else "FAILED",
            time.time() - t0))
        if proc.returncode:
            print(proc.stderr[-4000:])
            failures.append(os.path.basename(kernel))
    return failures


def build(src, build_dir, arch, with_cache, verbose=True):
    """Compiles and loads the extension; returns the path of the shared object."""
    import torch  # noqa: F401  (load() needs it; importing it first keeps errors readable)
    from torch.utils import cpp_extension

    os.makedirs(build_dir, exist_ok=True)
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", arch)
    os.environ.setdefault("MAX_JOBS", str(min(8, os.cpu_count() or 2)))
    name = NAME if with_cache else NAME + "_norm_rope"
    cpp_extension.load(
        name=name,
        sources=[os.path.join(HERE, "vllm_prologue_bindings.cpp"),
                 *_sources(src, with_cache)],
        extra_include_paths=[os.path.join(src, "csrc")],
        extra_cflags=["-O3", "-std=c++17", *DEFINES] +
        (["-DKVBENCH_VLLM_QKNORM_ROPE_CACHE"] if with_cache else []),
        extra_cuda_cflags=_cuda_flags(with_cache),
        build_directory=build_dir,
        is_python_module=False,
        verbose=verbose,
    )
    sos = glob.glob(os.path.join(build_dir, name + "*.so"))
    if not sos:
        raise RuntimeError("no %s*.so in %s after the build" % (name, build_dir))
    return sos[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", required=True, help="the folder of vLLM's extracted files")
    ap.add_argument("--extract", metavar="SDIST", help="extract from this sdist into --src")
    ap.add_argument("--build-dir", default="/tmp/vllm_prologue_peer")
    ap.add_argument("--status", help="write a JSON status here")
    ap.add_argument("--arch", default="9.0", help="TORCH_CUDA_ARCH_LIST when unset")
    ap.add_argument("--check", action="store_true",
                    help="compile the kernels to objects only (no GPU, no load)")
    args = ap.parse_args()
    if args.extract:
        extract(args.extract, args.src)
        return 0
    src = os.path.abspath(args.src)
    if not os.path.isfile(os.path.join(src, NORM_ROPE)):
        print("build_vllm_prologue: no %s in %s (run --extract first)" % (NORM_ROPE, src))
        return 2
    t0 = time.time()
    status = {"ok": False, "so": None, "ops": [], "schemas": [], "seconds": None,
              "error": None}
    try:
        import torch

        status["torch"] = torch.__version__
        missing = _torch_headers_missing(src)
        if missing:
            raise RuntimeError("torch %s lacks headers these vLLM sources include (a newer "
                               "torch is needed): %s" % (torch.__version__, ", ".join(missing)))
        if args.check:
            failures = check(src, args.arch)
            status.update(ok=not failures, error=("nvcc failed: " + ", ".join(failures))
                          if failures else None)
        else:
            with_cache = os.path.isfile(os.path.join(src, NORM_ROPE_CACHE))
            try:
                so = build(src, args.build_dir, args.arch, with_cache)
            except Exception as e:  # the cache kernel alone may not build: try without it
                if not with_cache:
                    raise
                traceback.print_exc()
                status["cache_kernel_error"] = "%s: %s" % (type(e).__name__, str(e)[-1500:])
                print("build_vllm_prologue: the build with %s failed; building "
                      "fused_qk_norm_rope alone" % NORM_ROPE_CACHE)
                with_cache = False
                so = build(src, args.build_dir, args.arch, with_cache)
            ops = ["fused_qk_norm_rope"] + (["fused_qknorm_rope_cache"] if with_cache else [])
            schemas = [str(getattr(torch.ops._C, n).default._schema) for n in ops]
            status.update(ok=True, so=so, ops=ops, schemas=schemas)
            print("build_vllm_prologue: built %s in %.1f s" % (so, time.time() - t0))
            for s in schemas:
                print("  " + s)
    except Exception as e:  # reported to the caller, which goes on without the peer
        traceback.print_exc()
        status["error"] = "%s: %s" % (type(e).__name__, str(e)[-2000:])
        print("build_vllm_prologue: FAILED after %.1f s: %s" % (time.time() - t0,
                                                               status["error"][:500]))
    status["seconds"] = round(time.time() - t0, 1)
    if args.status:
        os.makedirs(os.path.dirname(os.path.abspath(args.status)), exist_ok=True)
        with open(args.status, "w") as f:
            json.dump(status, f, indent=1)
    return 0 if status["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
