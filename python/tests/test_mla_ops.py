"""kvgen.ops.concat_and_cache_mla on the CPU, through generated host kernels
and kvrt_mla_append: every byte of the latent cache equals NumPy's
concatenation and indexing (vLLM's concat_and_cache_mla), and bad input is
refused by name with nothing written."""

import numpy as np
import pytest

import kvgen
from reference import bits

pytestmark = pytest.mark.usefixtures("compiler_path")

NB, BS = 5, 16


def _reference(kv_c, k_pe, cache, slots):
    out = cache.copy()
    nb, bs, _ = cache.shape
    for i, s in enumerate(slots):
        if s < 0 or s // bs >= nb:
            continue
        out[s // bs, s % bs] = np.concatenate([kv_c[i], k_pe[i]]).astype(
            out.dtype)
    return out


@pytest.mark.parametrize("rank,rope", [(128, 32), (448, 64)])
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_concat_and_cache_mla_equals_numpy(rank, rope, dtype):
    rng = np.random.default_rng(17)
    n = 9
    # kv_c and k_pe as column ranges of one projection output with 2 rows
    # more than slot_mapping (vLLM's CUDA-graph padding).
    proj = rng.standard_normal((n + 2, rank + rope + 8)).astype(dtype)
    kv_c, k_pe = proj[:, :rank], proj[:, rank:rank + rope]
    cache = rng.standard_normal((NB, BS, rank + rope)).astype(dtype)
    slots = rng.permutation(NB * BS)[:n].astype(np.int64)
    slots[[1, 6]] = -1  # padding tokens
    slots[4] = NB * BS + 3  # past the cache: nothing written
    want = _reference(kv_c, k_pe, cache, slots)
    kvgen.ops.concat_and_cache_mla(kv_c, k_pe, cache, slots, "auto", None)
    assert (bits(cache) == bits(want)).all()


def test_concat_and_cache_mla_casts_f32_to_f16():
    rng = np.random.default_rng(4)
    kv_c = rng.standard_normal((3, 128)).astype(np.float32)
    k_pe = rng.standard_normal((3, 32)).astype(np.float32)
    cache = np.zeros((NB, BS, 160), np.float16)
    slots = np.array([0, 17, -1], np.int64)
    want = _reference(kv_c, k_pe, cache, slots)
    kvgen.ops.concat_and_cache_mla(kv_c, k_pe, cache, slots)
    assert (bits(cache) == bits(want)).all()


@pytest.mark.parametrize("what,match", [
    ("entry", "kv_cache: entry of 150 elements"),
    ("dtype", "kv_cache_dtype"),
    ("rows", "fewer rows than slot_mapping"),
    ("ds_mla", "fp8_ds_mla"),
])
def test_bad_input_is_refused_by_name(what, match):
    rng = np.random.default_rng(2)
    kv_c = rng.standard_normal((4, 128)).astype(np.float16)
    k_pe = rng.standard_normal((4, 32)).astype(np.float16)
    cache = rng.standard_normal((NB, BS, 160)).astype(np.float16)
    slots = np.arange(4, dtype=np.int64)
    kind = "auto"
    if what == "entry":
        cache = cache[:, :, :150]
    elif what == "dtype":
        kind = "int4"
    elif what == "rows":
        slots = np.arange(6, dtype=np.int64)
    else:
        kind = "fp8_ds_mla"
    before = cache.copy()
    with pytest.raises(kvgen.InvalidArgumentError, match=match):
        kvgen.ops.concat_and_cache_mla(kv_c, k_pe, cache, slots, kind, None)
    assert (bits(cache) == bits(before)).all()


def test_bundle_mla_fused_append_equals_slot_rule():
    """The fused MLA kernel through Bundle.mla_fused_append: token t of
    request r lands at position context_lens[r] + t - query_start_loc[r] of
    its block-table row."""
    bundle = kvgen.compile(layout="paged_nhd", block_size=BS, num_kv_heads=1,
                           head_dim=160, dtype="f32", kv_lora_rank=128,
                           rope_dim=32, target="host")
    name = bundle.find("mla_fused_append")
    assert name
    rng = np.random.default_rng(8)
    kv_c = rng.standard_normal((5, 128)).astype(np.float32)
    k_pe = rng.standard_normal((5, 32)).astype(np.float32)
    cache = rng.standard_normal((NB, BS, 160)).astype(np.float32)
    table = np.array([[3, 1], [4, -1]], np.int32)
    qsl = np.array([0, 3, 4], np.int32)
    lens = np.array([15, 2], np.int32)
    # Request 0: positions 15, 16, 17 -> block 3 slot 15, block 1 slots 0, 1;
    # request 1: position 2 of block 4; token 4 is padding.
    slots = np.array([3 * BS + 15, BS, BS + 1, 4 * BS + 2, -1], np.int64)
    want = _reference(kv_c, k_pe, cache, slots)
    bundle.mla_fused_append(kv_c, k_pe, table, qsl, lens, cache, kernel=name)
    assert (bits(cache) == bits(want)).all()
