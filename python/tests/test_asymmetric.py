"""K and V of different head sizes (v_head_dim): describe's text, the
manifest match of Bundle.find, and an append through kvgen.ops on host
tensors (torch, skipped without it)."""

import pytest

import kvgen
from kvgen import bundle as bundle_mod
from kvgen import compiler


def test_describe_writes_v_head_dim_only_where_it_differs():
    text = compiler.describe(head_dim=192, v_head_dim=128)
    assert "head_dim = 192, v_head_dim = 128, dtype = bf16" in text
    for same in (None, 128):
        assert "v_head_dim" not in compiler.describe(head_dim=128,
                                                     v_head_dim=same)


def test_find_matches_v_head_dim_against_head_dim_when_absent():
    symmetric = {"head_dim": 128}
    asymmetric = {"head_dim": 192, "v_head_dim": 128}
    assert bundle_mod._cache_matches(symmetric, {"v_head_dim": 128})
    assert not bundle_mod._cache_matches(symmetric, {"v_head_dim": 64})
    assert bundle_mod._cache_matches(asymmetric, {"v_head_dim": 128})
    # A symmetric want never takes an asymmetric cache's kernel.
    assert not bundle_mod._cache_matches(asymmetric,
                                         {"head_dim": 192, "v_head_dim": 192})


def test_ops_append_of_packed_views_twice(compiler_path):
    torch = pytest.importorskip("torch")
    from kvgen import ops

    blocks, bs, heads, d, dv = 3, 4, 2, 16, 8
    packed = torch.zeros(blocks, bs, heads, d + dv, dtype=torch.bfloat16)
    kc, vc = packed.split([d, dv], dim=-1)
    slots = torch.tensor([5, -1, 0, 11], dtype=torch.long)
    # Twice: the second call takes the extension's fast path, whose call
    # signature holds V's shapes too.
    for seed in (0, 1):
        torch.manual_seed(seed)
        key = torch.randn(4, heads, d, dtype=torch.bfloat16)
        value = torch.randn(4, heads, dv, dtype=torch.bfloat16)
        ops.reshape_and_cache_flash(key, value, kc, vc, slots)
        for t, slot in enumerate(slots.tolist()):
            if slot >= 0:
                assert torch.equal(kc[slot // bs, slot % bs], key[t])
                assert torch.equal(vc[slot // bs, slot % bs], value[t])
    # Slot 1 * bs + 1 .. never written: the poison (zeros) stays.
    assert not packed[0, 1].any()


def test_compile_refuses_v_head_dim_on_the_vectorized_layout(compiler_path):
    with pytest.raises(kvgen.CompilerError,
                       match="the vllm_vectorized layout has one head size"):
        kvgen.compile(layout="vllm_vectorized", head_dim=192, v_head_dim=128,
                      kernels=["append"], target="host")


def test_ops_plan_follows_the_value_head_size(compiler_path):
    torch = pytest.importorskip("torch")
    from kvgen import ops

    key = torch.randn(3, 2, 16)
    slots = torch.tensor([0, 2, 5], dtype=torch.long)
    # One K geometry and one packed row of 32 (so the same strides), three
    # V head sizes: each call gets its own kernel.
    for dv in (8, 4, 16):
        packed = torch.zeros(2, 4, 2, 32)
        kc, vc = packed[..., :16], packed[..., 16:16 + dv]
        value = torch.randn(3, 2, dv)
        ops.reshape_and_cache_flash(key, value, kc, vc, slots)
        for t, slot in enumerate(slots.tolist()):
            assert torch.equal(vc[slot // 4, slot % 4], value[t]), dv
            assert torch.equal(kc[slot // 4, slot % 4], key[t]), dv
