"""vLLM's cache ops on kvgen's kernels: ``vllm._custom_ops`` and
``torch.ops._C_cache_ops`` with vLLM 0.34.0's signatures and semantics.

    import kvgen.vllm
    kvgen.vllm.install()      # torch.ops._C_cache_ops.* now run kvgen's kernels
    # or call them directly:
    kvgen.vllm.reshape_and_cache_flash(key, value, key_cache, value_cache,
                                       slot_mapping, "auto", k_scale, v_scale)

What kvgen has is routed to it: ``reshape_and_cache_flash`` and
``concat_and_cache_mla`` to ``kvgen.ops``, ``concat_and_cache_mla_rope_fused``
to kvgen's MLA append with a RoPE prologue, ``reshape_and_cache`` (vLLM's
x-vectorized cache) to kvgen's kernels of that layout, ``convert_fp8`` to
kvgen's static fp8 append and its gather over the tensor's rows,
``swap_blocks`` to kvrt's checked block copy. An op or a
format that kvgen does not provide raises ``NotProvidedError`` (a
``NotImplementedError``) naming the op and the format, before anything is
written; nothing falls back to another implementation. docs/VLLM.md lists
what is provided.
"""

import threading

import torch

from . import _vllm_ds_mla as _ds_mla
from . import _vllm_nvfp4 as _nvfp4
from . import compiler, errors, ops
from ._vllm_cache import (convert_fp8, cp_gather_cache,
                          gather_and_maybe_dequant_cache, swap_blocks)
from ._vllm_prologue import fused_qk_norm_rope_and_reshape_and_cache_flash
from ._vllm_mla_rope import concat_and_cache_mla_rope_fused
from ._vllm_common import (_DESC_FP8, _DTYPES, NotProvidedError,
                           VllmCheckError, _bad, _check_dtype,
                           _per_tensor_scales, _target)

__all__ = [
    "NotProvidedError", "VllmCheckError", "install", "installed",
    "reshape_and_cache", "reshape_and_cache_flash", "concat_and_cache_mla",
    "concat_and_cache_mla_grouped", "concat_and_cache_mla_rope_fused",
    "swap_blocks", "swap_blocks_batch", "convert_fp8",
    "gather_and_maybe_dequant_cache", "cp_gather_cache",
    "cp_gather_and_upconvert_fp8_kv_cache",
    "cp_gather_and_upconvert_nvfp4_kv_cache", "indexer_k_quant_and_cache",
    "fused_qk_norm_rope_and_reshape_and_cache_flash",
    "cp_gather_indexer_k_quant_cache", "concat_mla_q", "PROVIDED",
    "NOT_PROVIDED", "SCHEMAS",
]

#: The vLLM version whose signatures these are.
VLLM_VERSION = "0.34.0"


# Ops routed to kvgen ---------------------------------------------------------

def reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping,
                            kv_cache_dtype, k_scale, v_scale):
    """vLLM's reshape_and_cache_flash (kvgen.ops.reshape_and_cache_flash):
    caches [num_blocks, block_size, num_heads, head_size], NHD or HND in
    memory; V's head size may differ from K's; slot -1 pads."""
    op = "reshape_and_cache_flash"
    if kv_cache_dtype in _nvfp4.NVFP4_SEARCH:
        # vLLM's NVFP4 page (nvfp4, nvfp4_4over6): kvgen's #kv.nvfp4 append.
        _nvfp4.reshape_and_cache_flash_nvfp4(op, key, value, key_cache,
                                             value_cache, slot_mapping,
                                             kv_cache_dtype, k_scale, v_scale)
        return
    _check_dtype(op, kv_cache_dtype)
    # K and V of different head sizes (value_cache's own head_size), and
    # per-tensor or per-head fp8 scales: kvgen.ops takes both, as vLLM
    # does, and refuses any other shape by name.
    ops.reshape_and_cache_flash(key, value, key_cache, value_cache,
                                slot_mapping, kv_cache_dtype, k_scale,
                                v_scale)


def concat_and_cache_mla(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype,
                         scale, skip_scale=False):
    """vLLM's concat_and_cache_mla (kvgen.ops.concat_and_cache_mla): the
    latent cache [num_blocks, block_size, kv_lora_rank + pe_dim] gets kv_c
    then k_pe; one per-tensor scale for fp8. "fp8_ds_mla" is DeepSeek
    V3.2's 656-byte entry with inline scales (or its 528-byte nope rows),
    kvgen's latent append with #kv.inline_scales."""
    op = "concat_and_cache_mla"
    if kv_cache_dtype == "fp8_ds_mla":
        # DeepSeek V3.2's entry with inline scales, computed by the kernel:
        # vLLM ignores scale and skip_scale there.
        _ds_mla.concat_and_cache_ds_mla(op, kv_c, k_pe, kv_cache,
                                        slot_mapping)
        return
    _check_dtype(op, kv_cache_dtype)
    if skip_scale and kv_cache_dtype != "auto":
        raise NotProvidedError(op, "skip_scale=True with kv_cache_dtype %r"
                               % kv_cache_dtype)
    _per_tensor_scales(op, kv_cache_dtype, (("scale", scale),))
    ops.concat_and_cache_mla(kv_c, k_pe, kv_cache, slot_mapping,
                             kv_cache_dtype, scale)


# vLLM's x-vectorized cache (reshape_and_cache) is this kvgen layout.
_X_VECTORIZED = compiler._VLLM_LAYOUTS["x"]
_vectorized = {}
_vectorized_lock = threading.Lock()


def reshape_and_cache(key, value, key_cache, value_cache, slot_mapping,
                      kv_cache_dtype, k_scale, v_scale, interleaved_v=False):
    """vLLM's reshape_and_cache, its x-vectorized cache (kvgen has the
    layout): key_cache [num_blocks, num_heads,
    head_size // x, block_size, x] with x = 16 bytes of the cache dtype,
    value_cache [num_blocks, num_heads, head_size, block_size]; slot -1
    pads; rows of key past slot_mapping's length are ignored."""
    op = "reshape_and_cache"
    _check_dtype(op, kv_cache_dtype)
    if interleaved_v:
        raise NotProvidedError(op, "interleaved_v=True (V interleaved like K)")
    _per_tensor_scales(op, kv_cache_dtype, (("k_scale", k_scale),
                                            ("v_scale", v_scale)))
    for t, name in ((key, "key"), (value, "value"), (key_cache, "key_cache"),
                    (value_cache, "value_cache"),
                    (slot_mapping, "slot_mapping")):
        if not isinstance(t, torch.Tensor):
            raise _bad("%s: expected a torch.Tensor, got %s", name,
                       type(t).__name__)
    if key.dim() != 3:
        raise _bad("key: expected [num_tokens, num_heads, head_size], got "
                   "shape %s", list(key.shape))
    if key_cache.dim() != 5 or value_cache.dim() != 4:
        raise _bad("key_cache, value_cache: expected [num_blocks, num_heads, "
                   "head_size // x, block_size, x] and [num_blocks, "
                   "num_heads, head_size, block_size], got shapes %s and %s",
                   list(key_cache.shape), list(value_cache.shape))
    _, heads, head_size = key.shape
    nb, cache_heads, dim_over_x, bs, x = key_cache.shape
    if (cache_heads, dim_over_x * x) != (heads, head_size):
        raise _bad("key_cache: shape %s does not hold key's %d heads of "
                   "head_size %d", list(key_cache.shape), heads, head_size)
    source = _DTYPES.get(key.dtype)
    if source not in ("f32", "f16", "bf16"):
        raise _bad("key: dtype %s; expected float32, float16 or bfloat16",
                   key.dtype)
    cache = _DTYPES.get(key_cache.dtype)
    if kv_cache_dtype == "auto":
        if cache not in ("f32", "f16", "bf16"):
            raise _bad("key_cache: dtype %s with kv_cache_dtype 'auto'; an "
                       "fp8 cache needs kv_cache_dtype 'fp8'", key_cache.dtype)
        quant, desc_cache, view = None, cache, None
    else:
        quant, desc_cache, view = _DESC_FP8[kv_cache_dtype]
        if key_cache.dtype not in (torch.uint8, view):
            raise _bad("key_cache: dtype %s with kv_cache_dtype %r; expected "
                       "uint8 or the matching float8", key_cache.dtype,
                       kv_cache_dtype)
    if value_cache.dtype != key_cache.dtype:
        raise _bad("value_cache: dtype %s differs from key_cache's %s",
                   value_cache.dtype, key_cache.dtype)
    if slot_mapping.dim() != 1:
        raise _bad("slot_mapping: expected [num_tokens], got shape %s",
                   list(slot_mapping.shape))
    n = slot_mapping.shape[0]
    if key.shape[0] < n or value.dim() != 3 or value.shape[0] < n:
        raise _bad("key, value: shapes %s and %s have fewer rows than "
                   "slot_mapping (%d)", list(key.shape), list(value.shape), n)
    target, chip = _target(key_cache.device)
    memo = (target, chip, bs, heads, head_size, source, desc_cache, quant)
    bundle, kernel = _vectorized.get(memo, (None, None))
    if bundle is None:
        try:
            bundle = compiler.compile(
                layout=_X_VECTORIZED, block_size=bs, num_kv_heads=heads,
                head_dim=head_size, dtype=source, cache_dtype=desc_cache,
                quant=quant, kernels=("append",), target=target, chip=chip)
        except errors.CompilerError as e:
            raise errors.KernelNotAvailableError(
                "%s: kvgen could not generate the %s kernel: %s"
                % (op, _X_VECTORIZED, e)) from e
        kernel = bundle.find("append", layout=_X_VECTORIZED,
                             block_size=bs, num_kv_heads=heads,
                             head_dim=head_size, source_dtype=source)
        if kernel is None:
            raise errors.KernelNotAvailableError(
                "%s: %s has no %s append kernel" % (op, bundle.source,
                                                     _X_VECTORIZED))
        with _vectorized_lock:
            _vectorized[memo] = (bundle, kernel)
    if view is not None:
        key_cache, value_cache = key_cache.view(view), value_cache.view(view)
    ks = vs = None
    if quant is not None:
        ks, vs = k_scale.reshape(1), v_scale.reshape(1)
    bundle.append(key[:n], value[:n], slot_mapping, key_cache, value_cache,
                  kernel=kernel, key_scale=ks, value_scale=vs)


# Ops kvgen does not provide -------------------------------------------------

def _not_provided(op, fmt):
    def refuse(*args, **kwargs):
        raise NotProvidedError(op, fmt)

    refuse.__name__ = op
    refuse.__qualname__ = op
    refuse.__doc__ = "vLLM's %s: not provided by kvgen (%s)." % (op, fmt)
    return refuse


#: vLLM 0.34.0's cache ops that kvgen has no kernel for, and why.
NOT_PROVIDED = {
    "swap_blocks_batch": "batched block copies (swap_blocks_batch)",
    "concat_and_cache_mla_grouped":
        "grouped MLA appends across layers through cache pointers",
    "cp_gather_and_upconvert_fp8_kv_cache": "fp8_ds_mla gathers",
    "cp_gather_and_upconvert_nvfp4_kv_cache": "nvfp4_ds_mla gathers",
    "indexer_k_quant_and_cache": "the sparse-attention indexer's K cache",
    "cp_gather_indexer_k_quant_cache": "the sparse-attention indexer's K cache",
    "concat_mla_q": "MLA query concatenation (not a cache op)",
}

swap_blocks_batch = _not_provided("swap_blocks_batch",
                                  NOT_PROVIDED["swap_blocks_batch"])
concat_and_cache_mla_grouped = _not_provided(
    "concat_and_cache_mla_grouped",
    NOT_PROVIDED["concat_and_cache_mla_grouped"])


def cp_gather_and_upconvert_fp8_kv_cache(src_cache, dst, block_table,
                                         workspace_starts, batch_size,
                                         seq_starts=None, host_cache=None,
                                         host_row_ids=None,
                                         device_row_ids=None):
    """Not provided (NotProvidedError), after vLLM's own checks of the
    tensors, which refuse a call as vLLM's op does (a RuntimeError)."""
    _ds_mla.check_upconvert_args(
        "cp_gather_and_upconvert_fp8_kv_cache", src_cache, dst, block_table,
        workspace_starts, seq_starts)


cp_gather_and_upconvert_nvfp4_kv_cache = _not_provided(
    "cp_gather_and_upconvert_nvfp4_kv_cache",
    NOT_PROVIDED["cp_gather_and_upconvert_nvfp4_kv_cache"])
indexer_k_quant_and_cache = _not_provided(
    "indexer_k_quant_and_cache", NOT_PROVIDED["indexer_k_quant_and_cache"])
cp_gather_indexer_k_quant_cache = _not_provided(
    "cp_gather_indexer_k_quant_cache",
    NOT_PROVIDED["cp_gather_indexer_k_quant_cache"])
concat_mla_q = _not_provided("concat_mla_q", NOT_PROVIDED["concat_mla_q"])

#: The ops kvgen runs.
PROVIDED = {
    "reshape_and_cache": reshape_and_cache,
    "reshape_and_cache_flash": reshape_and_cache_flash,
    "concat_and_cache_mla": concat_and_cache_mla,
    "concat_and_cache_mla_rope_fused": concat_and_cache_mla_rope_fused,
    "convert_fp8": convert_fp8,
    "swap_blocks": swap_blocks,
    "gather_and_maybe_dequant_cache": gather_and_maybe_dequant_cache,
    "cp_gather_cache": cp_gather_cache,
}

# torch.ops._C_cache_ops ------------------------------------------------------

#: vLLM 0.34.0's schemas of torch.ops._C_cache_ops (csrc/torch_bindings.cpp),
#: less the hisparse ops, which are not cache writes.
SCHEMAS = {
    "swap_blocks": "swap_blocks(Tensor src, Tensor! dst, int "
                   "block_size_in_bytes, Tensor block_mapping) -> ()",
    "swap_blocks_batch": "swap_blocks_batch(Tensor src_ptrs, Tensor dst_ptrs, "
                         "Tensor sizes, bool is_src_access_order_any=False) "
                         "-> ()",
    "reshape_and_cache": "reshape_and_cache(Tensor key, Tensor value, Tensor! "
                         "key_cache, Tensor! value_cache, Tensor slot_mapping, "
                         "str kv_cache_dtype, Tensor k_scale, Tensor v_scale, "
                         "bool interleaved_v=False) -> ()",
    "reshape_and_cache_flash": "reshape_and_cache_flash(Tensor key, Tensor "
                               "value, Tensor! key_cache, Tensor! "
                               "value_cache, Tensor slot_mapping, str "
                               "kv_cache_dtype, Tensor k_scale, Tensor "
                               "v_scale) -> ()",
    "concat_and_cache_mla": "concat_and_cache_mla(Tensor kv_c, Tensor k_pe, "
                            "Tensor! kv_cache, Tensor slot_mapping, str "
                            "kv_cache_dtype, Tensor scale, bool "
                            "skip_scale=False) -> ()",
    "concat_and_cache_mla_grouped": "concat_and_cache_mla_grouped(Tensor kv_c, "
                                    "Tensor k_pe, Tensor kv_cache_ptrs, Tensor "
                                    "slot_mapping, int block_size, int "
                                    "block_stride, int entry_stride, Tensor? "
                                    "kv_scales=None, str "
                                    "kv_cache_dtype='auto') -> ()",
    "concat_and_cache_mla_rope_fused": "concat_and_cache_mla_rope_fused(Tensor "
                                       "positions, Tensor! q_pe, Tensor! k_pe, "
                                       "Tensor kv_c, Tensor cos_sin_cache, "
                                       "bool is_neox, Tensor slot_mapping, "
                                       "Tensor! kv_cache, str kv_cache_dtype, "
                                       "Tensor kv_cache_scale) -> ()",
    "convert_fp8": "convert_fp8(Tensor! dst_cache, Tensor src_cache, float "
                   "scale, str kv_cache_dtype) -> ()",
    "gather_and_maybe_dequant_cache": "gather_and_maybe_dequant_cache(Tensor "
                                      "src_cache, Tensor! dst, Tensor "
                                      "block_table, Tensor cu_seq_lens, Tensor "
                                      "token_to_seq, int num_tokens, str "
                                      "kv_cache_dtype, Tensor scale, Tensor? "
                                      "seq_starts) -> ()",
    "cp_gather_cache": "cp_gather_cache(Tensor src_cache, Tensor! dst, Tensor "
                       "block_table, Tensor cu_seq_lens, int batch_size, "
                       "Tensor? seq_starts) -> ()",
    "cp_gather_and_upconvert_fp8_kv_cache":
        "cp_gather_and_upconvert_fp8_kv_cache(Tensor src_cache, Tensor! dst, "
        "Tensor block_table, Tensor workspace_starts, int batch_size, Tensor? "
        "seq_starts, Tensor? host_cache=None, Tensor? host_row_ids=None, "
        "Tensor? device_row_ids=None) -> ()",
    "cp_gather_and_upconvert_nvfp4_kv_cache":
        "cp_gather_and_upconvert_nvfp4_kv_cache(Tensor src_cache, Tensor! dst, "
        "Tensor block_table, Tensor workspace_starts, int batch_size, Tensor? "
        "seq_starts=None) -> ()",
    "indexer_k_quant_and_cache": "indexer_k_quant_and_cache(Tensor k, Tensor! "
                                 "kv_cache, Tensor slot_mapping, int "
                                 "quant_block_size, str kv_cache_dtype) -> ()",
    "concat_mla_q": "concat_mla_q(Tensor ql_nope, Tensor q_pe, Tensor! q_out) "
                    "-> ()",
    "cp_gather_indexer_k_quant_cache": "cp_gather_indexer_k_quant_cache("
                                       "Tensor kv_cache, Tensor! dst_k, "
                                       "Tensor! dst_scale, Tensor block_table, "
                                       "Tensor cu_seq_lens) -> ()",
}

_libraries = []
_installed = {}
_install_lock = threading.Lock()


def _op_exists(name):
    try:
        getattr(torch.ops._C_cache_ops, name)
    except (AttributeError, RuntimeError):
        return False
    return True


def installed():
    """{op name: "defined" | "overridden"} of what install() registered."""
    return dict(_installed)


def install():
    """Makes ``torch.ops._C_cache_ops.*`` run kvgen's kernels on CPU and
    CUDA tensors.

    Where vLLM's extension already defined the ops (``import vllm`` came
    first), the CPU and CUDA kernels of the ops kvgen provides
    (``PROVIDED``) are replaced by kvgen's, and vLLM's other cache ops stay
    vLLM's. Without vLLM, every op of ``SCHEMAS`` is defined with vLLM's
    schema, and the ones kvgen does not provide raise NotProvidedError. Each
    op kvgen defines gets a fake implementation (it returns nothing), so
    torch.compile and FakeTensor tracing need no kernel. Safe to call again.
    Returns installed()."""
    with _install_lock:
        if _installed:
            return installed()
        fresh = [n for n in SCHEMAS if not _op_exists(n)]
        if fresh:
            lib = torch.library.Library("_C_cache_ops", "FRAGMENT")
            _libraries.append(lib)
            for name in fresh:
                lib.define(SCHEMAS[name])
                fn = PROVIDED.get(name) or globals()[name]
                lib.impl(name, _boxed(fn), "CPU")
                lib.impl(name, _boxed(fn), "CUDA")
                torch.library.register_fake("_C_cache_ops::" + name,
                                            _fake, lib=lib)
                _installed[name] = "defined"
        overrides = [n for n in PROVIDED if n not in fresh]
        if overrides:
            lib = torch.library.Library("_C_cache_ops", "IMPL")
            _libraries.append(lib)
            for name in overrides:
                lib.impl(name, _boxed(PROVIDED[name]), "CPU")
                lib.impl(name, _boxed(PROVIDED[name]), "CUDA")
                _installed[name] = "overridden"
        return installed()


def _boxed(fn):
    def kernel(*args, **kwargs):
        fn(*args, **kwargs)

    kernel.__name__ = fn.__name__
    return kernel


def _fake(*args, **kwargs):
    return None
