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
                   fp32), against kvgen's fp8 prologue without norm.

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
import math
import os
import sys
import time
import traceback

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import kvgen  # noqa: E402

QH, KH, D = 32, 8, 128
PAGE, NUM_PAGES = 16, 32768
ROT = 128
MAX_POS = 32768
EPS = 1e-6
ROPE_BASE = 1e6
FP8_SCALE = 1.0 / 32  # a power of two: x / s and x * (1 / s) are the same
DECODE = (1, 8, 32, 128, 512)
PREFILL = (1024, 4096, 16384, 65536)
QUICK_DECODE = (1, 32)
QUICK_PREFILL = (4096, 65536)
DRY_SIZES = (1, 5, 33)
# One decode graph's inputs are rotated over this many sets at most (a timing
# loop touches 256 MB or this many sets, whichever comes first).
MAX_SETS = 100
ROTATE_BYTES = 256 << 20

# Bytes per token each system must move (see the docstring). Q, K, V bf16.
_QB, _KB = QH * D * 2, KH * D * 2
_IDX, _COS, _W = 16, ROT * 2, 2 * D * 2
BYTES = {
    "kvgen": 2 * _QB + 4 * _KB + _IDX + _COS + _W,
    "kvgen-dropin": 2 * _QB + 4 * _KB + _IDX + _COS + _W,
    "kvgen-inplace": 2 * _QB + 4 * _KB + _IDX + _COS + _W,
    "kvgen-plain": 4 * _KB + 8,
    "vllm-unfused": (2 * _QB + 2 * _KB + 8 + _COS + _W) + (4 * _KB + 8),
    "unfused-kvgen": (2 * _QB + 2 * _KB + 8 + _COS + _W) + (4 * _KB + 8),
    # Reads qkv, writes Q, K and V out and K and V into the cache.
    "vllm-fused": 2 * _QB + 6 * _KB + _IDX + _COS + _W,
    # fp8: K and V written as one byte an element; no norm weights.
    "kvgen-fp8": 2 * _QB + 3 * _KB + _IDX + _COS,
    "kvgen-fp8-plain": 3 * _KB + 8,
    # Q written as fp8; cos/sin in fp32; int32 batch index and position, an
    # int64 pos_id (the page table's few bytes are left out).
    "flashinfer-fp8": _QB + _QB // 2 + 3 * _KB + 8 + 8 + 2 * _COS,
    "kvgen-fp8-norm": 2 * _QB + 3 * _KB + _IDX + _COS + _W,
    "vllm-unfused-fp8": (2 * _QB + 2 * _KB + 8 + _COS + _W) + (3 * _KB + 8),
    "unfused-kvgen-fp8": (2 * _QB + 2 * _KB + 8 + _COS + _W) + (3 * _KB + 8),
    "vllm-fused-fp8": 2 * _QB + 5 * _KB + _IDX + _COS + _W,
    "kvgen-dropin-fp8": 2 * _QB + 3 * _KB + _IDX + _COS + _W,
}


def log(msg=""):
    print(msg, flush=True)


# ----------------------------------------------------------------------------
# Inputs
# ----------------------------------------------------------------------------

def cos_sin_cache(dev, dtype=torch.bfloat16):
    """vLLM's RotaryEmbedding._compute_cos_sin_cache, in the source dtype."""
    inv_freq = 1.0 / (ROPE_BASE ** (torch.arange(0, ROT, 2, dtype=torch.float)
                                    / ROT))
    t = torch.arange(MAX_POS, dtype=torch.float)
    freqs = torch.einsum("i,j -> ij", t, inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(dtype).to(dev)


def workload(n, gen, num_pages):
    """One input set's page table, slots and positions (int64 for kvgen and
    vLLM, int32 for FlashInfer), on the host."""
    if n <= 512:
        reqs, fresh = n, [1] * n
    else:
        reqs, fresh = 4, [n // 4] * 4
    seq_lens = [int(torch.randint(1, 32 * PAGE, (1,), generator=gen)) + f
                for f in fresh]
    pages = [(s + PAGE - 1) // PAGE for s in seq_lens]
    assert sum(pages) <= num_pages, "the cache is too small for the workload"
    perm = torch.randperm(num_pages, generator=gen)
    indptr = [0]
    for p in pages:
        indptr.append(indptr[-1] + p)
    batch, pos, slots = [], [], []
    for r in range(reqs):
        for i in range(fresh[r]):
            p = seq_lens[r] - fresh[r] + i
            batch.append(r)
            pos.append(p)
            slots.append(int(perm[indptr[r] + p // PAGE]) * PAGE + p % PAGE)
    assert max(pos) < MAX_POS
    return dict(batch=batch, pos=pos, slots=slots, indices=perm[:indptr[-1]],
                indptr=indptr)


class Inputs:
    """Per size: `sets` input sets over one qkv pool, and the tensors every
    system shares (weights, cos/sin, epsilon, scale)."""

    def __init__(self, n, sets, shared, dev, gen, num_pages):
        self.n, self.sets = n, sets
        i64, i32 = torch.int64, torch.int32
        dg = torch.Generator(device=dev).manual_seed(1000 + n)
        self.pool = torch.randn(sets * n, (QH + 2 * KH) * D, generator=dg,
                                device=dev).to(torch.bfloat16)
        self.work = None  # vLLM's in-place norm + RoPE runs on this copy
        self.s = []
        for i in range(sets):
            w = workload(n, gen, num_pages)
            qkv = self.pool[i * n:(i + 1) * n]
            self.s.append(dict(
                qkv=qkv,
                slots=torch.tensor(w["slots"], dtype=i64, device=dev),
                pos=torch.tensor(w["pos"], dtype=i64, device=dev),
                pos32=torch.tensor(w["pos"], dtype=i32, device=dev),
                batch=torch.tensor(w["batch"], dtype=i32, device=dev),
                indices=w["indices"].to(i32).to(dev),
                indptr=torch.tensor(w["indptr"], dtype=i32, device=dev)))
        self.q_out = torch.empty(n, QH, D, dtype=torch.bfloat16, device=dev)
        self.shared = shared

    def work_copy(self):
        if self.work is None:
            self.work = self.pool.clone()
        return self.work

    def work_set(self, i):
        n = self.n
        return self.work_copy()[i * n:(i + 1) * n]

    def release(self):
        self.pool = self.work = self.q_out = None
        self.s = []


def split(qkv):
    n = qkv.shape[0]
    q = qkv[:, :QH * D].view(n, QH, D)
    k = qkv[:, QH * D:(QH + KH) * D].view(n, KH, D)
    v = qkv[:, (QH + KH) * D:].view(n, KH, D)
    return q, k, v


# ----------------------------------------------------------------------------
# The torch reference and the check
# ----------------------------------------------------------------------------

def reference(qkv, pos, sh, norm):
    """vLLM's unfused sequence of torch ops: RMSNorm.forward_native (fp32,
    then the dtype, then * weight in the dtype) and
    RotaryEmbedding.forward_native with the cos/sin cache in the dtype (each
    op rounded to the dtype). Returns (q, k, v) in bf16 and the magnitude
    each element's bound is taken from: |y[a]| + |y[b]| of its NeoX pair,
    y the normalized head in fp32."""
    q, k, v = split(qkv)

    def rms(x, w):
        xf = x.float()
        var = xf.pow(2).mean(dim=-1, keepdim=True)
        y = xf * torch.rsqrt(var + EPS)
        return y.to(x.dtype) * w, y * w.float()

    if norm:
        q, yq = rms(q, sh["q_w"])
        k, yk = rms(k, sh["k_w"])
    else:
        yq, yk = q.float(), k.float()
    cos, sin = sh["cs"][pos].chunk(2, dim=-1)
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)

    def rope(x):
        x1, x2 = x[..., :ROT // 2], x[..., ROT // 2:ROT]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin,
                          x[..., ROT:]), dim=-1)

    def pair(y):
        a = y[..., :ROT // 2].abs() + y[..., ROT // 2:ROT].abs()
        return torch.cat((a, a, y[..., ROT:].abs()), dim=-1)

    return rope(q), rope(k), v, pair(yq), pair(yk)


U_BF16 = 2.0 ** -8


def bound(mag, norm):
    """docs/CONTRACT.md's bound between the fused and the unfused values: 5u
    of the pair's magnitude with norm, 3u without, a quarter more for the
    fp32 estimate of the exact value, and an absolute floor for values near
    zero."""
    return (5.0 if norm else 3.0) * 1.25 * U_BF16 * mag + 2.0 ** -24


def fp8_step(x, scale):
    """One e4m3 step at magnitude |x| (in the source's units)."""
    q = (x.abs() / scale).clamp(min=2.0 ** -6)
    return torch.exp2(torch.floor(torch.log2(q)) - 3) * scale


def compare(name, got, want, tol, fp8_scale=None):
    """The worst |got - want| / tol over the elements; > 1 fails."""
    g = got.float()
    w = want.float()
    if fp8_scale is not None:
        g = g * fp8_scale
        tol = tol + fp8_step(w.abs() + tol, fp8_scale)
    err = (g - w).abs()
    bad = ~torch.isfinite(g)
    worst = float((err / tol).max()) if err.numel() else 0.0
    if bool(bad.any()):
        worst = float("inf")
    return name, worst


def rows(cache, slots):
    return cache.view(-1, KH, D)[slots]


class Check:
    """One system's check at one size: (name, worst ratio) of each output."""

    def __init__(self):
        self.parts = []

    def add(self, part):
        self.parts.append(part)

    @property
    def ok(self):
        return all(r <= 1.0 for _, r in self.parts)

    def text(self):
        return ", ".join("%s %.2f" % (n, r) for n, r in self.parts)


# ----------------------------------------------------------------------------
# Systems
# ----------------------------------------------------------------------------

class System:
    """One way to do the work: `launch(i)` runs it on input set i; `check()`
    runs it once on set 0 and compares its outputs."""

    def __init__(self, name, launch, check, note=""):
        self.name, self.launch, self.check, self.note = name, launch, check, note


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


def check_outputs(qkv, pos, slots, sh, norm, q_out, kc, vc, scale,
                  q_scale=None):
    """A system's Q out and cache rows against the torch reference."""
    rq, rk, rv, mq, mk = reference(qkv, pos, sh, norm)
    c = Check()
    c.add(compare("Q", q_out, rq, bound(mq, norm), q_scale))
    c.add(compare("K", rows(kc, slots), rk, bound(mk, norm), scale))
    zero = torch.zeros((), device=qkv.device) + 2.0 ** -24
    c.add(compare("V", rows(vc, slots), rv, zero, scale))
    return c


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


def flashinfer_system(inp, sh, caches, peers):
    """FlashInfer's fused RoPE + fp8 quantization + paged append: its K and V
    (RoPE, no norm) in the fp8 cache, Q quantized to fp8 (scale 1)."""
    fi = peers.get("flashinfer")
    if fi is None:
        return []
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
        fi(q, k, q_nope, k_nope, v, cs32, s["pos"], (kc, vc), s["indices"],
           s["indptr"], s["batch"], s["pos32"], is_neox=True,
           quantize_dtype=torch.float8_e4m3fn, quant_scale_q=1.0,
           quant_scale_kv=1.0 / FP8_SCALE, page_size=PAGE, kv_layout="NHD",
           q_rope_out=q8, q_nope_out=q_nope_out)

    def check():
        s = inp.s[0]
        launch(0)
        return check_outputs(s["qkv"], s["pos"], s["slots"], sh, False, q8,
                             kc, vc, FP8_SCALE, q_scale=1.0)

    return [System("flashinfer-fp8", launch, check,
                   note="Q out fp8, cos/sin fp32")]


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
# Report
# ----------------------------------------------------------------------------

def find(results, group, n, system, key):
    for r in results:
        if (r["group"], r["tokens"], r["system"]) == (group, n, system):
            return r.get(key)
    return None


def targets(results, decode, prefill):
    """Each target of the prologue's issue: (name, MET|MISSED|n/a, text)."""
    out = []

    def add(name, ok, text):
        out.append(dict(target=name, status="n/a" if ok is None else
                        ("MET" if ok else "MISSED"), value=text))

    big = max(prefill) if prefill else None
    if big:
        pct = find(results, "bf16", big, "kvgen", "pct_of_copy")
        add("(a) prefill %d: kvgen >= 90%% of the copy ceiling" % big,
            None if pct is None else pct >= 90.0,
            "-" if pct is None else "%.1f%%" % pct)
        fused = find(results, "bf16", big, "kvgen", "cold_us")
        for unf in ("vllm-unfused", "unfused-kvgen"):
            u = find(results, "bf16", big, unf, "cold_us")
            ratio = u / fused if u and fused else None
            add("(a) prefill %d: kvgen >= 1.15x %s" % (big, unf),
                None if ratio is None else ratio >= 1.15,
                "-" if ratio is None else "%.3fx (%.1f vs %.1f us)" % (
                    ratio, u, fused))
    for n in decode:
        if n not in (1, 8, 32):
            continue
        f = find(results, "bf16", n, "kvgen", "graph_us")
        p = find(results, "bf16", n, "kvgen-plain", "graph_us")
        add("(b) decode %d in a graph: kvgen within 0.15 us of the plain "
            "append" % n, None if f is None or p is None else f - p <= 0.15,
            "-" if f is None or p is None else "+%.3f us (%.3f vs %.3f)" % (
                f - p, f, p))
        for unf in ("vllm-unfused", "unfused-kvgen"):
            u = find(results, "bf16", n, unf, "graph_us")
            add("(b) decode %d in a graph: kvgen >= 1.7x %s" % (n, unf),
                None if f is None or u is None else u / f >= 1.7,
                "-" if f is None or u is None else "%.2fx (%.3f vs %.3f us)"
                % (u / f, u, f))
    for n in list(decode) + list(prefill):
        for mode in ("graph", "cold"):
            k = find(results, "fp8", n, "kvgen-fp8", mode + "_us")
            fi = find(results, "fp8", n, "flashinfer-fp8", mode + "_us")
            if k is None and fi is None:
                continue
            add("(c) fp8 %d %s: kvgen faster than FlashInfer" % (n, mode),
                None if k is None or fi is None else k < fi,
                "-" if k is None or fi is None else "%.3f vs %.3f us (%.2fx)"
                % (k, fi, fi / k))
    return out


def fmt(v, f="%.2f"):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) \
        else f % v


def markdown(report):
    lines = ["# The fused prologue beside the unfused sequence and its peers",
             "", "%s, torch %s; copy ceiling (4 GiB D2D) %s GB/s; quick: %s."
             % (report["device"], report["torch"],
                fmt(report.get("copy_GBps"), "%.0f"), report["quick"]), "",
             "Peers: " + "; ".join("%s: %s" % kv for kv in
                                   report["peers"].items()) + ".", "",
             "kvgen bundle: %s." % report["bundle"], "",
             "| group | tokens | system | check | graph us | eager us | "
             "cold us | % of copy | B/token | note |",
             "|---|---:|---|---|---:|---:|---:|---:|---:|---|"]
    for r in report["rows"]:
        lines.append("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["group"], r["tokens"], r["system"],
            ("ok" if r["check_ok"] else "FAILED: ") + (
                "" if r["check_ok"] else r["check"]),
            fmt(r.get("graph_us"), "%.3f"), fmt(r.get("eager_us"), "%.2f"),
            fmt(r.get("cold_us"), "%.2f"), fmt(r.get("pct_of_copy"), "%.1f"),
            fmt(r.get("bytes_per_token"), "%d"), r.get("note", "")))
    lines += ["", "## Targets", "", "| target | status | value |",
              "|---|---|---|"]
    for t in report["targets"]:
        lines.append("| %s | %s | %s |" % (t["target"], t["status"],
                                           t["value"]))
    lines += ["", "fp8 bytes: kvgen writes Q in bf16 (8192 B a token) where "
              "FlashInfer writes it in fp8 (4096 B) and reads its cos/sin in "
              "fp32 (512 B against 256): kvgen's fp8 call moves %d B a token, "
              "FlashInfer's %d." % (BYTES["kvgen-fp8"],
                                    BYTES["flashinfer-fp8"]), ""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------
# The check's own check (--cpu-dry-run): a torch model of the fused kernel
# passes it, the model broken as kvgen-prologue-unfused --break= breaks it
# fails it
# ----------------------------------------------------------------------------

def fused_model(qkv, pos, sh, norm, brk=None):
    """docs/CONTRACT.md's order in fp32 (x, RMSNorm, RoPE, one rounding),
    optionally broken: "sign" flips the rotation, "weight" drops the norm's
    weight, "pair" rotates GPT-J's pairs instead of NeoX's."""
    q, k, _ = split(qkv)
    cos, sin = sh["cs"][pos].float().chunk(2, dim=-1)
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)

    def head(x, w):
        x = x.float()
        if norm:
            r = 1.0 / torch.sqrt((x * x).sum(-1, keepdim=True) / D + EPS)
            x = x * r
            if brk != "weight":
                x = x * w.float()
        if brk == "pair":
            a, b = x[..., 0:ROT:2], x[..., 1:ROT:2]
        else:
            a, b = x[..., :ROT // 2], x[..., ROT // 2:ROT]
        sign = -1.0 if brk == "sign" else 1.0
        ra, rb = a * cos - sign * b * sin, b * cos + sign * a * sin
        if brk == "pair":
            out = torch.stack((ra, rb), dim=-1).flatten(-2)
        else:
            out = torch.cat((ra, rb), dim=-1)
        return torch.cat((out, x[..., ROT:]), dim=-1).to(torch.bfloat16)

    return head(q, sh["q_w"]), head(k, sh["k_w"])


def self_test(sh, dev, gen):
    """(what, passed) of each case: the model within the bound, each broken
    model outside it, for 33 tokens with and without norm."""
    results = []
    inp = Inputs(33, 1, sh, dev, gen, 2048)
    s = inp.s[0]
    for norm in (True, False):
        rq, rk, _, mq, mk = reference(s["qkv"], s["pos"], sh, norm)
        for brk in (None, "sign", "weight", "pair"):
            if brk == "weight" and not norm:
                continue
            fq, fk = fused_model(s["qkv"], s["pos"], sh, norm, brk)
            worst = max(compare("Q", fq, rq, bound(mq, norm))[1],
                        compare("K", fk, rk, bound(mk, norm))[1])
            passed = worst <= 1.0 if brk is None else worst > 1.0
            results.append(("model%s %s: worst %.2f of the bound" % (
                "" if norm else " (rope only)",
                "as built" if brk is None else "broken (%s)" % brk, worst),
                passed))
    # fp8: the model's K quantized as the cache would be.
    rq, rk, _, mq, mk = reference(s["qkv"], s["pos"], sh, True)
    fq, fk = fused_model(s["qkv"], s["pos"], sh, True)
    k8 = (fk.float() / FP8_SCALE).to(torch.float8_e4m3fn)
    worst = compare("K", k8, rk, bound(mk, True), FP8_SCALE)[1]
    results.append(("model fp8 K: worst %.2f of the bound" % worst,
                    worst <= 1.0))
    return results


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
                    flashinfer_system(inp, sh, caches8, peers)))
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
