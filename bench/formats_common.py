"""The new-formats benchmark's shapes, context, timing, results, torch
references and inputs, shared by formats_gpu.py and formats_rows.py."""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from dropins_gpu import same_bytes  # noqa: E402


H, D, BS = 8, 128, 16
RANK, ROPE, MLA_BS = 512, 64, 64
ENTRY = RANK + ROPE
DS_ENTRY = 656
FP8 = torch.float8_e4m3fn
ROWS = ("per_head_fp8", "asymmetric", "fp8_ds_mla", "gather_fp8", "gather_bf16",
        "cp_gather", "convert_to_fp8", "convert_from_fp8", "swap_blocks")
MIB = 1 << 20


class Ctx:
    """Sizes, device, peer and results of one run."""

    def __init__(self, args):
        self.dry = args.cpu_dry_run or args.precompile is not None
        self.dev = "cpu" if self.dry else "cuda"
        if self.dry:
            self.decode, self.prefill, self.small = [1, 8], [48, 200], [1, 8]
            self.cache_bytes = 2 * MIB
        elif args.quick:
            self.decode, self.prefill, self.small = [1, 32], [1024, 16384], [8]
            self.cache_bytes = 256 * MIB
        else:
            self.decode, self.prefill, self.small = [1, 8, 32, 128], [1024, 4096, 16384, 65536], \
                [1, 8, 32]
            self.cache_bytes = 512 * MIB
        self.peer = None
        self.peer_note = "no vLLM extension given (--vllm-ext)"
        self.results = []
        self.failures = []
        self.flush = None

    def blocks(self, block_bytes, at_least):
        """A cache's block count: cache_bytes of blocks, at least `at_least`."""
        return max(at_least, self.cache_bytes // block_bytes)


# Timing -----------------------------------------------------------------------------------------

def cold_us(ctx, fn, reps=15):
    """Median of single calls, each after a write that evicts L2."""
    if ctx.flush is None:
        ctx.flush = torch.empty(256 * MIB, dtype=torch.uint8, device="cuda")
    times = []
    for _ in range(reps):
        ctx.flush.zero_()
        begin = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        begin.record()
        fn()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end) * 1e3)
    times.sort()
    return times[len(times) // 2]


_ceilings = {}


def copy_us(ctx, nbytes):
    """A cold D2D copy that reads and writes `nbytes` in all."""
    half = max(1, nbytes // 2)
    if half not in _ceilings:
        src = torch.randint(0, 255, (half,), dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        _ceilings[half] = cold_us(ctx, lambda: dst.copy_(src))
        del src, dst
    return _ceilings[half]


class Rotating:
    """A function over `count` input sets, the next one at each call (a CUDA graph of many calls
    then reads 16 inputs rather than one)."""

    def __init__(self, fn, sets):
        self.fn, self.sets, self.i = fn, sets, 0

    def __call__(self):
        s = self.sets[self.i % len(self.sets)]
        self.i += 1
        self.fn(*s)


# Results ----------------------------------------------------------------------------------------

def record(ctx, row, size, mode, kvgen_us, vllm_us, nbytes=None, note="", check=""):
    r = dict(row=row, size=size, mode=mode, kvgen_us=kvgen_us, vllm_us=vllm_us, note=note,
             check=check)
    if kvgen_us is not None and vllm_us is not None:
        r["ratio"] = kvgen_us / vllm_us
        r["target"] = "MET" if r["ratio"] <= 1.0 else "MISSED"
    if nbytes is not None and mode == "cold" and not ctx.dry:
        c = copy_us(ctx, nbytes)
        r["bytes"] = nbytes
        r["copy_us"] = c
        if kvgen_us:
            r["kvgen_pct_copy"] = 100.0 * c / kvgen_us
        if vllm_us:
            r["vllm_pct_copy"] = 100.0 * c / vllm_us
    if row == "fp8_ds_mla" and mode == "cold" and size == 65536 and "kvgen_pct_copy" in r:
        r["copy_target"] = "MET" if r["kvgen_pct_copy"] >= 85.0 else "MISSED"
    ctx.results.append(r)
    print(line(r), flush=True)


def fmt(v, spec="%.2f"):
    return "-" if v is None else spec % v


HEADER = ("| row | size | timing | kvgen us | vLLM us | kvgen/vLLM | kvgen % copy | vLLM % copy "
          "| target | check | note |\n|---|---:|---|---:|---:|---:|---:|---:|---|---|---|")


def line(r):
    target = r.get("target", "-")
    if "ratio" in r:
        target = "%s (%.3f)" % (target, r["ratio"])
    if "copy_target" in r:
        target += "; >= 85%% copy %s (%.1f%%)" % (r["copy_target"], r["kvgen_pct_copy"])
    return "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        r["row"], r["size"], r["mode"], fmt(r["kvgen_us"]), fmt(r["vllm_us"]),
        fmt(r.get("ratio"), "%.3f"), fmt(r.get("kvgen_pct_copy"), "%.1f"),
        fmt(r.get("vllm_pct_copy"), "%.1f"), target, r["check"], r["note"])


def compare(ctx, row, size, got, want, who):
    """Bit for bit; a failure is recorded. Returns whether they agree."""
    pairs = got if isinstance(got, (list, tuple)) else [got]
    wants = want if isinstance(want, (list, tuple)) else [want]
    for g, w in zip(pairs, wants):
        if g.shape != w.shape or not same_bytes(g.contiguous(), w.contiguous()):
            diff = "shapes %s / %s" % (list(g.shape), list(w.shape)) if g.shape != w.shape \
                else "%d bytes differ" % int((g.contiguous().view(torch.uint8) !=
                                              w.contiguous().view(torch.uint8)).sum())
            ctx.failures.append("%s %s: %s: %s" % (row, size, who, diff))
            print("CHECK FAILED: %s %s: %s: %s" % (row, size, who, diff), flush=True)
            return False
    return True


def sync(ctx):
    if ctx.dev == "cuda":
        torch.cuda.synchronize()


# References (torch, bit exact) ------------------------------------------------------------------

def q_fp8(x, scale):
    """fp8 e4m3 bytes of x / scale: fp32 division, nearest even, saturated."""
    return (x.float() / scale).clamp(-448.0, 448.0).to(FP8).view(torch.uint8)


def dq_fp8(q, scale, dtype):
    return (q.view(FP8).float() * scale).to(dtype)


def ref_ds_mla(kv_c, k_pe):
    """DeepSeek V3.2's 656-byte entries: per 128 values the scale
    2^ceil(log2(max(amax / 448, 1e-4))), the fp8 values, the 4 f32 scales, then k_pe's bytes."""
    n = kv_c.shape[0]
    x = kv_c.float().view(n, 4, 128)
    s = (x.abs().amax(-1) / 448.0).clamp_min(1e-4)
    m, e = torch.frexp(s)
    e = torch.where(m == 0.5, e - 1, e)
    s = torch.ldexp(torch.ones_like(s), e)
    q = (x / s.unsqueeze(-1)).clamp(-448.0, 448.0).to(FP8).view(torch.uint8).view(n, RANK)
    return torch.cat([q, s.contiguous().view(torch.uint8).view(n, 16),
                      k_pe.contiguous().view(torch.uint8).view(n, 2 * ROPE)], 1)


def scatter(cache, slots, rows):
    """cache with rows written at slots (a copy)."""
    out = cache.clone()
    flat = out.view(out.shape[0] * out.shape[1], *out.shape[2:])
    flat[slots] = rows
    return out


def ref_gather(cache, table, cu, dtype=None, scale=None):
    bs = cache.shape[1]
    cu = cu.tolist()
    parts = []
    for r in range(len(cu) - 1):
        pos = torch.arange(cu[r + 1] - cu[r], device=cache.device)
        blk = table[r].long()[pos // bs]
        parts.append(cache[blk, pos % bs])
    rows = torch.cat(parts)
    if scale is not None:
        rows = dq_fp8(rows, scale, dtype)
    return rows


# Inputs -----------------------------------------------------------------------------------------

def rand(shape, ctx, dtype=torch.bfloat16):
    return torch.randn(*shape, device=ctx.dev).to(dtype)


def rand_bytes(shape, ctx):
    """Random fp8 e4m3 values (never NaN) as uint8."""
    return torch.randn(*shape, device=ctx.dev).mul_(8).to(FP8).view(torch.uint8)


def slots_for(n, num_slots, ctx):
    return torch.randperm(num_slots, device=ctx.dev)[:n]


def peer_op(ctx, name):
    return None if ctx.peer is None else getattr(ctx.peer, name)
