"""The PyTorch integration on CPU tensors (host kernels): the direct path,
torch.ops.kvgen.*, and torch.compile(fullgraph=True) of functions calling the
ops. Skipped without torch."""

import pytest

torch = pytest.importorskip("torch")

import kvgen  # noqa: E402

pytestmark = pytest.mark.usefixtures("compiler_path")

H, D, BS, NB = 4, 64, 16, 8


def _reference(cache, rows, slots):
    ref = cache.clone()
    keep = slots >= 0
    s = slots[keep]
    ref[s // BS, s % BS] = rows[:len(slots)][keep].to(ref.dtype)
    return ref


def _caches(layout):
    if layout == "HND":
        return [torch.randn(NB, H, BS, D, dtype=torch.float16).permute(
            0, 2, 1, 3) for _ in range(2)]
    return [torch.randn(NB, BS, H, D, dtype=torch.float16) for _ in range(2)]


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_direct_and_torch_ops_paths(layout):
    torch.manual_seed(0)
    kc, vc = _caches(layout)
    qkv = torch.randn(7, 3, H, D, dtype=torch.float16)
    key, value = qkv[:, 1], qkv[:, 2]
    slots = torch.tensor([3, -1, 17, 100, 5], dtype=torch.int64)
    want_k, want_v = _reference(kc, key, slots), _reference(vc, value, slots)
    kvgen.ops.reshape_and_cache_flash(key, value, kc, vc, slots, "auto",
                                      None, None)
    assert torch.equal(kc, want_k) and torch.equal(vc, want_v)
    kvgen.ops.register_torch_ops()
    want_k = _reference(kc, key * 3, slots)
    torch.ops.kvgen.reshape_and_cache_flash(key * 3, value, kc, vc, slots,
                                            "auto", None, None)
    assert torch.equal(kc, want_k)


def test_torch_compile_fullgraph_reshape_and_cache_flash():
    torch.manual_seed(1)
    kc, vc = _caches("NHD")
    scale = torch.ones(1)

    def step(qkv, kc, vc, slots):
        kvgen.ops.reshape_and_cache_flash(qkv[:, 1] * 2, qkv[:, 2], kc, vc,
                                          slots, "auto", scale, scale)
        return qkv[:, 0] + 1

    compiled = torch.compile(step, fullgraph=True)
    for n in (5, 9):
        qkv = torch.randn(n, 3, H, D, dtype=torch.float16)
        slots = torch.randperm(NB * BS)[:n]
        slots[0] = -1
        want_k = _reference(kc, qkv[:, 1] * 2, slots)
        want_v = _reference(vc, qkv[:, 2], slots)
        assert torch.equal(compiled(qkv, kc, vc, slots), qkv[:, 0] + 1)
        assert torch.equal(kc, want_k) and torch.equal(vc, want_v)


@pytest.mark.parametrize("compiled", [False, True])
def test_append_paged_kv_cache_torch(compiled):
    kc = torch.zeros(NB, BS, H, D, dtype=torch.float16)
    vc = torch.zeros_like(kc)
    kv_indptr = torch.tensor([0, 2, 3], dtype=torch.int32)
    kv_indices = torch.tensor([5, 1, 7], dtype=torch.int32)
    batch = torch.tensor([0, 0, 1], dtype=torch.int32)
    positions = torch.tensor([17, 18, 3], dtype=torch.int32)
    last = torch.tensor([3, 4], dtype=torch.int32)
    key = torch.randn(3, H, D, dtype=torch.float16)
    fn = kvgen.ops.append_paged_kv_cache
    if compiled:
        fn = torch.compile(lambda *a: kvgen.ops.append_paged_kv_cache(*a),
                           fullgraph=True)
    fn(key, -key, batch, positions, (kc, vc), kv_indices, kv_indptr, last)
    assert torch.equal(kc[1, 1], key[0]) and torch.equal(kc[1, 2], key[1])
    assert torch.equal(kc[7, 3], key[2]) and torch.equal(vc[7, 3], -key[2])
    assert int((kc != 0).any(-1).any(-1).sum()) == 3


@pytest.mark.parametrize("spoil", ["position_minus_one", "batch_minus_one",
                                   "batch_is_batch_size",
                                   "position_past_last_page"])
def test_append_paged_kv_cache_torch_hostile_token_writes_nothing(spoil):
    """Request 0 owns pages [5, 1], request 1 page [7]; token 2 (request 1)
    is spoiled and must write nothing, least of all into request 0's pages
    (position -1 was row 15 of page 1)."""
    kc = torch.zeros(NB, BS, H, D, dtype=torch.float16)
    vc = torch.zeros_like(kc)
    kv_indptr = torch.tensor([0, 2, 3], dtype=torch.int32)
    kv_indices = torch.tensor([5, 1, 7], dtype=torch.int32)
    batch = torch.tensor([0, 0, 1], dtype=torch.int32)
    positions = torch.tensor([17, 18, 3], dtype=torch.int32)
    if spoil == "position_minus_one":
        positions[2] = -1
    elif spoil == "batch_minus_one":
        batch[2] = -1
    elif spoil == "batch_is_batch_size":
        batch[2] = 2
    else:
        positions[2] = BS
    key = torch.randn(3, H, D, dtype=torch.float16)
    last = torch.tensor([3, 4], dtype=torch.int32)
    kvgen.ops.append_paged_kv_cache(key, -key, batch, positions, (kc, vc),
                                    kv_indices, kv_indptr, last)
    assert torch.equal(kc[1, 1], key[0]) and torch.equal(kc[1, 2], key[1])
    assert int((kc != 0).any(-1).any(-1).sum()) == 2
    assert int((vc != 0).any(-1).any(-1).sum()) == 2


def test_append_paged_kv_cache_torch_refuses_int64_positions():
    kc = torch.zeros(NB, BS, H, D, dtype=torch.float16)
    vc = torch.zeros_like(kc)
    key = torch.randn(2, H, D, dtype=torch.float16)
    positions = torch.tensor([1, 2 ** 32 + 1], dtype=torch.int64)
    with pytest.raises(kvgen.InvalidArgumentError, match="positions"):
        kvgen.ops.append_paged_kv_cache(
            key, key, torch.tensor([0, 0], dtype=torch.int32), positions,
            (kc, vc), torch.tensor([3], dtype=torch.int32),
            torch.tensor([0, 1], dtype=torch.int32),
            torch.tensor([2], dtype=torch.int32))
    assert not kc.any() and not vc.any()
