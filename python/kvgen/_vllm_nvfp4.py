"""vLLM's NVFP4 flash cache: reshape_and_cache_flash with kv_cache_dtype
"nvfp4" or "nvfp4_4over6" on kvgen's #kv.nvfp4 append (docs/VLLM.md,
"NVFP4"). kvgen.vllm routes those two dtypes here."""

import threading

import torch

from . import compiler, errors
from ._vllm_common import VllmCheckError, _bad, _target

# vLLM's kv_cache_dtype for its NVFP4 flash cache (csrc/
# nvfp4_kv_cache_kernels.cu) and the scale rule each names; the page is the
# same: K's scales linear, V's in the 4x4 tiles of the sm_100 trtllm-gen
# reader (docs/CONTRACT.md, "NVFP4").
NVFP4_SEARCH = {"nvfp4": "divisor_six", "nvfp4_4over6": "four_over_six"}
_NVFP4_SOURCES = {torch.bfloat16: "bf16", torch.float16: "f16",
                  torch.float32: "f32"}
_nvfp4_kernels = {}
_nvfp4_lock = threading.Lock()


def nvfp4_description(layout, block_size, num_heads, head_size, source,
                      search):
    """The kvgen description of vLLM's NVFP4 flash cache."""
    return (
        "module {\n  kv.append @nvfp4 : !kv.cache<layout = %s, block_size = "
        "%d, num_kv_heads = %d, head_dim = %d, dtype = i8, quant = "
        "#kv.quant<kind = nvfp4, granularity = per_tensor, mode = static>, "
        "nvfp4 = #kv.nvfp4<k_scales = linear, v_scales = swizzled, search = "
        "%s>> from %s\n}\n" % (layout, block_size, num_heads, head_size,
                               search, source))


def _nvfp4_kernel(op, device, layout, block_size, num_heads, head_size,
                  source, search):
    target, chip = _target(device)
    # sm_100 and later round to e2m1 with their cvt, which the arch-specific
    # target has (the same bits as the integer rounding elsewhere).
    if chip is not None and int(chip[3:]) >= 100:
        chip += "a"
    memo = (target, chip, layout, block_size, num_heads, head_size, source,
            search)
    found = _nvfp4_kernels.get(memo)
    if found is not None:
        return found
    text = nvfp4_description(layout, block_size, num_heads, head_size,
                             source, search)
    try:
        bundle = compiler.compile(text, target=target, chip=chip)
    except errors.CompilerError as e:
        raise errors.KernelNotAvailableError(
            "%s: kvgen could not generate the NVFP4 append: %s" % (op, e)) from e
    with _nvfp4_lock:
        found = _nvfp4_kernels.setdefault(memo, (bundle, "nvfp4"))
    return found


def _nvfp4_scale(op, name, s, device):
    if not isinstance(s, torch.Tensor) or s.dtype != torch.float32 or \
            s.numel() != 1:
        raise _bad("%s: %s: an NVFP4 cache takes one float32 scale per "
                   "tensor (vLLM's checkpoint scale), got %s", op, name,
                   "a %s of shape %s" % (s.dtype, list(s.shape))
                   if isinstance(s, torch.Tensor) else type(s).__name__)
    if s.device != device:
        raise _bad("%s: %s is on %s, the caches on %s", op, name, s.device,
                   device)
    return s.reshape(1)


def reshape_and_cache_flash_nvfp4(op, key, value, key_cache, value_cache,
                                  slot_mapping, kv_cache_dtype, k_scale,
                                  v_scale):
    """reshape_and_cache_flash(..., "nvfp4" or "nvfp4_4over6"): vLLM's
    checks in its words, then one launch of kvgen's NVFP4 append. The caches
    are vLLM's uint8 views kv_cache[:, 0] and kv_cache[:, 1], [num_blocks,
    block_size, num_heads, head_size / 2 + head_size / 16], NHD or HND in
    memory (the strides say which); a side's block is its values, then its
    scales."""
    for t, name in ((key, "key"), (value, "value"), (key_cache, "key_cache"),
                    (value_cache, "value_cache"),
                    (slot_mapping, "slot_mapping")):
        if not isinstance(t, torch.Tensor):
            raise _bad("%s: %s: expected a torch.Tensor, got %s", op, name,
                       type(t).__name__)
    if key.dim() != 3 or value.shape != key.shape:
        raise _bad("%s: key, value: expected [num_tokens, num_heads, "
                   "head_size] alike, got shapes %s and %s", op,
                   list(key.shape), list(value.shape))
    if slot_mapping.dim() != 1 or slot_mapping.dtype != torch.int64:
        raise _bad("%s: slot_mapping: expected int64 [num_tokens], got %s %s",
                   op, slot_mapping.dtype, list(slot_mapping.shape))
    num_heads, head_size = key.shape[1], key.shape[2]
    # vLLM's checks (reshape_and_cache_nvfp4_dispatch), in its words.
    full_dim = head_size // 2 + head_size // 16
    for cache in (key_cache, value_cache):
        if cache.dim() != 4:
            raise VllmCheckError("%s: key_cache must be 4D" % op)
        if cache.shape[3] != full_dim:
            raise VllmCheckError(
                "%s: key_cache last dim must be data_dim + scale_dim, got %d "
                "expected %d" % (op, cache.shape[3], full_dim))
    if head_size % 16 != 0:
        raise VllmCheckError("%s: head_size must be divisible by 16 for NVFP4 "
                             "KV cache" % op)
    block_size = key_cache.shape[1]
    if block_size % 4 != 0:
        raise VllmCheckError("%s: block_size must be divisible by 4 for NVFP4 "
                             "KV cache swizzle" % op)
    # vLLM's kernel does not check this one; its swizzle needs it.
    if (head_size // 16) % 4 != 0:
        raise VllmCheckError("%s: head_size / 16 must be divisible by 4 for "
                             "the NVFP4 KV cache's swizzled V scales, got "
                             "head_size %d" % (op, head_size))
    source = _NVFP4_SOURCES.get(key.dtype)
    if source is None or value.dtype != key.dtype:
        raise _bad("%s: key, value: dtypes %s and %s; the NVFP4 append takes "
                   "bfloat16, float16 or float32, one for both", op,
                   key.dtype, value.dtype)
    if value_cache.shape != key_cache.shape or \
            key_cache.shape[2] != num_heads:
        raise _bad("%s: key_cache, value_cache: expected [num_blocks, "
                   "block_size, %d, %d] alike, got shapes %s and %s", op,
                   num_heads, full_dim, list(key_cache.shape),
                   list(value_cache.shape))
    for cache, name in ((key_cache, "key_cache"), (value_cache, "value_cache")):
        if cache.element_size() != 1:
            raise _bad("%s: %s: an NVFP4 cache holds bytes (uint8), got %s",
                       op, name, cache.dtype)
    device = key.device
    devices = {t.device for t in (key, value, key_cache, value_cache,
                                  slot_mapping)}
    if len(devices) != 1:
        raise _bad("%s: key, value, the caches and slot_mapping are on %s; "
                   "all tensors must be on one device", op,
                   ", ".join(sorted(str(d) for d in devices)))
    ks = _nvfp4_scale(op, "k_scale", k_scale, device)
    vs = _nvfp4_scale(op, "v_scale", v_scale, device)
    n = slot_mapping.shape[0]
    if key.shape[0] < n:
        raise _bad("%s: key and value have %d rows, fewer than slot_mapping "
                   "(%d)", op, key.shape[0], n)
    # vLLM's rule: HND where the head stride passes the position's.
    hnd = key_cache.stride(2) > key_cache.stride(1)
    layout = compiler._VLLM_LAYOUTS["HND" if hnd else "NHD"]
    if hnd:
        # kvgen's HND axes: [num_blocks, num_heads, block_size, row].
        key_cache = key_cache.permute(0, 2, 1, 3)
        value_cache = value_cache.permute(0, 2, 1, 3)
    bundle, kernel = _nvfp4_kernel(op, device, layout, block_size, num_heads,
                                   head_size, source,
                                   NVFP4_SEARCH[kv_cache_dtype])
    bundle.append(key[:n], value[:n], slot_mapping, key_cache, value_cache,
                  key_scale=ks, value_scale=vs, kernel=kernel)
