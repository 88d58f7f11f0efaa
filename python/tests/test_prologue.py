"""The fused prologue through the package, on the host kernels: kvgen.compile
of a description with #kv.prologue<...>, and kvgen.Bundle's append and
fused_append with the prologue's tensors as keyword arguments (kvrt's field
names), against docs/CONTRACT.md's order of operations in float64. Needs
torch and the compiler.

In place (q_out is query): test_bundle_in_place_q[gptj-*] and [norm-only]
pass with the kernels as they are; test_bundle_in_place_q[neox-*] needs the
NeoX kernels' in-place Q (a chunk's partner read before any lane writes
it). With a CUDA device the in-place cases run on the GPU kernels too."""

import re

import pytest

torch = pytest.importorskip("torch")

import kvgen  # noqa: E402
from kvgen import errors  # noqa: E402

pytestmark = pytest.mark.usefixtures("compiler_path")

BS, H, QH, D, NB = 4, 2, 4, 16, 6
MAXPOS = 64
POISON = 0x5A


# The CPU (host kernels) always; a CUDA device (the GPU kernels, through the
# same kvrt launch) where there is one.
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _bundle(rope="neox", rotary_dim=D, q_heads=QH, norm="rms", dtype="f32",
            device="cpu"):
    prologue = {"q_heads": q_heads, "norm": norm, "rope": rope,
                "rotary_dim": rotary_dim if rope else None}
    return kvgen.compile(layout="paged_nhd", block_size=BS, num_kv_heads=H,
                         head_dim=D, dtype=dtype,
                         target="host" if device == "cpu" else "gpu",
                         prologue=prologue)


def _cos_sin(rotary_dim, dtype=torch.float32):
    inv = 1.0 / (10000 ** (torch.arange(0, rotary_dim, 2,
                                        dtype=torch.float64) / rotary_dim))
    freqs = torch.arange(MAXPOS, dtype=torch.float64)[:, None] * inv[None]
    return torch.cat([freqs.cos(), freqs.sin()], -1).to(dtype)


def _reference(x, w, cos_sin, pos, eps, rope, rotary_dim):
    """docs/CONTRACT.md's order in float64: RMSNorm per head, then RoPE of
    the first rotary_dim elements; x [n, heads, D]."""
    x = x.double()
    if w is not None:
        r = 1.0 / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
        x = x * r * w.double()
    if rope:
        cs = cos_sin.double()[pos]
        half = rotary_dim // 2
        c, s = cs[:, None, :half], cs[:, None, half:]
        if rope == "neox":
            a, b = x[..., :half], x[..., half:rotary_dim]
        else:
            a, b = x[..., 0:rotary_dim:2], x[..., 1:rotary_dim:2]
        oa, ob = a * c - b * s, b * c + a * s
        x = x.clone()
        if rope == "neox":
            x[..., :half], x[..., half:rotary_dim] = oa, ob
        else:
            x[..., 0:rotary_dim:2], x[..., 1:rotary_dim:2] = oa, ob
    return x


def _inputs(n, rotary_dim, seed=0):
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(n, (QH + 2 * H) * D, generator=g)
    query = qkv[:, :QH * D].unflatten(1, (QH, D))
    key = qkv[:, QH * D:(QH + H) * D].unflatten(1, (H, D))
    value = qkv[:, (QH + H) * D:].unflatten(1, (H, D))
    kw = 0.5 + torch.rand(D, generator=g)
    qw = 0.5 + torch.rand(D, generator=g)
    pos = torch.randint(0, MAXPOS, (n,), generator=g)
    return qkv, query, key, value, kw, qw, pos, _cos_sin(rotary_dim)


def _poisoned(shape, dtype=torch.float32):
    t = torch.empty(shape, dtype=dtype)
    t.view(torch.uint8).fill_(POISON)
    return t


@pytest.mark.parametrize("rope,rotary_dim", [("neox", D), ("gptj", D),
                                             ("neox", 8), ("gptj", 8)])
def test_bundle_append_applies_the_prologue(rope, rotary_dim):
    b = _bundle(rope, rotary_dim)
    n = 5
    qkv, query, key, value, kw, qw, pos, cs = _inputs(n, rotary_dim)
    slots = torch.tensor([3, -1, 0, 13, 22])
    kc, vc = _poisoned((NB, BS, H, D)), _poisoned((NB, BS, H, D))
    q_out = _poisoned((n, QH, D))
    eps = torch.tensor([1e-6])
    before = qkv.clone()
    b.append(key, value, slots, kc, vc, query=query, q_out=q_out,
             rope_positions=pos, cos_sin_cache=cs, k_norm_weight=kw,
             q_norm_weight=qw, epsilon=eps)
    assert torch.equal(qkv, before), "the prologue wrote its input"
    want_q = _reference(query, qw, cs, pos, 1e-6, rope, rotary_dim)
    want_k = _reference(key, kw, cs, pos, 1e-6, rope, rotary_dim)
    torch.testing.assert_close(q_out.double(), want_q, rtol=2e-6, atol=2e-6)
    for t, slot in enumerate(slots.tolist()):
        if slot < 0:
            continue
        blk, off = divmod(slot, BS)
        torch.testing.assert_close(kc[blk, off].double(), want_k[t],
                                   rtol=2e-6, atol=2e-6)
        assert torch.equal(vc[blk, off], value[t])
    # Nothing else of the caches: every other slot keeps its poison.
    written = {s for s in slots.tolist() if s >= 0}
    for slot in range(NB * BS):
        if slot not in written:
            blk, off = divmod(slot, BS)
            assert kc[blk, off].view(torch.uint8).eq(POISON).all()
            assert vc[blk, off].view(torch.uint8).eq(POISON).all()


def test_bundle_fused_append_takes_the_slot_rules_position():
    b = _bundle("gptj", D)
    n = 3
    qkv, query, key, value, kw, qw, _, cs = _inputs(n, D, seed=3)
    block_table = torch.tensor([[2, 5, -1], [0, 1, 3]], dtype=torch.int32)
    qsl = torch.tensor([0, 2, 3], dtype=torch.int32)
    context = torch.tensor([5, 6], dtype=torch.int32)
    kc, vc = _poisoned((NB, BS, H, D)), _poisoned((NB, BS, H, D))
    q_out = _poisoned((n, QH, D))
    b.fused_append(key, value, block_table, qsl, context, kc, vc,
                   query=query, q_out=q_out, cos_sin_cache=cs,
                   k_norm_weight=kw, q_norm_weight=qw,
                   epsilon=torch.tensor([1e-5]))
    pos = torch.tensor([5, 6, 6])
    torch.testing.assert_close(q_out.double(),
                               _reference(query, qw, cs, pos, 1e-5, "gptj", D),
                               rtol=2e-6, atol=2e-6)
    want_k = _reference(key, kw, cs, pos, 1e-5, "gptj", D)
    for t, slot in enumerate([5 * BS + 1, 5 * BS + 2, 1 * BS + 2]):
        blk, off = divmod(slot, BS)
        torch.testing.assert_close(kc[blk, off].double(), want_k[t],
                                   rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", ["gptj-full", "gptj-partial", "norm-only",
                                  "neox-full", "neox-partial"])
def test_bundle_in_place_q(case, device):
    """q_out is query itself (vLLM rotates Q inside qkv)."""
    rope = None if case == "norm-only" else case.split("-")[0]
    rotary_dim = 8 if case.endswith("partial") else D
    b = _bundle(rope, rotary_dim, device=device)
    n = 7
    qkv, query, key, value, kw, qw, pos, cs = _inputs(n, rotary_dim, seed=5)
    want_q = _reference(query, qw, cs, pos, 1e-6, rope, rotary_dim)
    want_k = _reference(key, kw, cs, pos, 1e-6, rope, rotary_dim)
    qkv, kw, qw, pos, cs = (t.to(device) for t in (qkv, kw, qw, pos, cs))
    query = qkv[:, :QH * D].unflatten(1, (QH, D))
    key = qkv[:, QH * D:(QH + H) * D].unflatten(1, (H, D))
    value = qkv[:, (QH + H) * D:].unflatten(1, (H, D))
    slots = torch.arange(n, device=device)
    kc = _poisoned((NB, BS, H, D)).to(device)
    vc = _poisoned((NB, BS, H, D)).to(device)
    rope_args = ({} if rope is None else
                 dict(rope_positions=pos, cos_sin_cache=cs))
    b.append(key, value, slots, kc, vc, query=query, q_out=query,
             k_norm_weight=kw, q_norm_weight=qw,
             epsilon=torch.tensor([1e-6], device=device), **rope_args)
    torch.testing.assert_close(query.cpu().double(), want_q, rtol=2e-6,
                               atol=2e-6)
    torch.testing.assert_close(kc.cpu().reshape(-1, H, D)[:n].double(),
                               want_k, rtol=2e-6, atol=2e-6)


def test_bundle_refuses_prologue_tensors_by_name():
    b = _bundle("neox", D)
    n = 2
    qkv, query, key, value, kw, qw, pos, cs = _inputs(n, D)
    kc, vc = _poisoned((NB, BS, H, D)), _poisoned((NB, BS, H, D))
    q_out = _poisoned((n, QH, D))
    slots = torch.tensor([0, 1])
    good = dict(query=query, q_out=q_out, rope_positions=pos,
                cos_sin_cache=cs, k_norm_weight=kw, q_norm_weight=qw,
                epsilon=torch.tensor([1e-6]))
    bad = [
        ("epsilon", None, "epsilon: tensor is NULL"),
        ("rope_positions", pos.int(), "rope_positions: dtype is i32"),
        ("cos_sin_cache", cs[:, :8].contiguous(),
         "cos_sin_cache: shape[1] (rotary_dim)"),
        ("k_norm_weight", kw[:8], "k_norm_weight: shape[0] (head_dim)"),
        ("q_out", qkv[:, QH * D // 2:QH * D // 2 + QH * D].unflatten(
            1, (QH, D)), "q_out: overlaps"),
    ]
    for name, tensor, message in bad:
        args = dict(good, **{name: tensor})
        with pytest.raises(errors.InvalidArgumentError,
                           match=re.escape(message)):
            b.append(key, value, slots, kc, vc, **args)
        assert kc.view(torch.uint8).eq(POISON).all(), name
        assert q_out.view(torch.uint8).eq(POISON).all(), name
    # find() tells the descriptions apart by their prologue.
    assert b.find("append") is None
    assert b.find("append", prologue={
        "q_heads": QH, "norm": "rms", "rope": "neox", "rotary_dim": D}) == (
            "kv_append")
    plain = kvgen.compile(layout="paged_nhd", block_size=BS, num_kv_heads=H,
                          head_dim=D, dtype="f32", target="host",
                          kernels=("append",))
    with pytest.raises(errors.InvalidArgumentError,
                       match="query: must be NULL"):
        plain.append(key, value, slots, kc, vc, query=query)
    assert kc.view(torch.uint8).eq(POISON).all()


def test_bundle_paged_kv_append_rotates_at_rope_positions():
    """paged_kv_append (FlashInfer's page table): the slot from
    batch_indices, positions, kv_indptr and kv_indices; RoPE at
    rope_positions, apart from the page position (FlashInfer's pos_ids). A
    padding token (batch index -1) writes no K or V but its Q."""
    b = _bundle("neox", 8)
    n = 5
    qkv, query, key, value, kw, qw, pos, cs = _inputs(n, 8, seed=7)
    batch = torch.tensor([0, 0, 1, -1, 1], dtype=torch.int32)
    page_pos = torch.tensor([0, 5, 2, 0, 3], dtype=torch.int32)
    kv_indices = torch.tensor([4, 1, 3], dtype=torch.int32)
    kv_indptr = torch.tensor([0, 2, 3], dtype=torch.int32)
    kc, vc = _poisoned((NB, BS, H, D)), _poisoned((NB, BS, H, D))
    q_out = _poisoned((n, QH, D))
    before = qkv.clone()
    b.paged_kv_append(key, value, batch, page_pos, kv_indices, kv_indptr, kc,
                      vc, query=query, q_out=q_out, rope_positions=pos,
                      cos_sin_cache=cs, k_norm_weight=kw, q_norm_weight=qw,
                      epsilon=torch.tensor([1e-6]))
    assert torch.equal(qkv, before), "the prologue wrote its input"
    torch.testing.assert_close(
        q_out.double(), _reference(query, qw, cs, pos, 1e-6, "neox", 8),
        rtol=2e-6, atol=2e-6)
    want_k = _reference(key, kw, cs, pos, 1e-6, "neox", 8)
    slots = {0: 4 * BS + 0, 1: 1 * BS + 1, 2: 3 * BS + 2, 4: 3 * BS + 3}
    for t, slot in slots.items():
        blk, off = divmod(slot, BS)
        torch.testing.assert_close(kc[blk, off].double(), want_k[t],
                                   rtol=2e-6, atol=2e-6)
        assert torch.equal(vc[blk, off], value[t])
    for slot in set(range(NB * BS)) - set(slots.values()):
        blk, off = divmod(slot, BS)
        assert kc[blk, off].view(torch.uint8).eq(POISON).all()
        assert vc[blk, off].view(torch.uint8).eq(POISON).all()
    # rope_positions is int64: FlashInfer's int32 positions are refused by
    # name, nothing written.
    kc.view(torch.uint8).fill_(POISON)
    with pytest.raises(errors.InvalidArgumentError,
                       match=re.escape("rope_positions: dtype is i32")):
        b.paged_kv_append(key, value, batch, page_pos, kv_indices, kv_indptr,
                          kc, vc, query=query, q_out=q_out,
                          rope_positions=pos.int(), cos_sin_cache=cs,
                          k_norm_weight=kw, q_norm_weight=qw,
                          epsilon=torch.tensor([1e-6]))
    assert kc.view(torch.uint8).eq(POISON).all()


def test_bundle_paged_kv_append_fp8_q_and_f32_cos_sin():
    """FlashInfer's fused op's prologue: Q written as fp8 e4m3 (Q / q_scale,
    q_quant), the cos/sin cache in f32 under a bf16 source (cos_sin), an fp8
    cache with a static scale. Each fp8 value is within half an fp8 step
    (2^-4 relative, e4m3's 3 fraction bits) of the float64 reference of the
    same bf16 inputs, plus the bf16-free fp32 work (far below it)."""
    prologue = {"q_heads": QH, "rope": "neox", "rotary_dim": 8,
                "q_quant": "fp8_e4m3", "cos_sin": "f32"}
    b = kvgen.compile(layout="paged_nhd", block_size=BS, num_kv_heads=H,
                      head_dim=D, dtype="bf16", quant="fp8_e4m3",
                      target="host", prologue=prologue)
    n = 4
    qkv, query, key, value, _, _, pos, cs = _inputs(n, 8, seed=11)
    qkv = qkv.bfloat16()
    query = qkv[:, :QH * D].unflatten(1, (QH, D))
    key = qkv[:, QH * D:(QH + H) * D].unflatten(1, (H, D))
    value = qkv[:, (QH + H) * D:].unflatten(1, (H, D))
    batch = torch.tensor([0, 0, 1, 1], dtype=torch.int32)
    page_pos = torch.tensor([0, 1, 0, 5], dtype=torch.int32)
    kv_indices = torch.tensor([2, 0, 5], dtype=torch.int32)
    kv_indptr = torch.tensor([0, 1, 3], dtype=torch.int32)
    kc = _poisoned((NB, BS, H, D), torch.uint8)
    vc = _poisoned((NB, BS, H, D), torch.uint8)
    q_out = _poisoned((n, QH, D), torch.float8_e4m3fn)
    k_scale, v_scale, q_scale = 0.02, 0.03, 0.015
    b.paged_kv_append(key, value, batch, page_pos, kv_indices, kv_indptr,
                      kc, vc, key_scale=torch.tensor([k_scale]),
                      value_scale=torch.tensor([v_scale]), query=query,
                      q_out=q_out, rope_positions=pos, cos_sin_cache=cs,
                      q_scale=torch.tensor([q_scale]))
    want_q = _reference(query, None, cs, pos, 0, "neox", 8)
    got_q = q_out.double() * q_scale
    torch.testing.assert_close(got_q, want_q, rtol=2 ** -4 + 1e-6,
                               atol=2 ** -9 * q_scale)
    want_k = _reference(key, None, cs, pos, 0, "neox", 8)
    fp8 = torch.float8_e4m3fn
    for t, slot in {0: 2 * BS, 1: 2 * BS + 1, 2: 0, 3: 5 * BS + 1}.items():
        blk, off = divmod(slot, BS)
        torch.testing.assert_close(
            kc[blk, off].view(fp8).double() * k_scale, want_k[t],
            rtol=2 ** -4 + 1e-6, atol=2 ** -9 * k_scale)
        torch.testing.assert_close(
            vc[blk, off].view(fp8).double() * v_scale, value[t].double(),
            rtol=2 ** -4 + 1e-6, atol=2 ** -9 * v_scale)
    # The cos/sin cache in the source dtype, or Q's scale left out: refused
    # by name, nothing written.
    kc.fill_(POISON)
    for bad, message in [(dict(cos_sin_cache=cs.bfloat16()), "cos_sin_cache"),
                         (dict(q_scale=None), "q_scale: tensor is NULL")]:
        args = dict(key_scale=torch.tensor([k_scale]),
                    value_scale=torch.tensor([v_scale]), query=query,
                    q_out=q_out, rope_positions=pos, cos_sin_cache=cs,
                    q_scale=torch.tensor([q_scale]))
        args.update(bad)
        with pytest.raises(errors.InvalidArgumentError,
                           match=re.escape(message)):
            b.paged_kv_append(key, value, batch, page_pos, kv_indices,
                              kv_indptr, kc, vc, **args)
        assert kc.eq(POISON).all()
