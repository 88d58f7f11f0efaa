"""vLLM's whole-cache ops on kvgen: convert_fp8 (kvgen's static fp8 append
and its gather over the tensor as rows), the MLA gathers through a block
table (gather_and_maybe_dequant_cache, cp_gather_cache on the fused_gather
kernels) and swap_blocks (kvrt's checked block copy). kvgen.vllm exports
them with vLLM's signatures."""

import math
import numbers
import threading

import torch

from . import _dlpack, _ext, blocks, compiler, errors
from ._vllm_common import (_DESC_FP8, _OTHER_VLLM_DTYPES, NotProvidedError,
                           _bad, _check_dtype, _per_tensor_scales, _target)
from .bundle import torch_current_stream


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


# MLA gathers ------------------------------------------------------------------

# vLLM's MLA gathers run on kvgen's fused_gather kernel (the block table
# rule of fused_append, read the other way) over the latent cache described
# as a K-only paged cache (block, position, head, dim) of one head whose row
# is the whole entry.
_gatherers = {}
_gatherers_lock = threading.Lock()
# A raw copy moves bits: a 1-byte cache (fp8 or uint8) is copied as 16-bit
# pairs, so that it needs no dtype of kvgen's rows it does not have.
_RAW = {torch.float32: ("f32", torch.float32),
        torch.float16: ("f16", torch.float16),
        torch.bfloat16: ("bf16", torch.bfloat16),
        torch.uint8: ("f16", torch.float16),
        torch.float8_e4m3fn: ("f16", torch.float16),
        torch.float8_e5m2: ("f16", torch.float16)}


def _gatherer(op, device, block_size, entry, cache, output, quant):
    """(bundle, fused_gather kernel) of a latent cache of `entry` elements
    of dtype `cache` read out as `output`, compiled once."""
    target, chip = _target(device)
    memo = (target, chip, block_size, entry, cache, output, quant)
    found = _gatherers.get(memo)
    if found is not None:
        return found
    q = ""
    if quant is not None:
        q = (", quant = #kv.quant<kind = %s, granularity = per_tensor, "
             "mode = static>" % quant)
    cache_type = ("!kv.cache<layout = paged_nhd, block_size = %d, "
                  "num_kv_heads = 1, head_dim = %d, dtype = %s, k_only = true"
                  "%s>" % (block_size, entry, cache, q))
    # Named for what it gathers, not for the op: the ops that read a cache
    # alike share one description, so one compiled kernel (in a kernel
    # cache made ahead of time too) serves whichever is called first.
    text = ("module {\n  kv.fused_gather @latent_gather : %s to %s\n}\n"
            % (cache_type, output))
    try:
        bundle = compiler.compile(text, target=target, chip=chip)
    except errors.CompilerError as e:
        raise errors.KernelNotAvailableError(
            "%s: kvgen could not generate the gather of a cache of %d rows "
            "of %d %s elements: %s" % (op, block_size, entry, cache, e)) from e
    kernel = bundle.find("fused_gather", head_dim=entry)
    if kernel is None:
        raise errors.KernelNotAvailableError(
            "%s: %s has no fused_gather kernel" % (op, bundle.source))
    with _gatherers_lock:
        found = _gatherers.setdefault(memo, (bundle, kernel))
    return found


def _index_tensor(op, t, name, ndim, device):
    if not isinstance(t, torch.Tensor):
        raise _bad("%s: %s: expected a torch.Tensor, got %s", op, name,
                   type(t).__name__)
    if t.dtype != torch.int32 or t.dim() != ndim:
        raise _bad("%s: %s: expected an int32 tensor of %d dimension(s), got "
                   "%s of shape %s", op, name, ndim, t.dtype, list(t.shape))
    if t.device != device:
        raise _bad("%s: %s is on %s but src_cache on %s; all tensors must be "
                   "on one device", op, name, t.device, device)


def _mla_gather(op, src_cache, dst, block_table, cu_seq_lens, batch_size,
                num_tokens, seq_starts, token_to_seq, quant, scale):
    """Checks everything, then launches one fused_gather: row t of dst, a
    token of sequence r, is the cache entry at position seq_starts[r] + t -
    cu_seq_lens[r] of block_table's row r."""
    for t, name in ((src_cache, "src_cache"), (dst, "dst")):
        if not isinstance(t, torch.Tensor):
            raise _bad("%s: %s: expected a torch.Tensor, got %s", op, name,
                       type(t).__name__)
    if src_cache.dim() != 3:
        raise _bad("%s: src_cache: expected [num_blocks, block_size, "
                   "entry_size], got shape %s", op, list(src_cache.shape))
    num_blocks, block_size, entry = src_cache.shape
    if dst.dim() != 2 or dst.shape[1] != entry:
        raise _bad("%s: dst: expected [num_tokens, %d] (src_cache's entry), "
                   "got shape %s", op, entry, list(dst.shape))
    device = src_cache.device
    if dst.device != device:
        raise _bad("%s: dst is on %s but src_cache on %s; all tensors must "
                   "be on one device", op, dst.device, device)
    _index_tensor(op, block_table, "block_table", 2, device)
    _index_tensor(op, cu_seq_lens, "cu_seq_lens", 1, device)
    if seq_starts is not None:
        _index_tensor(op, seq_starts, "seq_starts", 1, device)
    if token_to_seq is not None:
        _index_tensor(op, token_to_seq, "token_to_seq", 1, device)
    if isinstance(batch_size, bool) or not isinstance(batch_size,
                                                      numbers.Integral):
        raise _bad("%s: batch_size: expected an int, got %s", op,
                   type(batch_size).__name__)
    batch_size = int(batch_size)
    if batch_size < 0 or batch_size > block_table.shape[0] or \
            cu_seq_lens.shape[0] < batch_size + 1 or (
                seq_starts is not None and seq_starts.shape[0] < batch_size):
        raise _bad("%s: batch_size %d: block_table has %d rows, cu_seq_lens "
                   "%d entries and seq_starts %s; each needs one per "
                   "sequence (cu_seq_lens one more)", op, batch_size,
                   block_table.shape[0], cu_seq_lens.shape[0],
                   "none" if seq_starts is None else seq_starts.shape[0])
    if num_tokens is None:
        num_tokens = dst.shape[0]
    if num_tokens > dst.shape[0]:
        raise _bad("%s: num_tokens %d: dst has only %d rows", op, num_tokens,
                   dst.shape[0])
    # Every index is read on the host before anything is written: a row
    # past the block table, a block id outside the cache or a sequence
    # outside dst is refused by name, never read or written.
    cu = cu_seq_lens[:batch_size + 1].to("cpu", torch.int64)
    starts = (torch.zeros(batch_size, dtype=torch.int64)
              if seq_starts is None
              else seq_starts[:batch_size].to("cpu", torch.int64))
    table = block_table[:batch_size].to("cpu", torch.int64)
    if int(cu[0]) != 0:
        raise _bad("%s: cu_seq_lens[0] = %d; the first sequence starts at "
                   "row 0 of dst", op, int(cu[0]))
    for r in range(batch_size):
        lo, hi = int(cu[r]), int(cu[r + 1])
        if hi < lo or hi > num_tokens:
            raise _bad("%s: cu_seq_lens[%d] .. cu_seq_lens[%d] = %d .. %d is "
                       "not a range of the %d rows of dst", op, r, r + 1, lo,
                       hi, num_tokens)
        start = int(starts[r])
        if start < 0 or start + (hi - lo) >= 1 << 31:
            raise _bad("%s: seq_starts[%d] = %d is out of range [0, 2^31 - "
                       "sequence length)", op, r, start)
        if hi == lo:
            continue
        first, last = start // block_size, (start + hi - lo - 1) // block_size
        if last >= table.shape[1]:
            raise _bad("%s: sequence %d reaches position %d, block %d of its "
                       "block_table row, which has %d blocks", op, r,
                       start + hi - lo - 1, last, table.shape[1])
        blocks = table[r, first:last + 1]
        bad = ((blocks < 0) | (blocks >= num_blocks)).nonzero()
        if bad.numel():
            j = first + int(bad[0, 0])
            raise _bad("%s: block_table[%d, %d] = %d (sequence %d) is out of "
                       "range: the cache has num_blocks %d", op, r, j,
                       int(table[r, j]), r, num_blocks)
    if token_to_seq is not None:
        if token_to_seq.shape[0] < num_tokens:
            raise _bad("%s: token_to_seq has %d entries, fewer than "
                       "num_tokens %d", op, token_to_seq.shape[0], num_tokens)
        want = torch.repeat_interleave(torch.arange(batch_size),
                                       cu[1:] - cu[:-1])
        got = token_to_seq[:int(cu[-1])].to("cpu", torch.int64)
        if not torch.equal(got, want):
            t = int((got != want).nonzero()[0, 0])
            raise _bad("%s: token_to_seq[%d] = %d, but cu_seq_lens puts "
                       "token %d in sequence %d", op, t, int(got[t]), t,
                       int(want[t]))
    if quant is None:
        if src_cache.dtype != dst.dtype:
            raise _bad("%s: dst is %s but src_cache %s; a copy keeps the "
                       "dtype", op, dst.dtype, src_cache.dtype)
        if src_cache.dtype not in _RAW:
            raise _bad("%s: src_cache: dtype %s; expected float32, float16, "
                       "bfloat16, uint8 or float8", op, src_cache.dtype)
        name, view = _RAW[src_cache.dtype]
        if view != src_cache.dtype:
            try:
                src_cache, dst = src_cache.view(view), dst.view(view)
            except RuntimeError:
                raise NotProvidedError(
                    op, "a copy of a 1-byte cache whose entries or rows do "
                    "not start at an even byte (src_cache strides %s, dst "
                    "strides %s)" % (list(src_cache.stride()),
                                     list(dst.stride()))) from None
            entry //= 2
        cache, output, key_scale = name, name, None
    else:
        kind, storage, float8 = _DESC_FP8[quant]
        if src_cache.dtype not in (torch.uint8, float8):
            raise _bad("%s: src_cache: dtype %s with kv_cache_dtype %r; "
                       "expected uint8 or %s", op, src_cache.dtype, quant,
                       float8)
        output = _FLOATS.get(dst.dtype)
        if output is None:
            raise _bad("%s: dst: dtype %s; expected float32, float16 or "
                       "bfloat16", op, dst.dtype)
        if not isinstance(scale, torch.Tensor) or scale.numel() != 1 or \
                scale.dtype != torch.float32:
            raise _bad("%s: scale: expected a float32 tensor of one element",
                       op)
        src_cache = src_cache.view(float8)
        cache, key_scale = storage, scale.reshape(1).to(device)
        quant = kind
    if num_tokens == 0 or batch_size == 0:
        return
    bundle, kernel = _gatherer(op, device, block_size, entry, cache, output,
                               quant)
    if seq_starts is None:
        context = torch.zeros(batch_size, dtype=torch.int32, device=device)
    else:
        context = seq_starts[:batch_size]
    bundle.fused_gather(block_table[:batch_size], cu_seq_lens[:batch_size + 1],
                        context, src_cache.unsqueeze(2), None,
                        dst[:num_tokens].unsqueeze(1), None, kernel=kernel,
                        key_scale=key_scale)


def gather_and_maybe_dequant_cache(src_cache, dst, block_table, cu_seq_lens,
                                   token_to_seq, num_tokens, kv_cache_dtype,
                                   scale, seq_starts=None):
    """vLLM's gather_and_maybe_dequant_cache on kvgen's fused_gather: row t
    of dst (t < num_tokens), a token of sequence r (cu_seq_lens[r] <= t <
    cu_seq_lens[r + 1]), is the latent entry at position (seq_starts[r] or
    0) + t - cu_seq_lens[r] of block_table's row r, dequantized as
    ``float(q) * scale`` for kv_cache_dtype fp8, copied for "auto".
    token_to_seq must agree with cu_seq_lens. Every index is checked before
    anything is written."""
    op = "gather_and_maybe_dequant_cache"
    _check_dtype(op, kv_cache_dtype)
    if isinstance(num_tokens, torch.Tensor) and num_tokens.numel() == 1:
        num_tokens = int(num_tokens.item())
    if isinstance(num_tokens, bool) or not isinstance(num_tokens,
                                                      numbers.Integral) or \
            num_tokens < 0:
        raise _bad("%s: num_tokens: expected an int >= 0, got %r", op,
                   num_tokens)
    if not isinstance(cu_seq_lens, torch.Tensor) or cu_seq_lens.dim() != 1 \
            or cu_seq_lens.shape[0] < 1:
        raise _bad("%s: cu_seq_lens: expected an int32 tensor [batch_size + "
                   "1]", op)
    _per_tensor_scales(op, kv_cache_dtype, (("scale", scale),))
    quant = None if kv_cache_dtype == "auto" else kv_cache_dtype
    _mla_gather(op, src_cache, dst, block_table, cu_seq_lens,
                cu_seq_lens.shape[0] - 1, int(num_tokens), seq_starts,
                token_to_seq, quant, scale)


def cp_gather_cache(src_cache, dst, block_table, cu_seq_lens, batch_size,
                    seq_starts=None):
    """vLLM's cp_gather_cache on kvgen's fused_gather: row t of dst, a token
    of sequence r < batch_size, is a copy (bit for bit, any dtype) of the
    entry at position (seq_starts[r] or 0) + t - cu_seq_lens[r] of
    block_table's row r. Every index is checked before anything is
    written."""
    _mla_gather("cp_gather_cache", src_cache, dst, block_table, cu_seq_lens,
                batch_size, None, seq_starts, None, None, None)


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
    gpu = src if src.is_cuda else dst if dst.is_cuda else None
    if gpu is None:
        blocks.copy_blocks(src, dst, int(block_size_in_bytes), block_mapping,
                           0)
    else:
        # The GPU's current context and stream, as vLLM's device guard and
        # getCurrentCUDAStream give them.
        index = gpu.get_device()
        stream = _ext.get().work_stream(gpu, _dlpack.CUDA, index)
        if stream is None:
            stream = torch_current_stream(index)
        with torch.cuda.device(index):
            blocks.copy_blocks(src, dst, int(block_size_in_bytes),
                               block_mapping, stream)
