"""FlashInfer 0.7.2's
``flashinfer.rope.rope_quantize_fp8_append_paged_kv_cache`` (GQA/MHA form)
as one launch of kvgen's ``paged_kv_append`` with a fused
prologue (docs/CONTRACT.md, "The fused prologue"): RoPE of Q and K in fp32
with FlashInfer's f32 cos/sin cache, Q written as fp8 e4m3, K and V
quantized to fp8 e4m3 and stored at the page table's slots.

    import kvgen.flashinfer
    q8, q_nope8 = kvgen.flashinfer.rope_quantize_fp8_append_paged_kv_cache(
        q, k, None, None, v, cos_sin_cache, pos_ids, (k_cache, v_cache),
        kv_indices, kv_indptr, batch_indices, positions,
        quant_scale_q=1.0, quant_scale_kv=1.0 / k_scale)

kvgen does not yet take Q's and K's rotary and non-rotary parts as separate
tensors, so the one form provided is the one where the whole head is rotary:
``q_nope`` and ``k_nope`` None or of last extent 0. ``q_rope`` is then the
query, ``k_rope`` the key and ``q_rope_out`` the fp8 Q out; nothing is joined
or copied. A non-empty non-rotary part is refused by name, as are the MLA
form (``v`` None) and float8_e5m2 (docs/PYTHON.md; docs/BAD-INPUT.md lists
every refusal). Every argument is checked before anything is written.
"""

import math
import numbers
import struct
import threading

import torch

from . import _dlpack
from ._conventions import _vllm_layout
from ._vllm_common import _bad, _prologue_kernel, _target
from .bundle import _stream_of

__all__ = ["rope_quantize_fp8_append_paged_kv_cache"]

_OP = "rope_quantize_fp8_append_paged_kv_cache"
_SOURCES = {torch.float16: "f16", torch.bfloat16: "bf16"}
_FP8 = torch.float8_e4m3fn
_bundles = {}
_bundles_lock = threading.Lock()
# One f32 scale tensor per (device, value): the kernel reads its scales from
# memory; a step's scales rarely change, so each is made once.
_scales = {}
_MAX_SCALES = 256


def _tensor(t, name):
    if not isinstance(t, torch.Tensor):
        raise _bad("%s: %s: expected a torch.Tensor, got %s", _OP, name,
                   type(t).__name__)
    return t


def _no_nope(t, name, heads_of, nnz, heads):
    """A non-rotary part: None, or [nnz, heads, 0]; a non-empty one is
    refused (kvgen takes no separate rope/nope parts yet)."""
    if t is None:
        return
    _tensor(t, name)
    if t.dim() != 3 or t.shape[-1] != 0:
        raise _bad("%s: %s: shape %s; kvgen does not take Q's and K's rotary "
                   "and non-rotary parts as separate tensors yet: only the "
                   "whole head rotary is provided (%s None or of last extent "
                   "0, q_rope/k_rope the whole head), and a non-rotary part "
                   "is never joined to the rotary one by a copy", _OP, name,
                   list(t.shape), name)
    if list(t.shape[:2]) != [nnz, heads]:
        raise _bad("%s: %s: shape %s; expected [nnz, %s, 0] = [%d, %d, 0]",
                   _OP, name, list(t.shape), heads_of, nnz, heads)


def _f32(x):
    """x rounded to float32 (an infinity past its range)."""
    try:
        return struct.unpack("f", struct.pack("f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def _scale(value, name, device):
    """The f32 tensor of kvgen's dividing scale for FlashInfer's multiplying
    one: 1 / float32(value), as FlashInfer's kernel takes the value as a
    float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _bad("%s: %s: expected a float, got %s", _OP, name,
                   type(value).__name__)
    memo = (device, float(value))
    t = _scales.get(memo)
    if t is not None:
        return t
    m = _f32(float(value))
    inverse = _f32(1.0 / m) if math.isfinite(m) and m > 0 else 0.0
    if not (math.isfinite(m) and m > 0 and math.isfinite(inverse)
            and inverse >= 2.0 ** -126):
        raise _bad("%s: %s: %r; expected a positive finite float whose "
                   "reciprocal is a normal float32 (kvgen divides by "
                   "1 / %s)", _OP, name, value, name)
    t = torch.tensor([inverse], dtype=torch.float32, device=device)
    with _bundles_lock:
        if len(_scales) >= _MAX_SCALES:
            _scales.clear()
        _scales[memo] = t
    return t


def _quantize_dtype(quantize_dtype, q_rope_out, q_nope_out):
    """FlashInfer's rule (the argument, else q_rope_out's dtype, else
    q_nope_out's, else e4m3), then kvgen's: e4m3 only."""
    name = "quantize_dtype"
    if quantize_dtype is None:
        for t, out in ((q_rope_out, "q_rope_out"),
                       (q_nope_out, "q_nope_out")):
            if isinstance(t, torch.Tensor):
                quantize_dtype = t.dtype
                name = "quantize_dtype (None: %s's dtype)" % out
                break
        else:
            quantize_dtype = _FP8
    if quantize_dtype == torch.float8_e5m2:
        raise _bad("%s: %s: torch.float8_e5m2 is not provided; kvgen's Q "
                   "and cache in this op are torch.float8_e4m3fn only", _OP,
                   name)
    if quantize_dtype != _FP8:
        raise _bad("%s: %s: %r; expected torch.float8_e4m3fn (FlashInfer's "
                   "float8_e5m2 is not provided)", _OP, name, quantize_dtype)
    return quantize_dtype


def _index(t, name, n=None):
    _tensor(t, name)
    if t.dtype != torch.int32 or t.dim() != 1:
        raise _bad("%s: %s: %s of shape %s; expected a 1-D int32 tensor "
                   "(a wider index is refused, never narrowed)", _OP, name,
                   t.dtype, list(t.shape))
    if n is not None and t.shape[0] != n:
        raise _bad("%s: %s: %d entries for %d tokens (q_rope has nnz = %d): "
                   "one per token", _OP, name, t.shape[0], n, n)


def _kernel(device, layout, page_size, heads, head_dim, source, q_heads,
            rope):
    """(bundle, kernel name) of paged_kv_append with FlashInfer's prologue,
    compiled once per process."""
    target, chip = _target(device)
    memo = (target, chip, layout, page_size, heads, head_dim, source,
            q_heads, rope)
    found = _bundles.get(memo)
    if found is not None:
        return found
    prologue = dict(q_heads=q_heads, rope=rope, rotary_dim=head_dim,
                    q_quant="fp8_e4m3", cos_sin="f32")
    bundle, name = _prologue_kernel(
        _OP, "paged_kv_append",
        "paged_kv_append with a prologue (q_heads %d, %s, rotary_dim %d, fp8 "
        "Q, f32 cos/sin)" % (q_heads, rope, head_dim),
        layout=layout, block_size=page_size, num_kv_heads=heads,
        head_dim=head_dim, dtype=source, cache_dtype="f8E4M3FN",
        quant=("fp8_e4m3", "per_tensor", "static"), name="kv_flashinfer_rope",
        prologue=prologue, target=target, chip=chip)
    with _bundles_lock:
        found = _bundles.setdefault(memo, (bundle, name))
    return found


def rope_quantize_fp8_append_paged_kv_cache(
        q_rope, k_rope, q_nope, k_nope, v, cos_sin_cache, pos_ids,
        paged_kv_cache, kv_indices, kv_indptr, batch_indices, positions,
        is_neox=True, quantize_dtype=None, quant_scale_q=1.0,
        quant_scale_kv=1.0, page_size=16, kv_layout="NHD", q_rope_out=None,
        q_nope_out=None, enable_pdl=False):
    """FlashInfer 0.7.2's op of the same name, GQA/MHA form, with the whole
    head rotary. Returns ``(q_rope_out, q_nope_out)``, each allocated when
    not given, as FlashInfer does (q_nope_out is then [nnz, num_qo_heads,
    0]).

    q_rope [nnz, num_qo_heads, head_dim] and k_rope, v [nnz, num_kv_heads,
    head_dim]: float16 or bfloat16, one dtype, any strides (views of one
    packed QKV row are fine). q_nope, k_nope, q_nope_out: None or of last
    extent 0; a non-empty one is refused (kvgen takes no separate
    rotary/non-rotary parts yet). cos_sin_cache [max_position, head_dim]
    float32 (cos then sin). pos_ids [nnz]: RoPE's position, int64, or int32
    widened to int64 (one copy of nnz elements). The page table as
    kvgen.ops.append_paged_kv_cache takes it: batch_indices, positions
    [nnz], kv_indices, kv_indptr, all int32 (FlashInfer narrows a wider
    one; kvgen refuses it).

    Each head of Q and K is rotated in fp32 (NeoX pairs if is_neox, else
    GPT-J's) and quantized; Q goes to q_rope_out (float8_e4m3fn [nnz,
    num_qo_heads, head_dim]), K and V to paged_kv_cache = (k_cache,
    v_cache), float8_e4m3fn [max_pages, page_size, num_kv_heads, head_dim]
    (kv_layout "NHD") or [max_pages, num_kv_heads, page_size, head_dim]
    ("HND"); page_size must be the cache's. kvgen divides by 1 / quant_scale
    where FlashInfer multiplies by quant_scale: a byte may differ by one fp8
    step where the two land either side of a rounding boundary
    (docs/CONTRACT.md). A token with no slot (batch index out of range,
    FlashInfer's -1 padding included) writes no K or V but, unlike
    FlashInfer, its q_rope_out row. enable_pdl is accepted and ignored (it
    changes nothing the caller sees). Every argument is checked before
    anything is written; a refusal names the argument."""
    op = _OP
    for t, name in ((q_rope, "q_rope"), (k_rope, "k_rope"),
                    (cos_sin_cache, "cos_sin_cache"), (pos_ids, "pos_ids")):
        _tensor(t, name)
    if v is None or k_rope.dim() == 2:
        raise _bad("%s: %s; FlashInfer's MLA form (v None, 2-D k_rope, "
                   "paged_kv_cache = (ckv_cache, kpe_cache)) is not "
                   "provided: kvgen's drop-in takes the GQA/MHA form only",
                   op, "v is None" if v is None else "k_rope is 2-D")
    _tensor(v, "v")
    if q_rope.dim() != 3:
        raise _bad("%s: q_rope: shape %s; expected [nnz, num_qo_heads, "
                   "head_dim]", op, list(q_rope.shape))
    nnz, hq, d = q_rope.shape
    if k_rope.dim() != 3 or k_rope.shape[0] != nnz \
            or k_rope.shape[2] != d:
        raise _bad("%s: k_rope: shape %s; expected [nnz, num_kv_heads, "
                   "head_dim] = [%d, num_kv_heads, %d]", op,
                   list(k_rope.shape), nnz, d)
    hk = k_rope.shape[1]
    if list(v.shape) != [nnz, hk, d]:
        raise _bad("%s: v: shape %s; expected [nnz, num_kv_heads, head_dim] "
                   "= [%d, %d, %d]", op, list(v.shape), nnz, hk, d)
    _no_nope(q_nope, "q_nope", "num_qo_heads", nnz, hq)
    _no_nope(k_nope, "k_nope", "num_kv_heads", nnz, hk)
    _no_nope(q_nope_out, "q_nope_out", "num_qo_heads", nnz, hq)
    if hk == 0 or hq % hk:
        raise _bad("%s: q_rope has %d heads, k_rope %d: num_qo_heads must "
                   "be a multiple of num_kv_heads", op, hq, hk)
    if d == 0 or d % 2:
        raise _bad("%s: q_rope: head_dim %d; RoPE needs an even, positive "
                   "rotary dim", op, d)
    if q_rope.dtype not in _SOURCES:
        raise _bad("%s: q_rope: dtype %s; expected float16 or bfloat16", op,
                   q_rope.dtype)
    for t, name in ((k_rope, "k_rope"), (v, "v"), (q_nope, "q_nope"),
                    (k_nope, "k_nope")):
        if t is not None and t.dtype != q_rope.dtype:
            raise _bad("%s: %s: dtype %s; expected q_rope's, %s", op, name,
                       t.dtype, q_rope.dtype)
    if not isinstance(is_neox, bool):
        raise _bad("%s: is_neox: expected a bool, got %r", op, is_neox)
    if not isinstance(enable_pdl, bool):
        raise _bad("%s: enable_pdl: expected a bool, got %r", op, enable_pdl)
    _quantize_dtype(quantize_dtype, q_rope_out, q_nope_out)
    if cos_sin_cache.dtype != torch.float32 or cos_sin_cache.dim() != 2 \
            or cos_sin_cache.shape[1] != d:
        raise _bad("%s: cos_sin_cache: %s of shape %s; expected float32 "
                   "[max_position, rotary_dim] = [max_position, %d] (the "
                   "rotary dim is the whole head)", op, cos_sin_cache.dtype,
                   list(cos_sin_cache.shape), d)
    if not cos_sin_cache.is_contiguous():
        raise _bad("%s: cos_sin_cache: strides %s; it must be contiguous",
                   op, list(cos_sin_cache.stride()))
    if pos_ids.dtype not in (torch.int32, torch.int64) \
            or list(pos_ids.shape) != [nnz]:
        raise _bad("%s: pos_ids: %s of shape %s; expected int32 or int64 "
                   "[nnz] = [%d]", op, pos_ids.dtype, list(pos_ids.shape),
                   nnz)
    _index(batch_indices, "batch_indices", nnz)
    _index(positions, "positions", nnz)
    _index(kv_indices, "kv_indices")
    _index(kv_indptr, "kv_indptr")
    if kv_layout not in ("NHD", "HND"):
        raise _bad("%s: kv_layout: %r is not NHD or HND", op, kv_layout)
    if not isinstance(paged_kv_cache, (tuple, list)) \
            or len(paged_kv_cache) != 2:
        raise _bad("%s: paged_kv_cache: expected a pair (k_cache, v_cache), "
                   "got %s", op, type(paged_kv_cache).__name__)
    k_cache, v_cache = paged_kv_cache
    if isinstance(page_size, bool) or not isinstance(
            page_size, numbers.Integral) or page_size <= 0:
        raise _bad("%s: page_size: expected a positive integer, got %r", op,
                   page_size)
    hnd = kv_layout == "HND"
    want = [hk, page_size, d] if hnd else [page_size, hk, d]
    for t, name in ((k_cache, "k_cache"), (v_cache, "v_cache")):
        _tensor(t, name)
        if t.dtype != _FP8:
            raise _bad("%s: %s: dtype %s; expected torch.float8_e4m3fn (the "
                       "quantize dtype)", op, name, t.dtype)
        if t.dim() != 4 or list(t.shape[1:]) != want:
            raise _bad("%s: %s: shape %s; expected %s [max_pages, %s] = "
                       "[max_pages, %s] (page_size %d)", op, name,
                       list(t.shape), kv_layout,
                       "num_kv_heads, page_size, head_dim" if hnd else
                       "page_size, num_kv_heads, head_dim",
                       ", ".join(str(x) for x in want), page_size)
    if q_rope_out is not None:
        _tensor(q_rope_out, "q_rope_out")
        if q_rope_out.dtype != _FP8 or list(q_rope_out.shape) != [nnz, hq, d]:
            raise _bad("%s: q_rope_out: %s of shape %s; expected "
                       "torch.float8_e4m3fn [nnz, num_qo_heads, head_dim] = "
                       "[%d, %d, %d]", op, q_rope_out.dtype,
                       list(q_rope_out.shape), nnz, hq, d)
    tensors = [q_rope, k_rope, v, cos_sin_cache, pos_ids, k_cache, v_cache,
               kv_indices, kv_indptr, batch_indices, positions]
    tensors += [t for t in (q_nope, k_nope, q_rope_out, q_nope_out)
                if t is not None]
    devices = {t.device for t in tensors}
    if len(devices) != 1:
        raise _bad("%s: the tensors are on %s; all must be on one device",
                   op, ", ".join(sorted(str(x) for x in devices)))
    device = q_rope.device
    q_scale = _scale(quant_scale_q, "quant_scale_q", device)
    kv_scale = _scale(quant_scale_kv, "quant_scale_kv", device)

    bundle, kernel = _kernel(device, _vllm_layout(hnd), page_size, hk, d,
                             _SOURCES[q_rope.dtype], hq,
                             "neox" if is_neox else "gptj")
    if q_rope_out is None:
        q_rope_out = torch.empty_like(q_rope, dtype=_FP8)
    if q_nope_out is None:
        q_nope_out = torch.empty(nnz, hq, 0, dtype=_FP8, device=device)
    # kvgen's rope_positions are int64; FlashInfer's int32 pos_ids are
    # widened (never the reverse).
    rope_positions = pos_ids if pos_ids.dtype == torch.int64 \
        else pos_ids.to(torch.int64)

    keep = []
    describe = _dlpack.describe
    q_out = describe(q_rope_out, "q_rope_out", keep, True)
    descs = (describe(k_rope, "k_rope", keep), describe(v, "v", keep),
             describe(batch_indices, "batch_indices", keep),
             describe(positions, "positions", keep),
             describe(kv_indices, "kv_indices", keep),
             describe(kv_indptr, "kv_indptr", keep),
             describe(k_cache, "k_cache", keep, True),
             describe(v_cache, "v_cache", keep, True),
             describe(kv_scale, "quant_scale_kv", keep),
             describe(kv_scale, "quant_scale_kv", keep), None, None,
             describe(q_rope, "q_rope", keep), q_out,
             describe(rope_positions, "pos_ids", keep),
             describe(cos_sin_cache, "cos_sin_cache", keep), None, None, None,
             describe(q_scale, "quant_scale_q", keep))
    bundle._paged_kv_append(kernel, descs, 0, _stream_of(None, q_rope, q_out))
    return q_rope_out, q_nope_out
