"""The kinds table (kvgen/_kinds.py, from python/src/kvext.c): every kind of
include/kvgen/ABI/KernelKinds.def is there with its traits, its launch and
its tensors, and the package's launches, descriptions and C API are made from
it rather than from per-kind code."""

import inspect

import pytest

import kvgen
from kvgen import _kinds, capi, compiler

pytestmark = pytest.mark.usefixtures("compiler_path")

H, D, BS, NB = 4, 64, 16, 8


def test_every_kind_has_traits_and_a_launch():
    kinds = _kinds.all_kinds()
    names = [k.name for k in kinds]
    # KernelKinds.def's order: the binding's kind numbers.
    assert names[:4] == ["append", "slot_mapping", "fused_append", "gather"]
    assert [k.index for k in kinds] == list(range(len(kinds)))
    for k in kinds:
        assert k.rows in ("Into", "OutOf", "None")
        assert k.slot in ("Mapping", "BlockTable", "PageTable")
        assert k.entry in ("KV", "Latent", "None")
        assert k.entry_point.startswith("kvrt_")
        assert k.writes and set(k.writes) <= set(k.tensors)
        assert set(k.optional) <= set(k.tensors)
        # Rows moved: a variant to pick; none moved: one kernel.
        assert k.has_variant == (k.rows != "None")
    append = _kinds.by_name("append")
    assert append.tensors == (
        "key", "value", "slot_mapping", "key_cache", "value_cache",
        "key_scale", "value_scale", "key_scale_cache", "value_scale_cache",
        "query", "q_out", "rope_positions", "cos_sin_cache", "k_norm_weight",
        "q_norm_weight", "epsilon", "q_scale")
    assert append.optional == append.tensors[5:]
    # A fused prologue's tensors, by kvrt's field names.
    assert append.prologue == append.tensors[9:]
    assert _kinds.by_name("fused_append").prologue == (
        "query", "q_out", "cos_sin_cache", "k_norm_weight", "q_norm_weight",
        "epsilon", "q_scale")
    assert _kinds.by_name("gather").prologue == ()
    assert _kinds.by_name("mla_fused_append").entry == "Latent"
    assert _kinds.by_name("gather").rows == "OutOf"
    assert _kinds.by_method("build_slot_mapping").name == "slot_mapping"


def test_bundle_methods_come_from_the_table():
    """Each kind's Bundle method takes its struct's tensors, the scales and
    a fused prologue's tensors as keywords, and a variant where the kind has
    one."""
    for k in _kinds.all_kinds():
        sig = inspect.signature(getattr(kvgen.Bundle, k.method, None) or
                                _method(k))
        params = list(sig.parameters.values())[1:]
        positional = [p.name for p in params
                      if p.kind is p.POSITIONAL_OR_KEYWORD]
        keyword = [p.name for p in params if p.kind is p.KEYWORD_ONLY]
        assert positional == [t for t in k.tensors if t not in k.optional]
        assert keyword == (["kernel"] + (["variant"] if k.has_variant else [])
                           + list(k.optional) + ["stream"])
    sig = inspect.signature(kvgen.Bundle.append)
    assert str(sig) == (
        "(self, key, value, slot_mapping, key_cache, value_cache, *, "
        "kernel=None, variant='auto', key_scale=None, value_scale=None, "
        "key_scale_cache=None, value_scale_cache=None, query=None, "
        "q_out=None, rope_positions=None, cos_sin_cache=None, "
        "k_norm_weight=None, q_norm_weight=None, epsilon=None, "
        "q_scale=None, stream=None)")


def _method(kind):
    b = kvgen.Bundle.__new__(kvgen.Bundle)
    getattr(b, kind.method)  # made on first use
    return getattr(kvgen.Bundle, kind.method)


def test_unknown_attribute_is_attribute_error():
    b = kvgen.compile(layout="paged_nhd", block_size=BS, num_kv_heads=H,
                      head_dim=D, dtype="f32", target="host")
    with pytest.raises(AttributeError, match="no attribute 'mla_gather'"):
        b.mla_gather
    assert "paged_kv_append" in dir(b)


def test_describe_chooses_kinds_by_traits():
    kv = compiler.describe(layout="paged_nhd", num_kv_heads=H, head_dim=D)
    assert [line.split()[0] for line in kv.splitlines()[1:-1]] == [
        "kv.append", "kv.slot_mapping", "kv.fused_append",
        "kv.paged_kv_append"]
    latent = compiler.describe(layout="paged_nhd", kv_lora_rank=512,
                               rope_dim=64, num_kv_heads=1, head_dim=576)
    lines = latent.splitlines()[1:-1]
    assert [line.split()[0] for line in lines] == [
        "kv.mla_append", "kv.slot_mapping", "kv.mla_fused_append"]
    # A kind that moves no rows takes no source dtype.
    assert lines[1].endswith(">") and lines[0].endswith("> from bf16")
    with pytest.raises(ValueError, match=r"kernels: 'gather' is not one of "
                       r"append, slot_mapping, fused_append, paged_kv_append"):
        compiler.describe(kernels=["gather"])
    with pytest.raises(ValueError, match=r"'append' is not one of mla_append, "
                       r"slot_mapping, mla_fused_append \(a latent cache\)"):
        compiler.describe(kernels=["append"], kv_lora_rank=512, rope_dim=64)


def test_capi_args_takes_a_kind_name():
    with pytest.raises(ValueError, match="kvrt_gather takes 9 tensors"):
        capi.Args("gather", None, 0, (None,) * 10)
    with pytest.raises(ValueError, match="kind: 'copy' is not one of append"):
        capi.Args("copy", None, 0, ())


def test_paged_kv_append_refuses_a_read_only_cache():
    """The caches a kind writes are its table's writes: a read-only NumPy
    cache is refused by name before kvrt sees it, for every kind that writes
    one (paged_kv_append's launch once took it)."""
    np = pytest.importorskip("numpy")
    b = kvgen.compile(layout="paged_nhd", block_size=BS, num_kv_heads=H,
                      head_dim=D, dtype="f32", target="host")
    key = np.ones((2, H, D), np.float32)
    batch = np.zeros(2, np.int32)
    positions = np.arange(2, dtype=np.int32)
    idx = np.zeros(1, np.int32)
    ptr = np.array([0, 1], np.int32)
    kc, vc = np.zeros((NB, BS, H, D), np.float32), np.zeros(
        (NB, BS, H, D), np.float32)
    vc.flags.writeable = False
    with pytest.raises(kvgen.InvalidArgumentError,
                       match="value_cache: the array is read-only"):
        b.paged_kv_append(key, key, batch, positions, idx, ptr, kc, vc)
    assert not kc.any()
