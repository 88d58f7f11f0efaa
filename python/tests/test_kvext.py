"""kvgen._kvext, the compiled binding: its fast calls (tensors read through
torch's DLPack C exchange API, the call's signature looked up in the table
Python fills) write the bytes the Python-described path writes; a missing or
unloadable extension is an error that names the file; torch.compile sees all
three ops as custom ops. CPU tensors, host kernels."""

import pytest

import kvgen
from kvgen import _ext, errors, ops

pytestmark = pytest.mark.usefixtures("compiler_path")

H, D, BS, NB = 4, 64, 16, 8


def _fresh_key():
    torch = pytest.importorskip("torch")
    torch.manual_seed(7)
    return torch


def _flash_args(torch, fp8, hnd, per_head=False):
    qkv = torch.randn(9, 3, H, D, dtype=torch.bfloat16)
    key, value = qkv[:, 1], qkv[:, 2]  # strided rows, 2 padding rows
    slots = torch.tensor([3, -1, 17, 100, 5, 64, 120], dtype=torch.int64)
    dtype = torch.uint8 if fp8 else torch.bfloat16
    if hnd:
        kc, vc = [torch.full((NB, H, BS, D), 0x5A, dtype=dtype).permute(
            0, 2, 1, 3) for _ in range(2)]
    else:
        kc, vc = [torch.full((NB, BS, H, D), 0x5A, dtype=dtype)
                  for _ in range(2)]
    if per_head:
        ks, vs = torch.rand(H) + 0.5, torch.rand(H) + 0.5
    else:
        ks, vs = torch.tensor([0.5]), torch.tensor(2.0)  # [1] and []
    return [key, value, kc, vc, slots, "fp8" if fp8 else "auto", ks, vs]


def _clone_caches(args, at):
    out = list(args)
    for i in at:
        c = args[i]
        out[i] = c.clone() if c.is_contiguous() else c.permute(
            0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)
    return out


def _hits():
    return _ext.get().stats()[:3]


def _both_paths(fast_fn, python_fn, args, caches, op_index):
    """Runs `python_fn` (Python checks, described tensors) on one copy and
    `fast_fn` twice on two others: the second call must be the extension's.
    Returns the three sets of caches."""
    a, b, c = (_clone_caches(args, caches) for _ in range(3))
    python_fn(a)
    fast_fn(b)  # the Python path, which remembers the signature
    before = _hits()[op_index]
    fast_fn(c)
    assert _hits()[op_index] == before + 1, "the repeated call was not C's"
    return [[x[i] for i in caches] for x in (a, b, c)]


def _bytes(t):
    return t.contiguous().view(-1).view(__import__("torch").uint8)


@pytest.mark.parametrize("fp8,hnd,per_head", [
    (False, False, False), (False, True, False), (True, False, False),
    (True, True, False), (True, False, True)])
def test_flash_fast_path_writes_the_python_paths_bytes(fp8, hnd, per_head):
    torch = _fresh_key()
    args = _flash_args(torch, fp8, hnd, per_head)
    sets = _both_paths(
        lambda x: ops.reshape_and_cache_flash(*x),
        lambda x: ops._reshape_and_cache_flash(*x, None),
        args, (2, 3), 0)
    for got in sets[1:]:
        for x, y in zip(sets[0], got):
            assert _bytes(x).equal(_bytes(y))
    poison = torch.full_like(sets[0][0], 0x5A)
    assert not _bytes(sets[0][0]).equal(_bytes(poison)), "nothing written"


@pytest.mark.parametrize("stacked,layout", [(False, "NHD"), (False, "HND"),
                                            (True, "NHD")])
def test_paged_fast_path_writes_the_python_paths_bytes(stacked, layout):
    """FlashInfer's signature: a (K, V) pair or one [pages, 2, ...] tensor."""
    torch = _fresh_key()
    key = torch.randn(3, H, D, dtype=torch.bfloat16)
    value = torch.randn(3, H, D, dtype=torch.bfloat16)
    shape = (NB, BS, H, D) if layout == "NHD" else (NB, H, BS, D)
    idx = dict(dtype=torch.int32)
    batch, positions = torch.tensor([0, 0, 1], **idx), torch.tensor(
        [17, 18, 3], **idx)
    kv_indices, kv_indptr = torch.tensor([5, 1, 7], **idx), torch.tensor(
        [0, 2, 3], **idx)
    last = torch.tensor([3, 4], **idx)

    def fresh():
        if stacked:
            return torch.zeros((NB, 2) + shape[1:], dtype=torch.bfloat16)
        return (torch.zeros(shape, dtype=torch.bfloat16),
                torch.zeros(shape, dtype=torch.bfloat16))

    caches = [fresh() for _ in range(3)]

    def call(cache):
        ops.append_paged_kv_cache(key, value, batch, positions, cache,
                                  kv_indices, kv_indptr, last, layout)

    def python(cache):
        k, v = ops._split_paged(cache, layout)
        ops._append_paged_kv_cache(key, value, batch, positions, k, v,
                                   kv_indices, kv_indptr, layout, None)

    python(caches[0])
    call(caches[1])
    before = _hits()[1]
    call(caches[2])
    assert _hits()[1] == before + 1
    flat = [torch.stack(list(c)) if not stacked else c for c in caches]
    assert flat[0].abs().sum() > 0
    assert _bytes(flat[0]).equal(_bytes(flat[1]))
    assert _bytes(flat[0]).equal(_bytes(flat[2]))


@pytest.mark.parametrize("fp8", [False, True])
def test_mla_fast_path_writes_the_python_paths_bytes(fp8):
    torch = _fresh_key()
    rank, rope = 512, 64
    kv_c = torch.randn(6, rank, dtype=torch.bfloat16)
    k_pe = torch.randn(6, 2 * rope, dtype=torch.bfloat16)[:, ::2]  # strided
    slots = torch.tensor([4, -1, 33, 70], dtype=torch.int64)
    dtype = torch.uint8 if fp8 else torch.bfloat16
    cache = torch.zeros((NB, BS, rank + rope), dtype=dtype)
    args = [kv_c, k_pe, cache, slots, "fp8" if fp8 else "auto",
            torch.tensor([0.25])]
    sets = _both_paths(
        lambda x: ops.concat_and_cache_mla(*x),
        lambda x: ops._concat_and_cache_mla(*x, None), args, (2,), 2)
    assert sets[0][0].float().abs().sum() > 0
    for got in sets[1:]:
        assert _bytes(sets[0][0]).equal(_bytes(got[0]))


def test_fast_path_refuses_like_python():
    """A call the table knows but with too few key rows for its slots: the
    extension hands it to Python, which refuses it by name."""
    torch = _fresh_key()
    args = _flash_args(torch, False, False)
    ops.reshape_and_cache_flash(*args)
    ops.reshape_and_cache_flash(*args)
    bad = list(args)
    bad[4] = torch.zeros(12, dtype=torch.int64)
    with pytest.raises(errors.InvalidArgumentError, match="fewer rows"):
        ops.reshape_and_cache_flash(*bad)


@pytest.mark.parametrize("what", ["missing", "unloadable"])
def test_missing_extension_is_named(tmp_path, monkeypatch, what):
    path = tmp_path / "_kvext.abi3.so"
    if what == "unloadable":
        path.write_text("not an ELF object")
    monkeypatch.setattr(_ext, "_ext", None)
    monkeypatch.setattr(_ext, "_candidates", lambda: [str(path)])
    with pytest.raises(errors.LibraryNotFoundError) as e:
        _ext.get()
    assert str(path) in str(e.value)
    assert "compiled binding _kvext.abi3.so cannot be loaded" in str(e.value)
    assert ("missing" if what == "missing" else "ImportError") in str(e.value)
    # A launch says the same; nothing else runs in its place.
    b = kvgen.compile(layout="paged_nhd", block_size=BS, num_kv_heads=H,
                      head_dim=D, dtype="f32", target="host")
    np = pytest.importorskip("numpy")
    kc = np.zeros((NB, BS, H, D), np.float32)
    with pytest.raises(errors.LibraryNotFoundError, match=str(path)):
        b.append(np.ones((1, H, D), np.float32), np.ones((1, H, D),
                 np.float32), np.zeros(1, np.int64), kc, kc.copy())
    assert not kc.any()


def test_torch_compile_fullgraph_calls_every_op():
    """All three ops inside one compiled graph (no graph break), writing
    the bytes eager writes."""
    torch = _fresh_key()
    ops.register_torch_ops()
    rank, rope = 512, 64
    idx = dict(dtype=torch.int32)
    batch, positions = torch.tensor([0, 1], **idx), torch.tensor([2, 5],
                                                                 **idx)
    kv_indices, kv_indptr = torch.tensor([3, 6], **idx), torch.tensor(
        [0, 1, 2], **idx)
    last = torch.tensor([3, 6], **idx)
    scale = torch.tensor([1.0])

    def step(qkv, latent, slots, kc, vc, pk, pv, mla):
        kvgen.ops.reshape_and_cache_flash(qkv[:, 1], qkv[:, 2], kc, vc,
                                          slots, "auto", scale, scale)
        kvgen.ops.append_paged_kv_cache(qkv[:2, 1] * 2, qkv[:2, 2], batch,
                                        positions, (pk, pv), kv_indices,
                                        kv_indptr, last)
        kvgen.ops.concat_and_cache_mla(latent[:, :rank], latent[:, rank:],
                                       mla, slots, "auto", scale)
        return qkv.sum()

    def inputs():
        torch.manual_seed(3)
        return (torch.randn(4, 3, H, D, dtype=torch.bfloat16),
                torch.randn(4, rank + rope, dtype=torch.bfloat16),
                torch.tensor([1, -1, 40, 77], dtype=torch.int64),
                *[torch.zeros(NB, BS, H, D, dtype=torch.bfloat16)
                  for _ in range(4)],
                torch.zeros(NB, BS, rank + rope, dtype=torch.bfloat16))

    eager = inputs()
    step(*eager)
    compiled_args = inputs()
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    compiled(*compiled_args)
    for x, y in zip(eager[3:], compiled_args[3:]):
        assert x.abs().sum() > 0
        assert _bytes(x).equal(_bytes(y))


def test_fast_path_threads_while_register_empties_the_table():
    """Threads repeating a call the binding takes while another registers
    bundles (each register() empties the table, which holds the bundles):
    every call writes its bytes, none crashes."""
    import threading

    torch = _fresh_key()
    b = kvgen.compile(layout="paged_nhd", block_size=BS, num_kv_heads=H,
                      head_dim=D, dtype="bf16", target="host")
    saved = list(ops._registered)
    errors_seen = []

    def worker(i):
        try:
            args = _flash_args(torch, False, False)
            want = _clone_caches(args, (2, 3))
            ops._reshape_and_cache_flash(*want, None)
            for _ in range(300):
                ops.reshape_and_cache_flash(*args)
            assert _bytes(args[2]).equal(_bytes(want[2]))
            assert _bytes(args[3]).equal(_bytes(want[3]))
        except Exception as e:  # reported below
            errors_seen.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    try:
        for t in threads:
            t.start()
        for _ in range(30):
            ops.register(b)
        for t in threads:
            t.join()
    finally:
        ops._registered = saved
        ops._forget_calls()
    assert not errors_seen, errors_seen


def test_tensor_subclass_is_never_remembered():
    """A torch.Tensor subclass keeps the Python route (torch.ops.kvgen for
    fake and functional tensors): the binding's table never takes it."""
    torch = _fresh_key()

    class Sub(torch.Tensor):
        pass

    args = _flash_args(torch, False, False)
    args[0] = args[0].as_subclass(Sub)
    ops._forget_calls()
    ops.reshape_and_cache_flash(*args)
    before = _hits()[0]
    ops.reshape_and_cache_flash(*args)
    assert _hits()[0] == before
    assert _ext.get().stats()[3] == 0
