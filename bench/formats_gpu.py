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
import kvgen.vllm as kv  # noqa: E402
from kvgen import compiler  # noqa: E402

from dropins_gpu import device_us, eager_us, same_bytes  # noqa: E402

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


# Appends (decode in a graph, prefill cold) ------------------------------------------------------

def bench_append(ctx, row, make_caches, make_inputs, ours, theirs, reference, nbytes_per_token,
                 peer_note=""):
    """make_caches() -> (kvgen caches, vLLM caches); make_inputs(n) -> one input set;
    ours/theirs(caches, *inputs); reference(caches_before, *inputs) -> expected caches of
    kvgen's; theirs' outputs are compared through view_peer (kvgen's view of vLLM's caches)."""
    mine, peer_caches = make_caches()
    for mode, sizes in (("graph", ctx.decode), ("cold", ctx.prefill)):
        for n in sizes:
            sets = [make_inputs(n) for _ in range(16 if mode == "graph" and not ctx.dry else 1)]
            before = [c.clone() for c in mine]
            for s in sets:
                ours(mine, *s)
            sync(ctx)
            want = before
            for s in sets:
                want = reference(want, *s)
            del before
            ok = compare(ctx, row, n, list(mine), want, "kvgen vs reference")
            check = "kvgen = ref" if ok else "kvgen != ref"
            peer_ok = False
            if theirs is not None and peer_caches is not None:
                for s in sets:
                    theirs(peer_caches, *s)
                sync(ctx)
                peer_ok = compare(ctx, row, n, theirs.view(peer_caches), list(mine),
                                  "vLLM vs kvgen")
                check += "; vLLM = kvgen" if peer_ok else "; vLLM != kvgen (not timed)"
            del want
            if ctx.dry:
                record(ctx, row, n, mode, None, None, note="dry run", check=check)
                continue
            k_us = v_us = None
            note = peer_note
            for who, good, fn, caches in (("kvgen", ok, ours, mine),
                                          ("vLLM", peer_ok, theirs, peer_caches)):
                if not good:
                    continue
                try:
                    if mode == "graph":
                        t = device_us(Rotating(lambda *s: fn(caches, *s), sets), 100)
                    else:
                        t = cold_us(ctx, lambda: fn(caches, *sets[0]))
                except Exception as e:  # reported in the row; the others go on
                    t = None
                    note += " %s not timed: %s: %s" % (who, type(e).__name__,
                                                       str(e).splitlines()[0][:120])
                    torch.cuda.synchronize()
                if who == "kvgen":
                    k_us = t
                else:
                    v_us = t
            record(ctx, row, n, mode, k_us, v_us, nbytes_per_token * n, note.strip(), check)


class Peer:
    """vLLM's call and how its caches read as kvgen's (for the comparison)."""

    def __init__(self, call, view=lambda caches: list(caches)):
        self.call, self.view = call, view

    def __call__(self, caches, *inputs):
        self.call(caches, *inputs)


def row_per_head_fp8(ctx):
    nb = ctx.blocks(BS * H * D, 64)
    ks = (torch.rand(H, device=ctx.dev) * 0.08 + 0.02).float()
    vs = (torch.rand(H, device=ctx.dev) * 0.08 + 0.02).float()
    op = peer_op(ctx, "reshape_and_cache_flash")

    def make_caches():
        kc = rand_bytes((nb, BS, H, D), ctx)
        vc = rand_bytes((nb, BS, H, D), ctx)
        return (kc, vc), ((kc.clone(), vc.clone()) if op is not None else None)

    def make_inputs(n):
        return (rand((n, H, D), ctx), rand((n, H, D), ctx), slots_for(n, nb * BS, ctx))

    def ours(c, k, v, s):
        kv.reshape_and_cache_flash(k, v, c[0], c[1], s, "fp8", ks, vs)

    def reference(c, k, v, s):
        return [scatter(c[0], s, q_fp8(k, ks.view(1, H, 1))),
                scatter(c[1], s, q_fp8(v, vs.view(1, H, 1)))]

    theirs = None if op is None else Peer(lambda c, k, v, s: op(k, v, c[0], c[1], s, "fp8", ks,
                                                                 vs))
    # Bytes: bf16 K and V read, fp8 K and V written, the slot read.
    bench_append(ctx, "per_head_fp8", make_caches, make_inputs, ours, theirs, reference,
                 H * D * (2 + 2 + 1 + 1) + 8)


def row_asymmetric(ctx):
    DK, DV = 192, 128
    nb = ctx.blocks(BS * H * (DK + DV) * 2, 64)
    one = torch.ones(1, device=ctx.dev)
    op = peer_op(ctx, "reshape_and_cache_flash")

    def make_caches():
        kc = rand((nb, BS, H, DK), ctx)
        vc = rand((nb, BS, H, DV), ctx)
        peer = None
        if op is not None:
            # vLLM 0.26 stores V at K's head size: the same V, padded.
            vpad = torch.cat([vc, rand((nb, BS, H, DK - DV), ctx)], -1)
            peer = (kc.clone(), vpad)
        return (kc, vc), peer

    def make_inputs(n):
        v = rand((n, H, DV), ctx)
        return (rand((n, H, DK), ctx), v, slots_for(n, nb * BS, ctx),
                torch.cat([v, rand((n, H, DK - DV), ctx)], -1) if op is not None else None)

    def ours(c, k, v, s, vpad):
        kv.reshape_and_cache_flash(k, v, c[0], c[1], s, "auto", one, one)

    def reference(c, k, v, s, vpad):
        return [scatter(c[0], s, k), scatter(c[1], s, v)]

    theirs = None
    if op is not None:
        theirs = Peer(lambda c, k, v, s, vpad: op(k, vpad, c[0], c[1], s, "auto", one, one),
                      lambda c: [c[0], c[1][..., :DV]])
    bench_append(ctx, "asymmetric", make_caches, make_inputs, ours, theirs, reference,
                 H * (DK + DV) * 2 * 2 + 8,
                 "vLLM 0.26: one head size, V padded to 192" if op is not None else "")


def row_fp8_ds_mla(ctx):
    nb = ctx.blocks(MLA_BS * DS_ENTRY, 16)
    one = torch.ones(1, device=ctx.dev)
    op = peer_op(ctx, "concat_and_cache_mla")

    def make_caches():
        c = torch.randint(0, 256, (nb, MLA_BS, DS_ENTRY), dtype=torch.uint8, device=ctx.dev)
        return (c,), ((c.clone(),) if op is not None else None)

    def make_inputs(n):
        return (rand((n, RANK), ctx), rand((n, ROPE), ctx), slots_for(n, nb * MLA_BS, ctx))

    def ours(c, kv_c, k_pe, s):
        kv.concat_and_cache_mla(kv_c, k_pe, c[0], s, "fp8_ds_mla", one)

    def reference(c, kv_c, k_pe, s):
        return [scatter(c[0], s, ref_ds_mla(kv_c, k_pe))]

    theirs = None if op is None else Peer(
        lambda c, kv_c, k_pe, s: op(kv_c, k_pe, c[0], s, "fp8_ds_mla", one))
    bench_append(ctx, "fp8_ds_mla", make_caches, make_inputs, ours, theirs, reference,
                 ENTRY * 2 + DS_ENTRY + 8)


# Gathers, conversions and copies (cold at prefill sizes, eager at a step's) ---------------------

def bench_op(ctx, row, small, sizes, setup, ours, theirs, reference, outputs, nbytes):
    """small, sizes: the eager and the cold sizes; setup(n) -> state; ours/theirs(state) write outputs(state, who) ('kvgen' / 'vllm');
    reference(state) -> expected output. nbytes(n) -> bytes read and written."""
    for mode, ns in (("eager", small), ("cold", sizes)):
        for n in ns:
            st = setup(n)
            ours(st)
            sync(ctx)
            want = reference(st)
            ok = compare(ctx, row, n, outputs(st, "kvgen"), want, "kvgen vs reference")
            check = "kvgen = ref" if ok else "kvgen != ref"
            peer_ok = False
            if theirs is not None:
                theirs(st)
                sync(ctx)
                peer_ok = compare(ctx, row, n, outputs(st, "vllm"), want, "vLLM vs reference")
                check += "; vLLM = ref" if peer_ok else "; vLLM != ref (not timed)"
            del want
            if ctx.dry:
                record(ctx, row, n, mode, None, None, note="dry run", check=check)
                continue
            k_us = v_us = None
            if mode == "eager":
                iters = 200
                k_us = eager_us(lambda: ours(st), iters) if ok else None
                v_us = eager_us(lambda: theirs(st), iters) if peer_ok else None
            else:
                k_us = cold_us(ctx, lambda: ours(st)) if ok else None
                v_us = cold_us(ctx, lambda: theirs(st)) if peer_ok else None
            record(ctx, row, n, mode, k_us, v_us, nbytes(n), "", check)


def gather_row(ctx, row, fp8, cp):
    esize = 1 if fp8 else 2
    nb = ctx.blocks(MLA_BS * ENTRY * esize, 64)
    if fp8:
        cache = rand_bytes((nb, MLA_BS, ENTRY), ctx)
    else:
        cache = rand((nb, MLA_BS, ENTRY), ctx)
    scale = torch.tensor([0.037], device=ctx.dev)
    batch = 4
    name = "cp_gather_cache" if cp else "gather_and_maybe_dequant_cache"
    op = peer_op(ctx, name)

    def setup(n):
        lens = [n // batch + (1 if r < n % batch else 0) for r in range(batch)]
        width = (max(lens) + MLA_BS - 1) // MLA_BS
        perm = torch.randperm(nb, device=ctx.dev)[:batch * width]
        table = perm.view(batch, width).to(torch.int32)
        cu = torch.tensor([0] + lens, device=ctx.dev).cumsum(0).to(torch.int32)
        tts = torch.repeat_interleave(torch.arange(batch, device=ctx.dev),
                                      torch.tensor(lens, device=ctx.dev)).to(torch.int32)
        return dict(n=n, table=table, cu=cu, tts=tts,
                    kvgen=torch.empty(n, ENTRY, dtype=torch.bfloat16, device=ctx.dev),
                    vllm=torch.empty(n, ENTRY, dtype=torch.bfloat16, device=ctx.dev))

    if cp:
        def ours(st):
            kv.cp_gather_cache(cache, st["kvgen"], st["table"], st["cu"], batch, None)

        theirs = None if op is None else (
            lambda st: op(cache, st["vllm"], st["table"], st["cu"], batch, None))
    else:
        dt = "fp8" if fp8 else "auto"

        def ours(st):
            kv.gather_and_maybe_dequant_cache(cache, st["kvgen"], st["table"], st["cu"],
                                              st["tts"], st["n"], dt, scale, None)

        theirs = None if op is None else (
            lambda st: op(cache, st["vllm"], st["table"], st["cu"], st["tts"], st["n"], dt,
                          scale, None))

    def reference(st):
        return ref_gather(cache, st["table"], st["cu"], torch.bfloat16,
                          scale if fp8 else None)

    bench_op(ctx, row, [64] if ctx.dry else [256], ctx.prefill, setup, ours, theirs, reference,
             lambda st, who: st[who], lambda n: n * (ENTRY * esize + ENTRY * 2 + 4))


def convert_row(ctx, row, to_fp8):
    op = peer_op(ctx, "convert_fp8")
    scale = 0.043

    def setup(n):
        nb = max(1, n // BS)
        if to_fp8:
            src = rand((nb, BS, H, D), ctx)
            out = {w: torch.empty(nb, BS, H, D, dtype=torch.uint8, device=ctx.dev)
                   for w in ("kvgen", "vllm")}
        else:
            src = rand_bytes((nb, BS, H, D), ctx)
            out = {w: torch.empty(nb, BS, H, D, dtype=torch.bfloat16, device=ctx.dev)
                   for w in ("kvgen", "vllm")}
        return dict(src=src, **out)

    def ours(st):
        kv.convert_fp8(st["kvgen"], st["src"], scale, "fp8")

    theirs = None if op is None else (lambda st: op(st["vllm"], st["src"], scale, "fp8"))

    def reference(st):
        return q_fp8(st["src"], scale) if to_fp8 else dq_fp8(st["src"], scale, torch.bfloat16)

    bench_op(ctx, row, [64] if ctx.dry else [256], ctx.prefill, setup, ours, theirs, reference,
             lambda st, who: st[who], lambda n: max(1, n // BS) * BS * H * D * 3)


def row_swap_blocks(ctx):
    op = peer_op(ctx, "swap_blocks")
    block = BS * H * D * 2
    nb = ctx.blocks(block, 64)
    src = rand((nb, BS, H, D), ctx)
    dsts = {w: rand((nb, BS, H, D), ctx) for w in ("kvgen", "vllm")}
    dsts["vllm"].copy_(dsts["kvgen"])
    start = dsts["kvgen"].clone()

    def setup(blocks):
        for d in dsts.values():
            d.copy_(start)
        blocks = min(blocks, nb)
        pairs = torch.stack([torch.randperm(nb)[:blocks], torch.randperm(nb)[:blocks]], 1)
        return dict(map=pairs.to(torch.int64).contiguous())

    def ours(st):
        kv.swap_blocks(src, dsts["kvgen"], block, st["map"])

    theirs = None if op is None else (lambda st: op(src, dsts["vllm"], block, st["map"]))

    def reference(st):
        want = start.clone()
        m = st["map"].to(want.device)
        want[m[:, 1]] = src[m[:, 0]]
        return want

    def outputs(st, who):
        return dsts[who]

    # Sizes in blocks: a step's few blocks eagerly, then 1024 to 65536 tokens' blocks cold.
    bench_op(ctx, "swap_blocks", ctx.small, [max(1, n // BS) for n in ctx.prefill], setup, ours,
             theirs, reference, outputs, lambda b: min(b, nb) * block * 2)


ROW_FUNCS = {
    "per_head_fp8": row_per_head_fp8,
    "asymmetric": row_asymmetric,
    "fp8_ds_mla": row_fp8_ds_mla,
    "gather_fp8": lambda ctx: gather_row(ctx, "gather_fp8", True, False),
    "gather_bf16": lambda ctx: gather_row(ctx, "gather_bf16", False, False),
    "cp_gather": lambda ctx: gather_row(ctx, "cp_gather", False, True),
    "convert_to_fp8": lambda ctx: convert_row(ctx, "convert_to_fp8", True),
    "convert_from_fp8": lambda ctx: convert_row(ctx, "convert_from_fp8", False),
    "swap_blocks": row_swap_blocks,
}


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
    """Empties kvgen.vllm's memos of compiled bundles, keyed by shape rather than by
    description (two ops' gathers of one cache share one), so that each row asks for its own
    description and --precompile files every one of them."""
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
