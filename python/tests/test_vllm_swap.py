"""kvgen.vllm.swap_blocks (kvrt_copy_blocks through the binding): the
mapped blocks copied byte for byte and nothing else, every refusal with
nothing written, and, with a GPU, the copies between the GPU and the host on
torch's current stream. Needs torch (skipped without it); the host tests
need no compiler."""

import pytest

torch = pytest.importorskip("torch")

import kvgen  # noqa: E402
import kvgen.vllm as kv  # noqa: E402
from kvgen import errors  # noqa: E402

POISON = 0x5A
CUDA = torch.cuda.is_available()


def _cache(shape, dtype, seed, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.uint8:
        t = torch.randint(0, 256, shape, dtype=torch.uint8, generator=g)
    else:
        t = torch.randn(shape, generator=g).to(dtype)
    return t.to(device)


def _poisoned(shape, dtype, device="cpu"):
    t = torch.empty(shape, dtype=dtype, device=device)
    t.view(torch.uint8).fill_(POISON)
    return t


def _block_bytes(cache):
    return cache.element_size() * cache.stride(0)


def _expected(src, dst, pairs):
    want = dst.clone()
    for s, d in pairs:
        want[d] = src[s].to(want.device).view(want.dtype)
    return want


CACHES = [
    ((16, 8, 4, 64), torch.bfloat16),     # flash [nb, bs, H, D]
    ((16, 4, 8, 8, 16), torch.uint8),     # x-vectorized fp8 key cache
    ((16, 4, 64, 8), torch.float32),      # x-vectorized value cache
    ((16, 16, 576), torch.float16),       # MLA latent cache
]


@pytest.mark.parametrize("shape,dtype", CACHES)
def test_copies_the_mapped_blocks_and_nothing_else(shape, dtype):
    src = _cache(shape, dtype, 0)
    dst = _poisoned(shape, dtype)
    pairs = [(3, 0), (15, 7), (0, 15), (7, 3)]
    want = _expected(src, dst, pairs)
    before = src.clone()
    kv.swap_blocks(src, dst, _block_bytes(src), torch.tensor(pairs))
    assert torch.equal(dst.view(torch.uint8), want.view(torch.uint8))
    assert torch.equal(src, before)


def test_hnd_views_and_float8_over_uint8():
    # vLLM's HND caches: [nb, bs, H, D] views of [nb, H, bs, D] memory.
    src = _cache((6, 4, 8, 32), torch.float16, 1).permute(0, 2, 1, 3)
    dst = _poisoned((6, 4, 8, 32), torch.float16).permute(0, 2, 1, 3)
    want = _expected(src, dst, [(1, 2), (2, 1)])
    kv.swap_blocks(src, dst, _block_bytes(src), torch.tensor([[1, 2], [2, 1]]))
    assert torch.equal(dst, want)
    src = _cache((6, 16, 64), torch.uint8, 2)
    dst = _poisoned((6, 16, 64), torch.float8_e4m3fn)
    kv.swap_blocks(src, dst, 1024, torch.tensor([[5, 0]]))
    assert torch.equal(dst[0].view(torch.uint8), src[5])


def test_the_torch_op_runs_it():
    kv.install()
    src = _cache((8, 4, 16), torch.float32, 3)
    dst = _poisoned((8, 4, 16), torch.float32)
    torch.ops._C_cache_ops.swap_blocks(src, dst, 256, torch.tensor([[6, 1]]))
    assert torch.equal(dst[1], src[6])


def test_an_empty_mapping_copies_nothing():
    src = _cache((4, 8), torch.float32, 4)
    dst = _poisoned((4, 8), torch.float32)
    kv.swap_blocks(src, dst, 32, torch.zeros(0, 2, dtype=torch.int64))
    assert (dst.view(torch.uint8) == POISON).all()


def _refused(match, src, dst, block_bytes, mapping, exc=None):
    before = dst.clone() if isinstance(dst, torch.Tensor) else None
    with pytest.raises(exc or errors.InvalidArgumentError, match=match):
        kv.swap_blocks(src, dst, block_bytes, mapping)
    if before is not None:
        assert torch.equal(dst.contiguous().view(torch.uint8),
                           before.contiguous().view(torch.uint8)), \
            "a refused swap_blocks wrote dst"


def test_refusals_write_nothing():
    src = _cache((8, 4, 16), torch.float32, 5)
    dst = _poisoned((8, 4, 16), torch.float32)
    good = torch.tensor([[0, 1], [2, 3]])
    _refused("dst: expected a torch.Tensor", src, dst.numpy(), 256, good)
    _refused("block_mapping: expected a torch.Tensor", src, dst, 256,
             [[0, 1]])
    _refused("src: rank 6", src.view(8, 1, 1, 1, 4, 16), dst, 256, good)
    for bad in (True, 0, -256, 256.0, 1 << 64):
        _refused("block_size_in_bytes .* is not a positive 64-bit integer",
                 src, dst, bad, good)
    _refused("block_bytes is 128 but a block of src and dst is 256 bytes",
             src, dst, 128, good)
    _refused("block_mapping: must be a contiguous int64 .n, 2.", src, dst,
             256, good.int())
    _refused("block_mapping: must be a contiguous int64 .n, 2.", src, dst,
             256, torch.tensor([[0, 1, 2]]))
    _refused("block_mapping: must be a contiguous int64 .n, 2.", src, dst,
             256, torch.tensor([[0, 2], [1, 3]]).t())
    # A good pair first: nothing of it is copied either.
    _refused(r"block_mapping: pair 1 names src block 8, outside \[0, 8\)",
             src, dst, 256, torch.tensor([[0, 1], [8, 2]]))
    _refused(r"block_mapping: pair 0 names dst block -1, outside \[0, 8\)",
             src, dst, 256, torch.tensor([[0, -1]]))
    _refused("block_mapping: dst block 3 is written by two pairs", src, dst,
             256, torch.tensor([[0, 3], [1, 2], [4, 3]]))
    _refused(r"dst: its blocks \(bf16\) are not laid out as src's \(f32\)",
             src, _poisoned((8, 4, 32), torch.bfloat16), 256, good)
    _refused("are not laid out as src's", src,
             _poisoned((8, 16, 4), torch.float32).transpose(1, 2), 256, good)
    # K of a [nb, 2, ...] K/V tensor: blocks with V's bytes between them.
    kv_pair = _poisoned((8, 2, 4, 16), torch.float32)
    _refused("dst: dimension 0 has stride 128 but a block holds 64 elements",
             src, kv_pair[:, 0], 256, good)
    assert (kv_pair.view(torch.uint8) == POISON).all()
    _refused("dst: a block .dimensions 1... is not contiguous", src,
             _poisoned((8, 4, 32), torch.float32)[:, :, :16], 256, good)
    _refused("dst: shares bytes with src", src, src, 256, good)


def test_kvgen_copy_blocks_takes_any_dlpack_tensor():
    # The package's own copy, which swap_blocks calls: NumPy caches, the
    # mapping a NumPy array too.
    np = pytest.importorskip("numpy")
    src = _cache((8, 4, 32), torch.float32, 3).numpy()
    dst = _poisoned((8, 4, 32), torch.float32).numpy()
    pairs = [(1, 6), (7, 0)]
    want = _expected(torch.from_numpy(src), torch.from_numpy(dst), pairs)
    kvgen.copy_blocks(src, dst, 512, np.array(pairs, dtype=np.int64))
    assert torch.equal(torch.from_numpy(dst), want)
    with pytest.raises(kvgen.InvalidArgumentError,
                       match="block_bytes is 256 but a block of src and dst "
                             "is 512 bytes"):
        kvgen.copy_blocks(src, dst, 256, np.array(pairs, dtype=np.int64))
    with pytest.raises(kvgen.InvalidArgumentError,
                       match="copy_blocks: block_bytes 2.5 is not a positive "
                             "64-bit integer"):
        kvgen.copy_blocks(src, dst, 2.5, np.array(pairs, dtype=np.int64))


def test_a_libkvrt_without_it_is_named(monkeypatch):
    from kvgen import _kvrt

    class Old:
        handle = object()
        path = "/old/libkvrt.so"
        entry = staticmethod(lambda name: None)

    monkeypatch.setattr(_kvrt, "lib", lambda: Old)
    with pytest.raises(kvgen.LibraryNotFoundError,
                       match="/old/libkvrt.so lacks kvrt_copy_blocks"):
        kv.swap_blocks(torch.zeros(2, 4), torch.zeros(2, 4), 16,
                       torch.tensor([[0, 1]]))


@pytest.mark.skipif(not CUDA, reason="needs torch with a CUDA device")
@pytest.mark.parametrize("direction", [("cuda", "cpu"), ("cuda", "cuda"),
                                       ("cpu", "cuda")])
def test_gpu_copies_on_the_current_stream(direction):
    src = _cache((64, 16, 8, 128), torch.bfloat16, 6, direction[0])
    dst = _poisoned((64, 16, 8, 128), torch.bfloat16, direction[1])
    pairs = [(3, 0), (63, 7), (0, 63)]
    want = _expected(src.cpu(), dst.cpu(), pairs)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        if src.is_cuda:
            src.mul_(1)  # queued on `stream` before the copy
        kv.swap_blocks(src, dst, _block_bytes(src), torch.tensor(pairs))
    stream.synchronize()
    assert torch.equal(dst.cpu(), want)
    _refused("block_mapping: must be a contiguous int64", src, dst,
             _block_bytes(src), torch.tensor(pairs, device="cuda"))
