"""The fused prologue benchmark's peers: vLLM's unfused sequence and fused
kernel (a torch extension built from vLLM's source by
peers/build_vllm_prologue.py) and FlashInfer's fp8 op, each optional."""

import torch

from prologue_check import check_outputs
from prologue_common import (D, EPS, FP8_SCALE, KH, PAGE, QH, ROT, System, log,
                             split)

def vllm_systems(inp, sh, caches, fp8, peers, bundle):
    """vLLM's unfused sequence (its norm + RoPE, then its append or kvgen's)
    and its fused kernel."""
    out = []
    ops = peers.get("vllm_prologue")
    if ops is None:
        return out
    kc, vc = caches
    # vLLM allocates an fp8 cache as uint8: its ops get that view (the check
    # reads the fp8 tensor).
    vkc, vvc = (kc.view(torch.uint8), vc.view(torch.uint8)) if fp8 else caches
    dtype = "fp8" if fp8 else "auto"
    scale = sh["scale"] if fp8 else sh["one"]

    def norm_rope(qkv, s):
        ops.fused_qk_norm_rope(qkv, QH, KH, KH, D, EPS, sh["q_w"], sh["k_w"],
                               sh["cs"], True, s["pos"], -1)

    cache_op = peers.get("vllm_cache")
    appends = []
    if cache_op is not None:
        appends.append(("vllm-unfused", lambda k, v, s: cache_op(
            k, v, vkc, vvc, s["slots"], dtype, scale, scale)))
    if bundle is not None:
        plain = "plain_fp8" if fp8 else "plain_bf16"
        extra = dict(key_scale=scale, value_scale=scale) if fp8 else {}
        appends.append(("unfused-kvgen", lambda k, v, s: bundle.append(
            k, v, s["slots"], kc, vc, kernel=plain, **extra)))
    for name, append in appends:
        def launch(i, append=append):
            s = inp.s[i]
            work = inp.work_set(i)
            norm_rope(work, s)
            _, k, v = split(work)
            append(k, v, s)

        def check(append=append, launch=launch):
            s = inp.s[0]
            work = inp.work_set(0)
            work.copy_(s["qkv"])
            launch(0)
            return check_outputs(s["qkv"], s["pos"], s["slots"], sh, True,
                                 split(work)[0], kc, vc,
                                 sh["scale"] if fp8 else None)

        out.append(System(name + ("-fp8" if fp8 else ""), launch, check))
    fused = getattr(ops, "fused_qknorm_rope_cache", None) \
        if peers.get("vllm_fused") else None
    if fused is not None:
        n = inp.n
        dev = inp.pool.device
        qo = torch.empty(n, QH * D, dtype=torch.bfloat16, device=dev)
        ko = torch.empty(n, KH * D, dtype=torch.bfloat16, device=dev)
        vo = torch.empty_like(ko)
        cos, sin = sh["cs"][:, :ROT // 2], sh["cs"][:, ROT // 2:]

        def launch_fused(i):
            s = inp.s[i]
            fused(qo, ko, vo, s["qkv"], sh["q_w"], sh["k_w"], cos, sin,
                  s["pos"], s["slots"], vkc, vvc, D, QH, KH, ROT // 2, EPS,
                  0.0,
                  dtype, sh["scale"] if fp8 else None,
                  sh["scale"] if fp8 else None)

        def check_fused():
            s = inp.s[0]
            launch_fused(0)
            return check_outputs(s["qkv"], s["pos"], s["slots"], sh, True,
                                 qo.view(n, QH, D), kc, vc,
                                 sh["scale"] if fp8 else None)

        out.append(System("vllm-fused" + ("-fp8" if fp8 else ""),
                          launch_fused, check_fused,
                          note="also writes K and V out"))
    return out


def _fp8_rope_system(fn, name, inp, sh, caches, note):
    """A system of FlashInfer's rope_quantize_fp8_append_paged_kv_cache
    signature (FlashInfer's op or kvgen's drop-in), called with the same
    arguments: K and V (RoPE, no norm) in the fp8 cache, Q quantized to fp8
    (scale 1), q_nope/k_nope of extent 0 (the whole head rotary)."""
    kc, vc = caches
    n, dev = inp.n, inp.pool.device
    q8 = torch.empty(n, QH, D, dtype=torch.float8_e4m3fn, device=dev)
    q_nope = torch.empty(n, QH, 0, dtype=torch.bfloat16, device=dev)
    k_nope = torch.empty(n, KH, 0, dtype=torch.bfloat16, device=dev)
    q_nope_out = torch.empty(n, QH, 0, dtype=torch.float8_e4m3fn, device=dev)
    # The same cos/sin values as kvgen's (its bf16 cache), in fp32 as
    # FlashInfer takes them.
    cs32 = sh["cs"].float()

    def launch(i):
        s = inp.s[i]
        q, k, v = split(s["qkv"])
        fn(q, k, q_nope, k_nope, v, cs32, s["pos"], (kc, vc), s["indices"],
           s["indptr"], s["batch"], s["pos32"], is_neox=True,
           quantize_dtype=torch.float8_e4m3fn, quant_scale_q=1.0,
           quant_scale_kv=1.0 / FP8_SCALE, page_size=PAGE, kv_layout="NHD",
           q_rope_out=q8, q_nope_out=q_nope_out)

    def check():
        s = inp.s[0]
        q8.fill_(float("nan"))
        launch(0)
        return check_outputs(s["qkv"], s["pos"], s["slots"], sh, False, q8,
                             kc, vc, FP8_SCALE, q_scale=1.0)

    return System(name, launch, check, note=note)


def flashinfer_systems(inp, sh, caches, peers):
    """FlashInfer's fused RoPE + fp8 quantization + paged append and kvgen's
    drop-in of it (kvgen.flashinfer), called alike: kvgen's side is the
    drop-in, so the row compares the same call, outputs and eager cost."""
    out = []
    try:
        import kvgen.flashinfer as kv_fi
        out.append(_fp8_rope_system(
            kv_fi.rope_quantize_fp8_append_paged_kv_cache,
            "kvgen-flashinfer-fp8", inp, sh, caches,
            "kvgen.flashinfer drop-in; Q out fp8, cos/sin fp32"))
    except Exception as e:  # noqa: BLE001 -- reported; the peer still runs
        log("kvgen-flashinfer-fp8: kvgen.flashinfer does not import: %s: %s"
            % (type(e).__name__, e))
    fi = peers.get("flashinfer")
    if fi is not None:
        out.append(_fp8_rope_system(fi, "flashinfer-fp8", inp, sh, caches,
                                    "Q out fp8, cos/sin fp32"))
    return out


# ----------------------------------------------------------------------------
# Peers and kvgen's bundle
# ----------------------------------------------------------------------------

def load_peers(args, report):
    peers = {}
    notes = report["peers"]
    if args.vllm_prologue_ext:
        try:
            torch.ops.load_library(args.vllm_prologue_ext)
            peers["vllm_prologue"] = torch.ops._C
            torch.ops._C.fused_qk_norm_rope  # noqa: B018 -- registered?
            try:
                torch.ops._C.fused_qknorm_rope_cache  # noqa: B018
                peers["vllm_fused"] = True
                notes["vllm-fused"] = "vLLM's fused_qknorm_rope_cache"
            except (AttributeError, RuntimeError):
                notes["vllm-fused"] = "not built (the library has "\
                    "fused_qk_norm_rope only)"
            notes["vllm_prologue"] = args.vllm_prologue_ext
        except Exception as e:  # noqa: BLE001 -- the peer is optional
            peers.pop("vllm_prologue", None)
            notes["vllm_prologue"] = "not loaded: %s: %s" % (
                type(e).__name__, e)
    else:
        notes["vllm_prologue"] = "not given (--vllm-prologue-ext)"
    if args.vllm_cache_ext:
        try:
            torch.ops.load_library(args.vllm_cache_ext)
            peers["vllm_cache"] = torch.ops._C_cache_ops.reshape_and_cache_flash
            notes["vllm_cache"] = args.vllm_cache_ext
        except Exception as e:  # noqa: BLE001
            notes["vllm_cache"] = "not loaded: %s: %s" % (type(e).__name__, e)
    else:
        notes["vllm_cache"] = "not given (--vllm-cache-ext)"
    if args.no_flashinfer:
        notes["flashinfer"] = "not asked for (--no-flashinfer)"
    else:
        try:
            import flashinfer
            from flashinfer.rope import rope_quantize_fp8_append_paged_kv_cache
            peers["flashinfer"] = rope_quantize_fp8_append_paged_kv_cache
            notes["flashinfer"] = getattr(flashinfer, "__version__", "?")
        except Exception as e:  # noqa: BLE001
            notes["flashinfer"] = "not available: %s: %s" % (
                type(e).__name__, e)
    for k, v in notes.items():
        log("peer %s: %s" % (k, v))
    return peers
