"""reshape_and_cache_flash with per-attention-head fp8 scales on a CUDA GPU,
byte for byte against torch's own division and cast, as vLLM's
test_reshape_and_cache_flash computes them. Needs torch with CUDA and the
per_head kernels: in KVGEN_CACHE_DIR (``python -m kvgen precompile ...
--kv-cache-dtypes auto,fp8_e4m3,fp8_e5m2 --scales per_tensor,per_head``,
docs/PYTHON.md) or from a kvgen compiler on this machine."""

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import kvgen  # noqa: E402  (after torch: registers torch.ops.kvgen)

H, D, BS, NB = 8, 128, 16, 64
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
DEV = "cuda"


def _reference(cache, rows, slots):
    ref = cache.clone()
    keep = slots >= 0
    s = slots[keep]
    ref[s // BS, s % BS] = rows[:len(slots)][keep]
    return ref


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("kind,torch_dtype", [
    ("fp8", "float8_e4m3fn"), ("fp8_e5m2", "float8_e5m2")])
@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_per_head_fp8_equals_torch_cast(dtype, kind, torch_dtype, layout):
    gen = torch.Generator(device=DEV).manual_seed(21)
    n, pad = 45, 3
    qkv = torch.randn(n + pad, 3, H, D, generator=gen, device=DEV)
    # Heads of very different ranges: one scale per head matters.
    qkv *= torch.logspace(-3, 3, H, device=DEV).view(1, 1, H, 1)
    qkv = qkv.to(DTYPES[dtype])
    key, value = qkv[:, 1], qkv[:, 2]
    # vLLM's test: amax over tokens and head_size, / 64.
    ks = (key.amax(dim=(0, 2)) / 64.0).to(torch.float32)
    vs = (value.amax(dim=(0, 2)) / 64.0).to(torch.float32)
    ks[1] = 1e30  # every value of head 1 goes to zero (its sign kept)
    f8 = getattr(torch, torch_dtype)
    qmax = torch.finfo(f8).max
    shape = (NB, H, BS, D) if layout == "HND" else (NB, BS, H, D)
    caches = [torch.randint(0, 255, shape, generator=gen, device=DEV,
                            dtype=torch.uint8) for _ in range(2)]
    if layout == "HND":
        caches = [c.permute(0, 2, 1, 3) for c in caches]
    kc, vc = caches
    slots = torch.randperm(NB * BS, generator=gen, device=DEV)[:n]
    slots[::7] = -1
    slots = slots.to(torch.int64)

    def quantized(x, s):
        return (x.float() / s.view(1, H, 1)).clamp(-qmax, qmax).to(
            f8).view(torch.uint8)

    want_k = _reference(kc, quantized(key, ks), slots)
    want_v = _reference(vc, quantized(value, vs), slots)
    kvgen.ops.reshape_and_cache_flash(key, value, kc.view(f8), vc.view(f8),
                                      slots, kind, ks, vs)
    torch.cuda.synchronize()
    assert torch.equal(kc, want_k)
    assert torch.equal(vc, want_v)


def _q8(x, s):
    return (x.float() / s.view(1, H, 1)).clamp(-448, 448).to(
        torch.float8_e4m3fn).view(torch.uint8)


def test_per_head_cuda_graph_replay_with_changed_scales():
    gen = torch.Generator(device=DEV).manual_seed(22)
    kc = torch.zeros(NB, BS, H, D, device=DEV, dtype=torch.uint8)
    vc = torch.zeros_like(kc)
    key = torch.randn(9, H, D, generator=gen, device=DEV).to(torch.bfloat16)
    ks = torch.linspace(0.01, 2.0, H, device=DEV)
    vs = torch.linspace(3.0, 0.5, H, device=DEV)
    slots = torch.arange(9, device=DEV, dtype=torch.int64) * 5
    # Warm up (kernel lookup, module load) outside the capture.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        kvgen.ops.reshape_and_cache_flash(key, key, kc, vc, slots, "fp8", ks,
                                          vs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kvgen.ops.reshape_and_cache_flash(key, key, kc, vc, slots, "fp8", ks,
                                          vs)
    for step in range(2):
        # The graph reads the scales where they lie: new values apply.
        ks.mul_(3.0)
        vs.copy_(torch.rand(H, generator=gen, device=DEV) + 0.1)
        want_k = _reference(kc, _q8(key, ks), slots)
        want_v = _reference(vc, _q8(key, vs), slots)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(kc, want_k), step
        assert torch.equal(vc, want_v), step


def test_per_head_under_torch_compile():
    gen = torch.Generator(device=DEV).manual_seed(23)
    kc = torch.zeros(NB, BS, H, D, device=DEV, dtype=torch.uint8)
    vc = torch.zeros_like(kc)

    def step(qkv, kc, vc, slots, ks, vs):
        kvgen.ops.reshape_and_cache_flash(qkv[:, 1], qkv[:, 2], kc, vc,
                                          slots, "fp8", ks, vs)
        return qkv[:, 0] + 1

    compiled = torch.compile(step, fullgraph=True)
    for n in (5, 9):
        qkv = torch.randn(n, 3, H, D, generator=gen, device=DEV).to(
            torch.float16)
        ks = torch.rand(H, generator=gen, device=DEV) + 0.05
        vs = torch.rand(H, generator=gen, device=DEV) + 0.05
        slots = torch.randperm(NB * BS, generator=gen, device=DEV)[:n]
        slots[0] = -1
        want_k = _reference(kc, _q8(qkv[:, 1], ks), slots)
        want_v = _reference(vc, _q8(qkv[:, 2], vs), slots)
        assert torch.equal(compiled(qkv, kc, vc, slots, ks, vs),
                           qkv[:, 0] + 1)
        torch.cuda.synchronize()
        assert torch.equal(kc, want_k) and torch.equal(vc, want_v)
