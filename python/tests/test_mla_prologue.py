"""The MLA appends' RoPE prologue through kvrt and the package, on the host
kernels: kvgen.compile of a latent cache with a prologue, kvgen.Bundle's
mla_append and mla_fused_append with the prologue's tensors as keyword
arguments (kvrt's field names: query, q_out, k_pe_out, rope_positions,
cos_sin_cache), against docs/CONTRACT.md ("The MLA appends' prologue") in
f32, where the kernel's fp32 arithmetic is the reference's bit for bit; and
kvrt's refusals, each naming the tensor, with nothing written. Needs torch
and the compiler."""

import pytest

torch = pytest.importorskip("torch")

import kvgen  # noqa: E402
from kvgen import errors  # noqa: E402

pytestmark = pytest.mark.usefixtures("compiler_path")

BS, NB, R, P, QH, MAXPOS = 4, 6, 32, 16, 3, 40
POISON = 0x5A
# The CPU (host kernels) always; a CUDA device (the GPU kernels, through the
# same kvrt launch) where there is one.
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _bundle(rope="neox", q_heads=QH, kernels=("mla_append",), device="cpu"):
    return kvgen.compile(layout="paged_nhd", block_size=BS, num_kv_heads=1,
                         head_dim=R + P, dtype="f32", kv_lora_rank=R,
                         rope_dim=P, kernels=kernels,
                         target="host" if device == "cpu" else "gpu",
                         prologue={"q_heads": q_heads, "rope": rope,
                                   "rotary_dim": P})


def _cos_sin():
    inv = 1.0 / (10000 ** (torch.arange(0, P, 2, dtype=torch.float64) / P))
    freqs = torch.arange(MAXPOS, dtype=torch.float64)[:, None] * inv[None]
    return torch.cat([freqs.cos(), freqs.sin()], -1).float()


def _rotate(x, cs, pos, rope):
    """docs/CONTRACT.md's rotation in f32, each product rounded: x [n, ...,
    P], rotated at pos [n]."""
    half = P // 2
    c, s = cs[pos][:, :half], cs[pos][:, half:]
    while c.dim() < x.dim():
        c, s = c.unsqueeze(1), s.unsqueeze(1)
    if rope == "neox":
        a, b = x[..., :half], x[..., half:]
    else:
        a, b = x[..., 0::2], x[..., 1::2]
    oa, ob = a * c - b * s, b * c + a * s
    out = x.clone()
    if rope == "neox":
        out[..., :half], out[..., half:] = oa, ob
    else:
        out[..., 0::2], out[..., 1::2] = oa, ob
    return out


def _inputs(n, seed=0):
    """vLLM's buffers: q [n, QH, nope + P] (q_pe its last P of each head),
    kv [n, R + P] (kv_c then k_pe)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n, QH, 8 + P, generator=g)
    kv = torch.randn(n, R + P, generator=g)
    pos = torch.randint(0, MAXPOS, (n,), generator=g)
    return q, q[..., 8:], kv, kv[:, :R], kv[:, R:], pos


def _poisoned(shape):
    t = torch.empty(shape)
    t.view(torch.uint8).fill_(POISON)
    return t


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rope", ["neox", "gptj"])
@pytest.mark.parametrize("in_place", [False, True])
def test_mla_append_rotates_k_pe_and_q_pe(rope, in_place, device):
    b = _bundle(rope, device=device)
    n = 6
    q, q_pe, kv, kv_c, k_pe, pos = _inputs(n)
    cs = _cos_sin()
    slots = torch.tensor([3, -1, 0, 13, 22, NB * BS + 1])
    pos[3] = MAXPOS  # outside the cos/sin cache: nothing of token 3
    cache = _poisoned((NB, BS, R + P))
    q0, kv0 = q.clone(), kv.clone()
    if in_place:
        q_out, k_pe_out = q_pe, k_pe
    else:
        q_out, k_pe_out = _poisoned((n, QH, P)), _poisoned((n, P))
    out_q0, out_k0 = q_out.clone(), k_pe_out.clone()
    if device == "cpu":
        b.mla_append(kv_c, k_pe, slots, cache, query=q_pe, q_out=q_out,
                     k_pe_out=k_pe_out, rope_positions=pos, cos_sin_cache=cs)
    else:
        # The same views of device copies, copied back.
        dq, dkv, dcache = q.to(device), kv.to(device), cache.to(device)
        dq_out, dk_out = ((dq[..., 8:], dkv[:, R:]) if in_place else
                          (q_out.to(device), k_pe_out.to(device)))
        b.mla_append(dkv[:, :R], dkv[:, R:], slots.to(device), dcache,
                     query=dq[..., 8:], q_out=dq_out, k_pe_out=dk_out,
                     rope_positions=pos.to(device),
                     cos_sin_cache=cs.to(device))
        q.copy_(dq.cpu())
        kv.copy_(dkv.cpu())
        cache.copy_(dcache.cpu())
        if not in_place:
            q_out.copy_(dq_out.cpu())
            k_pe_out.copy_(dk_out.cpu())
    safe = pos.clamp(0, MAXPOS - 1)
    want_q = _rotate(q0[..., 8:], cs, safe, rope)
    want_k = _rotate(kv0[:, R:], cs, safe, rope)
    written = [t for t in range(n)
               if 0 <= slots[t] < NB * BS and 0 <= pos[t] < MAXPOS]
    assert written == [0, 2, 4]
    for t in range(n):
        if t in written:
            assert torch.equal(q_out[t], want_q[t])
            assert torch.equal(k_pe_out[t], want_k[t])
            blk, off = divmod(int(slots[t]), BS)
            assert torch.equal(cache[blk, off], torch.cat((kv0[t, :R],
                                                           want_k[t])))
        else:
            # vLLM's kernel: a padding token is left alone, q_pe and k_pe
            # included; kvgen also for a slot past the cache and a position
            # outside the cos/sin cache.
            assert torch.equal(q_out[t], out_q0[t])
            assert torch.equal(k_pe_out[t], out_k0[t])
    # The rest of each buffer as it was: q's nope part, kv_c.
    assert torch.equal(q[..., :8], q0[..., :8])
    assert torch.equal(kv[:, :R], kv0[:, :R])
    if not in_place:
        assert torch.equal(q, q0) and torch.equal(kv, kv0)
    used = {int(slots[t]) for t in written}
    for slot in range(NB * BS):
        if slot not in used:
            blk, off = divmod(slot, BS)
            assert cache[blk, off].view(torch.uint8).eq(POISON).all()


def test_mla_fused_append_takes_the_slot_rules_position():
    b = _bundle("gptj", kernels=("mla_fused_append",))
    n = 3
    q, q_pe, kv, kv_c, k_pe, _ = _inputs(n, seed=2)
    cs = _cos_sin()
    block_table = torch.tensor([[2, 5, -1], [0, 1, 3]], dtype=torch.int32)
    qsl = torch.tensor([0, 2, 3], dtype=torch.int32)
    context = torch.tensor([5, 6], dtype=torch.int32)
    cache = _poisoned((NB, BS, R + P))
    kv0 = kv.clone()
    b.mla_fused_append(kv_c, k_pe, block_table, qsl, context, cache,
                       query=q_pe, q_out=q_pe, k_pe_out=k_pe,
                       cos_sin_cache=cs)
    pos = torch.tensor([5, 6, 6])
    want_k = _rotate(kv0[:, R:], cs, pos, "gptj")
    assert torch.equal(k_pe, want_k)
    slots = [5 * BS + 1, 5 * BS + 2, 1 * BS + 2]
    for t, slot in enumerate(slots):
        blk, off = divmod(slot, BS)
        assert torch.equal(cache[blk, off], torch.cat((kv0[t, :R],
                                                       want_k[t])))


def _call(b, **changes):
    n = 4
    q, q_pe, kv, kv_c, k_pe, pos = _inputs(n, seed=5)
    args = dict(kv_c=kv_c, k_pe=k_pe, slot_mapping=torch.tensor([0, 1, 2, 3]),
                key_cache=_poisoned((NB, BS, R + P)), query=q_pe, q_out=q_pe,
                k_pe_out=k_pe, rope_positions=pos, cos_sin_cache=_cos_sin())
    args.update(changes)
    before = {k: v.clone() for k, v in args.items() if v is not None}
    with pytest.raises(errors.KvgenError) as e:
        b.mla_append(args.pop("kv_c"), args.pop("k_pe"),
                     args.pop("slot_mapping"), args.pop("key_cache"), **args)
    return str(e.value), before, args


@pytest.mark.parametrize("change,message", [
    ("no_k_pe_out", "k_pe_out: tensor is NULL but the kernel 'kv_mla_append' "
                    "has a fused prologue with rope, which takes it"),
    ("no_cos_sin", "cos_sin_cache: tensor is NULL but the kernel"),
    ("shifted_k_pe_out", "k_pe_out: overlaps k_pe but is not k_pe itself"),
    ("q_head_dim", "query: shape[2] (rope_dim) is 18 but the kernel "
                   "'kv_mla_append' was generated for 16"),
    ("k_pe_out_rows", "k_pe_out: shape[0] (num_tokens) is 5 but kv_c has 4"),
])
def test_bad_prologue_tensors_are_refused_by_name(change, message):
    b = _bundle("neox")
    n = 4
    kv = torch.randn(n, R + P + 1)
    changes = {
        "no_k_pe_out": dict(k_pe_out=None),
        "no_cos_sin": dict(cos_sin_cache=None),
        "shifted_k_pe_out": dict(k_pe=kv[:, R:R + P],
                                 k_pe_out=kv[:, R + 1:R + 1 + P]),
        "q_head_dim": dict(query=torch.randn(n, QH, P + 2),
                           q_out=torch.randn(n, QH, P + 2)),
        "k_pe_out_rows": dict(k_pe_out=torch.randn(n + 1, P)),
    }[change]
    text, before, _ = _call(b, **changes)
    assert message in text, text
    assert before["key_cache"].view(torch.uint8).eq(POISON).all()


def test_plain_mla_kernel_refuses_prologue_tensors():
    b = kvgen.compile(layout="paged_nhd", block_size=BS, num_kv_heads=1,
                      head_dim=R + P, dtype="f32", kv_lora_rank=R, rope_dim=P,
                      kernels=("mla_append",), target="host")
    n = 2
    _, q_pe, _, kv_c, k_pe, pos = _inputs(n)
    with pytest.raises(errors.KvgenError, match="k_pe_out: must be NULL"):
        b.mla_append(kv_c, k_pe, torch.tensor([0, 1]),
                     _poisoned((NB, BS, R + P)), k_pe_out=k_pe)


def test_checked_mode_reads_the_positions_of_tokens_with_a_slot():
    """Checked mode refuses a position outside the cos/sin cache, named; a
    padding token's position is not read (the kernel writes nothing of that
    token, as vLLM's), so it may be anything."""
    b = _bundle("neox")
    b.set_checked(True)
    n = 4
    q, q_pe, kv, kv_c, k_pe, pos = _inputs(n, seed=9)
    cs = _cos_sin()
    cache = _poisoned((NB, BS, R + P))
    pos[1] = -7
    b.mla_append(kv_c, k_pe, torch.tensor([0, -1, 2, 3]), cache, query=q_pe,
                 q_out=q_pe, k_pe_out=k_pe, rope_positions=pos,
                 cos_sin_cache=cs)
    pos[2] = MAXPOS
    kv0 = kv.clone()
    with pytest.raises(errors.KvgenError,
                       match=r"rope_positions\[2\] = 40 is outside the "
                             r"cos/sin cache.*checked mode"):
        b.mla_append(kv_c, k_pe, torch.tensor([4, -1, 5, 6]), cache,
                     query=q_pe, q_out=q_pe, k_pe_out=k_pe,
                     rope_positions=pos, cos_sin_cache=cs)
    assert torch.equal(kv, kv0)
