"""kvgen's new cache formats and ops beside vLLM's kernels for them, in one process.

    KVGEN_CACHE_DIR=STAGE/kvgen-cache KVGEN_KVRT_LIB=STAGE/lib/libkvrt.so PYTHONPATH=python \
        python3 bench/formats_gpu.py [--vllm-ext LIB.so] [--quick] [--rows a,b,...]
        [--json OUT.json] [--md OUT.md]          (scripts/gpu-run.sh formats STAGE runs it)
    PYTHONPATH=python python3 bench/formats_gpu.py --precompile CACHE_DIR [--chip sm_90]
    PYTHONPATH=python python3 bench/formats_gpu.py --cpu-dry-run [--chip sm_90]

Each row is one of kvgen's drop-ins (kvgen.vllm's function, called with vLLM's arguments) beside
vLLM's op for the same format (torch.ops._C_cache_ops, from --vllm-ext: vLLM's own CUDA source
built by bench/peers/vllm_formats/build.py; optional: without it kvgen runs alone). Before a
size is timed, every system's output is compared with a torch reference of the format and with
the other system's, bit for bit (every format here is exact: copies, fp8 conversions of one IEEE
division, DeepSeek's power-of-two scales); a system that differs is not timed.

Rows (bf16 sources; caches larger than L2, random contents, random slots and blocks):
  per_head_fp8   reshape_and_cache_flash, "fp8" (e4m3, uint8 caches), k_scale/v_scale of
                 [num_kv_heads]; 8 KV heads x 128, paged NHD, block 16
  asymmetric     reshape_and_cache_flash, "auto", K 192 / V 128 (vLLM's asymmetric-head
                 tests); vLLM 0.26 takes one head size for K and V, so its figure is its op
                 on V padded to 192 (what it must store instead), checked on the first 128
  fp8_ds_mla     concat_and_cache_mla, "fp8_ds_mla": 512 + 64, block 64, 656-byte entries
  gather_fp8     gather_and_maybe_dequant_cache, fp8 latent (576) -> bf16, block 64
  gather_bf16    gather_and_maybe_dequant_cache, "auto", bf16 latent (576), block 64
  cp_gather      cp_gather_cache, bf16 latent (576), block 64
  convert_to_fp8, convert_from_fp8
                 convert_fp8 over a whole [blocks, 16, 8, 128] cache, bf16 <-> e4m3
  swap_blocks    swap_blocks, GPU -> GPU, blocks of 16 x 8 x 128 bf16 (32 KiB)
Timings:
  graph   decode, 1 / 8 / 32 / 128 new tokens: us per call in a CUDA graph of 100 calls over
          16 rotating inputs, median of 20 replays (the appends; vLLM captures them);
  cold    prefill, 1024 / 4096 / 16384 / 65536 tokens (the gathers: context tokens gathered
          over 4 sequences; convert_fp8: a cache of that many slots; swap_blocks: that many
          tokens' blocks, 64 to 4096 blocks): the median of 15 single calls, each after a
          256 MiB write that evicts L2, timed with events; "% copy" is a D2D copy of the same
          bytes (read + written) timed the same way, over the call's time;
  eager   the gathers, convert_fp8 and swap_blocks at a serving step's sizes (gathers: 256
          context tokens over 4 sequences; convert: 256 slots; swap: 1, 8, 32 blocks): wall us
          per call of a loop of calls with one synchronize at the end. vLLM calls these ops
          outside its CUDA graphs (prefill, offloading), so they are timed as called.
Targets: every format at least as fast as vLLM's kernel in the same run (kvgen/vLLM <= 1 at
every size; MET / MISSED with the ratio), fp8_ds_mla prefill >= 85% of the copy at 65536.

--precompile fills a kernel cache for a GPU without a compiler: it runs every row at tiny sizes
on the CPU (host kernels, the same descriptions as the GPU run), then compiles each description
that was used for --chip into CACHE_DIR. --cpu-dry-run runs the rows again on the CPU with no
compiler (host kernels from KVGEN_CACHE_DIR), checks each against its reference, and checks
that every description has its GPU kernels in the cache.
"""

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kvgen  # noqa: E402
from kvgen import compiler  # noqa: E402

from formats_common import HEADER, ROWS, Ctx, line  # noqa: E402
from formats_rows import ROW_FUNCS  # noqa: E402

# Kernel cache: precompile and the dry run's check -----------------------------------------------

class DescriptionLog:
    """Every description the drop-ins ask the compiler's cache for (kvgen.compiler._entry is
    the one path of compile and cache_entry)."""

    def __init__(self):
        self.texts = []
        self.real = compiler._entry

        def entry(description, target, chip, cache, comp, fields, rebuild=False):
            text = description if description is not None else compiler.describe(**fields)
            if text not in self.texts:
                self.texts.append(text)
            return self.real(description, target, chip, cache, comp, fields, rebuild)

        compiler._entry = entry

    def restore(self):
        compiler._entry = self.real


def gpu_entries(texts, chip, cache, build):
    """Compiles (build) or finds (not build) each description's GPU kernels; returns the
    descriptions that have none."""
    missing = []
    for text in texts:
        try:
            if build:
                compiler.cache_entry(text, target="gpu", chip=chip, cache=cache)
            else:
                compiler._entry(text, "gpu", chip, cache, None, {})
        except kvgen.KvgenError as e:
            missing.append("%s: %s" % (type(e).__name__, str(e).splitlines()[0]))
    return missing


# Main -------------------------------------------------------------------------------------------

def forget_kernels():
    """Empties kvgen.vllm's memos of compiled bundles (keyed by the cache's shape), so that
    each row asks for its descriptions again and --precompile files every one of them."""
    from kvgen import _vllm_cache
    for memo in (getattr(_vllm_cache, "_gatherers", None),
                 getattr(_vllm_cache, "_converters", None)):
        if memo is not None:
            memo.clear()


def run_rows(ctx, rows):
    for row in rows:
        print("## %s" % row, flush=True)
        if ctx.dry:
            forget_kernels()
        try:
            ROW_FUNCS[row](ctx)
        except Exception as e:  # one row's failure does not stop the others
            msg = "%s: %s: %s" % (row, type(e).__name__, str(e).splitlines()[0] if str(e)
                                  else "")
            ctx.failures.append(msg)
            print("ROW FAILED: " + msg, flush=True)
        if ctx.dev == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()


def summary(ctx):
    out = {}
    for r in ctx.results:
        s = out.setdefault(r["row"], {"met": 0, "missed": 0, "untimed": 0, "worst": None})
        if "target" in r:
            s["met" if r["target"] == "MET" else "missed"] += 1
            s["worst"] = max(s["worst"] or 0, r["ratio"])
        else:
            s["untimed"] += 1
    return out


def load_peer(ctx, path):
    if not path:
        return
    try:
        torch.ops.load_library(path)
        ops = torch.ops._C_cache_ops
        for n in ("reshape_and_cache_flash", "concat_and_cache_mla", "convert_fp8",
                  "gather_and_maybe_dequant_cache", "cp_gather_cache", "swap_blocks"):
            getattr(ops, n).default
        ctx.peer = ops
        ctx.peer_note = "vLLM 0.26's ops from %s" % path
    except Exception as e:  # the peer is optional
        ctx.peer_note = "vLLM's extension did not load (%s: %s); kvgen alone" % (
            type(e).__name__, str(e).splitlines()[0] if str(e) else "")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vllm-ext", help="vLLM's ops built by bench/peers/vllm_formats/build.py")
    p.add_argument("--quick", action="store_true", help="fewer sizes, smaller caches")
    p.add_argument("--rows", default=",".join(ROWS), help="some of " + ",".join(ROWS))
    p.add_argument("--json", help="write the results here")
    p.add_argument("--md", help="write the markdown table here")
    p.add_argument("--precompile", metavar="CACHE_DIR",
                   help="CPU: run the rows on host kernels, then compile every description "
                   "used for --chip into CACHE_DIR")
    p.add_argument("--cpu-dry-run", action="store_true",
                   help="CPU, no compiler: check the rows on host kernels from "
                   "KVGEN_CACHE_DIR and that each has its GPU kernels there")
    p.add_argument("--chip", default=os.environ.get("KVGEN_CHIP") or "sm_90")
    args = p.parse_args()
    rows = [r for r in args.rows.split(",") if r]
    bad = [r for r in rows if r not in ROW_FUNCS]
    if bad:
        p.error("unknown rows %s; rows are %s" % (", ".join(bad), ", ".join(ROWS)))
    if args.precompile and args.cpu_dry_run:
        p.error("--precompile and --cpu-dry-run are two steps: run one, then the other")
    ctx = Ctx(args)
    torch.manual_seed(20261207)
    t0 = time.time()

    if ctx.dry:
        if args.precompile:
            os.environ["KVGEN_CACHE_DIR"] = os.path.abspath(args.precompile)
        else:
            # No compiler: every kernel must come from the cache.
            compiler.find_compiler = lambda: None
        cache = os.environ.get("KVGEN_CACHE_DIR")
        if not cache:
            p.error("--cpu-dry-run reads KVGEN_CACHE_DIR (the folder --precompile filled)")
        log = DescriptionLog()
        print("formats_gpu: %s on the CPU, kernel cache %s" % (
            "precompile" if args.precompile else "dry run", cache))
        print(HEADER)
        run_rows(ctx, rows)
        log.restore()
        missing = gpu_entries(log.texts, args.chip, cache, build=bool(args.precompile))
        print("descriptions used: %d; GPU (%s) kernels %s: %d; missing: %d" % (
            len(log.texts), args.chip, "compiled" if args.precompile else "found",
            len(log.texts) - len(missing), len(missing)))
        for m in missing:
            print("  MISSING " + m)
        if args.precompile:
            with open(os.path.join(cache, "formats-descriptions.json"), "w") as f:
                json.dump({"chip": args.chip, "descriptions": log.texts}, f, indent=1)
        ok = not ctx.failures and not missing
        for f in ctx.failures:
            print("FAILED " + f)
        print("formats_gpu: %s in %.0f s: %d checks, %d failures, %d kernels missing" % (
            "OK" if ok else "FAILED", time.time() - t0, len(ctx.results), len(ctx.failures),
            len(missing)))
        return 0 if ok else 1

    if not torch.cuda.is_available():
        print("formats_gpu: skipped: no CUDA device")
        return 0
    load_peer(ctx, args.vllm_ext)
    print("device: %s, torch %s" % (torch.cuda.get_device_name(), torch.__version__))
    print("peer: " + ctx.peer_note)
    print(HEADER)
    run_rows(ctx, rows)
    summ = summary(ctx)
    print("\nsummary (kvgen/vLLM <= 1 is MET):")
    for row, s in summ.items():
        print("  %s: %d MET, %d MISSED, %d not compared%s" % (
            row, s["met"], s["missed"], s["untimed"],
            "" if s["worst"] is None else ", worst kvgen/vLLM %.3f" % s["worst"]))
    for f in ctx.failures:
        print("FAILED " + f)
    print("formats_gpu: %.0f s" % (time.time() - t0))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "peer": ctx.peer_note, "results": ctx.results, "summary": summ,
                       "failures": ctx.failures, "seconds": time.time() - t0}, f, indent=1)
    if args.md:
        with open(args.md, "w") as f:
            f.write("device: %s, torch %s; peer: %s\n\n%s\n" % (
                torch.cuda.get_device_name(), torch.__version__, ctx.peer_note, HEADER))
            for r in ctx.results:
                f.write(line(r) + "\n")
    return 1 if ctx.failures else 0


if __name__ == "__main__":
    sys.exit(main())
