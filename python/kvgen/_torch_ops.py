"""The ops as PyTorch custom ops: torch.ops.kvgen.reshape_and_cache_flash,
torch.ops.kvgen.append_paged_kv_cache and torch.ops.kvgen.concat_and_cache_mla.

Each declares the caches it writes (mutates_args), so torch.compile keeps the
call and its order, and has a fake implementation (it returns nothing and
allocates nothing), so tracing needs no kernel. Imported by kvgen.ops when
torch is loaded; never imported without torch.
"""

from typing import Optional

import torch

from . import ops


@torch.library.custom_op("kvgen::reshape_and_cache_flash",
                         mutates_args=("key_cache", "value_cache"))
def reshape_and_cache_flash(key: torch.Tensor, value: torch.Tensor,
                            key_cache: torch.Tensor, value_cache: torch.Tensor,
                            slot_mapping: torch.Tensor, kv_cache_dtype: str,
                            k_scale: Optional[torch.Tensor],
                            v_scale: Optional[torch.Tensor]) -> None:
    ops._reshape_and_cache_flash(key, value, key_cache, value_cache,
                                 slot_mapping, kv_cache_dtype, k_scale,
                                 v_scale, None)


@reshape_and_cache_flash.register_fake
def _(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype,
      k_scale, v_scale):
    return None


@torch.library.custom_op("kvgen::append_paged_kv_cache",
                         mutates_args=("k_cache", "v_cache"))
def append_paged_kv_cache(append_key: torch.Tensor,
                          append_value: torch.Tensor,
                          batch_indices: torch.Tensor, positions: torch.Tensor,
                          k_cache: torch.Tensor, v_cache: torch.Tensor,
                          kv_indices: torch.Tensor, kv_indptr: torch.Tensor,
                          kv_last_page_len: torch.Tensor,
                          kv_layout: str) -> None:
    ops._append_paged_kv_cache(append_key, append_value, batch_indices,
                               positions, k_cache, v_cache, kv_indices,
                               kv_indptr, kv_layout, None)


@append_paged_kv_cache.register_fake
def _(append_key, append_value, batch_indices, positions, k_cache, v_cache,
      kv_indices, kv_indptr, kv_last_page_len, kv_layout):
    return None


@torch.library.custom_op("kvgen::concat_and_cache_mla",
                         mutates_args=("kv_cache",))
def concat_and_cache_mla(kv_c: torch.Tensor, k_pe: torch.Tensor,
                         kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                         kv_cache_dtype: str,
                         scale: Optional[torch.Tensor]) -> None:
    ops._concat_and_cache_mla(kv_c, k_pe, kv_cache, slot_mapping,
                              kv_cache_dtype, scale, None)


@concat_and_cache_mla.register_fake
def _(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale):
    return None


# A traced call (torch.compile) takes the custom op, never the extension's
# fast call, which tracing cannot see into.
ops._is_compiling = torch.compiler.is_compiling
ops._torch = torch
