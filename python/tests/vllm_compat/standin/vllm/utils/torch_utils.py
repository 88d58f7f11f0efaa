"""vllm.utils.torch_utils: the seed and the random caches the cache test
builds (create_kv_caches_with_random, ..._flash), written from their
documented behaviour.

Test scaffolding, not an op under test: an fp8 cache is filled with random
e4m3 bytes through torch's own float8 cast."""

import random

import numpy as np
import torch

_CACHE_DTYPES = {
    "half": torch.float16, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "float": torch.float32,
    "float32": torch.float32, "fp8": torch.uint8, "fp8_e4m3": torch.uint8,
    "fp8_e5m2": torch.uint8, "nvfp4": torch.uint8, "nvfp4_4over6": torch.uint8,
}


def set_random_seed(seed, data_parallel_index=0):
    """Seeds Python's, NumPy's and torch's generators (every device's)."""
    if seed is None:
        return
    if data_parallel_index:
        seed = int(np.random.SeedSequence((seed, data_parallel_index))
                   .generate_state(1)[0])
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    from vllm.platforms import current_platform

    current_platform.manual_seed_all(seed)


def _cache_torch_dtype(cache_dtype, model_dtype):
    if isinstance(cache_dtype, torch.dtype):
        return cache_dtype
    if cache_dtype == "auto":
        if isinstance(model_dtype, torch.dtype):
            return model_dtype
        if model_dtype in _CACHE_DTYPES:
            return _CACHE_DTYPES[model_dtype]
        raise ValueError("Invalid model dtype: %s" % (model_dtype,))
    if cache_dtype in _CACHE_DTYPES:
        return _CACHE_DTYPES[cache_dtype]
    raise ValueError("Invalid kv cache dtype: %s" % (cache_dtype,))


def _fill(cache, cache_dtype, low, high):
    """Uniform values in [low, high); an fp8 cache gets their e4m3 bytes."""
    if cache_dtype in ("auto", "half", "bfloat16", "float"):
        cache.uniform_(low, high)
    elif cache_dtype == "fp8":
        values = torch.empty(cache.shape, dtype=torch.float16,
                             device=cache.device).uniform_(low, high)
        cache.copy_(values.to(torch.float8_e4m3fn).view(torch.uint8))
    else:
        raise ValueError("Does not support key cache of type %s" % cache_dtype)


def nvfp4_kv_cache_full_dim(head_size):
    """The packed last dimension of an NVFP4 cache: the e2m1 data (two a
    byte) and one e4m3 scale per 16 elements."""
    return head_size // 2 + head_size // 16


def nvfp4_split_data_scale(kv_side):
    """(data, scale) views of one side of an NVFP4 cache, [pages, d1, d2,
    data_dim] uint8 and [pages, d1, d2, scale_dim] float8_e4m3fn: each page
    holds every row's data, then every row's scales."""
    pages, d1, d2, full = kv_side.shape
    data_dim = full * 8 // 9
    scale_dim = full - data_dim
    page = kv_side.stride(0)
    base = kv_side.storage_offset()
    data = torch.as_strided(
        kv_side, (pages, d1, d2, data_dim),
        (page, kv_side.stride(1) * data_dim // full,
         kv_side.stride(2) * data_dim // full, 1), base)
    scale = torch.as_strided(
        kv_side, (pages, d1, d2, scale_dim),
        (page, kv_side.stride(1) * scale_dim // full,
         kv_side.stride(2) * scale_dim // full, 1),
        base + d1 * d2 * data_dim).view(torch.float8_e4m3fn)
    return data, scale


def create_kv_caches_with_random_flash(num_blocks, block_size, num_layers,
                                       num_heads, head_size, cache_dtype,
                                       model_dtype=None, seed=None,
                                       device="cuda", cache_layout="NHD"):
    """Per layer, one [num_blocks, 2, block_size, num_heads, head_size]
    tensor (HND: heads before positions in memory, as a permuted view) of
    uniform values in +-head_size**-0.5; returns its [:, 0] views (K) and
    its [:, 1] views (V)."""
    set_random_seed(seed)
    dtype = _cache_torch_dtype(cache_dtype, model_dtype)
    if cache_layout not in ("NHD", "HND"):
        raise ValueError("cache_layout: %r is not NHD or HND" % cache_layout)
    order = (0, 1, 2, 3, 4) if cache_layout == "NHD" else (0, 1, 3, 2, 4)
    inverse = [order.index(i) for i in range(5)]
    scale = head_size ** -0.5
    nvfp4 = isinstance(cache_dtype, str) and cache_dtype.startswith("nvfp4")
    last = nvfp4_kv_cache_full_dim(head_size) if nvfp4 else head_size
    logical = (num_blocks, 2, block_size, num_heads, last)
    physical = tuple(logical[i] for i in order)
    keys, values = [], []
    for _ in range(num_layers):
        if nvfp4:
            kv = torch.randint(0, 256, physical, dtype=dtype,
                               device=device).permute(*inverse)
        else:
            kv = torch.empty(physical, dtype=dtype,
                             device=device).permute(*inverse)
            _fill(kv, cache_dtype, -scale, scale)
        keys.append(kv[:, 0])
        values.append(kv[:, 1])
    return keys, values


def create_kv_caches_with_random(num_blocks, block_size, num_layers,
                                 num_heads, head_size, cache_dtype,
                                 model_dtype=None, seed=None, device="cuda"):
    """vLLM's x-vectorized caches per layer: K [num_blocks, num_heads,
    head_size // x, block_size, x] with x = 16 bytes of the cache dtype, V
    [num_blocks, num_heads, head_size, block_size], uniform values in
    +-head_size**-0.5."""
    if cache_dtype == "fp8" and head_size % 16:
        raise ValueError("Does not support key cache of type fp8 with "
                         "head_size %d" % head_size)
    set_random_seed(seed)
    dtype = _cache_torch_dtype(cache_dtype, model_dtype)
    scale = head_size ** -0.5
    x = 16 // torch.tensor([], dtype=dtype).element_size()
    keys, values = [], []
    for _ in range(num_layers):
        k = torch.empty((num_blocks, num_heads, head_size // x, block_size, x),
                        dtype=dtype, device=device)
        _fill(k, cache_dtype, -scale, scale)
        keys.append(k)
    for _ in range(num_layers):
        v = torch.empty((num_blocks, num_heads, head_size, block_size),
                        dtype=dtype, device=device)
        _fill(v, cache_dtype, -scale, scale)
        values.append(v)
    return keys, values
