"""reshape_and_cache_flash with vLLM's per-attention-head fp8 scales
(k_scale, v_scale of shape [num_kv_heads]) on host kernels: every cache byte
equals the plain reference (element (t, h, d) stored as fp8(x / k_scale[h])),
the memo keeps per-tensor and per-head plans apart, bad scales are refused
by name with nothing written, and precompile makes the per-head kernels."""

import os
import subprocess
import sys

import numpy as np
import pytest

import kvgen
from kvgen import precompile
from reference import flash_reference, fp8_bytes, fp8_quantized

pytestmark = pytest.mark.usefixtures("compiler_path")

NB, BS, H, D = 5, 8, 4, 32
DTYPES = {"f16": np.float16, "f32": np.float32}
PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_fp8_reference_encodes_known_bytes():
    # The reference itself, on values whose bytes the formats define.
    e4m3 = fp8_bytes(np.array([448, 464, 1e9, -np.inf, 2.0 ** -9, 2.0 ** -10,
                               1.5 * 2.0 ** -9, -0.0, 1.0, -2.5], np.float32),
                     "fp8_e4m3")
    assert list(e4m3) == [0x7E, 0x7E, 0x7E, 0xFE, 0x01, 0x00, 0x02, 0x80,
                          0x38, 0xC2]
    e5m2 = fp8_bytes(np.array([57344, 1e9, 2.0 ** -16, 1.0, -0.0, 1.25],
                              np.float32), "fp8_e5m2")
    assert list(e5m2) == [0x7B, 0x7B, 0x01, 0x3C, 0x80, 0x3D]


def _inputs(rng, source, layout, n=13, pad=3):
    """key and value (views into one QKV buffer, `pad` CUDA-graph rows past
    slot_mapping), uint8 caches of random bytes, slots with padding."""
    dt = DTYPES[source]
    qkv = rng.standard_normal((n + pad, 3, H, D)).astype(np.float32)
    # Per head: values that saturate, values that go subnormal, and between.
    qkv *= np.array([300.0, 1.0, 1e-3, 40.0], np.float32).reshape(1, 1, H, 1)
    qkv = qkv.astype(dt)
    if layout == "HND":
        def cache():
            return rng.integers(0, 256, (NB, H, BS, D), np.uint8).transpose(
                0, 2, 1, 3)
    else:
        def cache():
            return rng.integers(0, 256, (NB, BS, H, D), np.uint8)
    slots = rng.permutation(NB * BS)[:n].astype(np.int64)
    slots[[1, 6]] = -1
    return qkv[:, 1], qkv[:, 2], cache(), cache(), slots


K_SCALE = np.array([0.37, 2.5, 1.0 / 3, 0.0078125], np.float32)
V_SCALE = np.array([1.5, 0.01, 7.0, 0.2], np.float32)


def _expected(key, value, kc, vc, slots, ks, vs, kind):
    fmt = "fp8_e5m2" if kind == "fp8_e5m2" else "fp8_e4m3"
    return flash_reference(fp8_quantized(key, ks, fmt),
                           fp8_quantized(value, vs, fmt), kc, vc, slots)


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("source", sorted(DTYPES))
@pytest.mark.parametrize("kind", ["fp8", "fp8_e4m3", "fp8_e5m2"])
def test_per_head_fp8_equals_reference(kind, source, layout):
    rng = np.random.default_rng(31)
    key, value, kc, vc, slots = _inputs(rng, source, layout)
    want_k, want_v = _expected(key, value, kc, vc, slots, K_SCALE, V_SCALE,
                               kind)
    kvgen.ops.reshape_and_cache_flash(key, value, kc, vc, slots, kind,
                                      K_SCALE, V_SCALE)
    assert (kc == want_k).all()
    assert (vc == want_v).all()


@pytest.mark.parametrize("kind", ["fp8_e4m3", "fp8_e5m2"])
def test_per_tensor_and_per_head_plans_are_kept_apart(kind):
    """The same tensors' shapes with [1] and [H] scales, alternately: each
    call takes its own kernel (the memo keys on the granularity)."""
    rng = np.random.default_rng(5)
    key, value, kc, vc, slots = _inputs(rng, "f16", "NHD")
    one_k, one_v = K_SCALE[:1].copy(), V_SCALE[1:2].copy()
    for ks, vs in ((one_k, one_v), (K_SCALE, V_SCALE), (one_k, one_v),
                   (np.float32(2.0) * K_SCALE, V_SCALE)):
        want_k, want_v = _expected(key, value, kc, vc, slots, ks, vs, kind)
        kvgen.ops.reshape_and_cache_flash(key, value, kc, vc, slots, kind,
                                          ks, vs)
        assert (kc == want_k).all() and (vc == want_v).all(), (ks, vs)


def test_one_kv_head_takes_a_one_element_scale_per_tensor():
    # With one KV head, [1] is both vLLM's shapes: the per-tensor kernel.
    rng = np.random.default_rng(9)
    key = (rng.standard_normal((4, 1, D)) * 50).astype(np.float32)
    kc = rng.integers(0, 256, (2, BS, 1, D), np.uint8)
    vc = kc.copy()
    slots = np.array([3, 0, -1, 15], np.int64)
    s = np.array([0.5], np.float32)
    want_k, want_v = _expected(key, key, kc, vc, slots, s, s, "fp8")
    kvgen.ops.reshape_and_cache_flash(key, key, kc, vc, slots, "fp8", s, s)
    assert (kc == want_k).all() and (vc == want_v).all()


def _strided_heads():
    return np.ones(2 * H, np.float32)[::2]


# (k_scale, v_scale, what the refusal says)
BAD_SCALES = [
    (np.ones(H - 1, np.float32), V_SCALE,
     "k_scale: shape [3]; expected one scale (shape [] or [1]) or one per KV "
     "head (shape [4])"),
    (K_SCALE, np.ones(H + 1, np.float32),
     "v_scale: shape [5]; expected one scale"),
    (K_SCALE.reshape(1, H), V_SCALE.reshape(1, H),
     "k_scale: shape [1, 4]; expected one scale"),
    (K_SCALE, np.ones((2, 2), np.float32), "v_scale: shape [2, 2]"),
    (np.ones(0, np.float32), V_SCALE, "k_scale: shape [0]"),
    (K_SCALE, V_SCALE[:1].copy(),
     "k_scale [4] and v_scale [1]: one is per_head, the other per_tensor; "
     "both must be [1] (per tensor) or both [4] (per head)"),
    (np.ones(1, np.float32), V_SCALE,
     "k_scale [1] and v_scale [4]: one is per_tensor, the other per_head"),
    (_strided_heads(), V_SCALE,
     "k_scale: [4] with stride 2; a per-head scale must be contiguous"),
    (K_SCALE, None, "v_scale: an fp8 cache needs the scale tensor"),
    (K_SCALE.astype(np.float16), V_SCALE,
     "key_scale: dtype is f16 but the kernel"),
]


@pytest.mark.parametrize("k_scale,v_scale,says", BAD_SCALES,
                         ids=[s.split(";")[0] for *_, s in BAD_SCALES])
def test_bad_scales_are_refused_by_name(k_scale, v_scale, says):
    rng = np.random.default_rng(2)
    key, value, kc, vc, slots = _inputs(rng, "f32", "NHD")
    before_k, before_v = kc.copy(), vc.copy()
    with pytest.raises(kvgen.InvalidArgumentError) as e:
        kvgen.ops.reshape_and_cache_flash(key, value, kc, vc, slots,
                                          "fp8_e4m3", k_scale, v_scale)
    assert says in str(e.value)
    assert (kc == before_k).all() and (vc == before_v).all()


def test_auto_ignores_the_scales_as_vllm_does():
    rng = np.random.default_rng(4)
    key = rng.standard_normal((3, H, D)).astype(np.float32)
    kc = np.zeros((NB, BS, H, D), np.float32)
    vc = np.zeros_like(kc)
    slots = np.array([0, 9, -1], np.int64)
    want_k, want_v = flash_reference(key, key, kc, vc, slots)
    kvgen.ops.reshape_and_cache_flash(key, key, kc, vc, slots, "auto",
                                      K_SCALE, V_SCALE)
    assert (kc == want_k).all() and (vc == want_v).all()


def test_registered_bundle_serves_only_its_granularity(monkeypatch):
    """A registered per-tensor fp8 bundle never serves [H] scales (its kernel
    reads one scale); a registered per-head one does, without compiling."""
    fields = dict(target="host", layout="paged_nhd", block_size=BS,
                  num_kv_heads=H, head_dim=D, dtype="f32")
    per_tensor = kvgen.compile(quant="fp8_e4m3", **fields)
    per_head = kvgen.compile(quant="fp8_e4m3,per_head,static", **fields)
    compiled = []
    real = kvgen.compiler.compile

    def counting(*args, **kwargs):
        compiled.append(kwargs.get("quant"))
        return real(*args, **kwargs)

    monkeypatch.setattr(kvgen.compiler, "compile", counting)
    rng = np.random.default_rng(12)
    try:
        for bundle, compiles in ((per_tensor, 1), (per_head, 0)):
            kvgen.ops.register(bundle)
            compiled.clear()
            key, value, kc, vc, slots = _inputs(rng, "f32", "NHD")
            want_k, want_v = _expected(key, value, kc, vc, slots, K_SCALE,
                                       V_SCALE, "fp8")
            kvgen.ops.reshape_and_cache_flash(key, value, kc, vc, slots,
                                              "fp8", K_SCALE, V_SCALE)
            assert (kc == want_k).all() and (vc == want_v).all()
            assert len(compiled) == compiles, compiled
    finally:
        for b in (per_tensor, per_head):
            if b in kvgen.ops._registered:
                kvgen.ops._registered.remove(b)
        kvgen.ops._plans.clear()


# precompile ------------------------------------------------------------------

def _descriptions(flags):
    import argparse

    ns = argparse.Namespace(model=None, mla=None, num_kv_heads="2",
                            head_dim="32", tp=None, dtypes=None,
                            block_size="16", layouts="paged_nhd",
                            kv_cache_dtypes="auto,fp8_e4m3,fp8_e5m2",
                            scales="per_tensor")
    for k, v in flags.items():
        setattr(ns, k, v)
    return [d.get("quant") for d in precompile.descriptions(ns)]


def test_precompile_defaults_are_per_tensor():
    assert _descriptions({}) == [None, "fp8_e4m3", "fp8_e5m2"]


def test_precompile_scales_per_head():
    assert _descriptions({"scales": "per_head"}) == [
        None, "fp8_e4m3,per_head,static", "fp8_e5m2,per_head,static"]
    assert _descriptions({"scales": "per_tensor,per_head"}) == [
        None, "fp8_e4m3", "fp8_e4m3,per_head,static", "fp8_e5m2",
        "fp8_e5m2,per_head,static"]


def _precompile(args):
    return subprocess.run([sys.executable, "-m", "kvgen", "precompile"] +
                          args, text=True, capture_output=True,
                          cwd=PYTHON_DIR, timeout=300)


@pytest.mark.parametrize("flags,says", [
    (["--scales", "per_token"], "--scales: 'per_token' is not per_tensor or "
     "per_head"),
    (["--scales", "per_head"], "--scales per_head needs an fp8 "
     "--kv-cache-dtypes"),
    (["--scales", "per_head", "--kv-cache-dtypes", "fp8", "--mla",
      "512+64"], "--scales per_head: a latent (MLA) cache takes one "
     "per_tensor scale"),
])
def test_precompile_bad_scales_flag_is_one_line_and_exit_2(tmp_path, flags,
                                                           says):
    cache = tmp_path / "cache"
    out = _precompile(["--cache-dir", str(cache), "--target", "host"] + flags)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], out.stderr
    assert not cache.exists()


def _entries(cache):
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(cache)
                  for f in fs)


def test_precompiled_per_head_kernels_serve_the_op(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    out = _precompile(["--cache-dir", str(cache), "--target", "host",
                       "--num-kv-heads", str(H), "--head-dim", str(D),
                       "--block-size", str(BS), "--dtypes", "f32",
                       "--layouts", "paged_nhd", "--kv-cache-dtypes",
                       "fp8_e5m2", "--scales", "per_head"])
    assert out.returncode == 0, out.stderr
    assert "1 descriptions cached, 0 failed" in out.stdout
    assert "quant=fp8_e5m2,per_head,static" in out.stdout
    made = _entries(cache)
    monkeypatch.setenv("KVGEN_CACHE_DIR", str(cache))
    rng = np.random.default_rng(8)
    key, value, kc, vc, slots = _inputs(rng, "f32", "NHD")
    want_k, want_v = _expected(key, value, kc, vc, slots, K_SCALE, V_SCALE,
                               "fp8_e5m2")
    kvgen.ops.reshape_and_cache_flash(key, value, kc, vc, slots, "fp8_e5m2",
                                      K_SCALE, V_SCALE)
    assert (kc == want_k).all() and (vc == want_v).all()
    assert _entries(cache) == made  # found there, nothing compiled


# torch (CPU) -----------------------------------------------------------------

def _torch_inputs(torch, source, cache_dtype, layout):
    rng = np.random.default_rng(17)
    key, value, kc, vc, slots = _inputs(rng, source, layout)
    t = torch.from_numpy
    # vLLM's per-head scales: amax over tokens and head_size, / 64.
    ks = (t(np.ascontiguousarray(key)).abs().float().amax(dim=(0, 2)) / 64)
    vs = (t(np.ascontiguousarray(value)).abs().float().amax(dim=(0, 2)) / 64)
    want_k, want_v = _expected(key, value, kc, vc, slots, ks.numpy(),
                               vs.numpy(), cache_dtype)
    tkc, tvc = t(kc), t(vc)
    if cache_dtype != "uint8":
        f8 = getattr(torch, {"fp8_e4m3": "float8_e4m3fn",
                             "fp8_e5m2": "float8_e5m2"}[cache_dtype])
        tkc, tvc = tkc.view(f8), tvc.view(f8)
    return (t(key), t(value), tkc, tvc, t(slots), ks, vs, want_k, want_v)


def _bytes(torch, cache):
    return cache.view(torch.uint8).numpy()


@pytest.mark.parametrize("path", ["direct", "torch.ops", "compiled"])
@pytest.mark.parametrize("kind", ["fp8_e4m3", "fp8_e5m2"])
def test_torch_cpu_per_head(kind, path):
    torch = pytest.importorskip("torch")
    key, value, kc, vc, slots, ks, vs, want_k, want_v = _torch_inputs(
        torch, "f16", kind, "HND" if path == "torch.ops" else "NHD")

    def step(key, value, kc, vc, slots, ks, vs):
        kvgen.ops.reshape_and_cache_flash(key, value, kc, vc, slots, kind,
                                          ks, vs)
        return key[:1] + 1

    if path == "torch.ops":
        kvgen.ops.register_torch_ops()
        torch.ops.kvgen.reshape_and_cache_flash(key, value, kc, vc, slots,
                                                kind, ks, vs)
    elif path == "compiled":
        kvgen.ops.register_torch_ops()
        torch.compile(step, fullgraph=True)(key, value, kc, vc, slots, ks, vs)
    else:
        step(key, value, kc, vc, slots, ks, vs)
    assert (_bytes(torch, kc) == want_k).all()
    assert (_bytes(torch, vc) == want_v).all()


def test_torch_cpu_uint8_cache_and_mixed_scales_refused():
    torch = pytest.importorskip("torch")
    key, value, kc, vc, slots, ks, vs, want_k, want_v = _torch_inputs(
        torch, "f32", "uint8", "NHD")
    kvgen.ops.reshape_and_cache_flash(key, value, kc, vc, slots, "fp8", ks,
                                      vs)
    assert (kc.numpy() == want_k).all() and (vc.numpy() == want_v).all()
    before = kc.clone()
    with pytest.raises(kvgen.InvalidArgumentError, match="k_scale \\[4\\] "
                       "and v_scale \\[\\]"):
        kvgen.ops.reshape_and_cache_flash(key * 2, value, kc, vc, slots,
                                          "fp8", ks, torch.tensor(1.0))
    assert torch.equal(kc, before)
