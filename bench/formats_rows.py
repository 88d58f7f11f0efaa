"""The new-formats benchmark's rows: each format or op of kvgen.vllm beside
vLLM's kernel for it (formats_gpu.py runs them)."""

import torch

import kvgen.vllm as kv
from dropins_gpu import device_us, eager_us
from formats_common import (BS, D, DS_ENTRY, ENTRY, H, MLA_BS, RANK, ROPE,
                            Rotating, cold_us, compare, dq_fp8, peer_op, q_fp8,
                            rand, rand_bytes, record, ref_ds_mla, ref_gather,
                            scatter, slots_for, sync)


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
