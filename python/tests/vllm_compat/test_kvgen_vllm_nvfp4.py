"""kvgen.vllm's reshape_and_cache_flash with vLLM's NVFP4 caches
(kv_cache_dtype "nvfp4" and "nvfp4_4over6") on CPU tensors: every byte of
both sides of a poisoned buffer against a reference written from
docs/CONTRACT.md's "NVFP4" rules (not from kvgen's lowering), and vLLM's
refusals in its words with nothing written. Needs torch."""

import math
import struct
from fractions import Fraction

import pytest

torch = pytest.importorskip("torch")

import kvgen  # noqa: E402
import kvgen.vllm as kv  # noqa: E402

POISON = 0x55


def _f32(x):
    """x rounded to f32: a double result of one f32 +, -, *, / rounded to
    f32 is the correctly rounded f32 result."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


_E4M3 = [Fraction(m, 8) / 64 if e == 0 else (1 + Fraction(m, 8)) * Fraction(2) ** (e - 7)
         for e in range(16) for m in range(8)][:0x7F]
_E2M1 = [Fraction(v) for v in (0, 0.5, 1, 1.5, 2, 3, 4, 6)]


def _nearest(table, a):
    """The index of `table`'s value nearest to a, ties to the even index."""
    return min(range(len(table)), key=lambda i: (abs(table[i] - a), i % 2))


def _e4m3(x):
    if math.isnan(x):
        return 0x7F
    sign = 0x80 if math.copysign(1, x) < 0 else 0
    if abs(x) >= 448:
        return sign | 0x7E
    return sign | _nearest(_E4M3, Fraction(abs(x)))


def _e4m3_value(code):
    v = float(_E4M3[code & 0x7F])
    return -v if code & 0x80 else v


def _e2m1(x):
    if math.isnan(x):
        return 0
    sign = 8 if math.copysign(1, x) < 0 else 0
    if abs(x) >= 6:
        return sign | 7
    return sign | _nearest(_E2M1, Fraction(abs(x)))


def _e2m1_value(code):
    v = float(_E2M1[code & 7])
    return -v if code & 8 else v


def _candidate(x, amax, g, inv_g, d):
    code = _e4m3(_f32(g * _f32(amax * _f32(1.0 / d))))
    s = _e4m3_value(code)
    factor = _f32(1.0 / _f32(s * inv_g)) if s != 0 else 0.0
    return code, [_e2m1(_f32(v * factor)) for v in x], factor


def _error(x, q, factor):
    e = _f32(1.0 / factor) if factor != 0 else 0.0
    err = 0.0
    for i in range(0, 16, 2):
        dx = _f32(_f32(_e2m1_value(q[i]) * e) - x[i])
        dy = _f32(_f32(_e2m1_value(q[i + 1]) * e) - x[i + 1])
        err = _f32(err + _f32(_f32(dx * dx) + _f32(dy * dy)))
    return err


def _group(x, k, four_over_six):
    """One group's scale byte and its 16 e2m1 codes."""
    g = _f32(1.0 / k)
    inv_g = _f32(1.0 / g)
    amax = max([abs(v) for v in x if math.isfinite(v)] + [0.0])
    six = _candidate(x, amax, g, inv_g, 6.0)
    if four_over_six:
        four = _candidate(x, amax, g, inv_g, 4.0)
        if _error(x, four[1], four[2]) < _error(x, six[1], six[2]):
            return four[:2]
    return six[:2]


def _reference(buf, key, value, slots, k, v, hnd, four_over_six):
    """The page bytes: each side of block b is [values | scales], rows by
    position then head (NHD) or head then position (HND); K's scales linear,
    V's swizzled in 4x4 tiles of (position, scale)."""
    nb, _, bs, heads, full = buf.shape if not hnd else (
        buf.shape[0], 2, buf.shape[3], buf.shape[2], buf.shape[4])
    dim = key.shape[2]
    s_dim = dim // 16
    side = bs * heads * full
    out = [POISON] * (nb * 2 * side)
    for t, slot in enumerate(slots):
        if slot < 0:
            continue
        blk, pos = divmod(slot, bs)
        for side_i, (src, scale) in enumerate(((key, k), (value, v))):
            base = (blk * 2 + side_i) * side
            for h in range(heads):
                row = h * bs + pos if hnd else pos * heads + h
                for j in range(s_dim):
                    x = [float(e) for e in src[t, h, 16 * j:16 * j + 16]]
                    sc, q = _group(x, scale, four_over_six)
                    for b in range(8):
                        out[base + row * (dim // 2) + 8 * j + b] = (
                            q[2 * b] | q[2 * b + 1] << 4)
                    if side_i == 0:
                        srow, sj = row, j
                    else:
                        grp = s_dim // 4
                        tp = pos // 4 * 4 + j // grp
                        sj = j % grp * 4 + pos % 4
                        srow = h * bs + tp if hnd else tp * heads + h
                    out[base + bs * heads * (dim // 2) + srow * s_dim + sj] = sc
    return out


def _caches(blocks, bs, heads, dim, hnd):
    """vLLM's NVFP4 buffer (create_kv_caches_with_random_flash's layout)
    filled with POISON, and its K and V views."""
    full = dim // 2 + dim // 16
    if hnd:
        buf = torch.full((blocks, 2, heads, bs, full), POISON,
                         dtype=torch.uint8)
        view = buf.permute(0, 1, 3, 2, 4)
    else:
        buf = torch.full((blocks, 2, bs, heads, full), POISON,
                         dtype=torch.uint8)
        view = buf
    return buf, view[:, 0], view[:, 1]


@pytest.mark.parametrize("hnd", [False, True])
@pytest.mark.parametrize("dtype", ["nvfp4", "nvfp4_4over6"])
@pytest.mark.parametrize("source", [torch.bfloat16, torch.float32])
def test_every_byte_against_the_contract(compiler_path, hnd, dtype, source):
    torch.manual_seed(3)
    heads, dim, bs, blocks = 2, 64, 8, 3
    key = (torch.randn(5, heads, dim) * 3).to(source)
    value = torch.randn(5, heads, dim).to(source)
    key[0, 0, 0] = float("nan")
    key[0, 0, 1] = float("inf")
    value[1, 1, 16:32] = 0.0
    key[2, 1, 0:16] = torch.tensor([6.0] + [4.5] * 15)
    slots = torch.tensor([9, 0, 22, -1, 13], dtype=torch.long)
    k_scale = torch.tensor(0.0125)
    v_scale = torch.tensor(1.0)
    buf, kc, vc = _caches(blocks, bs, heads, dim, hnd)
    kv.reshape_and_cache_flash(key, value, kc, vc, slots, dtype, k_scale,
                               v_scale)
    want = _reference(buf, key.float(), value.float(), slots.tolist(),
                      float(k_scale), float(v_scale), hnd,
                      dtype == "nvfp4_4over6")
    got = buf.flatten().tolist()
    bad = [i for i in range(len(got)) if got[i] != want[i]]
    assert not bad, "bytes %s: got %s, want %s" % (
        bad[:8], [got[i] for i in bad[:8]], [want[i] for i in bad[:8]])


@pytest.mark.parametrize("change,message", [
    (dict(dim=72), "head_size must be divisible by 16 for NVFP4 KV cache"),
    (dict(dim=80), "head_size / 16 must be divisible by 4"),
    (dict(bs=6), "block_size must be divisible by 4 for NVFP4 KV cache "
                 "swizzle"),
    (dict(full=40), "key_cache last dim must be data_dim \\+ scale_dim, got "
                    "40 expected 36"),
])
def test_vllm_refusals_write_nothing(change, message):
    dim, bs = change.get("dim", 64), change.get("bs", 8)
    full = change.get("full", dim // 2 + dim // 16)
    buf = torch.full((2, 2, bs, 2, full), POISON, dtype=torch.uint8)
    key = torch.randn(3, 2, dim, dtype=torch.bfloat16)
    one = torch.tensor(1.0)
    with pytest.raises(kv.VllmCheckError, match=message):
        kv.reshape_and_cache_flash(key, key, buf[:, 0], buf[:, 1],
                                   torch.tensor([0, 1, 2]), "nvfp4", one, one)
    assert (buf == POISON).all()


def test_per_head_scales_are_refused():
    buf = torch.full((2, 2, 8, 2, 36), POISON, dtype=torch.uint8)
    key = torch.randn(3, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(kvgen.InvalidArgumentError,
                       match="k_scale: an NVFP4 cache takes one float32 scale "
                             "per tensor"):
        kv.reshape_and_cache_flash(key, key, buf[:, 0], buf[:, 1],
                                   torch.tensor([0, 1, 2]), "nvfp4",
                                   torch.ones(2), torch.ones(2))
    assert (buf == POISON).all()


def test_a_cache_whose_rows_are_not_one_page_is_refused(compiler_path):
    # Rows of 36 bytes 40 apart: the view's strides are not a page's, which
    # kvrt checks before the kernel writes a block as one page.
    wide = torch.full((2, 2, 8, 2, 40), POISON, dtype=torch.uint8)
    buf = wide[..., :36]
    key = torch.randn(3, 2, 64, dtype=torch.bfloat16)
    one = torch.tensor(1.0)
    with pytest.raises(kvgen.InvalidArgumentError,
                       match="compact row-major below its block: an NVFP4 "
                             "block is one page of rows"):
        kv.reshape_and_cache_flash(key, key, buf[:, 0], buf[:, 1],
                                   torch.tensor([0, 1, 2]), "nvfp4", one, one)
    assert (wide == POISON).all()
