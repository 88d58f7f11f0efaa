"""The fused prologue (QK-norm + RoPE + append) beside the unfused sequence and
its peers, on a GPU, in one process.

    PYTHONPATH=python python3 bench/prologue_gpu.py [--bundle B.json]
        [--vllm-cache-ext LIB.so] [--vllm-prologue-ext LIB.so] [--quick]
        [--out DIR]
    PYTHONPATH=python KVGEN_COMPILER=build/bin/kvgen \\
        python3 bench/prologue_gpu.py --cpu-dry-run

The setup is Qwen3's: 32 query heads and 8 KV heads of 128, bf16 in, paged NHD
caches with block 16 (1 GiB each), QK-norm (RMSNorm, epsilon 1e-6) and NeoX
RoPE over the whole head (rotary 128) with vLLM's cos/sin cache in bf16.
Tokens come as requests with a page table (FlashInfer's form, from
dropins_gpu.flashinfer_workload: one token per request up to 512 tokens,
else four requests); the slot mapping and the positions every system takes
are derived from it, so all systems write the same slots.

Systems (each optional but kvgen's; one that does not import, build or load
is reported and left out):
  kvgen            the fused kernel through kvgen.Bundle.append (query, q_out,
                   rope_positions, cos_sin_cache, k/q_norm_weight, epsilon);
                   q_out is a separate tensor;
  kvgen-inplace    the same with q_out = query (Q rotated in place in qkv, as
                   vLLM leaves it), where kvgen takes an overlapping q_out;
  kvgen-dropin     kvgen.vllm.fused_qk_norm_rope_and_reshape_and_cache_flash,
                   the vLLM drop-in: its eager cost is what vLLM would pay;
  kvgen-plain      kvgen's plain append of the same K and V (no prologue): the
                   decode baseline;
  vllm-unfused     vLLM's way: torch.ops._C.fused_qk_norm_rope in place on
                   the packed qkv, then torch.ops._C_cache_ops
                   .reshape_and_cache_flash of its K and V views (two
                   launches; --vllm-prologue-ext and --vllm-cache-ext);
  unfused-kvgen    the same norm + RoPE, then kvgen's plain append: the
                   fastest unfused sequence there is to beat;
  vllm-fused       vLLM 0.34's fused_qknorm_rope_cache (norm, RoPE and the
                   cache write in one kernel; it also writes K and V out);
  flashinfer       FlashInfer's rope_quantize_fp8_append_paged_kv_cache (fp8
                   rows only: RoPE, no norm, Q quantized to fp8, cos/sin in
                   fp32, q_nope/k_nope of extent 0), beside
  kvgen-flashinfer kvgen.flashinfer's drop-in of it, called with the same
                   arguments (the fp8 target compares these two), and
                   kvgen-fp8, kvgen's kernel without the drop-in (Q out bf16).

Before a system is timed at a size, its outputs on that size's first input
set are compared with a torch reference, vLLM's unfused sequence of torch
ops (RMSNorm.forward_native, RotaryEmbedding.forward_native in the source
dtype, then the index assignment), within docs/CONTRACT.md's bound ("Against
the unfused sequence"): 5 unit roundoffs of the pair's magnitude, plus one
fp8 step for an fp8 output. A system that fails is reported and not timed.

Timing (side_by_side_gpu.Timer, the conventions of the other GPU scripts):
  graph  decode sizes: us per call inside CUDA graphs of 100 calls, the
         input sets rotated, median of the replays;
  eager  decode sizes: us per call of a Python loop, one synchronize at the
         end (the host cost of a call);
  cold   prefill sizes (and every fp8 size): the L2 flushed before each call,
         events around it, median; % of the copy ceiling = a cold
         device-to-device copy of the same bytes (read + written), timed in
         the same process, over the system's time.
The systems' samples are interleaved (the turn order rotated every sample)
so that drift hits them alike.

Bytes a call must move per token (BYTES below): kvgen fused bf16: Q, K, V
read (8192 + 2048 + 2048), Q written (8192), K and V written (2048 + 2048),
the position and the slot (16), the cos/sin row (256) and both norm weights
(512, once per token by the targets' accounting) = 25360. The unfused
sequence moves Q and K twice and K once more: 29456.

Output: a markdown table and the targets, MET or MISSED with the number, on
stdout and in OUT/prologue.md, and every number in OUT/prologue.json.
"""

import argparse
import inspect
import json
import os
import sys
import time
import traceback

import torch

import kvgen
from prologue_check import Check, check_outputs, compare, rows, self_test
from prologue_common import (BYTES, D, DECODE, DRY_SIZES, EPS, FP8_SCALE, HERE,
                             KH, MAX_SETS, NUM_PAGES, PAGE, PREFILL, QH,
                             QUICK_DECODE, QUICK_PREFILL, ROTATE_BYTES, Inputs,
                             System, cos_sin_cache, log, split)
from prologue_peers import flashinfer_systems, load_peers, vllm_systems
from prologue_report import markdown, targets

def kvgen_systems(bundle, inp, sh, caches, fp8):
    """kvgen's fused kernel, its drop-in and its plain append, for the bf16
    (fp8=None) or an fp8 variant ("rope", "norm") of the cache."""
    out = []
    if bundle is None:
        return out
    norm = fp8 != "rope"
    kc, vc = caches
    scale = sh["scale"] if fp8 else None
    fused_kernel = {None: "prologue_bf16", "rope": "prologue_fp8_rope",
                    "norm": "prologue_fp8_norm"}[fp8]
    plain_kernel = "plain_fp8" if fp8 else "plain_bf16"
    extra = dict(key_scale=scale, value_scale=scale) if fp8 else {}
    if norm:
        extra.update(k_norm_weight=sh["k_w"], q_norm_weight=sh["q_w"],
                     epsilon=sh["eps"])
    name = "kvgen" if fp8 is None else "kvgen-fp8" + (
        "-norm" if fp8 == "norm" else "")

    def fused(i):
        s = inp.s[i]
        q, k, v = split(s["qkv"])
        bundle.append(k, v, s["slots"], kc, vc, kernel=fused_kernel,
                      query=q, q_out=inp.q_out, rope_positions=s["pos"],
                      cos_sin_cache=sh["cs"], **extra)

    def check_fused():
        s = inp.s[0]
        inp.q_out.fill_(float("nan"))
        fused(0)
        return check_outputs(s["qkv"], s["pos"], s["slots"], sh, norm,
                             inp.q_out, kc, vc, scale)

    out.append(System(name, fused, check_fused))

    if fp8 is None:
        # Q rotated in place in the packed qkv, as vLLM's sequence leaves it:
        # where kvgen refuses q_out overlapping query, the check says so and
        # the row is left out.
        def inplace(i):
            s = inp.s[i]
            q, k, v = split(inp.work_set(i))
            bundle.append(k, v, s["slots"], kc, vc, kernel=fused_kernel,
                          query=q, q_out=q, rope_positions=s["pos"],
                          cos_sin_cache=sh["cs"], **extra)

        def check_inplace():
            s = inp.s[0]
            work = inp.work_set(0)
            work.copy_(s["qkv"])
            inplace(0)
            return check_outputs(s["qkv"], s["pos"], s["slots"], sh, norm,
                                 split(work)[0], kc, vc, scale)

        out.append(System("kvgen-inplace", inplace, check_inplace,
                          note="q_out = query"))

    def plain(i):
        s = inp.s[i]
        _, k, v = split(s["qkv"])
        bundle.append(k, v, s["slots"], kc, vc, kernel=plain_kernel, **(
            dict(key_scale=scale, value_scale=scale) if fp8 else {}))

    def check_plain():
        s = inp.s[0]
        plain(0)
        _, k, v = split(s["qkv"])
        c = Check()
        zero = torch.zeros((), device=k.device)
        c.add(compare("K", rows(kc, s["slots"]), k, zero + 2.0 ** -24, scale))
        c.add(compare("V", rows(vc, s["slots"]), v, zero + 2.0 ** -24, scale))
        return c

    if fp8 != "norm":
        out.append(System(name + "-plain" if fp8 else "kvgen-plain", plain,
                          check_plain))
    if fp8 is None or fp8 == "norm":
        dropin = dropin_system(inp, sh, caches, fp8)
        if dropin is not None:
            out.append(dropin)
    return out


def _dropin_call(fn, qkv, s, sh, caches, fp8):
    """The drop-in called with the arguments its signature names: vLLM's
    fused_qk_norm_rope's, then reshape_and_cache_flash's. A parameter this
    script does not know, without a default, means the signature changed:
    the drop-in is left out, named."""
    scale = sh["scale"] if fp8 else sh["one"]
    known = dict(qkv=qkv, num_heads_q=QH, num_heads_k=KH, num_heads_v=KH,
                 head_dim=D, eps=EPS, epsilon=EPS, q_weight=sh["q_w"],
                 k_weight=sh["k_w"], cos_sin_cache=sh["cs"], is_neox=True,
                 position_ids=s["pos"], positions=s["pos"],
                 key_cache=caches[0].view(torch.uint8) if fp8 else caches[0],
                 value_cache=caches[1].view(torch.uint8) if fp8 else caches[1],
                 slot_mapping=s["slots"],
                 kv_cache_dtype="fp8" if fp8 else "auto", k_scale=scale,
                 v_scale=scale, forced_token_heads_per_warp=-1)
    kwargs, unknown = {}, []
    for p in inspect.signature(fn).parameters.values():
        if p.name in known:
            kwargs[p.name] = known[p.name]
        elif p.default is inspect.Parameter.empty and p.kind not in (
                p.VAR_POSITIONAL, p.VAR_KEYWORD):
            unknown.append(p.name)
    if unknown:
        raise TypeError("unknown parameters %s" % ", ".join(unknown))
    return kwargs


def dropin_system(inp, sh, caches, fp8):
    fn = getattr(getattr(kvgen, "vllm", None),
                 "fused_qk_norm_rope_and_reshape_and_cache_flash", None)
    if fn is None:
        try:
            import kvgen.vllm as kv_vllm
            fn = getattr(kv_vllm,
                         "fused_qk_norm_rope_and_reshape_and_cache_flash",
                         None)
        except Exception:  # noqa: BLE001 -- reported below
            fn = None
    if fn is None:
        log("kvgen-dropin: kvgen.vllm has no "
            "fused_qk_norm_rope_and_reshape_and_cache_flash: left out")
        return None
    kc, vc = caches
    scale = sh["scale"] if fp8 else None
    try:
        args = [_dropin_call(fn, inp.work_set(i), inp.s[i], sh, caches, fp8)
                for i in range(inp.sets)]
    except TypeError as e:
        log("kvgen-dropin: left out: %s" % e)
        return None

    def launch(i):
        fn(**args[i])

    def check():
        s = inp.s[0]
        work = inp.work_set(0)
        work.copy_(s["qkv"])
        got = fn(**args[0])
        q_out = got if isinstance(got, torch.Tensor) and got.numel() == \
            inp.n * QH * D else split(work)[0]
        return check_outputs(s["qkv"], s["pos"], s["slots"], sh, True,
                             q_out.reshape(inp.n, QH, D), kc, vc, scale)

    return System("kvgen-dropin" + ("-fp8" if fp8 else ""), launch, check,
                  note="Q in place in qkv")


def load_bundle(args, report):
    """kvgen's bench bundle: --bundle, else the staged one, else compiled
    from bench/bench-prologue.mlir (for the host in a dry run)."""
    path = args.bundle
    try:
        if args.cpu_dry_run and not path:
            with open(os.path.join(HERE, "bench-prologue.mlir")) as f:
                bundle = kvgen.compile(f.read(), target="host")
            report["bundle"] = "compiled for the host"
        else:
            if not path:
                build = os.environ.get("KVGEN_BUILD_DIR", "build/gpu-stage")
                path = os.path.join(build, "bench",
                                    "bench-prologue.bundle.json")
            bundle = kvgen.Bundle.load(path)
            report["bundle"] = path
        if args.register:
            # The drop-in finds its kernel here where no compiler is.
            kvgen.ops.register(bundle)
        return bundle
    except Exception as e:  # noqa: BLE001 -- reported; the peers still run
        report["bundle"] = "not loaded: %s: %s" % (type(e).__name__, e)
        log("kvgen: bundle %s" % report["bundle"])
        return None


# ----------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------

def copy_us(timer, nbytes, reps):
    """Cold device-to-device copy moving `nbytes` (read + written): the
    ceiling of a call that must move as much."""
    half = max(1, nbytes // 2)
    src = torch.ones(half, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)

    def launch(_):
        dst.copy_(src)
    return median(timer.cold(launch, 1))


def median(samples):
    s = sorted(samples)
    if not s:
        return float("nan")
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def run_group(label, n, systems, inp, timer, modes, results, copy_cache,
              reps):
    """Checks every system, then times those that pass, interleaved."""
    timed = []
    for sysm in systems:
        row = dict(group=label, tokens=n, system=sysm.name,
                   bytes_per_token=BYTES.get(sysm.name), note=sysm.note)
        try:
            c = sysm.check()
            torch.cuda.synchronize() if timer else None
            row["check"] = c.text()
            row["check_ok"] = c.ok
        except Exception as e:  # noqa: BLE001 -- one system's failure
            row["check"] = "raised %s: %s" % (type(e).__name__, str(e)[:300])
            row["check_ok"] = False
            row["raised"] = True
            if os.environ.get("PROLOGUE_TRACEBACK"):
                traceback.print_exc()
        log("  %-7s %6d %-18s check %s: %s" % (
            label, n, sysm.name, "ok" if row["check_ok"] else "FAILED",
            row["check"]))
        results.append(row)
        if row["check_ok"]:
            timed.append((sysm, row))
    if timer is None or not timed:
        return
    launches = [s.launch for s, _ in timed]
    for mode in modes:
        try:
            if mode == "cold":
                samples = timer.cold_interleaved(launches, inp.sets)
            elif mode == "graph":
                samples = timer.graph_interleaved(launches, inp.sets)
            else:
                # Interleaved as the other modes are (Timer's eager_pair,
                # for any number of launchers).
                samples = timer._eager(tuple(launches), inp.sets)
        except Exception as e:  # noqa: BLE001 -- e.g. a capture that fails
            log("  %s %d %s: %s: %s; timing each alone" % (
                label, n, mode, type(e).__name__, e))
            samples = []
            for fn in launches:
                try:
                    samples.append(getattr(timer, mode)(fn, inp.sets))
                except Exception as e2:  # noqa: BLE001
                    log("    %s" % e2)
                    samples.append([])
        for (sysm, row), smp in zip(timed, samples):
            us = median(smp)
            row[mode + "_us"] = us
            if mode == "cold" and row["bytes_per_token"]:
                nbytes = n * row["bytes_per_token"]
                if nbytes not in copy_cache:
                    copy_cache[nbytes] = copy_us(timer, nbytes, reps)
                row["copy_us"] = copy_cache[nbytes]
                row["pct_of_copy"] = 100.0 * copy_cache[nbytes] / us \
                    if us == us and us > 0 else float("nan")
                row["GBps"] = nbytes / us / 1e3 if us > 0 else float("nan")
            log("  %-7s %6d %-18s %-5s %9.3f us%s" % (
                label, n, sysm.name, mode, us,
                "  %5.1f%% of copy" % row["pct_of_copy"]
                if mode == "cold" and "pct_of_copy" in row else ""))


# ----------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------

def groups(bundle, inp, sh, caches8, caches16, peers, want):
    """(label, systems) for one size: bf16 (norm + RoPE), fp8 (RoPE only,
    beside FlashInfer) and fp8-norm (beside vLLM's sequence into fp8)."""
    out = []
    if "bf16" in want:
        out.append(("bf16", kvgen_systems(bundle, inp, sh, caches16, None) +
                    vllm_systems(inp, sh, caches16, None, peers, bundle)))
    if "fp8" in want:
        out.append(("fp8", kvgen_systems(bundle, inp, sh, caches8, "rope") +
                    flashinfer_systems(inp, sh, caches8, peers)))
    if "fp8-norm" in want:
        out.append(("fp8norm",
                    kvgen_systems(bundle, inp, sh, caches8, "norm") +
                    vllm_systems(inp, sh, caches8, "norm", peers, bundle)))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bundle", help="bench-prologue.bundle.json (default: "
                   "$KVGEN_BUILD_DIR/bench/, else build/gpu-stage/bench/)")
    p.add_argument("--vllm-prologue-ext", help="vLLM's fused_qk_norm_rope "
                   "(and fused_qknorm_rope_cache) built by "
                   "bench/peers/build_vllm_prologue.py")
    p.add_argument("--vllm-cache-ext", help="vLLM's reshape_and_cache_flash "
                   "(the peers' vllm_ext build)")
    p.add_argument("--no-flashinfer", action="store_true")
    p.add_argument("--no-register", dest="register", action="store_false",
                   help="do not offer the bundle to kvgen.ops (the drop-in "
                   "then compiles or finds its kernel in KVGEN_CACHE_DIR)")
    p.add_argument("--groups", default="bf16,fp8,fp8-norm")
    p.add_argument("--decode", help="decode sizes (default 1,8,32,128,512)")
    p.add_argument("--prefill", help="prefill sizes (default "
                   "1024,4096,16384,65536)")
    p.add_argument("--quick", action="store_true",
                   help="two sizes of each, few repetitions: a smoke run")
    p.add_argument("--cpu-dry-run", action="store_true",
                   help="tiny sizes on the CPU through the host kernels: "
                   "the checks only, no timing, no peers")
    p.add_argument("--out", default="prologue-out")
    args = p.parse_args()

    def sizes(text, default):
        return tuple(int(x) for x in text.split(",") if x) if text is not None \
            else default

    dry = args.cpu_dry_run
    if dry:
        decode, prefill = DRY_SIZES, ()
        dev, num_pages = "cpu", 2048
    else:
        if not torch.cuda.is_available():
            log("prologue_gpu: no CUDA device (--cpu-dry-run checks the "
                "script on the CPU)")
            return 2
        decode = sizes(args.decode, QUICK_DECODE if args.quick else DECODE)
        prefill = sizes(args.prefill, QUICK_PREFILL if args.quick else
                        PREFILL)
        dev, num_pages = "cuda", NUM_PAGES
    want = args.groups.split(",")
    t_start = time.time()
    report = {"tool": "prologue_gpu", "quick": args.quick, "dry_run": dry,
              "device": torch.cuda.get_device_name() if not dry else "cpu",
              "torch": torch.__version__, "peers": {}, "rows": [],
              "bytes_per_token": BYTES}
    os.makedirs(args.out, exist_ok=True)
    bundle = load_bundle(args, report)
    peers = {} if dry else load_peers(args, report)
    gen = torch.Generator().manual_seed(7919)
    dg = torch.Generator(device=dev).manual_seed(17)
    sh = dict(
        cs=cos_sin_cache(dev),
        q_w=(1 + 0.1 * torch.randn(D, generator=dg, device=dev)).to(
            torch.bfloat16),
        k_w=(1 + 0.1 * torch.randn(D, generator=dg, device=dev)).to(
            torch.bfloat16),
        eps=torch.tensor([EPS], dtype=torch.float32, device=dev),
        scale=torch.tensor([FP8_SCALE], dtype=torch.float32, device=dev),
        one=torch.tensor([1.0], dtype=torch.float32, device=dev))
    if dry:
        report["self_test"] = self_test(sh, dev, gen)
        for what, passed in report["self_test"]:
            log("self-test: %s: %s" % (what, "ok" if passed else "FAILED"))
    shape = (num_pages, PAGE, KH, D)
    caches16 = (torch.randn(shape, generator=dg, device=dev).to(
        torch.bfloat16), torch.randn(shape, generator=dg, device=dev).to(
        torch.bfloat16))
    caches8 = tuple(torch.zeros(shape, dtype=torch.float8_e4m3fn, device=dev)
                    for _ in range(2)) \
        if any(g.startswith("fp8") for g in want) else None
    timer = None
    stream = None
    if not dry:
        import side_by_side as sbs
        import side_by_side_gpu as sbg
        reps = dict(sbs.repetitions(args.quick))
        reps["eager_calls"] = min(reps["eager_calls"], 1000)
        report["reps"] = reps
        stream = torch.cuda.Stream()
    copy_cache = {}
    ctx = torch.cuda.stream(stream) if stream is not None else _Null()
    with ctx:
        if not dry:
            timer = sbg.Timer(stream, reps)
            report["copy_GBps"], _ = timer.copy_ceiling()
            log("prologue_gpu: %s, copy ceiling %.0f GB/s" % (
                report["device"], report["copy_GBps"]))
        for n in list(decode) + list(prefill):
            phase = "decode" if n in decode else "prefill"
            sets = 1 if phase == "prefill" or dry else max(1, min(
                MAX_SETS, ROTATE_BYTES // (n * BYTES["kvgen"])))
            inp = Inputs(n, sets, sh, dev, gen, num_pages)
            for label, systems in groups(bundle, inp, sh, caches8, caches16,
                                         peers, want):
                if dry:
                    modes = []
                elif phase == "decode":
                    modes = ["graph", "eager"] + (
                        ["cold"] if label == "fp8" else [])
                else:
                    modes = ["cold"] + (["graph"] if label == "fp8" else [])
                run_group(label, n, systems, inp, timer, modes,
                          report["rows"], copy_cache, reps if timer else None)
            inp.release()
            if not dry:
                torch.cuda.empty_cache()
    report["targets"] = targets(report["rows"], decode, prefill)
    report["seconds"] = round(time.time() - t_start, 1)
    text = markdown(report)
    log("")
    log(text)
    with open(os.path.join(args.out, "prologue.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
    with open(os.path.join(args.out, "prologue.md"), "w") as f:
        f.write(text)
    log("prologue_gpu: wrote %s/prologue.{json,md} in %.0f s" % (
        args.out, report["seconds"]))
    # A kvgen row that is wrong fails the run; an overlapping q_out that
    # kvgen refuses is a limit of the release, not a failure.
    failed = [r for r in report["rows"] if not r["check_ok"] and
              r["system"].startswith("kvgen") and not (
                  r["system"] == "kvgen-inplace" and r.get("raised"))]
    failed += [w for w, ok in report.get("self_test", []) if not ok]
    if failed:
        return 3
    if bundle is None:
        log("prologue_gpu: kvgen's kernels did not run (%s)" % report["bundle"])
        return 2
    return 0


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    sys.exit(main())
