"""kvgen.vllm on CPU tensors: what it routes to kvgen, what it refuses and
how, and install() with and without vLLM's ops already defined. Needs torch
(skipped without it); vLLM's own cache test runs through
scripts/vllm-tests.sh."""

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import kvgen  # noqa: E402
import kvgen.vllm as kv  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.abspath(os.path.join(HERE, os.pardir, os.pardir))


def _flash(num_tokens=5, heads=2, dim=16, blocks=4, bs=8, dtype=torch.float32,
           cache_dtype=None):
    torch.manual_seed(0)
    key = torch.randn(num_tokens, heads, dim, dtype=dtype)
    value = torch.randn(num_tokens, heads, dim, dtype=dtype)
    cache_dtype = cache_dtype or dtype
    kc = torch.zeros(blocks, bs, heads, dim, dtype=cache_dtype)
    vc = torch.zeros(blocks, bs, heads, dim, dtype=cache_dtype)
    slots = torch.tensor([3, 0, 17, -1, 30][:num_tokens], dtype=torch.long)
    return key, value, kc, vc, slots


def test_not_provided_error_names_op_and_format():
    e = kv.NotProvidedError("swap_blocks_batch", "batched block copies")
    assert isinstance(e, NotImplementedError)
    assert isinstance(e, kvgen.KvgenError)
    assert (e.op, e.format) == ("swap_blocks_batch", "batched block copies")
    assert str(e) == ("kvgen does not provide vLLM's swap_blocks_batch: "
                      "batched block copies")


# The fp8_ds_mla gather checks its tensors as vLLM does first
# (test_fp8_ds_mla_gather_checks_then_is_not_provided).
@pytest.mark.parametrize("name", sorted(
    set(kv.NOT_PROVIDED) - {"cp_gather_and_upconvert_fp8_kv_cache"}))
def test_every_op_kvgen_lacks_refuses_by_name(name):
    with pytest.raises(kv.NotProvidedError, match=name) as info:
        getattr(kv, name)()
    assert info.value.op == name


def test_per_head_fp8_scales_store_each_head_by_its_scale(compiler_path):
    key, value, kc, vc, slots = _flash(cache_dtype=torch.uint8)
    k_scale = torch.tensor([0.5, 2.0])
    v_scale = torch.tensor([4.0, 0.25])
    kv.reshape_and_cache_flash(key, value, kc, vc, slots, "fp8", k_scale,
                               v_scale)
    for cache, src, scale in ((kc, key, k_scale), (vc, value, v_scale)):
        want = (src.float() / scale.view(1, -1, 1)).to(
            torch.float8_e4m3fn).view(torch.uint8)
        rows = cache.view(-1, *cache.shape[2:])
        for t, slot in enumerate(slots.tolist()):
            if slot >= 0:
                assert torch.equal(rows[slot], want[t]), (t, slot)


def test_per_head_fp8_scales_of_another_count_are_refused_before_writing():
    key, value, kc, vc, slots = _flash(cache_dtype=torch.uint8)
    scale = torch.ones(3)
    with pytest.raises(kvgen.InvalidArgumentError, match="k_scale"):
        kv.reshape_and_cache_flash(key, value, kc, vc, slots, "fp8", scale,
                                   scale)
    assert not kc.any() and not vc.any()


def _packed(hnd, heads=2, dim=16, v_dim=8, blocks=4, bs=8,
            dtype=torch.float32):
    """K and V caches as views of one layer buffer, K's head_size then V's
    per head and slot (vLLM's asymmetric layout)."""
    if hnd:
        packed = torch.zeros(blocks, heads, bs, dim + v_dim, dtype=dtype)
        kc, vc = packed.transpose(1, 2).split([dim, v_dim], dim=-1)
    else:
        packed = torch.zeros(blocks, bs, heads, dim + v_dim, dtype=dtype)
        kc, vc = packed.split([dim, v_dim], dim=-1)
    return packed, kc, vc


@pytest.mark.parametrize("hnd", [False, True])
def test_different_k_and_v_head_sizes_write_each_side(compiler_path, hnd):
    key, _, _, _, slots = _flash()
    value = torch.randn(5, 2, 8)
    packed, kc, vc = _packed(hnd)
    one = torch.ones(())
    kv.reshape_and_cache_flash(key, value, kc, vc, slots, "auto", one, one)
    want_k, want_v = torch.zeros_like(kc), torch.zeros_like(vc)
    for t, slot in enumerate(slots.tolist()):
        if slot >= 0:
            want_k[slot // 8, slot % 8] = key[t]
            want_v[slot // 8, slot % 8] = value[t]
    assert torch.equal(kc, want_k) and torch.equal(vc, want_v)


def test_different_head_sizes_with_per_head_fp8_scales(compiler_path):
    key, _, _, _, slots = _flash()
    value = torch.randn(5, 2, 8)
    packed, kc, vc = _packed(False, dtype=torch.uint8)
    k_scale = torch.tensor([0.5, 2.0])
    v_scale = torch.tensor([4.0, 0.25])
    kv.reshape_and_cache_flash(key, value, kc, vc, slots, "fp8", k_scale,
                               v_scale)
    for cache, src, scale in ((kc, key, k_scale), (vc, value, v_scale)):
        want = (src.float() / scale.view(1, -1, 1)).to(
            torch.float8_e4m3fn).view(torch.uint8)
        for t, slot in enumerate(slots.tolist()):
            if slot >= 0:
                assert torch.equal(cache[slot // 8, slot % 8], want[t]), t


def test_value_of_another_head_size_than_value_cache_is_refused(compiler_path):
    key, _, _, _, slots = _flash()
    value = torch.randn(5, 2, 16)
    packed, kc, vc = _packed(False)
    one = torch.ones(())
    with pytest.raises(kvgen.InvalidArgumentError,
                       match=r"value: shape\[2\] \(v_head_dim\) is 16"):
        kv.reshape_and_cache_flash(key, value, kc, vc, slots, "auto", one, one)
    assert not packed.any()


@pytest.mark.parametrize("dtype,provided", [
    ("nvfp4_ds_mla", False), ("fp8_ds_mla", False), ("fp8_inc", False),
    ("bogus", True)])
def test_cache_dtypes(dtype, provided):
    key, value, kc, vc, slots = _flash()
    one = torch.ones(())
    cls = kvgen.InvalidArgumentError if provided else kv.NotProvidedError
    with pytest.raises(cls, match=repr(dtype)):
        kv.reshape_and_cache_flash(key, value, kc, vc, slots, dtype, one, one)


def test_mla_skip_scale_is_refused():
    kv_c, k_pe = torch.randn(3, 512), torch.randn(3, 64)
    cache = torch.zeros(2, 16, 576, dtype=torch.uint8)
    slots = torch.tensor([0, 1, 2])
    one = torch.ones(())
    with pytest.raises(kv.NotProvidedError, match="skip_scale=True"):
        kv.concat_and_cache_mla(kv_c, k_pe, cache, slots, "fp8", one, True)
    assert not cache.any()


def _ds_mla_reference(kv_c, k_pe, cache, slots):
    """vLLM's fp8_ds_mla entry, written out from its kernel's definition
    (csrc/cache_kernels.cu): per 128 values, scale = 2^ceil(log2(max(amax /
    448, 1e-4))), q = fp8_e4m3(x / scale) saturated; then k_pe's bits, or
    zeros in a 656-byte row without k_pe."""
    want = cache.clone()
    bs, row = cache.shape[1], cache.shape[2]
    for i, s in enumerate(slots.tolist()):
        if s < 0:
            continue
        entry = want[s // bs, s % bs]
        for g in range(4):
            x = kv_c[i, g * 128:(g + 1) * 128].float()
            raw = torch.clamp(x.abs().max() / 448.0, min=1e-4)
            scale = torch.exp2(torch.ceil(torch.log2(raw)))
            q = (x / scale).clamp(-448, 448).to(torch.float8_e4m3fn)
            entry[g * 128:(g + 1) * 128] = q.view(torch.uint8)
            entry[512 + 4 * g:516 + 4 * g] = scale.reshape(1).view(
                torch.uint8)
        if row == 656:
            pe = (k_pe[i] if k_pe.shape[1] else
                  torch.zeros(64, dtype=kv_c.dtype))
            entry[528:] = pe.contiguous().view(torch.uint8)
    return want


@pytest.mark.parametrize("row,pe_dim,dtype", [
    (656, 64, torch.bfloat16), (656, 64, torch.float16),
    (656, 0, torch.bfloat16), (528, 0, torch.bfloat16)])
def test_fp8_ds_mla_writes_vllms_entry(row, pe_dim, dtype):
    """Every byte of the written entries against the format's definition,
    every other byte of the cache (and of a padded row) untouched."""
    torch.manual_seed(3)
    n, bs = 6, 16
    kv_c = torch.randn(n, 512, dtype=dtype) * 4
    kv_c[1, :128] = 0                  # a group of zeros: the 1e-4 floor
    kv_c[2, 130] = 3000                # saturation is not reached: amax scales
    k_pe = torch.randn(n, pe_dim, dtype=dtype)
    storage = torch.full((3, bs, row + 16), 0xA5, dtype=torch.uint8)
    cache = storage[:, :, :row]
    slots = torch.tensor([0, 17, 47, -1, 5, 33])
    want = _ds_mla_reference(kv_c, k_pe, cache, slots)
    kv.concat_and_cache_mla(kv_c, k_pe, cache, slots, "fp8_ds_mla",
                            torch.ones(()))
    assert torch.equal(cache, want)
    assert (storage[:, :, row:] == 0xA5).all()


@pytest.mark.parametrize("what,match", [
    ("rank", "kv_lora_rank must be 512 for fp8_ds_mla"),
    ("pe", "pe_dim must be 64 or 0 for fp8_ds_mla"),
    ("rows", "528-byte rows with pe_dim == 0"),
    ("f32", "must be 2 for fp8_ds_mla"),
])
def test_fp8_ds_mla_refuses_as_vllm_does(what, match):
    """vLLM's checks with its words, as a RuntimeError (vLLM's own) that is
    also kvgen's InvalidArgumentError; nothing is written."""
    kv_c, k_pe = torch.randn(3, 512).bfloat16(), torch.randn(3, 64).bfloat16()
    cache = torch.zeros(2, 16, 656, dtype=torch.uint8)
    if what == "rank":
        kv_c = torch.randn(3, 256).bfloat16()
    elif what == "pe":
        k_pe = torch.randn(3, 32).bfloat16()
    elif what == "rows":
        cache = torch.zeros(2, 16, 528, dtype=torch.uint8)
    else:
        kv_c, k_pe = kv_c.float(), k_pe.float()
    slots = torch.tensor([0, 1, 2])
    with pytest.raises(RuntimeError, match=match) as e:
        kv.concat_and_cache_mla(kv_c, k_pe, cache, slots, "fp8_ds_mla",
                                torch.ones(()))
    assert isinstance(e.value, kvgen.InvalidArgumentError)
    assert not cache.any()


def test_fp8_ds_mla_gather_checks_then_is_not_provided():
    args = (torch.zeros(1, 1, dtype=torch.int32),
            torch.zeros(1, dtype=torch.int32), 1)
    dst = torch.empty(1, 576, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="at least 656 bytes"):
        kv.cp_gather_and_upconvert_fp8_kv_cache(
            torch.zeros(2, 16, 528, dtype=torch.uint8), dst, *args)
    with pytest.raises(kv.NotProvidedError, match="fp8_ds_mla gathers"):
        kv.cp_gather_and_upconvert_fp8_kv_cache(
            torch.zeros(2, 16, 656, dtype=torch.uint8), dst, *args)


def test_interleaved_v_is_refused():
    with pytest.raises(kv.NotProvidedError, match="interleaved_v"):
        kv.reshape_and_cache(None, None, None, None, None, "auto", None, None,
                             True)


def test_reshape_and_cache_vectorized(compiler_path):
    """vLLM's x-vectorized cache through kvgen's vllm_vectorized kernel:
    K [nb, H, D / x, bs, x] with x = 16 bytes of the dtype, V [nb, H, D,
    bs]; -1 pads; rows past slot_mapping are ignored."""
    heads, dim, bs, blocks = 2, 16, 8, 4
    x = 16 // 4
    torch.manual_seed(1)
    key = torch.randn(6, heads, dim)
    value = torch.randn(6, heads, dim)
    kc = torch.zeros(blocks, heads, dim // x, bs, x)
    vc = torch.zeros(blocks, heads, dim, bs)
    slots = torch.tensor([3, 9, -1, 31, 16])
    one = torch.ones(())
    kv.reshape_and_cache(key, value, kc, vc, slots, "auto", one, one)
    want_k, want_v = torch.zeros_like(kc), torch.zeros_like(vc)
    for t, s in enumerate(slots.tolist()):
        if s < 0:
            continue
        b, o = divmod(s, bs)
        want_k[b, :, :, o, :] = key[t].reshape(heads, dim // x, x)
        want_v[b, :, :, o] = value[t]
    assert torch.equal(kc, want_k) and torch.equal(vc, want_v)


def test_reshape_and_cache_flash_routes_to_kvgen(compiler_path):
    key, value, kc, vc, slots = _flash()
    one = torch.ones(())
    kv.reshape_and_cache_flash(key, value, kc, vc, slots, "auto", one, one)
    for t, s in enumerate(slots.tolist()):
        if s >= 0:
            assert torch.equal(kc[s // 8, s % 8], key[t])
            assert torch.equal(vc[s // 8, s % 8], value[t])
    assert int((kc != 0).any(-1).any(-1).sum()) == 4


_INSTALL_SCRIPT = r"""
import sys, torch
if sys.argv[1] == "vllm-first":
    # vLLM's extension came first: its ops and kernels (registered here for
    # every backend, since torch lets Python replace a kernel that C++
    # registered, as vLLM's are, but not one that Python registered).
    lib = torch.library.Library("_C_cache_ops", "DEF")
    lib.define("reshape_and_cache_flash(Tensor key, Tensor value, Tensor! "
               "key_cache, Tensor! value_cache, Tensor slot_mapping, str "
               "kv_cache_dtype, Tensor k_scale, Tensor v_scale) -> ()")
    lib.define("concat_mla_q(Tensor ql_nope, Tensor q_pe, Tensor! q_out) -> "
               "()")
    def vllms(*args):
        raise RuntimeError("vLLM's kernel ran")
    lib.impl("reshape_and_cache_flash", vllms, "CompositeExplicitAutograd")
    lib.impl("concat_mla_q", vllms, "CompositeExplicitAutograd")
import kvgen.vllm as kv
state = kv.install()
assert kv.install() == state
print(state["reshape_and_cache_flash"], state.get("concat_mla_q"))
k = torch.randn(2, 1, 8)
kc = torch.zeros(2, 4, 1, 8)
vc = torch.zeros(2, 4, 1, 8)
one = torch.ones(())
torch.ops._C_cache_ops.reshape_and_cache_flash(
    k, k, kc, vc, torch.tensor([5, 0]), "auto", one, one)
assert torch.equal(kc[1, 1], k[0]) and torch.equal(vc[0, 0], k[1])
try:
    torch.ops._C_cache_ops.concat_mla_q(kc, vc, kc)
except Exception as e:
    print(type(e).__name__, e)
"""


@pytest.mark.parametrize("order,want", [
    ("kvgen-only", ["defined defined", "NotProvidedError kvgen does not "
                    "provide vLLM's concat_mla_q"]),
    ("vllm-first", ["overridden None", "RuntimeError vLLM's kernel ran"])])
def test_install(compiler_path, order, want):
    """Without vLLM every op is defined (kvgen's or a refusal); after vLLM's
    extension only the ops kvgen provides are replaced."""
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    proc = subprocess.run([sys.executable, "-c", _INSTALL_SCRIPT, order],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == want[0]
    assert lines[1].startswith(want[1])


def test_reshape_and_cache_vectorized_fp8(compiler_path):
    """fp8 in the x-vectorized cache (x = 16 one-byte elements): the bytes
    of (x / k_scale) cast to e4m3, as torch casts them."""
    heads, dim, bs, blocks = 2, 32, 4, 3
    torch.manual_seed(2)
    key = torch.randn(3, heads, dim)
    value = torch.randn(3, heads, dim)
    kc = torch.zeros(blocks, heads, dim // 16, bs, 16, dtype=torch.uint8)
    vc = torch.zeros(blocks, heads, dim, bs, dtype=torch.uint8)
    slots = torch.tensor([5, 0, 11])
    ks, vs = torch.tensor(0.5), torch.tensor(0.25)
    kv.reshape_and_cache(key, value, kc, vc, slots, "fp8", ks, vs)

    def fp8(x, s):
        return (x.float() / s).to(torch.float8_e4m3fn).view(torch.uint8)

    for t, s in enumerate(slots.tolist()):
        b, o = divmod(s, bs)
        assert torch.equal(kc[b, :, :, o, :],
                           fp8(key[t], ks).reshape(heads, dim // 16, 16))
        assert torch.equal(vc[b, :, :, o], fp8(value[t], vs))
