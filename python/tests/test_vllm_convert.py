"""kvgen.vllm.convert_fp8 on CPU tensors (host kernels): the bytes against
torch's own conversions (a saturating division, then the cast; the cast
back, then the product), every refusal with nothing written, and no path
that converts without kvgen's kernels. Needs torch (skipped without it)."""

import pytest

torch = pytest.importorskip("torch")

import kvgen  # noqa: E402
import kvgen.vllm as kv  # noqa: E402
from kvgen import _vllm_cache  # noqa: E402
from kvgen import compiler, errors  # noqa: E402

FLOAT8 = {"fp8": torch.float8_e4m3fn, "fp8_e4m3": torch.float8_e4m3fn,
          "fp8_e5m2": torch.float8_e5m2}
POISON = 0x5A


def _quantized(x, scale, kv_dtype):
    """fp8(x / scale) as vLLM computes it: fp32 division, saturated to the
    format's largest finite value, rounded to nearest even (torch's cast)."""
    f8 = FLOAT8[kv_dtype]
    qmax = torch.finfo(f8).max
    s = torch.tensor(scale, dtype=torch.float32)
    return (x.float() / s).clamp(-qmax, qmax).to(f8).view(torch.uint8)


def _dequantized(q, scale, kv_dtype, dtype):
    s = torch.tensor(scale, dtype=torch.float32)
    return (q.view(FLOAT8[kv_dtype]).float() * s).to(dtype)


def _poisoned(shape, dtype):
    t = torch.empty(shape, dtype=dtype)
    t.view(torch.uint8).fill_(POISON)
    return t


def _values(shape, dtype, qmax):
    """Random values across the format's range, past qmax (saturation),
    tiny ones (subnormals) and signed zeros."""
    torch.manual_seed(0)
    x = torch.randn(shape) * qmax / 3
    flat = x.view(-1)
    n = flat.numel()
    flat[: n // 8] *= 4
    flat[n // 8: n // 4] *= 2.0 ** -12
    flat[n // 4] = 0.0
    flat[n // 4 + 1] = -0.0
    return x.to(dtype)


SHAPES = [(3, 4, 16, 8),   # test_fp8_e4m3_conversion's [nb, H, D, bs]
          (2, 4, 576),     # an MLA cache, rows of 576
          (5, 7, 3),       # rows of 3, an odd count
          (2, 3, 2, 4, 16)]  # reshape_and_cache's x-vectorized key cache


@pytest.mark.parametrize("kv_dtype", ["fp8", "fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16,
                                   torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_to_fp8_is_the_saturated_division(compiler_path, kv_dtype, dtype,
                                          shape):
    qmax = torch.finfo(FLOAT8[kv_dtype]).max
    x = _values(shape, dtype, qmax)
    for scale, storage in ((1.0, torch.uint8), (0.37, FLOAT8[kv_dtype])):
        out = _poisoned(shape, storage)
        kv.convert_fp8(out, x, scale, kv_dtype)
        want = _quantized(x, scale, kv_dtype)
        got = out.view(torch.uint8)
        bad = (got != want).nonzero()
        assert bad.numel() == 0, (scale, bad[:4].tolist(),
                                  got[tuple(bad[0])], want[tuple(bad[0])])


@pytest.mark.parametrize("kv_dtype", ["fp8", "fp8_e5m2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16,
                                   torch.bfloat16])
def test_from_fp8_is_the_scaled_value(compiler_path, kv_dtype, dtype):
    # Every finite code of the format, a few times over.
    codes = torch.arange(256, dtype=torch.uint8).repeat(8)
    finite = torch.isfinite(codes.view(FLOAT8[kv_dtype]).float())
    q = codes[finite][:1024].reshape(4, 2, 128)
    for scale in (1.0, 0.0123, 3.5):
        out = _poisoned(q.shape, dtype)
        kv.convert_fp8(out, q, scale, kv_dtype)
        want = _dequantized(q, scale, kv_dtype, dtype)
        assert torch.equal(out.view(torch.uint8), want.view(torch.uint8)), \
            scale
    out = _poisoned(q.shape, dtype)
    kv.convert_fp8(out, q.view(FLOAT8[kv_dtype]), 2.0, kv_dtype)
    assert torch.equal(out, _dequantized(q, 2.0, kv_dtype, dtype))


def test_round_trip_as_vllm_tests_it(compiler_path):
    """test_fp8_e4m3_conversion's check: values in [-224, 224] and back."""
    torch.manual_seed(0)
    cache = torch.empty(2, 8, 64, 16).uniform_(-224.0, 224.0)
    cache_fp8 = torch.empty_like(cache, dtype=torch.uint8)
    kv.convert_fp8(cache_fp8, cache)
    converted = torch.empty_like(cache)
    kv.convert_fp8(converted, cache_fp8)
    torch.testing.assert_close(cache, converted, atol=0.001, rtol=0.1)


def test_an_empty_tensor_is_nothing_to_do(compiler_path):
    kv.convert_fp8(torch.empty(0, 8, dtype=torch.uint8), torch.empty(0, 8))


def _refused(exc, match, dst, src, *args, **kwargs):
    tensor = isinstance(dst, torch.Tensor)
    before = dst.clone() if tensor else None
    with pytest.raises(exc, match=match):
        kv.convert_fp8(dst, src, *args, **kwargs)
    if tensor:
        assert torch.equal(dst.view(torch.uint8), before.view(torch.uint8)), \
            "a refused convert_fp8 wrote dst_cache"


def test_refusals_write_nothing(compiler_path):
    src = torch.randn(4, 16)
    dst = _poisoned((4, 16), torch.uint8)
    bad = errors.InvalidArgumentError
    _refused(bad, "dst_cache: expected a torch.Tensor", [0] * 4, src)
    _refused(bad, "src_cache: expected a torch.Tensor", dst, src.numpy())
    _refused(bad, "kv_dtype 'bogus' is not one of fp8, fp8_e4m3, fp8_e5m2",
             dst, src, 1.0, "bogus")
    _refused(bad, "kv_dtype 'auto' is not one of", dst, src, 1.0, "auto")
    _refused(kv.NotProvidedError, "convert_fp8: kv_dtype 'nvfp4'", dst, src,
             1.0, "nvfp4")
    _refused(bad, "scale: expected a float, got bool", dst, src, True)
    _refused(bad, "scale: expected a float, got Tensor", dst, src,
             torch.ones(1))
    for scale in (0.0, float("inf"), float("nan"), 1e39, 1e-50, 10 ** 400):
        _refused(bad, "the scale must be a finite, nonzero fp32 number", dst,
                 src, scale)
    _refused(bad, "src_cache torch.float32 -> dst_cache torch.float16: one "
             "side must be", _poisoned((4, 16), torch.float16), src)
    _refused(bad, "src_cache torch.uint8 -> dst_cache torch.uint8",
             dst, torch.zeros(4, 16, dtype=torch.uint8))
    _refused(bad, "dst_cache torch.float8_e5m2.*kv_dtype 'fp8'",
             _poisoned((4, 16), torch.float8_e5m2), src)
    _refused(bad, r"dst_cache has shape \[4, 16\] but src_cache \[4, 8\]",
             dst, src[:, :8].contiguous())
    _refused(bad, "src_cache .shape .4, 8., strides .16, 1.. is not "
             "contiguous", _poisoned((4, 8), torch.uint8), src[:, :8])
    wide = _poisoned((4, 32), torch.uint8)
    _refused(bad, "dst_cache .shape .4, 16., strides .32, 1.. is not "
             "contiguous", wide[:, :16], src)
    assert (wide == POISON).all()


def test_overlapping_tensors_are_refused(compiler_path):
    """dst_cache over src_cache's own bytes."""
    buf = torch.zeros(64, dtype=torch.uint8)
    src = buf.view(torch.float16)          # 32 elements over all 64 bytes
    dst = buf[:32]
    before = buf.clone()
    with pytest.raises(errors.InvalidArgumentError,
                       match="dst_cache shares memory with src_cache"):
        kv.convert_fp8(dst, src)
    assert torch.equal(buf, before)


def test_nothing_converts_without_kvgen_kernels(compiler_path, monkeypatch):
    """A description the compiler refuses is KernelNotAvailableError, dst
    untouched: there is no other implementation to fall back to."""
    def refuse(*args, **kwargs):
        raise errors.CompilerError("refused for the test")

    monkeypatch.setattr(compiler, "compile", refuse)
    monkeypatch.setattr(_vllm_cache, "_converters", {})
    dst = _poisoned((2, 40), torch.uint8)
    _refused(kvgen.KernelNotAvailableError, "refused for the test", dst,
             torch.randn(2, 40))


def test_rows_merge_by_powers_of_two_up_to_1024():
    assert _vllm_cache._convert_row((3, 4, 16, 8)) == (3, 512)
    assert _vllm_cache._convert_row((1024, 8, 64, 16)) == (8192, 1024)
    assert _vllm_cache._convert_row((8, 16, 576)) == (128, 576)
    assert _vllm_cache._convert_row((8, 16, 320)) == (64, 640)
    assert _vllm_cache._convert_row((5, 7, 3)) == (35, 3)
    assert _vllm_cache._convert_row((2, 4096)) == (8, 1024)
    assert _vllm_cache._convert_row(()) == (1, 1)


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs torch with a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16,
                                   torch.bfloat16])
def test_gpu_bytes_are_the_hosts(dtype):
    """On the GPU (kernels compiled for it, or found in KVGEN_CACHE_DIR):
    the same bytes as torch's saturating cast, and back."""
    x = _values((32, 8, 64, 16), dtype, 448.0).cuda()
    q = torch.empty_like(x, dtype=torch.uint8)
    kv.convert_fp8(q, x, 0.37)
    assert torch.equal(q.cpu(), _quantized(x.cpu(), 0.37, "fp8"))
    back = torch.empty_like(x)
    kv.convert_fp8(back, q, 0.37)
    assert torch.equal(back.cpu(), _dequantized(q.cpu(), 0.37, "fp8", dtype))
