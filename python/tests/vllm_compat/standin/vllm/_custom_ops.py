"""vllm._custom_ops: the cache ops, kvgen's (kvgen.vllm). Importing it
installs them as torch.ops._C_cache_ops.*, as importing vLLM loads its
extension."""

import kvgen.vllm as _kv

from ._standin import placeholder

_kv.install()

reshape_and_cache = _kv.reshape_and_cache
reshape_and_cache_flash = _kv.reshape_and_cache_flash
concat_and_cache_mla = _kv.concat_and_cache_mla
concat_and_cache_mla_grouped = _kv.concat_and_cache_mla_grouped
concat_and_cache_mla_rope_fused = _kv.concat_and_cache_mla_rope_fused
swap_blocks = _kv.swap_blocks
swap_blocks_batch = _kv.swap_blocks_batch
convert_fp8 = _kv.convert_fp8
gather_and_maybe_dequant_cache = _kv.gather_and_maybe_dequant_cache
cp_gather_cache = _kv.cp_gather_cache
cp_gather_and_upconvert_fp8_kv_cache = _kv.cp_gather_and_upconvert_fp8_kv_cache
cp_gather_and_upconvert_nvfp4_kv_cache = (
    _kv.cp_gather_and_upconvert_nvfp4_kv_cache)
indexer_k_quant_and_cache = _kv.indexer_k_quant_and_cache
cp_gather_indexer_k_quant_cache = _kv.cp_gather_indexer_k_quant_cache
concat_mla_q = _kv.concat_mla_q


def scaled_fp4_quant(*args, **kwargs):
    """NVFP4 quantization (tests/kernels/quantization/nvfp4_utils.py imports
    it): not a cache op; kvgen has no NVFP4."""
    raise _kv.NotProvidedError("scaled_fp4_quant", "NVFP4 quantization")


def __getattr__(name):
    return placeholder("vllm._custom_ops." + name)
