"""vllm.v1.attention.ops.triton_reshape_and_cache_flash: vLLM's Triton
version of reshape_and_cache_flash, with the same signature and result; here
it is kvgen's reshape_and_cache_flash (kvgen.vllm), so the cache test's
"triton" cases run kvgen's kernels too."""

import kvgen.vllm as _kv


def triton_reshape_and_cache_flash(key, value, key_cache, value_cache,
                                   slot_mapping, kv_cache_dtype, k_scale,
                                   v_scale):
    _kv.reshape_and_cache_flash(key, value, key_cache, value_cache,
                                slot_mapping, kv_cache_dtype, k_scale, v_scale)
