"""vLLM's fp8_ds_mla cache (DeepSeek V3.2) on kvgen's latent append with
inline scales.

vLLM 0.34.0's entry (csrc/cache_kernels.cu, concat_and_cache_ds_mla_kernel)
is 656 bytes: kv_c's 512 values in fp8 e4m3, one f32 scale per 128 of them
(the group's amax / 448, at least 1e-4, rounded up to a power of two), then
k_pe's 64 values as they are (16-bit). Its "nope" rows (pe_dim 0) are 528
bytes, or 656 with the RoPE part zeroed. kvgen describes the entry as a
latent cache whose `#kv.inline_scales` say so (docs/CONTRACT.md, "Latent
entries with inline scales"); the checks below are vLLM's, with its words.
"""

import threading

import torch

from . import compiler, errors
from ._vllm_common import NotProvidedError, VllmCheckError, _bad, _target

#: vLLM's fp8_ds_mla entry.
KV_LORA_RANK = 512
PE_DIM = 64
GROUP_SIZE = 128
MIN_SCALE = 1e-4
ENTRY_BYTES = 656
NOPE_ENTRY_BYTES = 528

_SOURCES = {torch.bfloat16: "bf16", torch.float16: "f16"}
_kernels = {}
_kernels_lock = threading.Lock()


def description(block_size, rope_dim, source):
    """The kvgen description of vLLM's fp8_ds_mla cache of `block_size`
    slots a block, `rope_dim` 64 (656-byte rows) or 0 (528-byte rows),
    appended from `source` (bf16 or f16, which its RoPE part keeps)."""
    return (
        "module {\n  kv.mla_append @ds_mla : !kv.cache<layout = paged_nhd, "
        "block_size = %d, num_kv_heads = 1, head_dim = %d, dtype = f8E4M3FN, "
        "quant = #kv.quant<kind = fp8_e4m3, granularity = per_token, "
        "mode = dynamic>, latent = #kv.latent<kv_lora_rank = %d, "
        "rope_dim = %d, scales = #kv.inline_scales<group_size = %d, "
        "rope_dtype = %s, min_scale = %r : f32, power_of_two = true>>> "
        "from %s\n}\n" % (block_size, KV_LORA_RANK + rope_dim, KV_LORA_RANK,
                          rope_dim, GROUP_SIZE, source, MIN_SCALE, source))


def _kernel(op, device, block_size, rope_dim, source):
    target, chip = _target(device)
    memo = (target, chip, block_size, rope_dim, source)
    found = _kernels.get(memo)
    if found is not None:
        return found
    text = description(block_size, rope_dim, source)
    try:
        bundle = compiler.compile(text, target=target, chip=chip)
    except errors.CompilerError as e:
        raise errors.KernelNotAvailableError(
            "%s: kvgen could not generate the fp8_ds_mla append: %s"
            % (op, e)) from e
    if not bundle.find("mla_append"):
        raise errors.KernelNotAvailableError(
            "%s: %s has no mla_append kernel" % (op, bundle.source))
    with _kernels_lock:
        found = _kernels.setdefault(memo, (bundle, "ds_mla"))
    return found


def concat_and_cache_ds_mla(op, kv_c, k_pe, kv_cache, slot_mapping):
    """concat_and_cache_mla(..., "fp8_ds_mla", scale): vLLM's checks, then
    one launch of the append with inline scales (vLLM ignores `scale`)."""
    for t, name in ((kv_c, "kv_c"), (k_pe, "k_pe"), (kv_cache, "kv_cache"),
                    (slot_mapping, "slot_mapping")):
        if not isinstance(t, torch.Tensor):
            raise _bad("%s: %s: expected a torch.Tensor, got %s", op, name,
                       type(t).__name__)
    if kv_c.dim() != 2 or k_pe.dim() != 2 or kv_cache.dim() != 3:
        raise _bad("%s: kv_c, k_pe, kv_cache: expected [num_tokens, "
                   "kv_lora_rank], [num_tokens, pe_dim] and [num_blocks, "
                   "block_size, entry], got shapes %s, %s and %s", op,
                   list(kv_c.shape), list(k_pe.shape), list(kv_cache.shape))
    if slot_mapping.dim() != 1:
        raise _bad("%s: slot_mapping: expected [num_tokens], got shape %s",
                   op, list(slot_mapping.shape))
    # vLLM's checks, in its order and words (concat_and_cache_mla in
    # csrc/cache_kernels.cu).
    kv_lora_rank, pe_dim = kv_c.shape[1], k_pe.shape[1]
    row_bytes = kv_cache.shape[2] * kv_cache.element_size()
    has_rope_tail = row_bytes == ENTRY_BYTES
    if kv_lora_rank != KV_LORA_RANK:
        raise VllmCheckError("%s: kv_lora_rank must be 512 for fp8_ds_mla, "
                             "got %d" % (op, kv_lora_rank))
    if pe_dim not in (PE_DIM, 0):
        raise VllmCheckError("%s: pe_dim must be 64 or 0 for fp8_ds_mla, got "
                             "%d" % (op, pe_dim))
    if not has_rope_tail and not (pe_dim == 0 and
                                  row_bytes == NOPE_ENTRY_BYTES):
        raise VllmCheckError(
            "%s: fp8_ds_mla requires 656-byte rows, or 528-byte rows with "
            "pe_dim == 0; got %d-byte rows and pe_dim %d"
            % (op, row_bytes, pe_dim))
    if kv_c.element_size() != 2 or k_pe.element_size() != 2:
        raise VllmCheckError(
            "%s: kv_c.element_size() and k_pe.element_size() must be 2 for "
            "fp8_ds_mla, got %s and %s" % (op, kv_c.dtype, k_pe.dtype))
    source = _SOURCES.get(kv_c.dtype)
    if source is None or k_pe.dtype != kv_c.dtype:
        raise _bad("%s: kv_c, k_pe: dtypes %s and %s; fp8_ds_mla takes "
                   "bfloat16 or float16, one for both", op, kv_c.dtype,
                   k_pe.dtype)
    devices = {t.device for t in (kv_c, k_pe, kv_cache, slot_mapping)}
    if len(devices) != 1:
        raise _bad("%s: kv_c, k_pe, kv_cache and slot_mapping are on %s; all "
                   "tensors must be on one device", op,
                   ", ".join(sorted(str(d) for d in devices)))
    n = slot_mapping.shape[0]
    if kv_c.shape[0] < n or k_pe.shape[0] < n:
        raise _bad("%s: kv_c and k_pe have %d and %d rows, fewer than "
                   "slot_mapping (%d)", op, kv_c.shape[0], k_pe.shape[0], n)
    # The entry is bytes, whatever dtype vLLM's tensor has.
    if kv_cache.element_size() != 1:
        try:
            kv_cache = kv_cache.view(torch.uint8)
        except RuntimeError:
            raise _bad("%s: kv_cache: a %s tensor whose rows cannot be "
                       "viewed as bytes (strides %s)", op, kv_cache.dtype,
                       list(kv_cache.stride())) from None
    elif kv_cache.dtype not in (torch.uint8, torch.float8_e4m3fn):
        kv_cache = kv_cache.view(torch.uint8)
    rope_dim = PE_DIM if has_rope_tail else 0
    if has_rope_tail and pe_dim == 0:
        # vLLM writes the RoPE part of a 656-byte row as zeros when there
        # is no k_pe; so does the append from a zero k_pe.
        k_pe = torch.zeros(n, PE_DIM, dtype=kv_c.dtype, device=kv_c.device)
    bundle, kernel = _kernel(op, kv_c.device, kv_cache.shape[1], rope_dim,
                             source)
    bundle.mla_append(kv_c[:n], k_pe[:n], slot_mapping, kv_cache,
                      kernel=kernel)


def check_upconvert_args(op, src_cache, dst, block_table, workspace_starts,
                         seq_starts):
    """The checks of vLLM's cp_gather_and_upconvert_fp8_kv_cache, in its
    order and words, ahead of its NotProvidedError: a call vLLM refuses is
    refused alike (a RuntimeError)."""
    for t, name in ((src_cache, "src_cache"), (dst, "dst"),
                    (block_table, "block_table"),
                    (workspace_starts, "workspace_starts")):
        if not isinstance(t, torch.Tensor):
            raise _bad("%s: %s: expected a torch.Tensor, got %s", op, name,
                       type(t).__name__)
    if block_table.dtype != torch.int32:
        raise VllmCheckError("%s: block_table must be int32" % op)
    if workspace_starts.dtype != torch.int32:
        raise VllmCheckError("%s: workspace_starts must be int32" % op)
    if seq_starts is not None and (not isinstance(seq_starts, torch.Tensor)
                                   or seq_starts.dtype != torch.int32):
        raise VllmCheckError("%s: seq_starts must be int32" % op)
    if src_cache.dim() != 3 or dst.dim() != 2:
        raise _bad("%s: src_cache, dst: expected [num_blocks, block_size, "
                   "656] and [num_tokens, 576], got shapes %s and %s", op,
                   list(src_cache.shape), list(dst.shape))
    if dst.dtype != torch.bfloat16:
        raise VllmCheckError("%s: dst must be bfloat16" % op)
    if dst.shape[1] != KV_LORA_RANK + PE_DIM:
        raise VllmCheckError("%s: head_dim must be 576 for MLA" % op)
    if src_cache.shape[2] * src_cache.element_size() < ENTRY_BYTES:
        raise VllmCheckError("%s: src_cache rows must contain at least 656 "
                             "bytes for MLA" % op)
    raise NotProvidedError(op, "fp8_ds_mla gathers")
