"""kvgen.vllm.gather_and_maybe_dequant_cache and cp_gather_cache on CPU
tensors (host kernels, kvgen's fused_gather): the bytes against a plain
Python loop over tokens, every refusal with nothing written. Needs torch
(skipped without it)."""

import pytest

torch = pytest.importorskip("torch")

import kvgen.vllm as kv  # noqa: E402
from kvgen import errors  # noqa: E402

POISON = 0x5A


def _poisoned(shape, dtype):
    t = torch.empty(shape, dtype=dtype)
    t.view(torch.uint8).fill_(POISON)
    return t


def _case(lens, starts, block_size=16, num_blocks=24, entry=40, seed=0):
    """A random cache, one block table row a sequence (a permutation of the
    blocks), cu_seq_lens and token_to_seq."""
    g = torch.Generator().manual_seed(seed)
    cache = torch.randint(0, 256, (num_blocks, block_size, entry),
                          dtype=torch.uint8, generator=g)
    table = torch.stack([torch.randperm(num_blocks, generator=g)
                         for _ in lens]).to(torch.int32)
    lens_t = torch.tensor(lens, dtype=torch.int32)
    cu = torch.zeros(len(lens) + 1, dtype=torch.int32)
    cu[1:] = lens_t.cumsum(0)
    t2s = torch.repeat_interleave(torch.arange(len(lens), dtype=torch.int32),
                                  lens_t.long())
    st = None if starts is None else torch.tensor(starts, dtype=torch.int32)
    return cache, table, cu, t2s, st


def _rows(cache, table, cu, starts, block_size):
    """The cache rows of every token, in order: the reference loop."""
    out = []
    for r in range(table.shape[0]):
        start = 0 if starts is None else int(starts[r])
        for i in range(int(cu[r + 1]) - int(cu[r])):
            p = start + i
            out.append(cache[int(table[r, p // block_size]), p % block_size])
    return torch.stack(out)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16,
                                   torch.float16, torch.uint8,
                                   torch.float8_e4m3fn])
@pytest.mark.parametrize("starts", [None, [3, 17, 0, 31]])
def test_cp_gather_copies_bits(dtype, starts):
    cache8, table, cu, _, st = _case([5, 0, 37, 4], starts, entry=48)
    cache = cache8.view(dtype)
    want = _rows(cache, table, cu, st, 16)
    dst = _poisoned(want.shape, dtype)
    kv.cp_gather_cache(cache, dst, table, cu, 4, st)
    assert torch.equal(dst.view(torch.uint8), want.view(torch.uint8))


def test_cp_gather_leaves_rows_past_the_sequences():
    cache, table, cu, _, _ = _case([3, 2], None)
    cache = cache.view(torch.bfloat16)
    dst = _poisoned((9, cache.shape[2]), torch.bfloat16)
    kv.cp_gather_cache(cache, dst, table, cu, 2)
    want = _rows(cache, table, cu, None, 16)
    assert torch.equal(dst[:5].view(torch.uint8), want.view(torch.uint8))
    assert (dst[5:].view(torch.uint8) == POISON).all()


def test_cp_gather_strided_views():
    cache, table, cu, _, st = _case([7, 20], [1, 9], entry=40)
    wide = cache.view(torch.bfloat16)  # [24, 16, 20]
    src = wide[..., 1:]
    want = _rows(src, table, cu, st, 16)
    storage = _poisoned((want.shape[0], 20), torch.bfloat16)
    kv.cp_gather_cache(src, storage[:, 1:], table, cu, 2, st)
    assert torch.equal(storage[:, 1:].view(torch.int16),
                       want.view(torch.int16))
    assert (storage[:, 0].view(torch.int16) == 0x5A5A).all()


@pytest.mark.parametrize("kv_dtype", ["fp8", "fp8_e5m2"])
@pytest.mark.parametrize("out", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("starts", [None, [3, 17, 5]])
def test_gather_dequantizes(kv_dtype, out, starts):
    cache, table, cu, t2s, st = _case([20, 10, 16], starts, entry=64)
    f8 = torch.float8_e4m3fn if kv_dtype == "fp8" else torch.float8_e5m2
    # Finite codes only: a NaN's payload is not part of the contract.
    cache = torch.where(cache.view(f8).float().isfinite(), cache,
                        torch.zeros_like(cache))
    scale = torch.tensor(0.1, dtype=torch.float32)
    want = (_rows(cache, table, cu, st, 16).view(f8).float() * scale).to(out)
    dst = _poisoned(want.shape, out)
    kv.gather_and_maybe_dequant_cache(cache, dst, table, cu, t2s,
                                      want.shape[0], kv_dtype, scale, st)
    assert torch.equal(dst, want)


def test_gather_auto_copies():
    cache, table, cu, t2s, st = _case([20, 10, 16], [3, 17, 5], entry=64)
    cache = cache.view(torch.float32)
    want = _rows(cache, table, cu, st, 16)
    dst = _poisoned(want.shape, torch.float32)
    kv.gather_and_maybe_dequant_cache(cache, dst, table, cu, t2s,
                                      torch.tensor(want.shape[0]), "auto",
                                      torch.tensor(1.0), st)
    assert torch.equal(dst.view(torch.uint8), want.view(torch.uint8))


def _refused(fn, match, dst):
    before = dst.clone()
    with pytest.raises(errors.InvalidArgumentError, match=match):
        fn()
    assert torch.equal(dst.view(torch.uint8), before.view(torch.uint8))


def test_refusals_write_nothing():
    cache, table, cu, t2s, st = _case([20, 10, 16], [3, 17, 5], entry=64)
    cache = cache.view(torch.bfloat16)
    dst = _poisoned((46, 32), torch.bfloat16)

    def cp(**kw):
        a = dict(src_cache=cache, dst=dst, block_table=table, cu_seq_lens=cu,
                 batch_size=3, seq_starts=st)
        a.update(kw)
        return lambda: kv.cp_gather_cache(**a)

    bad = table.clone()
    bad[1, 2] = 24  # position 17 + 9 = 26 of sequence 1: block 1
    bad[1, 1] = 24
    _refused(cp(block_table=bad),
             r"block_table\[1, 1\] = 24 \(sequence 1\) is out of range: "
             r"the cache has num_blocks 24", dst)
    bad = table.clone()
    bad[2, 0] = -1
    _refused(cp(block_table=bad), r"block_table\[2, 0\] = -1", dst)
    _refused(cp(block_table=table[:, :1]),
             r"sequence 0 reaches position 22, block 1 of its block_table "
             r"row, which has 1 blocks", dst)
    _refused(cp(seq_starts=torch.tensor([3, -1, 5], dtype=torch.int32)),
             r"seq_starts\[1\] = -1 is out of range", dst)
    _refused(cp(cu_seq_lens=torch.tensor([0, 20, 10, 46], dtype=torch.int32)),
             r"cu_seq_lens\[1\] .. cu_seq_lens\[2\] = 20 .. 10", dst)
    _refused(cp(cu_seq_lens=torch.tensor([0, 20, 30, 47], dtype=torch.int32)),
             r"30 .. 47 is not a range of the 46 rows of dst", dst)
    _refused(cp(cu_seq_lens=torch.tensor([1, 20, 30, 46], dtype=torch.int32)),
             r"cu_seq_lens\[0\] = 1", dst)
    _refused(cp(batch_size=4), r"batch_size 4: block_table has 3 rows", dst)
    _refused(cp(block_table=table.long()),
             r"block_table: expected an int32 tensor", dst)
    _refused(cp(src_cache=cache.float()), r"dst is torch.bfloat16 but "
             r"src_cache torch.float32", dst)
    _refused(cp(src_cache=cache[..., :31]), r"dst: expected \[num_tokens, "
             r"31\]", dst)
    wrong = t2s.clone()
    wrong[25] = 2
    _refused(lambda: kv.gather_and_maybe_dequant_cache(
        cache, dst, table, cu, wrong, 46, "auto", torch.tensor(1.0), st),
        r"token_to_seq\[25\] = 2, but cu_seq_lens puts token 25 in "
        r"sequence 1", dst)
    _refused(lambda: kv.gather_and_maybe_dequant_cache(
        cache, dst, table, cu, t2s, 47, "auto", torch.tensor(1.0), st),
        r"num_tokens 47: dst has only 46 rows", dst)
    _refused(lambda: kv.gather_and_maybe_dequant_cache(
        cache.view(torch.uint8), dst, table, cu, t2s, 46, "fp8",
        torch.tensor(1.0), st), r"src_cache: dtype torch.uint8 with "
        r"kv_cache_dtype 'fp8'|dst: expected", dst)


def test_not_provided():
    cache, table, cu, t2s, st = _case([4], None, entry=64)
    dst = _poisoned((4, 64), torch.float32)
    with pytest.raises(kv.NotProvidedError, match="kv_cache_dtype 'nvfp4'"):
        kv.gather_and_maybe_dequant_cache(cache, dst, table, cu, t2s, 4,
                                          "nvfp4", torch.tensor(1.0), st)
    # A raw copy of a 1-byte cache at an odd byte: no 16-bit view.
    storage = cache.view(torch.uint8)
    with pytest.raises(kv.NotProvidedError, match="even byte"):
        kv.cp_gather_cache(storage[..., 1:], _poisoned((4, 63), torch.uint8),
                           table, cu, 1)
    assert "gather_and_maybe_dequant_cache" in kv.PROVIDED
    assert "cp_gather_cache" in kv.PROVIDED
    assert "cp_gather_and_upconvert_nvfp4_kv_cache" in kv.NOT_PROVIDED


def test_ops_that_read_a_cache_alike_share_one_description(monkeypatch):
    """cp_gather_cache and gather_and_maybe_dequant_cache ("auto") of the
    same cache compile the same description, whichever comes first, so a
    kernel cache compiled ahead of time serves both."""
    from kvgen import _vllm_cache, compiler

    texts = []
    compile_ = compiler.compile

    def recording(text, *args, **kwargs):
        texts.append(text)
        return compile_(text, *args, **kwargs)

    monkeypatch.setattr(compiler, "compile", recording)
    cache, table, cu, t2s, st = _case([20, 10], [3, 17], entry=64)
    cache = cache.view(torch.float32)
    n = int(cu[-1])
    for call in ("cp", "gather"):
        monkeypatch.setattr(_vllm_cache, "_gatherers", {})
        dst = _poisoned((n, cache.shape[-1]), torch.float32)
        if call == "cp":
            kv.cp_gather_cache(cache, dst, table, cu, table.shape[0], st)
        else:
            kv.gather_and_maybe_dequant_cache(cache, dst, table, cu, t2s,
                                              torch.tensor(n), "auto",
                                              torch.tensor(1.0), st)
    assert len(texts) == 2
    assert texts[0] == texts[1]
