"""The drop-in ops on a CUDA GPU against PyTorch's own indexing, byte for
byte. Needs torch with CUDA; the kernels come from KVGEN_CACHE_DIR (filled
ahead of time by ``python -m kvgen precompile``, see docs/PYTHON.md) or from a
kvgen compiler on this machine."""

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import kvgen  # noqa: E402  (after torch: registers torch.ops.kvgen)

H, D, BS, NB = 8, 128, 16, 64
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
DEV = "cuda"


def _bits(t):
    return t.contiguous().view(torch.uint8)


def _caches(layout, dtype, gen):
    """vLLM's [nb, bs, H, D] caches, NHD, or HND memory seen through a
    permuted view; filled with noise (a stray write shows)."""
    shape = (NB, H, BS, D) if layout == "HND" else (NB, BS, H, D)
    out = []
    for _ in range(2):
        c = torch.randn(shape, generator=gen, device=DEV).to(dtype)
        out.append(c.permute(0, 2, 1, 3) if layout == "HND" else c)
    return out


def _reference(cache, rows, slots):
    """torch's own append: cache.view(-1, H, D)[slots] = rows (through the
    [nb, bs] indices, so HND views work too)."""
    ref = cache.clone()
    keep = slots >= 0
    s = slots[keep]
    ref[s // BS, s % BS] = rows[keep].to(ref.dtype)
    return ref


def _tokens(n, pad, dtype, gen):
    """K and V as views into one fused QKV tensor with `pad` rows more than
    the slots (vLLM's CUDA-graph padding)."""
    qkv = torch.randn(n + pad, 3, H, D, generator=gen, device=DEV).to(dtype)
    return qkv[:, 1], qkv[:, 2]


def _slots(n, gen):
    slots = torch.randperm(NB * BS, generator=gen, device=DEV)[:n]
    slots[::5] = -1  # padding tokens
    return slots.to(torch.int64)


def _flash(key, value, kc, vc, slots, kind="auto", ks=None, vs=None):
    try:
        kvgen.ops.reshape_and_cache_flash(key, value, kc, vc, slots, kind, ks,
                                          vs)
    except kvgen.KernelNotAvailableError as e:
        pytest.skip("kernels not available: %s" % str(e).splitlines()[0])


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("n", [1, 7, 300])
def test_reshape_and_cache_flash_equals_torch(layout, dtype, n):
    gen = torch.Generator(device=DEV).manual_seed(n)
    dt = DTYPES[dtype]
    kc, vc = _caches(layout, dt, gen)
    key, value = _tokens(n, 4, dt, gen)
    slots = _slots(n, gen)
    want_k = _reference(kc, key[:n], slots)
    want_v = _reference(vc, value[:n], slots)
    _flash(key, value, kc, vc, slots)
    torch.cuda.synchronize()
    assert torch.equal(_bits(kc), _bits(want_k))
    assert torch.equal(_bits(vc), _bits(want_v))


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_append_paged_kv_cache_equals_torch(layout, dtype):
    gen = torch.Generator(device=DEV).manual_seed(3)
    dt = DTYPES[dtype]
    shape = (NB, H, BS, D) if layout == "HND" else (NB, BS, H, D)
    kc = torch.randn(shape, generator=gen, device=DEV).to(dt)
    vc = torch.randn(shape, generator=gen, device=DEV).to(dt)
    seq_lens = torch.tensor([40, 9, 20, 1], dtype=torch.int32)
    appended = torch.tensor([5, 1, 20, 1], dtype=torch.int32)
    pages = (seq_lens + BS - 1) // BS
    kv_indptr = torch.cat([torch.zeros(1, dtype=torch.int32),
                           pages.cumsum(0).to(torch.int32)])
    kv_indices = torch.randperm(NB, generator=torch.Generator().manual_seed(1))
    kv_indices = kv_indices[:int(kv_indptr[-1])].to(torch.int32)
    batch = torch.repeat_interleave(torch.arange(4, dtype=torch.int32),
                                    appended)
    positions = torch.cat([torch.arange(s - a, s) for s, a in
                           zip(seq_lens.tolist(), appended.tolist())])
    positions = positions.to(torch.int32)
    nnz = int(appended.sum())
    key = torch.randn(nnz, H, D, generator=gen, device=DEV).to(dt)
    value = torch.randn(nnz, H, D, generator=gen, device=DEV).to(dt)
    page = kv_indices[(kv_indptr[batch.long()] + positions // BS).long()]
    row = positions % BS
    want_k, want_v = kc.clone(), vc.clone()
    if layout == "HND":
        want_k[page.long(), :, row.long()] = key
        want_v[page.long(), :, row.long()] = value
    else:
        want_k[page.long(), row.long()] = key
        want_v[page.long(), row.long()] = value
    last = (seq_lens - 1) % BS + 1
    try:
        kvgen.ops.append_paged_kv_cache(
            key, value, batch.to(DEV), positions.to(DEV), (kc, vc),
            kv_indices.to(DEV), kv_indptr.to(DEV), last.to(DEV), layout)
    except kvgen.KernelNotAvailableError as e:
        pytest.skip("kernels not available: %s" % str(e).splitlines()[0])
    torch.cuda.synchronize()
    assert torch.equal(_bits(kc), _bits(want_k))
    assert torch.equal(_bits(vc), _bits(want_v))


def _fast_hits():
    from kvgen import _ext

    return _ext.get().stats()[0]


def test_cuda_graph_replay_with_changed_slots():
    gen = torch.Generator(device=DEV).manual_seed(5)
    dt = torch.bfloat16
    n = 32
    kc, vc = _caches("NHD", dt, gen)
    key = torch.randn(n, H, D, generator=gen, device=DEV).to(dt)
    value = torch.randn(n, H, D, generator=gen, device=DEV).to(dt)
    slots = _slots(n, gen)
    # Warm up (kernel lookup, module load) outside the capture.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        _flash(key, value, kc, vc, slots)
    torch.cuda.current_stream().wait_stream(side)
    _flash(key, value, kc, vc, slots)  # the binding remembers the call
    hits = _fast_hits()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kvgen.ops.reshape_and_cache_flash(key, value, kc, vc, slots, "auto",
                                          None, None)
    # Captured by the binding's C path, on the capture stream (the exchange
    # API's current_work_stream).
    assert _fast_hits() == hits + 1
    for step in range(3):
        slots.copy_(_slots(n, gen))
        key.copy_(torch.randn(n, H, D, generator=gen, device=DEV).to(dt))
        value.copy_(torch.randn(n, H, D, generator=gen, device=DEV).to(dt))
        want_k = _reference(kc, key, slots)
        want_v = _reference(vc, value, slots)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(_bits(kc), _bits(want_k)), step
        assert torch.equal(_bits(vc), _bits(want_v)), step


def test_torch_compile_of_a_function_calling_the_op():
    gen = torch.Generator(device=DEV).manual_seed(9)
    dt = torch.float16
    kc, vc = _caches("NHD", dt, gen)
    scale = torch.ones(1, device=DEV)

    def attention_step(qkv, kc, vc, slots):
        k, v = qkv[:, 1] * 2, qkv[:, 2]  # work around the op, in the graph
        kvgen.ops.reshape_and_cache_flash(k, v, kc, vc, slots, "auto", scale,
                                          scale)
        return qkv[:, 0] + 1

    compiled = torch.compile(attention_step, fullgraph=True)
    for n in (5, 9):
        qkv = torch.randn(n, 3, H, D, generator=gen, device=DEV).to(dt)
        slots = _slots(n, gen)
        want_k = _reference(kc, qkv[:, 1] * 2, slots)
        want_v = _reference(vc, qkv[:, 2], slots)
        try:
            out = compiled(qkv, kc, vc, slots)
        except Exception as e:  # a missing kernel surfaces wrapped
            if "kernels" in str(e) and "not available" in str(e):
                pytest.skip(str(e).splitlines()[0])
            raise
        torch.cuda.synchronize()
        assert torch.equal(out, qkv[:, 0] + 1)
        assert torch.equal(_bits(kc), _bits(want_k))
        assert torch.equal(_bits(vc), _bits(want_v))


@pytest.mark.parametrize("kind,torch_dtype", [
    ("fp8", "float8_e4m3fn"), ("fp8_e4m3", "float8_e4m3fn"),
    ("fp8_e5m2", "float8_e5m2")])
@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
def test_fp8_equals_torch_cast(kind, torch_dtype, dtype):
    gen = torch.Generator(device=DEV).manual_seed(11)
    dt = DTYPES[dtype]
    n = 40
    kc = torch.randint(0, 255, (NB, BS, H, D), generator=gen, device=DEV,
                       dtype=torch.uint8)
    vc = kc.clone()
    key, value = _tokens(n, 0, dt, gen)
    key = key * 300  # some values saturate after the scale
    slots = _slots(n, gen)
    ks = torch.tensor([0.37], device=DEV)
    vs = torch.tensor([2.5], device=DEV)
    f8 = getattr(torch, torch_dtype)
    qmax = torch.finfo(f8).max

    def quantized(x, s):
        # torch's cast rounds to nearest even but does not saturate; vLLM's
        # kernels and kvgen's (docs/CONTRACT.md) clamp to the largest finite.
        return (x.float() / s).clamp(-qmax, qmax).to(f8).view(torch.uint8)

    want_k = _reference(kc, quantized(key, ks), slots)
    want_v = _reference(vc, quantized(value, vs), slots)
    _flash(key, value, kc, vc, slots, kind, ks, vs)
    torch.cuda.synchronize()
    assert torch.equal(kc, want_k)
    assert torch.equal(vc, want_v)


def test_launch_follows_the_current_stream():
    gen = torch.Generator(device=DEV).manual_seed(13)
    dt = torch.bfloat16
    kc, vc = _caches("NHD", dt, gen)
    n = 64
    slots = _slots(n, gen)
    key = torch.empty(n, H, D, device=DEV, dtype=dt)
    _flash(key, key, kc, vc, slots)  # kernel lookup outside the timing
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)  # the producer is still busy...
        key.copy_(torch.randn(n, H, D, generator=gen, device=DEV).to(dt))
        want = _reference(kc, key, slots)
        kvgen.ops.reshape_and_cache_flash(key, key, kc, vc, slots)
        hits = _fast_hits()
        kvgen.ops.reshape_and_cache_flash(key, key, kc, vc, slots)  # C's
        assert _fast_hits() == hits + 1
    torch.cuda.synchronize()
    assert torch.equal(_bits(kc), _bits(want))


def test_bad_tensor_raises_not_crashes():
    kc = torch.zeros(NB, BS, H, D, device=DEV, dtype=torch.bfloat16)
    key = torch.zeros(3, H, D, device=DEV, dtype=torch.bfloat16)
    with pytest.raises(kvgen.InvalidArgumentError, match="slot_mapping"):
        kvgen.ops.reshape_and_cache_flash(
            key, key, kc, kc.clone(),
            torch.zeros(3, device=DEV, dtype=torch.int32))
    with pytest.raises(kvgen.InvalidArgumentError):
        kvgen.ops.reshape_and_cache_flash(  # the slots live on the host
            key, key, kc, kc.clone(), torch.zeros(3, dtype=torch.int64))


def _pdl_bundle():
    """bench-pdl.bundle.json (kvgen --programmatic-launch), staged beside the
    bench's bundles; KVGEN_PDL_BUNDLE names another."""
    import os

    path = os.environ.get("KVGEN_PDL_BUNDLE") or os.path.join(
        os.environ.get("KVGEN_BUILD_DIR", "build"), "bench",
        "bench-pdl.bundle.json")
    if not os.path.exists(path):
        pytest.skip("no programmatic-launch bundle at %s" % path)
    bundle = kvgen.Bundle.load(path)
    assert bundle.waits_for_producer, "%s has no waiting kernel" % path
    return bundle


@pytest.mark.parametrize("graph", [False, True])
def test_programmatic_launch_after_a_producer_appends_its_bytes(graph):
    """Each layer: a producer writes K/V, the append (launched with
    programmatic stream serialization) copies them; the append must see the
    producer's bytes of its own layer, never the previous layer's."""
    bundle = _pdl_bundle()
    name = bundle.waits_for_producer[0]
    nb = 256
    layers, n = 8, 64
    gen = torch.Generator(device=DEV).manual_seed(5)
    base = torch.randn(n, 3, H, D, generator=gen, device=DEV).to(
        torch.bfloat16)
    qkv = torch.empty_like(base)
    perm = torch.randperm(nb * BS, generator=gen, device=DEV)
    slots = [perm[l * n:(l + 1) * n].to(torch.int64) for l in range(layers)]
    kc = torch.empty(nb, BS, H, D, dtype=torch.bfloat16, device=DEV)
    vc = torch.empty_like(kc)
    kc.view(torch.int16).fill_(-1)
    vc.view(torch.int16).fill_(-1)
    want_k, want_v = kc.clone(), vc.clone()
    for l in range(layers):
        rows = torch.add(base, float(l + 1))
        want_k.view(-1, H, D)[slots[l]] = rows[:, 1]
        want_v.view(-1, H, D)[slots[l]] = rows[:, 2]

    bundle.set_programmatic_launch(True)

    def run():
        for l in range(layers):
            torch.add(base, float(l + 1), out=qkv)
            bundle.append(qkv[:, 1], qkv[:, 2], slots[l], kc, vc, kernel=name,
                          variant="vector")

    if graph:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            run()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        kc.view(torch.int16).fill_(-1)
        vc.view(torch.int16).fill_(-1)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            run()
        g.replay()
    else:
        run()
    torch.cuda.synchronize()
    bundle.set_programmatic_launch(False)
    assert torch.equal(_bits(kc), _bits(want_k))
    assert torch.equal(_bits(vc), _bits(want_v))


# vLLM's concat_and_cache_mla: DeepSeek-V3's latent cache, 512 + 64, block 64.
MLA_RANK, MLA_ROPE, MLA_BS, MLA_NB = 512, 64, 64, 32


@pytest.mark.parametrize("kind", ["auto", "fp8_e4m3"])
def test_concat_and_cache_mla_equals_torch(kind):
    gen = torch.Generator(device=DEV).manual_seed(12)
    n, pad = 37, 3
    # kv_c and k_pe as column ranges of one projection output, 3 rows of
    # CUDA-graph padding past slot_mapping.
    proj = torch.randn(n + pad, MLA_RANK + MLA_ROPE + 64, generator=gen,
                       device=DEV).to(torch.bfloat16)
    kv_c, k_pe = proj[:, :MLA_RANK], proj[:, MLA_RANK:MLA_RANK + MLA_ROPE]
    entry = MLA_RANK + MLA_ROPE
    cache = torch.randn(MLA_NB, MLA_BS, entry, generator=gen, device=DEV)
    scale = torch.tensor([0.05], device=DEV)
    if kind == "auto":
        cache = cache.to(torch.bfloat16)
    else:
        cache = cache.to(torch.float8_e4m3fn).view(torch.uint8)
    slots = torch.randperm(MLA_NB * MLA_BS, generator=gen, device=DEV)[:n]
    slots[::6] = -1
    slots = slots.to(torch.int64)
    rows = torch.cat([kv_c[:n], k_pe[:n]], dim=1)
    if kind != "auto":
        rows = (rows.float() / scale).to(torch.float8_e4m3fn).view(torch.uint8)
    ref = cache.clone()
    keep = slots >= 0
    s = slots[keep]
    ref[s // MLA_BS, s % MLA_BS] = rows[keep].to(ref.dtype)
    try:
        kvgen.ops.concat_and_cache_mla(kv_c, k_pe, cache, slots, kind, scale)
    except kvgen.KernelNotAvailableError as e:
        pytest.skip("kernels not available: %s" % str(e).splitlines()[0])
    torch.cuda.synchronize()
    assert torch.equal(_bits(cache), _bits(ref))
