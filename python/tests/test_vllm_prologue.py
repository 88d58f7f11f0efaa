"""kvgen.vllm.fused_qk_norm_rope_and_reshape_and_cache_flash on the host
kernels, against vLLM's unfused sequence of torch ops (fused_qk_norm_rope as
RMSNorm.forward_native and RotaryEmbedding.forward_native, then
reshape_and_cache_flash's index assignment) within docs/CONTRACT.md's
per-element bound ("Against the unfused sequence"); V byte for byte, padding
and every slot not written left as they were, and each bad argument refused
by name with nothing written. Needs torch and the compiler.

The drop-in rotates Q in place: its NeoX cases
(test_drop_in_within_the_contract_bound[*-True-*]) need the NeoX kernels'
in-place Q; the GPT-J cases pass with the kernels as they are. With a CUDA
device the bound and slot tests run on the GPU kernels too."""

import pytest

torch = pytest.importorskip("torch")

import kvgen.vllm as kv  # noqa: E402
from kvgen import errors  # noqa: E402

from test_prologue import (BS, D, H, MAXPOS, NB, POISON, QH,  # noqa: E402
                           _cos_sin, _poisoned)

pytestmark = pytest.mark.usefixtures("compiler_path")


def _unfused(qkv, hq, hk, d, eps, qw, kw, cs, is_neox, pos, kc, vc, slots,
             kv_cache_dtype, k_scale, v_scale):
    """vLLM's sequence as its torch ops run it (RMSNorm.forward_native,
    RotaryEmbedding.forward_native with the cache in qkv's dtype, then
    reshape_and_cache_flash's index assignment): every op rounds to qkv's
    dtype."""
    dtype = qkv.dtype

    def norm(x, w):
        xf = x.float()
        var = xf.pow(2).mean(-1, keepdim=True)
        return (xf * torch.rsqrt(var + eps)).to(dtype) * w

    def rope(x):
        rd = cs.shape[1]
        c, s = cs[pos].chunk(2, -1)
        c, s = c[:, None].to(dtype), s[:, None].to(dtype)
        r = x[..., :rd]
        if is_neox:
            x1, x2 = r.chunk(2, -1)
        else:
            x1, x2 = r[..., ::2], r[..., 1::2]
        o1 = x1 * c - x2 * s
        o2 = x2 * c + x1 * s
        out = (torch.cat((o1, o2), -1) if is_neox else
               torch.stack((o1, o2), -1).flatten(-2))
        return torch.cat((out, x[..., rd:]), -1)

    n = qkv.shape[0]
    q = qkv[:, :hq * d].unflatten(1, (hq, d))
    k = qkv[:, hq * d:(hq + hk) * d].unflatten(1, (hk, d))
    v = qkv[:, (hq + hk) * d:].unflatten(1, (hk, d))
    q2, k2 = rope(norm(q, qw)), rope(norm(k, kw))
    for t in range(n):
        slot = int(slots[t])
        if slot < 0:
            continue
        blk, off = divmod(slot, kc.shape[1])
        kc[blk, off] = k2[t]
        vc[blk, off] = v[t]
    return q2, k2


def _bound(x, w, cs, pos, eps, is_neox, dtype):
    """docs/CONTRACT.md's B per element, with norm: the exact value E and
    the bound of |fused - unfused| on a 16-bit output."""
    p = 8 if dtype == torch.bfloat16 else 11
    u, eta = 2.0 ** -p, 2.0 ** (-134 if dtype == torch.bfloat16 else -25)
    d = x.shape[-1]
    ut = u + 2.0 ** -23
    rho = (d / 2 + 16) * 2.0 ** -24
    alpha = (1 + rho) * (1 + ut) ** 2 - 1
    beta = (1 + alpha) * (1 + ut) - 1
    xd = x.double()
    y = xd / torch.sqrt((xd * xd).mean(-1, keepdim=True) + eps) * w.double()
    rd = cs.shape[1]
    half = rd // 2
    csd = cs.double()[pos]
    c, s = csd[:, None, :half], csd[:, None, half:]
    idx_a = (torch.arange(half) if is_neox else torch.arange(0, rd, 2))
    idx_b = idx_a + (half if is_neox else 1)
    ya, yb = y[..., idx_a], y[..., idx_b]
    E = y.clone()
    E[..., idx_a] = ya * c - yb * s
    E[..., idx_b] = yb * c + ya * s
    S = y.abs().clone()
    S[..., idx_a] = (ya * c).abs() + (yb * s).abs()
    S[..., idx_b] = (yb * c).abs() + (ya * s).abs()
    rotated = torch.zeros(d, dtype=torch.bool)
    rotated[:rd] = True
    U = torch.where(rotated, beta * (1 + ut) * S + ut * E.abs(), alpha * S)
    F = torch.where(rotated, (rho + 3 * 2.0 ** -24) * S, rho * S)
    A = (8 + 4 * w.double().abs().max()) * eta
    return E, U + F + u * (E.abs() + F) + A


def _drop_in_case(is_neox, rotary_dim, dtype=torch.bfloat16, n=6, seed=11):
    g = torch.Generator().manual_seed(seed)
    qkv = (torch.randn(n, (QH + 2 * H) * D, generator=g) * 2).to(dtype)
    qw = (0.5 + torch.rand(D, generator=g)).to(dtype)
    kw = (0.5 + torch.rand(D, generator=g)).to(dtype)
    cs = _cos_sin(rotary_dim, dtype)
    pos = torch.randint(0, MAXPOS, (n,), generator=g)
    slots = torch.tensor([9, -1, 2, 17, -1, 0][:n])
    return qkv, qw, kw, cs, pos, slots


# The CPU (host kernels) always; a CUDA device (the GPU kernels, through the
# same kvrt launch) where there is one.
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _fused_on(device, qkv, qw, kw, cs, pos, slots, kc, vc, is_neox, eps):
    """The drop-in on `device`; qkv, the caches as they end up (on the
    CPU)."""
    d = [t.to(device) for t in (qkv, qw, kw, cs, pos, slots, kc, vc)]
    kv.fused_qk_norm_rope_and_reshape_and_cache_flash(
        d[0], QH, H, H, D, eps, d[1], d[2], d[3], is_neox, d[4], d[6], d[7],
        d[5], "auto", None, None)
    return d[0].cpu(), d[6].cpu(), d[7].cpu()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("is_neox", [False, True])
def test_drop_in_writes_v_and_the_slots_only(is_neox, device):
    """V's bytes as the unfused sequence stores them, qkv's K and V
    sections unchanged, and padding slots (-1) and every other slot keep
    their poison."""
    dtype = torch.bfloat16
    qkv, qw, kw, cs, pos, slots = _drop_in_case(is_neox, D, dtype)
    eps = 1e-6
    kc, vc = _poisoned((NB, BS, H, D), dtype), _poisoned((NB, BS, H, D), dtype)
    want_kc, want_vc = kc.clone(), vc.clone()
    _unfused(qkv, QH, H, D, eps, qw, kw, cs, is_neox, pos, want_kc, want_vc,
             slots, "auto", None, None)
    kv_before = qkv[:, QH * D:].clone()
    qkv, kc, vc = _fused_on(device, qkv, qw, kw, cs, pos, slots, kc, vc,
                            is_neox, eps)
    assert torch.equal(qkv[:, QH * D:], kv_before)
    assert torch.equal(vc.view(torch.uint8), want_vc.view(torch.uint8))
    for slot in slots.tolist():
        if slot >= 0:  # K is compared within the bound elsewhere
            blk, off = divmod(slot, BS)
            want_kc[blk, off] = kc[blk, off]
    assert torch.equal(kc.view(torch.uint8), want_kc.view(torch.uint8))


def _check_within_bound(fused, unfused, x, w, cs, pos, eps, is_neox, dtype):
    E, B = _bound(x, w, cs, pos, eps, is_neox, dtype)
    diff = (fused.double() - unfused.double()).abs()
    assert (diff <= B).all(), (diff / B).max()
    # The bound is not vacuous: the unfused value is near E too.
    assert ((unfused.double() - E).abs() <= 2 * B).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("is_neox", [False, True])
@pytest.mark.parametrize("rotary_dim", [D, 8])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_drop_in_within_the_contract_bound(is_neox, rotary_dim, dtype,
                                           device):
    qkv, qw, kw, cs, pos, slots = _drop_in_case(is_neox, rotary_dim, dtype)
    eps = 1e-6
    x_q = qkv[:, :QH * D].unflatten(1, (QH, D)).clone()
    x_k = qkv[:, QH * D:(QH + H) * D].unflatten(1, (H, D)).clone()
    kc, vc = _poisoned((NB, BS, H, D), dtype), _poisoned((NB, BS, H, D), dtype)
    want_kc, want_vc = kc.clone(), vc.clone()
    q2, k2 = _unfused(qkv, QH, H, D, eps, qw, kw, cs, is_neox, pos, want_kc,
                      want_vc, slots, "auto", None, None)
    qkv, kc, vc = _fused_on(device, qkv, qw, kw, cs, pos, slots, kc, vc,
                            is_neox, eps)
    q = qkv[:, :QH * D].unflatten(1, (QH, D))
    _check_within_bound(q, q2, x_q, qw, cs, pos, eps, is_neox, dtype)
    for t, slot in enumerate(slots.tolist()):
        if slot < 0:
            continue
        blk, off = divmod(slot, BS)
        _check_within_bound(kc[blk, off][None], k2[t][None], x_k[t][None],
                            kw, cs, pos[t:t + 1], eps, is_neox, dtype)


def test_drop_in_fp8_cache_writes_only_the_slots():
    dtype = torch.bfloat16
    qkv, qw, kw, cs, pos, slots = _drop_in_case(False, D, dtype)
    kc = _poisoned((NB, BS, H, D), torch.uint8)
    vc = _poisoned((NB, BS, H, D), torch.uint8)
    ks, vs = torch.tensor([0.5]), torch.tensor([0.25])
    kv.fused_qk_norm_rope_and_reshape_and_cache_flash(
        qkv, QH, H, H, D, 1e-6, qw, kw, cs, False, pos, kc, vc, slots,
        "fp8", ks, vs)
    written = {s for s in slots.tolist() if s >= 0}
    v = qkv[:, (QH + H) * D:].unflatten(1, (H, D))
    for slot in range(NB * BS):
        blk, off = divmod(slot, BS)
        if slot not in written:
            assert kc[blk, off].eq(POISON).all()
            assert vc[blk, off].eq(POISON).all()
    for t, slot in enumerate(slots.tolist()):
        if slot >= 0:
            blk, off = divmod(slot, BS)
            want = (v[t].float() / 0.25).to(torch.float8_e4m3fn)
            assert torch.equal(vc[blk, off], want.view(torch.uint8))


def _bad_calls():
    def with_(**change):
        return change
    return [
        ("q_weight", with_(q_weight=torch.ones(D // 2, dtype=torch.bfloat16)),
         "q_weight"),
        ("k_weight", with_(k_weight=torch.ones(D, dtype=torch.float32)),
         "k_weight"),
        ("cos_sin_cache", with_(cos_sin_cache=_cos_sin(D, torch.float32)),
         "cos_sin_cache"),
        ("position_ids", with_(position_ids=torch.zeros(6, dtype=torch.int32)),
         "position_ids"),
        ("slot_mapping", with_(slot_mapping=torch.zeros(5, dtype=torch.int64)),
         "slot_mapping"),
        ("cos_sin_cache_strided",
         with_(cos_sin_cache=_cos_sin(2 * D, torch.bfloat16)[:, :D]),
         "cos_sin_cache: strides"),
        ("num_heads_v", with_(num_heads_v=H + 1), "num_heads_v"),
        ("qkv_dtype", with_(qkv=torch.zeros((6, (QH + 2 * H) * D),
                                            dtype=torch.float64)), "qkv"),
        ("num_heads_q", with_(num_heads_q=QH + 2), "qkv: shape"),
        ("num_heads_q_multiple", with_(num_heads_q=QH + 1),
         "not a multiple of num_heads_k"),
        ("eps", with_(eps=float("nan")), "eps"),
        ("is_neox", with_(is_neox=1), "is_neox"),
        ("key_cache", with_(key_cache=_poisoned((NB, BS, H, D // 2),
                                                 torch.bfloat16)),
         "key_cache"),
        ("kv_cache_dtype", with_(kv_cache_dtype="fp9"), "kv_cache_dtype"),
        ("k_scale", with_(kv_cache_dtype="fp8", k_scale=None), "k_scale"),
    ]


@pytest.mark.parametrize("name,change,message", _bad_calls(),
                         ids=[c[0] for c in _bad_calls()])
def test_drop_in_refuses_bad_input_writing_nothing(name, change, message):
    dtype = torch.bfloat16
    qkv, qw, kw, cs, pos, slots = _drop_in_case(False, D, dtype)
    kc, vc = _poisoned((NB, BS, H, D), dtype), _poisoned((NB, BS, H, D), dtype)
    args = dict(qkv=qkv, num_heads_q=QH, num_heads_k=H, num_heads_v=H,
                head_dim=D, eps=1e-6, q_weight=qw, k_weight=kw,
                cos_sin_cache=cs, is_neox=False, position_ids=pos,
                key_cache=kc, value_cache=vc, slot_mapping=slots,
                kv_cache_dtype="auto", k_scale=None, v_scale=None)
    if change.get("kv_cache_dtype") == "fp8":
        kc = _poisoned((NB, BS, H, D), torch.uint8)
        vc = _poisoned((NB, BS, H, D), torch.uint8)
        args.update(key_cache=kc, value_cache=vc, v_scale=torch.tensor([1.]))
    args.update(change)
    before = qkv.clone()
    with pytest.raises(errors.InvalidArgumentError, match=message):
        kv.fused_qk_norm_rope_and_reshape_and_cache_flash(**args)
    assert torch.equal(qkv, before)
    for cache in (args["key_cache"], args["value_cache"]):
        assert cache.view(torch.uint8).eq(POISON).all()


def test_drop_in_hnd_cache_holds_what_nhd_holds():
    """The layout comes from the cache's strides, as reshape_and_cache_flash
    reads it: an HND cache (a permuted view) ends up with the same values."""
    dtype = torch.bfloat16
    caches = {}
    for hnd in (False, True):
        qkv, qw, kw, cs, pos, slots = _drop_in_case(False, D, dtype)
        if hnd:
            kc = _poisoned((NB, H, BS, D), dtype).permute(0, 2, 1, 3)
            vc = _poisoned((NB, H, BS, D), dtype).permute(0, 2, 1, 3)
        else:
            kc = _poisoned((NB, BS, H, D), dtype)
            vc = _poisoned((NB, BS, H, D), dtype)
        kv.fused_qk_norm_rope_and_reshape_and_cache_flash(
            qkv, QH, H, H, D, 1e-6, qw, kw, cs, False, pos, kc, vc, slots,
            "auto", None, None)
        caches[hnd] = (qkv, kc.contiguous(), vc.contiguous())
    for a, b in zip(caches[False], caches[True]):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))
