"""kvgen.vllm.concat_and_cache_mla_rope_fused on the host kernels, against an
independent torch model of vLLM 0.34's kernel (csrc/cache_kernels_fused.cu:
per token with slot >= 0, q_pe and k_pe rotated in place with each product,
difference and sum a bf16/fp16 operation, then [kv_c, rotated k_pe] stored,
fp8 as x / scale) within docs/CONTRACT.md's per-element bound ("Against the
unfused sequence", RoPE without norm); the entry is kvgen's exactly where
the contract fixes it (kv_c, and the rotated k_pe as k_pe_out holds it);
padding, rows past num_tokens and every other slot left as they were; each
bad argument refused by name with nothing written. Needs torch and the
compiler. With a CUDA device the bound test runs on the GPU kernels too."""

import pytest

torch = pytest.importorskip("torch")

import kvgen.vllm as kv  # noqa: E402
from kvgen import errors  # noqa: E402

pytestmark = pytest.mark.usefixtures("compiler_path")

BS, NB, MAXPOS, NOPE = 16, 4, 64, 16
POISON = 0x5A
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
# Unit roundoff u and half the smallest subnormal, per source dtype.
_U = {torch.bfloat16: (2.0 ** -8, 2.0 ** -134),
      torch.float16: (2.0 ** -11, 2.0 ** -25)}


def _cos_sin(rope_dim, dtype):
    inv = 1.0 / (10000 ** (torch.arange(0, rope_dim, 2,
                                        dtype=torch.float64) / rope_dim))
    freqs = torch.arange(MAXPOS, dtype=torch.float64)[:, None] * inv[None]
    return torch.cat([freqs.cos(), freqs.sin()], -1).to(dtype)


def _pairs(x, is_neox):
    half = x.shape[-1] // 2
    return ((x[..., :half], x[..., half:]) if is_neox else
            (x[..., 0::2], x[..., 1::2]))


def _join(a, b, is_neox):
    return (torch.cat((a, b), -1) if is_neox else
            torch.stack((a, b), -1).flatten(-2))


def _vllm_rotate(x, cs, pos, is_neox):
    """vLLM's kernel: qk_t arithmetic, each op rounded to x's dtype."""
    half = x.shape[-1] // 2
    c, s = cs[pos][:, :half].to(x.dtype), cs[pos][:, half:].to(x.dtype)
    while c.dim() < x.dim():
        c, s = c.unsqueeze(1), s.unsqueeze(1)
    a, b = _pairs(x, is_neox)
    return _join(a * c - b * s, b * c + a * s, is_neox)


def _exact(x, cs, pos, is_neox):
    """The exact rotation (float64) and the contract's S per element."""
    half = x.shape[-1] // 2
    c, s = cs[pos][:, :half].double(), cs[pos][:, half:].double()
    while c.dim() < x.dim():
        c, s = c.unsqueeze(1), s.unsqueeze(1)
    a, b = _pairs(x.double(), is_neox)
    e = _join(a * c - b * s, b * c + a * s, is_neox)
    big = _join((a * c).abs() + (b * s).abs(), (b * c).abs() + (a * s).abs(),
                is_neox)
    return e, big


def _bound(e, big, dtype):
    """B = U + F + u (|E| + F) + A with alpha = 0 (no norm):
    docs/CONTRACT.md, "Against the unfused sequence"."""
    u, eta = _U[dtype]
    ut = u + 2.0 ** -23
    unfused = ut * (1 + ut) * big + ut * e.abs()
    fused = 3 * 2.0 ** -24 * big
    return unfused + fused + u * (e.abs() + fused) + 8 * eta


def _inputs(n, heads, rank, rope_dim, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n, heads, NOPE + rope_dim, generator=g).to(dtype)
    kvbuf = torch.randn(n, rank + rope_dim, generator=g).to(dtype)
    pos = torch.randint(0, MAXPOS, (n,), generator=g)
    return q.to(device), kvbuf.to(device), pos.to(device)


def _poisoned(shape, dtype, device):
    t = torch.empty(shape, dtype=dtype, device=device)
    t.view(torch.uint8).fill_(POISON)
    return t


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("kv_cache_dtype", ["auto", "fp8", "fp8_e5m2"])
def test_drop_in_within_the_contract_bound(device, dtype, is_neox,
                                           kv_cache_dtype):
    fp8 = kv_cache_dtype != "auto"
    heads, rank, rope_dim = 4, 64, 32
    padded, n = 9, 7  # rows 7 and 8: CUDA-graph padding past slot_mapping
    q, kvbuf, pos = _inputs(padded, heads, rank, rope_dim, dtype, device)
    q_pe, kv_c, k_pe = q[..., NOPE:], kvbuf[:, :rank], kvbuf[:, rank:]
    cs = _cos_sin(rope_dim, dtype).to(device)
    slots = torch.tensor([5, -1, 17, 40, 2, 63, -1], device=device)
    cache = _poisoned((NB, BS, rank + rope_dim),
                      torch.uint8 if fp8 else dtype, device)
    scale = torch.tensor([0.02 if fp8 else 1.0], device=device)
    q0, kv0, cache0 = q.clone(), kvbuf.clone(), cache.clone()
    kv.concat_and_cache_mla_rope_fused(
        pos, q_pe, k_pe, kv_c, cs, is_neox, slots, cache, kv_cache_dtype,
        scale)

    q0, kv0, cs, pos = q0.cpu(), kv0.cpu(), cs.cpu(), pos.cpu()
    q, kvbuf, cache, cache0 = q.cpu(), kvbuf.cpu(), cache.cpu(), cache0.cpu()
    live = [t for t in range(n) if slots[t] >= 0]
    model_q = _vllm_rotate(q0[..., NOPE:], cs, pos, is_neox)
    model_k = _vllm_rotate(kv0[:, rank:], cs, pos, is_neox)
    e_q, s_q = _exact(q0[..., NOPE:], cs, pos, is_neox)
    e_k, s_k = _exact(kv0[:, rank:], cs, pos, is_neox)
    b_q, b_k = _bound(e_q, s_q, dtype), _bound(e_k, s_k, dtype)
    # The model itself is within U + A of the exact values.
    u, eta = _U[dtype]
    ut = u + 2.0 ** -23
    assert ((model_k.double() - e_k).abs() <=
            ut * (1 + ut) * s_k + ut * e_k.abs() + 8 * eta).all()
    for t in range(padded):
        if t in live:
            assert ((q[t, :, NOPE:].double() - model_q[t].double()).abs()
                    <= b_q[t]).all(), t
            assert ((kvbuf[t, rank:].double() - model_k[t].double()).abs()
                    <= b_k[t]).all(), t
        else:
            # Padding and rows past num_tokens: as they were.
            assert torch.equal(q[t], q0[t]) and torch.equal(kvbuf[t], kv0[t])
    # q's nope part and kv_c are never written.
    assert torch.equal(q[..., :NOPE], q0[..., :NOPE])
    assert torch.equal(kvbuf[:, :rank], kv0[:, :rank])
    # The entry: kv_c and the rotated k_pe as k_pe now holds it, stored as
    # concat_and_cache_mla stores them (docs/CONTRACT.md).
    flat, flat0 = cache.view(-1, rank + rope_dim), cache0.view(
        -1, rank + rope_dim)
    for slot in range(NB * BS):
        t = [i for i in live if slots[i] == slot]
        if not t:
            assert torch.equal(flat[slot], flat0[slot]), slot
            continue
        row = torch.cat((kv0[t[0], :rank], kvbuf[t[0], rank:]))
        if fp8:
            want = (row.float() / scale.cpu()).to(
                torch.float8_e5m2 if kv_cache_dtype == "fp8_e5m2" else
                torch.float8_e4m3fn)
            assert torch.equal(flat[slot], want.view(torch.uint8)), slot
        else:
            assert torch.equal(flat[slot], row), slot


def test_the_bound_catches_a_wrong_rotation():
    """The comparison is tight enough to see a bug: the model with its sin
    negated (a rotation the wrong way) is outside the bound."""
    dtype, heads, rope_dim = torch.bfloat16, 4, 32
    q, kvbuf, pos = _inputs(7, heads, 64, rope_dim, dtype, "cpu", seed=1)
    cs = _cos_sin(rope_dim, dtype)
    q_pe = q[..., NOPE:]
    want = q_pe.clone()
    kv.concat_and_cache_mla_rope_fused(
        pos, q_pe, kvbuf[:, 64:], kvbuf[:, :64], cs, True,
        torch.arange(7), _poisoned((NB, BS, 96), dtype, "cpu"), "auto",
        torch.ones(1))
    wrong = cs.clone()
    wrong[:, rope_dim // 2:] *= -1
    model = _vllm_rotate(want, wrong, pos, True)
    e, s = _exact(want, cs, pos, True)
    assert not ((q_pe.double() - model.double()).abs() <=
                _bound(e, s, dtype)).all()


def _good(device="cpu"):
    dtype = torch.bfloat16
    q, kvbuf, pos = _inputs(4, 2, 32, 16, dtype, device, seed=7)
    return dict(positions=pos, q_pe=q[..., NOPE:], k_pe=kvbuf[:, 32:],
                kv_c=kvbuf[:, :32], cos_sin_cache=_cos_sin(16, dtype),
                is_neox=True, slot_mapping=torch.tensor([0, 3, -1, 9]),
                kv_cache=_poisoned((NB, BS, 48), dtype, device),
                kv_cache_dtype="auto", kv_cache_scale=torch.ones(1))


@pytest.mark.parametrize("change,message", [
    (dict(q_pe=torch.zeros(4, 2, 16, 2)), "q_pe: shape [4, 2, 16, 2]"),
    (dict(k_pe=torch.zeros(4, 16)), "k_pe: torch.float32 of shape [4, 16]"),
    (dict(kv_c=torch.zeros(3, 32, dtype=torch.bfloat16)), "kv_c: "),
    (dict(positions=torch.zeros(4, dtype=torch.int32)), "positions: "),
    (dict(cos_sin_cache=torch.zeros(64, 8, dtype=torch.bfloat16)),
     "cos_sin_cache: torch.bfloat16 of shape [64, 8]"),
    (dict(slot_mapping=torch.zeros(5, dtype=torch.int64)),
     "slot_mapping: torch.int64 of shape [5]"),
    (dict(kv_cache=torch.zeros(NB, BS, 50, dtype=torch.bfloat16)),
     "kv_cache: shape [4, 16, 50]"),
    (dict(kv_cache_scale=torch.ones(2)), "kv_cache_scale: "),
    (dict(is_neox=1), "is_neox: expected a bool"),
    (dict(kv_cache_dtype="fp8"), "kv_cache: dtype bf16 with kv_cache_dtype"),
    (dict(kv_cache_dtype="fp8_ds_mla"),
     "kvgen does not provide vLLM's concat_and_cache_mla_rope_fused: "
     "kv_cache_dtype 'fp8_ds_mla'"),
    (dict(kv_cache_dtype="auto",
          kv_cache=torch.zeros(NB, BS, 48, dtype=torch.uint8)),
     "kv_cache: dtype"),
])
def test_bad_arguments_are_refused_by_name(change, message):
    args = _good()
    args.update(change)
    tensors = {k: v.clone() for k, v in args.items()
               if isinstance(v, torch.Tensor)}
    with pytest.raises((errors.KvgenError, ValueError)) as e:
        kv.concat_and_cache_mla_rope_fused(**args)
    assert "concat_and_cache_mla_rope_fused" in str(e.value) or \
        message.startswith("kv_cache"), str(e.value)
    assert message in str(e.value), str(e.value)
    for k, v in tensors.items():
        assert torch.equal(args[k], v), "%s was written" % k


def test_in_schemas_and_provided():
    assert "concat_and_cache_mla_rope_fused" in kv.PROVIDED
    assert "concat_and_cache_mla_rope_fused" not in kv.NOT_PROVIDED
