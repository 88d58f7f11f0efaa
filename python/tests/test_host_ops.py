"""The drop-in ops on the CPU, through generated host kernels (kvgen
--target=host --emit=shared-lib) and kvrt: every byte of the caches equals
NumPy's indexing."""

import numpy as np
import pytest

import kvgen
from reference import bits, flash_reference, flashinfer_reference

pytestmark = pytest.mark.usefixtures("compiler_path")

NB, BS, H, D = 6, 16, 4, 64
DTYPES = {"f16": np.float16, "f32": np.float32}


def _poisoned(shape, dtype, rng):
    return rng.standard_normal(shape).astype(dtype)


def _hnd_cache(rng, dtype):
    """A [nb, bs, H, D] view of HND memory, as vLLM makes it."""
    return _poisoned((NB, H, BS, D), dtype, rng).transpose(0, 2, 1, 3)


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_reshape_and_cache_flash_equals_numpy(layout, dtype):
    rng = np.random.default_rng(7)
    dt = DTYPES[dtype]
    n = 11
    # K and V as views into one fused QKV projection (strided rows).
    qkv = rng.standard_normal((n + 3, 3, H, D)).astype(dt)
    key, value = qkv[:, 1], qkv[:, 2]
    make = _hnd_cache if layout == "HND" else (
        lambda r, d: _poisoned((NB, BS, H, D), d, r))
    kc, vc = make(rng, dt), make(rng, dt)
    slots = rng.permutation(NB * BS)[:n].astype(np.int64)
    slots[[2, 7]] = -1  # padding tokens
    want_k, want_v = flash_reference(key, value, kc, vc, slots)
    # key has 3 rows more than slot_mapping: vLLM's CUDA-graph padding.
    kvgen.ops.reshape_and_cache_flash(key, value, kc, vc, slots, "auto",
                                      None, None)
    assert (bits(kc) == bits(want_k)).all()
    assert (bits(vc) == bits(want_v)).all()


def test_reshape_and_cache_flash_casts_f32_to_f16():
    rng = np.random.default_rng(3)
    key = rng.standard_normal((5, H, D)).astype(np.float32)
    value = rng.standard_normal((5, H, D)).astype(np.float32)
    kc = np.zeros((NB, BS, H, D), np.float16)
    vc = np.zeros_like(kc)
    slots = np.array([0, 1, 33, -1, 95], np.int64)
    want_k, want_v = flash_reference(key, value, kc, vc, slots)
    kvgen.ops.reshape_and_cache_flash(key, value, kc, vc, slots)
    assert (bits(kc) == bits(want_k)).all()
    assert (bits(vc) == bits(want_v)).all()


def test_slot_past_the_cache_writes_nothing():
    rng = np.random.default_rng(5)
    key = rng.standard_normal((2, H, D)).astype(np.float16)
    kc = _poisoned((NB, BS, H, D), np.float16, rng)
    vc = kc.copy()
    before = kc.copy()
    slots = np.array([NB * BS, -5], np.int64)
    kvgen.ops.reshape_and_cache_flash(key, key, kc, vc, slots)
    assert (bits(kc) == bits(before)).all()


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("stacked", [False, True])
def test_append_paged_kv_cache_equals_reference(layout, stacked):
    rng = np.random.default_rng(11)
    page = BS
    # Three requests: 3 pages, 1 page, 2 pages; appending 5, 1 and 4 tokens.
    kv_indptr = np.array([0, 3, 4, 6], np.int32)
    kv_indices = np.array([4, 0, 2, 5, 1, 3], np.int32)
    seq_lens = [40, 9, 20]
    appended = [5, 1, 4]
    batch = np.repeat(np.arange(3), appended).astype(np.int32)
    positions = np.concatenate(
        [np.arange(s - a, s) for s, a in zip(seq_lens, appended)]).astype(
            np.int32)
    nnz = len(batch)
    key = rng.standard_normal((nnz, H, D)).astype(np.float16)
    value = rng.standard_normal((nnz, H, D)).astype(np.float16)
    shape = (NB, H, page, D) if layout == "HND" else (NB, page, H, D)
    if stacked:
        full = _poisoned((NB, 2) + shape[1:], np.float16, rng)
        kc, vc = full[:, 0], full[:, 1]
        cache = full
    else:
        kc = _poisoned(shape, np.float16, rng)
        vc = _poisoned(shape, np.float16, rng)
        cache = (kc, vc)
    want_k, want_v = flashinfer_reference(key, value, batch, positions, kc,
                                          vc, kv_indices, kv_indptr, layout)
    last = np.array([(s - 1) % page + 1 for s in seq_lens], np.int32)
    kvgen.ops.append_paged_kv_cache(key, value, batch, positions, cache,
                                    kv_indices, kv_indptr, last, layout)
    assert (bits(kc) == bits(want_k)).all()
    assert (bits(vc) == bits(want_v)).all()


def _two_requests(rng, layout="NHD"):
    """Request 0 owns pages [4, 0] (32 rows), request 1 pages [2, 5]; one
    token each, at position 20 of request 0 and 3 of request 1."""
    kv_indptr = np.array([0, 2, 4], np.int32)
    kv_indices = np.array([4, 0, 2, 5], np.int32)
    batch = np.array([0, 1], np.int32)
    positions = np.array([20, 3], np.int32)
    key = rng.standard_normal((2, H, D)).astype(np.float16)
    value = rng.standard_normal((2, H, D)).astype(np.float16)
    shape = (NB, H, BS, D) if layout == "HND" else (NB, BS, H, D)
    kc = _poisoned(shape, np.float16, rng)
    vc = _poisoned(shape, np.float16, rng)
    return key, value, batch, positions, kc, vc, kv_indices, kv_indptr


def _spoil_position_minus_one(b, p, idx, ptr):
    # Was request 0's last page's last row (page 0, row 15).
    p[1] = -1


def _spoil_position_past_last_page(b, p, idx, ptr):
    p[1] = 2 * BS


def _spoil_batch_minus_one(b, p, idx, ptr):
    # NumPy's b[-1] would be the last request: no wrapping.
    b[1] = -1


def _spoil_batch_is_batch_size(b, p, idx, ptr):
    b[1] = 2


def _spoil_indptr_past_indices(b, p, idx, ptr):
    ptr[2] = len(idx) + 1


def _spoil_negative_page(b, p, idx, ptr):
    idx[2] = -1


def _spoil_page_past_the_cache(b, p, idx, ptr):
    idx[2] = NB


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("spoil", [
    _spoil_position_minus_one, _spoil_position_past_last_page,
    _spoil_batch_minus_one, _spoil_batch_is_batch_size,
    _spoil_indptr_past_indices, _spoil_negative_page,
    _spoil_page_past_the_cache], ids=lambda f: f.__name__[len("_spoil_"):])
def test_append_paged_kv_cache_hostile_token_writes_nothing(layout, spoil):
    """Token 1's index is out of range: it writes nothing anywhere (least of
    all into request 0's pages), and token 0 is written as usual."""
    rng = np.random.default_rng(13)
    key, value, batch, positions, kc, vc, idx, ptr = _two_requests(rng,
                                                                   layout)
    spoil(batch, positions, idx, ptr)
    want_k, want_v = flashinfer_reference(key, value, batch, positions, kc,
                                          vc, idx, ptr, layout)
    before_k = kc.copy()
    kvgen.ops.append_paged_kv_cache(key, value, batch, positions, (kc, vc),
                                    idx, ptr, np.array([5, 4], np.int32),
                                    layout)
    assert (bits(kc) == bits(want_k)).all()
    assert (bits(vc) == bits(want_v)).all()
    # Only token 0's row changed: nothing of token 1 landed anywhere.
    changed = (bits(kc) != bits(before_k)).reshape(NB, -1).any(axis=1)
    assert list(np.nonzero(changed)[0]) == [0]  # page kv_indices[1]


def test_append_paged_kv_cache_position_minus_one_keeps_other_request():
    """The reviewer's reproducer: position -1 of request 1 used to write row
    15 of request 0's last page."""
    rng = np.random.default_rng(17)
    key, value, batch, positions, kc, vc, idx, ptr = _two_requests(rng)
    positions[1] = -1
    row15 = kc[0, 15].copy()
    kvgen.ops.append_paged_kv_cache(key, value, batch, positions, (kc, vc),
                                    idx, ptr, np.array([5, 4], np.int32))
    assert (bits(kc[0, 15]) == bits(row15)).all()


@pytest.mark.parametrize("name", ["batch_indices", "positions", "kv_indices",
                                  "kv_indptr"])
@pytest.mark.parametrize("dtype", [np.int64, np.int16, np.uint32,
                                   np.float32])
def test_append_paged_kv_cache_refuses_other_index_dtypes(name, dtype):
    rng = np.random.default_rng(19)
    key, value, batch, positions, kc, vc, idx, ptr = _two_requests(rng)
    args = dict(batch_indices=batch, positions=positions, kv_indices=idx,
                kv_indptr=ptr)
    args[name] = args[name].astype(dtype)
    before = kc.copy()
    with pytest.raises(kvgen.InvalidArgumentError, match=name + ".*int32"):
        kvgen.ops.append_paged_kv_cache(
            key, value, args["batch_indices"], args["positions"], (kc, vc),
            args["kv_indices"], args["kv_indptr"], None)
    assert (bits(kc) == bits(before)).all()


def test_append_paged_kv_cache_refuses_int64_positions_never_truncates():
    """2**32 + 1 cut to 32 bits is 1: refused instead, nothing written."""
    rng = np.random.default_rng(23)
    key, value, batch, positions, kc, vc, idx, ptr = _two_requests(rng)
    wide = positions.astype(np.int64)
    wide[1] = 2 ** 32 + 1
    before_k, before_v = kc.copy(), vc.copy()
    with pytest.raises(kvgen.InvalidArgumentError, match="positions"):
        kvgen.ops.append_paged_kv_cache(key, value, batch, wide, (kc, vc),
                                        idx, ptr, None)
    assert (bits(kc) == bits(before_k)).all()
    assert (bits(vc) == bits(before_v)).all()


@pytest.mark.parametrize("name", ["batch_indices", "positions"])
@pytest.mark.parametrize("length", [1, 3])
def test_append_paged_kv_cache_refuses_one_index_per_token_mismatch(name,
                                                                    length):
    rng = np.random.default_rng(29)
    key, value, batch, positions, kc, vc, idx, ptr = _two_requests(rng)
    args = dict(batch_indices=batch, positions=positions)
    args[name] = np.resize(args[name], length).astype(np.int32)
    before = kc.copy()
    with pytest.raises(kvgen.InvalidArgumentError, match=name):
        kvgen.ops.append_paged_kv_cache(
            key, value, args["batch_indices"], args["positions"], (kc, vc),
            idx, ptr, None)
    assert (bits(kc) == bits(before)).all()


def test_bundle_api_on_host_kernels(tmp_path):
    b = kvgen.compile(layout="paged_nhd", block_size=BS, num_kv_heads=H,
                      head_dim=D, dtype="f32", target="host")
    assert b.has_host_kernels
    assert b.find("append", layout="paged_nhd", dtype="f32") == "kv_append"
    # Slot mapping from a block table, then the append through it.
    block_table = np.array([[2, 5, -1], [0, 1, 3]], np.int32)
    qsl = np.array([0, 2, 3], np.int32)
    context = np.array([15, 20], np.int32)
    slots = np.full(3, -7, np.int64)
    b.build_slot_mapping(block_table, qsl, context, slots)
    assert slots.tolist() == [2 * BS + 15, 5 * BS + 0, 1 * BS + 4]
    rng = np.random.default_rng(1)
    key = rng.standard_normal((3, H, D)).astype(np.float32)
    kc = np.zeros((NB, BS, H, D), np.float32)
    vc = np.zeros_like(kc)
    b.append(key, key, slots, kc, vc, variant="scalar")
    want, _ = flash_reference(key, key, np.zeros_like(kc), vc, slots)
    assert (bits(kc) == bits(want)).all()
    # The wide kernel (kvrt's choice for many tokens), forced at three.
    kinds = {k["name"]: k["variant"] for k in b.kernels}
    assert kinds["kv_append_wide"] == "wide"
    kc[:] = 0
    b.append(key, key, slots, kc, vc, variant="wide")
    assert (bits(kc) == bits(want)).all()


@pytest.mark.parametrize("variant", ["auto", "scalar", "wide"])
def test_bundle_paged_kv_append_and_checked_mode(variant):
    """Bundle.paged_kv_append launches the kernel itself; in checked mode a
    batch index out of range is refused by name, nothing written."""
    b = kvgen.compile(layout="paged_nhd", block_size=BS, num_kv_heads=H,
                      head_dim=D, dtype="f16", target="host")
    name = b.find("paged_kv_append", layout="paged_nhd", dtype="f16")
    assert name == "kv_paged_kv_append"
    rng = np.random.default_rng(31)
    key, value, batch, positions, kc, vc, idx, ptr = _two_requests(rng)
    want_k, want_v = flashinfer_reference(key, value, batch, positions, kc,
                                          vc, idx, ptr, "NHD")
    b.paged_kv_append(key, value, batch, positions, idx, ptr, kc, vc,
                      kernel=name, variant=variant)
    assert (bits(kc) == bits(want_k)).all()
    assert (bits(vc) == bits(want_v)).all()
    batch[1] = -1
    before = kc.copy()
    b.set_checked(True)
    try:
        with pytest.raises(kvgen.InvalidArgumentError,
                           match=r"batch_indices\[1\] = -1 is out of range"):
            b.paged_kv_append(key, value, batch, positions, idx, ptr, kc, vc,
                              kernel=name)
    finally:
        b.set_checked(False)
    assert (bits(kc) == bits(before)).all()


def test_steady_state_call_does_not_look_up_kernels(monkeypatch):
    rng = np.random.default_rng(2)
    key = rng.standard_normal((4, H, D)).astype(np.float16)
    kc = np.zeros((NB, BS, H, D), np.float16)
    vc = np.zeros_like(kc)
    slots = np.arange(4, dtype=np.int64)
    kvgen.ops.reshape_and_cache_flash(key, key, kc, vc, slots)

    def no_compile(*args, **kwargs):
        raise AssertionError("a memoized shape looked its kernel up again")

    monkeypatch.setattr(kvgen.compiler, "compile", no_compile)
    # Another token count and other caches of the same shape: a dict hit.
    key2 = rng.standard_normal((9, H, D)).astype(np.float16)
    kc2, vc2 = np.zeros_like(kc), np.zeros_like(vc)
    slots2 = np.arange(9, dtype=np.int64) + 20
    kvgen.ops.reshape_and_cache_flash(key2, key2, kc2, vc2, slots2)
    want, _ = flash_reference(key2, key2, np.zeros_like(kc), vc, slots2)
    assert (bits(kc2) == bits(want)).all()


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_bf16_through_ml_dtypes(layout):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf16 = ml_dtypes.bfloat16
    rng = np.random.default_rng(17)
    n = 9
    key = rng.standard_normal((n, H, D)).astype(bf16)
    value = rng.standard_normal((n, H, D)).astype(np.float32)
    make = _hnd_cache if layout == "HND" else (
        lambda r, d: _poisoned((NB, BS, H, D), d, r))
    kc = make(rng, bf16)
    vc = make(rng, bf16)
    slots = rng.permutation(NB * BS)[:n].astype(np.int64)
    slots[4] = -1
    want_k, _ = flash_reference(key, key, kc, vc, slots)
    kvgen.ops.reshape_and_cache_flash(key, key, kc, vc, slots)
    assert (bits(kc) == bits(want_k)).all()
    # f32 -> bf16: round to nearest even, as NumPy's cast to bfloat16.
    kc2 = make(rng, bf16)
    want_v, _ = flash_reference(value, value, kc2, vc, slots)
    vc2 = make(rng, bf16)
    kvgen.ops.reshape_and_cache_flash(value, value, kc2, vc2, slots)
    assert (bits(kc2) == bits(want_v)).all()


@pytest.mark.parametrize("kind", ["fp8", "fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("source", ["f16", "f32"])
def test_fp8_equals_saturating_cast(kind, source):
    """vLLM's fp8 path: cache byte = fp8(clamp(float(x) / scale)), rounded to
    nearest even; runs once kvgen generates quantized kernels."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    f8 = ml_dtypes.float8_e5m2 if kind == "fp8_e5m2" else (
        ml_dtypes.float8_e4m3fn)
    qmax = np.float32(ml_dtypes.finfo(f8).max)
    rng = np.random.default_rng(23)
    n = 12
    key = (rng.standard_normal((n, H, D)) * 300).astype(DTYPES[source])
    value = rng.standard_normal((n, H, D)).astype(DTYPES[source])
    kc = rng.integers(0, 256, (NB, BS, H, D), dtype=np.uint8)
    vc = rng.integers(0, 256, (NB, BS, H, D), dtype=np.uint8)
    slots = rng.permutation(NB * BS)[:n].astype(np.int64)
    slots[[1, 6]] = -1
    ks = np.array([0.37], np.float32)
    vs = np.array([2.5], np.float32)

    def quantized(x, s):
        return np.clip(x.astype(np.float32) / s[0], -qmax, qmax).astype(
            f8).view(np.uint8)

    want_k, want_v = flash_reference(quantized(key, ks), quantized(value, vs),
                                     kc, vc, slots)
    try:
        kvgen.ops.reshape_and_cache_flash(key, value, kc, vc, slots, kind, ks,
                                          vs)
    except kvgen.KernelNotAvailableError as e:
        pytest.skip("no quantized kernels: %s" % str(e).splitlines()[0])
    assert (kc == want_k).all()
    assert (vc == want_v).all()


def test_registered_bundle_serves_the_ops(compiler_path, tmp_path,
                                          monkeypatch):
    import subprocess

    lib = tmp_path / "kernels.so"
    subprocess.run([compiler_path, "--layout=paged_nhd", "--block-size=32",
                    "--num-kv-heads=1", "--head-dim=32", "--dtype=f32",
                    "--target=host", "--emit=shared-lib", "-o", str(lib)],
                   check=True)
    bundle = kvgen.Bundle.load(lib)  # an ELF file: its host kernels
    assert bundle.has_host_kernels and not bundle.has_device_code

    def no_compile(*args, **kwargs):
        raise AssertionError("a registered bundle's kernel was compiled")

    monkeypatch.setattr(kvgen.compiler, "compile", no_compile)
    kvgen.ops.register(bundle)
    try:
        rng = np.random.default_rng(4)
        key = rng.standard_normal((3, 1, 32)).astype(np.float32)
        kc = np.zeros((2, 32, 1, 32), np.float32)
        vc = np.zeros_like(kc)
        slots = np.array([63, -1, 0], np.int64)
        kvgen.ops.reshape_and_cache_flash(key, key, kc, vc, slots)
        want, _ = flash_reference(key, key, np.zeros_like(kc), vc, slots)
        assert (bits(kc) == bits(want)).all()
    finally:
        kvgen.ops._registered.remove(bundle)
        kvgen.ops._plans.clear()


class _Producer:
    """Any other DLPack producer (CuPy, JAX, ...): only __dlpack__."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_any_dlpack_producer():
    rng = np.random.default_rng(29)
    qkv = rng.standard_normal((6, 3, H, D)).astype(np.float32)
    key, value = qkv[:, 1], qkv[:, 2]  # strided: the capsule carries strides
    kc = _hnd_cache(rng, np.float32)
    vc = _hnd_cache(rng, np.float32)
    slots = np.array([5, 70, -1, 31, 32, 0], np.int64)
    want_k, want_v = flash_reference(key, value, kc, vc, slots)
    kvgen.ops.reshape_and_cache_flash(
        _Producer(key), _Producer(value), _Producer(kc), _Producer(vc),
        _Producer(slots))
    assert (bits(kc) == bits(want_k)).all()
    assert (bits(vc) == bits(want_v)).all()


def test_remembered_launch_still_validates_every_change():
    """Bundle._append remembers packed args by the tensors' descriptions;
    a changed pointer, shape, stride or dtype packs (and validates) again."""
    b = kvgen.compile(layout="paged_nhd", block_size=BS, num_kv_heads=H,
                      head_dim=D, dtype="f32", target="host")
    rng = np.random.default_rng(3)
    key = rng.standard_normal((3, H, D)).astype(np.float32)
    slots = np.array([1, 17, 40], np.int64)
    kc = np.zeros((NB, BS, H, D), np.float32)
    vc = np.zeros_like(kc)
    b.append(key, key, slots, kc, vc)
    b.append(key, key, slots, kc, vc)
    # Another cache (a changed pointer): its bytes are written, not kc's.
    kc2, vc2 = np.zeros_like(kc), np.zeros_like(vc)
    b.append(key, key, slots, kc2, vc2)
    want, _ = flash_reference(key, key, np.zeros_like(kc), vc, slots)
    assert (bits(kc2) == bits(want)).all()
    # A changed shape, stride or dtype is refused by kvrt, as the first time.
    with pytest.raises(kvgen.InvalidArgumentError, match="key"):
        b.append(key[:, :, : D // 2], key, slots, kc, vc)
    wide = np.zeros((NB, BS, H, 2 * D), np.float32)
    with pytest.raises(kvgen.InvalidArgumentError, match="key_cache"):
        b.append(key, key, slots, wide[..., ::2], vc)  # same shape, stride 2
    with pytest.raises(kvgen.InvalidArgumentError, match="slot_mapping"):
        b.append(key, key, slots.astype(np.int32), kc, vc)


def test_repeated_op_call_still_validates_every_change():
    """reshape_and_cache_flash remembers a call by its five descriptions;
    new tensors (pointers), shapes, strides or dtypes take the full path."""
    rng = np.random.default_rng(4)
    key = rng.standard_normal((5, H, D)).astype(np.float32)
    slots = np.array([3, 9, -1, 30, 64], np.int64)
    kc = np.zeros((NB, BS, H, D), np.float32)
    vc = np.zeros_like(kc)
    for _ in range(3):
        kvgen.ops.reshape_and_cache_flash(key, key, kc, vc, slots)
    want, _ = flash_reference(key, key, np.zeros_like(kc), vc, slots)
    assert (bits(kc) == bits(want)).all()
    kc2, vc2 = np.zeros_like(kc), np.zeros_like(vc)
    kvgen.ops.reshape_and_cache_flash(key, key, kc2, vc2, slots)
    assert (bits(kc2) == bits(want)).all()
    with pytest.raises(kvgen.InvalidArgumentError, match="slot_mapping"):
        kvgen.ops.reshape_and_cache_flash(key, key, kc, vc,
                                          slots.astype(np.int32))
    with pytest.raises(kvgen.InvalidArgumentError, match="key"):
        kvgen.ops.reshape_and_cache_flash(key[:2], key, kc, vc, slots)
    wide = np.zeros((NB, BS, H, 2 * D), np.float32)
    with pytest.raises(kvgen.InvalidArgumentError, match="key_cache"):
        kvgen.ops.reshape_and_cache_flash(key, key, wide[..., ::2], vc, slots)


def test_bundle_prologue_position_outside_the_cos_sin_cache():
    """A RoPE position outside [0, max_position) writes nothing for its
    token: no K, V or q_out row (docs/CONTRACT.md, "The fused prologue").
    Checked mode refuses the launch by name instead, nothing written, a
    padding token's position included (its Q row is written otherwise)."""
    maxpos, qh, n = 16, 4, 4
    b = kvgen.compile(layout="paged_nhd", block_size=BS, num_kv_heads=H,
                      head_dim=D, dtype="f32", target="host",
                      prologue={"q_heads": qh, "norm": "rms", "rope": "neox",
                                "rotary_dim": D})
    rng = np.random.default_rng(12)
    qkv = rng.standard_normal((n, qh + 2 * H, D)).astype(np.float32)
    query, key, value = qkv[:, :qh], qkv[:, qh:qh + H], qkv[:, qh + H:]
    kc = _poisoned((NB, BS, H, D), np.float32, rng)
    vc = _poisoned((NB, BS, H, D), np.float32, rng)
    q_out = _poisoned((n, qh, D), np.float32, rng)
    slots = np.array([3, -1, 40, 70], np.int64)  # token 1 pads
    prologue = dict(query=query, q_out=q_out,
                    cos_sin_cache=rng.standard_normal(
                        (maxpos, D)).astype(np.float32),
                    k_norm_weight=np.ones(D, np.float32),
                    q_norm_weight=np.ones(D, np.float32),
                    epsilon=np.array([1e-6], np.float32))
    before = [x.copy() for x in (kc, vc, q_out)]

    def unchanged():
        return all((bits(x) == bits(y)).all()
                   for x, y in zip((kc, vc, q_out), before))

    b.set_checked(True)
    try:
        for positions, message in (
                ([1, 2, maxpos, 7], r"rope_positions\[2\] = 16 is outside "
                 r"the cos/sin cache: cos_sin_cache has max_position 16"),
                ([1, -1, 3, 7], r"rope_positions\[1\] = -1 is outside")):
            with pytest.raises(kvgen.InvalidArgumentError, match=message):
                b.append(key, value, slots, kc, vc,
                         rope_positions=np.array(positions, np.int64),
                         **prologue)
            assert unchanged()
    finally:
        b.set_checked(False)
    # Unchecked, the launch runs and the kernel skips token 2: its slot and
    # its q_out row keep what they held; the padding token's Q is written.
    b.append(key, value, slots, kc, vc,
             rope_positions=np.array([1, 2, maxpos, 7], np.int64), **prologue)
    kflat, vflat = kc.reshape(-1, H, D), vc.reshape(-1, H, D)
    kbefore, vbefore = before[0].reshape(-1, H, D), before[1].reshape(-1, H, D)
    assert (bits(kflat[40]) == bits(kbefore[40])).all()
    assert (bits(vflat[40]) == bits(vbefore[40])).all()
    assert (bits(q_out[2]) == bits(before[2][2])).all()
    for t in (0, 1, 3):
        assert (bits(q_out[t]) != bits(before[2][t])).any(), t
    for t, slot in ((0, 3), (3, 70)):
        assert (bits(vflat[slot]) == bits(value[t])).all()
        assert (bits(kflat[slot]) != bits(kbefore[slot])).any()
