"""vLLM's cache ops on kvgen's kernels: ``vllm._custom_ops`` and
``torch.ops._C_cache_ops`` with vLLM 0.34.0's signatures and semantics.

    import kvgen.vllm
    kvgen.vllm.install()      # torch.ops._C_cache_ops.* now run kvgen's kernels
    # or call them directly:
    kvgen.vllm.reshape_and_cache_flash(key, value, key_cache, value_cache,
                                       slot_mapping, "auto", k_scale, v_scale)

What kvgen has is routed to it: ``reshape_and_cache_flash`` and
``concat_and_cache_mla`` to ``kvgen.ops``, ``reshape_and_cache`` (vLLM's
x-vectorized cache) to kvgen's kernels of that layout, ``convert_fp8`` to
kvgen's static fp8 append and its gather over the tensor's rows,
``swap_blocks`` to kvrt's checked block copy. An op or a
format that kvgen does not provide raises ``NotProvidedError`` (a
``NotImplementedError``) naming the op and the format, before anything is
written; nothing falls back to another implementation. docs/VLLM.md lists
what is provided.
"""

import ctypes
import math
import numbers
import threading

import torch

from . import _dlpack, _ext, _kvrt, compiler, errors, ops
from .bundle import torch_current_stream

__all__ = [
    "NotProvidedError", "install", "installed", "reshape_and_cache",
    "reshape_and_cache_flash", "concat_and_cache_mla",
    "concat_and_cache_mla_grouped", "concat_and_cache_mla_rope_fused",
    "swap_blocks", "swap_blocks_batch", "convert_fp8",
    "gather_and_maybe_dequant_cache", "cp_gather_cache",
    "cp_gather_and_upconvert_fp8_kv_cache",
    "cp_gather_and_upconvert_nvfp4_kv_cache", "indexer_k_quant_and_cache",
    "cp_gather_indexer_k_quant_cache", "concat_mla_q", "PROVIDED",
    "NOT_PROVIDED", "SCHEMAS",
]

#: The vLLM version whose signatures these are.
VLLM_VERSION = "0.34.0"


class NotProvidedError(errors.KvgenError, NotImplementedError):
    """A vLLM cache op, or a format of one, that kvgen does not provide.
    ``.op`` is vLLM's op name, ``.format`` what of it is missing."""

    def __init__(self, op, fmt):
        self.op = op
        self.format = fmt
        super().__init__("kvgen does not provide vLLM's %s: %s" % (op, fmt))


# kv_cache_dtype values -------------------------------------------------------

_FP8 = ("fp8", "fp8_e4m3", "fp8_e5m2")
# vLLM's cache dtypes that kvgen's caches cannot hold.
_OTHER_VLLM_DTYPES = ("fp8_inc", "fp8_ds_mla", "nvfp4", "nvfp4_4over6",
                      "nvfp4_ds_mla", "int8", "turboquant", "ultraquant")


def _check_dtype(op, kv_cache_dtype, extra=()):
    """Refuses a kv_cache_dtype that is vLLM's but not kvgen's (a
    NotProvidedError) or nobody's (kvgen's InvalidArgumentError)."""
    if kv_cache_dtype == "auto" or kv_cache_dtype in _FP8:
        return
    if kv_cache_dtype in _OTHER_VLLM_DTYPES or kv_cache_dtype in extra:
        raise NotProvidedError(op, "kv_cache_dtype %r" % kv_cache_dtype)
    raise errors.InvalidArgumentError(
        "%s: kv_cache_dtype %r is not one of auto, fp8, fp8_e4m3, fp8_e5m2"
        % (op, kv_cache_dtype))


def _per_tensor_scales(op, kv_cache_dtype, scales):
    """A quantized cache takes one scale per tensor here: a scale tensor of
    more elements (vLLM's per-head scales) is a format kvgen's drop-in does
    not take."""
    if kv_cache_dtype not in _FP8:
        return
    for name, s in scales:
        if isinstance(s, torch.Tensor) and s.numel() > 1:
            raise NotProvidedError(
                op, "fp8 scales per head (%s of shape %s); kvgen's drop-in "
                "takes one scale per tensor" % (name, list(s.shape)))


# Ops routed to kvgen ---------------------------------------------------------

def reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping,
                            kv_cache_dtype, k_scale, v_scale):
    """vLLM's reshape_and_cache_flash (kvgen.ops.reshape_and_cache_flash):
    caches [num_blocks, block_size, num_heads, head_size], NHD or HND in
    memory; V's head size may differ from K's; slot -1 pads."""
    op = "reshape_and_cache_flash"
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
    then k_pe; one per-tensor scale for fp8."""
    op = "concat_and_cache_mla"
    _check_dtype(op, kv_cache_dtype)
    if skip_scale and kv_cache_dtype != "auto":
        raise NotProvidedError(op, "skip_scale=True with kv_cache_dtype %r"
                               % kv_cache_dtype)
    _per_tensor_scales(op, kv_cache_dtype, (("scale", scale),))
    ops.concat_and_cache_mla(kv_c, k_pe, kv_cache, slot_mapping,
                             kv_cache_dtype, scale)


# vLLM's x-vectorized cache (reshape_and_cache) is this kvgen layout.
_X_VECTORIZED = compiler._VLLM_LAYOUTS["x"]
_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
           torch.uint8: "u8", torch.float8_e4m3fn: "f8e4m3",
           torch.float8_e5m2: "f8e5m2"}
_DESC_FP8 = {"fp8": ("fp8_e4m3", "f8E4M3FN", torch.float8_e4m3fn),
             "fp8_e4m3": ("fp8_e4m3", "f8E4M3FN", torch.float8_e4m3fn),
             "fp8_e5m2": ("fp8_e5m2", "f8E5M2", torch.float8_e5m2)}
_vectorized = {}
_vectorized_lock = threading.Lock()


def _bad(message, *args):
    return errors.InvalidArgumentError(message % args)


def _target(device):
    if device.type == "cpu":
        return "host", None
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return "gpu", "sm_%d%d" % (major, minor)
    raise _bad("tensors on %s: kvgen runs on CPU and CUDA tensors", device)


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


# convert_fp8 -----------------------------------------------------------------

# convert_fp8 runs on the tensor as rows of a K-only cache of one head and
# block_size 1: 16/32-bit -> fp8 is kvgen's static per-tensor append into it
# (slots 0..rows-1), fp8 -> 16/32-bit its gather (dequantize) out of it. A row
# is the last dimension, merged by powers of two while they divide the row
# count, up to this many elements: the slot list (8 bytes a row) stays small
# beside the data, and one description serves many shapes.
_CONVERT_ROW_ELEMS = 1024
# kvgen's rows hold at most this many elements (its head_dim limit).
_CONVERT_MAX_ROW = 1 << 16
# Rows per launch: kvrt's counts are below 2^31.
_CONVERT_ROWS_PER_LAUNCH = 1 << 30
_FLOATS = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
_converters = {}
_converters_lock = threading.Lock()


def _convert_row(shape):
    """(rows, width): the tensor's elements as rows of `width`."""
    width = shape[-1] if shape else 1
    numel = 1
    for extent in shape:
        numel *= extent
    while width > _CONVERT_ROW_ELEMS and width % 2 == 0:
        width //= 2
    rows = numel // width
    while width * 2 <= _CONVERT_ROW_ELEMS and rows % 2 == 0:
        width, rows = width * 2, rows // 2
    return rows, width


def _converter(op, device, width, kv_dtype, source):
    """(bundle, append kernel, gather kernel) of rows of `width` elements
    between `source` (f32, f16, bf16) and kv_dtype's fp8, compiled once."""
    target, chip = _target(device)
    quant, storage, _ = _DESC_FP8[kv_dtype]
    memo = (target, chip, width, quant, source)
    found = _converters.get(memo)
    if found is not None:
        return found
    cache = ("!kv.cache<layout = paged_nhd, block_size = 1, num_kv_heads = 1, "
             "head_dim = %d, dtype = %s, k_only = true, quant = #kv.quant<"
             "kind = %s, granularity = per_tensor, mode = static>>"
             % (width, storage, quant))
    text = ("module {\n  kv.append @convert_fp8_append : %s from %s\n"
            "  kv.gather @convert_fp8_gather : %s to %s\n}\n"
            % (cache, source, cache, source))
    try:
        bundle = compiler.compile(text, target=target, chip=chip)
    except errors.CompilerError as e:
        raise errors.KernelNotAvailableError(
            "%s: kvgen could not generate the conversion kernels of %s rows "
            "of %d elements: %s" % (op, quant, width, e)) from e
    append = bundle.find("append", head_dim=width, source_dtype=source)
    gather = bundle.find("gather", head_dim=width)
    if append is None or gather is None:
        raise errors.KernelNotAvailableError(
            "%s: %s has no append and gather kernels of %s rows of %d "
            "elements" % (op, bundle.source, quant, width))
    with _converters_lock:
        found = _converters.setdefault(memo, (bundle, append, gather))
    return found


def convert_fp8(dst_cache, src_cache, scale=1.0, kv_dtype="fp8"):
    """vLLM's convert_fp8, elementwise over the whole tensor: from float32,
    float16 or bfloat16 to fp8 ``fp8(x / scale)`` (IEEE fp32 division,
    rounded to nearest even, saturated to the largest finite value), or from
    fp8 to float32/float16/bfloat16 ``float(q) * scale`` (fp32, then rounded
    to nearest even). ``kv_dtype`` "fp8" or "fp8_e4m3" is e4m3fn, "fp8_e5m2"
    e5m2; the fp8 side is uint8 or the matching float8 dtype. Both tensors
    contiguous, of one shape, on one device. Runs kvgen's generated kernels
    (a static per-tensor append, a gather); nothing is written before every
    check passed."""
    op = "convert_fp8"
    for t, name in ((dst_cache, "dst_cache"), (src_cache, "src_cache")):
        if not isinstance(t, torch.Tensor):
            raise _bad("%s: %s: expected a torch.Tensor, got %s", op, name,
                       type(t).__name__)
    if not isinstance(kv_dtype, str) or kv_dtype not in _DESC_FP8:
        if isinstance(kv_dtype, str) and kv_dtype in _OTHER_VLLM_DTYPES:
            raise NotProvidedError(op, "kv_dtype %r" % kv_dtype)
        raise _bad("%s: kv_dtype %r is not one of fp8, fp8_e4m3, fp8_e5m2 "
                   "(the fp8 format converted to or from)", op, kv_dtype)
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise _bad("%s: scale: expected a float, got %s", op,
                   type(scale).__name__)
    try:
        scale32 = torch.tensor([float(scale)], dtype=torch.float32)
    except OverflowError:  # an int past any float
        scale32 = torch.tensor([math.inf], dtype=torch.float32)
    value = scale32.item()
    if value == 0 or not math.isfinite(value):
        raise _bad("%s: scale %r is %r in fp32; the scale must be a finite, "
                   "nonzero fp32 number", op, scale, value)
    quant, _, float8 = _DESC_FP8[kv_dtype]
    fp8 = (torch.uint8, float8)
    if src_cache.dtype in _FLOATS and dst_cache.dtype in fp8:
        source, to_fp8 = _FLOATS[src_cache.dtype], True
    elif src_cache.dtype in fp8 and dst_cache.dtype in _FLOATS:
        source, to_fp8 = _FLOATS[dst_cache.dtype], False
    else:
        raise _bad("%s: src_cache %s -> dst_cache %s: one side must be "
                   "float32, float16 or bfloat16 and the other uint8 or %s "
                   "(kv_dtype %r)", op, src_cache.dtype, dst_cache.dtype,
                   float8, kv_dtype)
    if dst_cache.shape != src_cache.shape:
        raise _bad("%s: dst_cache has shape %s but src_cache %s; both must "
                   "have one shape", op, list(dst_cache.shape),
                   list(src_cache.shape))
    if dst_cache.device != src_cache.device:
        raise _bad("%s: dst_cache is on %s but src_cache on %s; both must be "
                   "on one device", op, dst_cache.device, src_cache.device)
    for t, name in ((dst_cache, "dst_cache"), (src_cache, "src_cache")):
        if not t.is_contiguous():
            raise _bad("%s: %s (shape %s, strides %s) is not contiguous; "
                       "convert_fp8 converts a tensor's elements in memory "
                       "order, as vLLM's kernel does: pass .contiguous()",
                       op, name, list(t.shape), list(t.stride()))
    ends = [(t.data_ptr(), t.data_ptr() + t.numel() * t.element_size())
            for t in (dst_cache, src_cache)]
    if ends[0][0] < ends[1][1] and ends[1][0] < ends[0][1]:
        raise _bad("%s: dst_cache shares memory with src_cache; the "
                   "conversion writes a tensor of its own", op)
    rows, width = _convert_row(tuple(src_cache.shape))
    if width > _CONVERT_MAX_ROW:
        raise NotProvidedError(op, "a last dimension of %d elements, which "
                               "halving does not bring within kvgen's rows "
                               "of at most %d" % (src_cache.shape[-1],
                                                  _CONVERT_MAX_ROW))
    if rows == 0:
        return
    bundle, append, gather = _converter(op, src_cache.device, width,
                                        kv_dtype, source)
    device = src_cache.device
    scale32 = scale32.to(device)
    src = src_cache.view(rows, 1, width)
    dst = dst_cache.view(rows, 1, width)
    for start in range(0, rows, _CONVERT_ROWS_PER_LAUNCH):
        stop = min(rows, start + _CONVERT_ROWS_PER_LAUNCH)
        slots = torch.arange(stop - start, dtype=torch.int64, device=device)
        if to_fp8:
            bundle.append(src[start:stop], None, slots,
                          dst[start:stop].unsqueeze(1), None, kernel=append,
                          key_scale=scale32)
        else:
            bundle.gather(src[start:stop].unsqueeze(1), None, slots,
                          dst[start:stop], None, kernel=gather,
                          key_scale=scale32)


# swap_blocks -----------------------------------------------------------------

def swap_blocks(src, dst, block_size_in_bytes, block_mapping):
    """vLLM's swap_blocks: for each pair (s, d) of block_mapping (int64
    [n, 2] on the CPU), block d of dst (dimension 0) becomes a copy of block
    s of src; GPU <-> GPU (one device), GPU <-> CPU and CPU <-> CPU. No
    kernel: kvrt_copy_blocks checks the two caches' blocks (one dtype and
    layout, contiguous, block_size_in_bytes each), every pair's range and
    that no dst block is written twice before it copies anything, then
    copies each block (memcpy, or cuMemcpyAsync on torch's current stream of
    the GPU's device)."""
    op = "swap_blocks"
    tensors = ((src, "src"), (dst, "dst"), (block_mapping, "block_mapping"))
    for t, name in tensors:
        if not isinstance(t, torch.Tensor):
            raise _bad("%s: %s: expected a torch.Tensor, got %s", op, name,
                       type(t).__name__)
        if t.dim() > _dlpack.MAX_RANK:
            raise _bad("%s: %s: rank %d; kvgen's tensors have rank %d at "
                       "most", op, name, t.dim(), _dlpack.MAX_RANK)
    if (isinstance(block_size_in_bytes, bool) or
            not isinstance(block_size_in_bytes, numbers.Integral) or
            not 0 < block_size_in_bytes < 1 << 63):
        raise _bad("%s: block_size_in_bytes %r is not a positive 64-bit "
                   "integer", op, block_size_in_bytes)
    keep = []
    descs = _dlpack.describe_all([t for t, _ in tensors],
                                 [n for _, n in tensors], keep, ("dst",))
    k = _kvrt.lib()
    entry = getattr(k.handle, "kvrt_copy_blocks", None)
    if entry is None:
        raise errors.LibraryNotFoundError(
            "the libkvrt at %s lacks kvrt_copy_blocks; it is older than this "
            "package" % k.path)
    address = ctypes.cast(entry, ctypes.c_void_p).value
    ext = _ext.get()
    gpu = src if src.is_cuda else dst if dst.is_cuda else None
    if gpu is None:
        status = ext.copy_blocks(address, descs[0], descs[1],
                                 int(block_size_in_bytes), descs[2], 0)
    else:
        # The GPU's current context and stream, as vLLM's device guard and
        # getCurrentCUDAStream give them.
        index = gpu.get_device()
        stream = ext.work_stream(gpu, _dlpack.CUDA, index)
        if stream is None:
            stream = torch_current_stream(index)
        with torch.cuda.device(index):
            status = ext.copy_blocks(address, descs[0], descs[1],
                                     int(block_size_in_bytes), descs[2],
                                     stream)
    _kvrt.check(status)


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
    "concat_and_cache_mla_rope_fused": "MLA append fused with RoPE",
    "gather_and_maybe_dequant_cache": "MLA cache gathers",
    "cp_gather_cache": "MLA cache gathers",
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
concat_and_cache_mla_rope_fused = _not_provided(
    "concat_and_cache_mla_rope_fused",
    NOT_PROVIDED["concat_and_cache_mla_rope_fused"])
gather_and_maybe_dequant_cache = _not_provided(
    "gather_and_maybe_dequant_cache",
    NOT_PROVIDED["gather_and_maybe_dequant_cache"])
cp_gather_cache = _not_provided("cp_gather_cache",
                                NOT_PROVIDED["cp_gather_cache"])
cp_gather_and_upconvert_fp8_kv_cache = _not_provided(
    "cp_gather_and_upconvert_fp8_kv_cache",
    NOT_PROVIDED["cp_gather_and_upconvert_fp8_kv_cache"])
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
    "convert_fp8": convert_fp8,
    "swap_blocks": swap_blocks,
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
