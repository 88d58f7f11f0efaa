"""The serving stacks' conventions, read off the ops' arguments: vLLM's
kv_cache_dtype and fp8 scales, its cache layouts (HND or NHD in memory), and
FlashInfer's paged cache as one tensor or a pair. Pure functions of the
tensors' descriptions (kvgen._dlpack); kvgen.ops chooses and launches the
kernels."""

from . import _dlpack, compiler, errors

_FP8 = {"fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
_FP8_CACHE = {"fp8_e4m3": ("f8e4m3", ("u8", "f8e4m3")),
              "fp8_e5m2": ("f8e5m2", ("u8", "f8e5m2"))}
_UNQUANTIZED = ("f32", "f16", "bf16")


def _bad(message, *args):
    return errors.InvalidArgumentError(message % args)


def _vllm_layout(hnd):
    """kvgen's name of vLLM's cache layout, HND in memory or NHD."""
    return compiler._VLLM_LAYOUTS["HND" if hnd else "NHD"]


def _cache_layout(kc, vc, names):
    """Whether a [nb, bs, H, D] cache (vLLM's logical shape) is HND in
    memory, from its strides; K and V must agree."""
    def hnd(d):
        s = d[6]
        return d[5][1] > 1 and d[5][2] > 1 and s[2] > s[1]

    if hnd(kc) != hnd(vc):
        raise _bad("%s is %s in memory but %s is %s", names[0],
                   "HND" if hnd(kc) else "NHD", names[1],
                   "HND" if hnd(vc) else "NHD")
    return hnd(kc)


def _hnd_view(d):
    """The [nb, H, bs, D] view of a [nb, bs, H, D] HND-strided cache."""
    shape, strides = d[5], d[6]
    return d[:5] + ((shape[0], shape[2], shape[1], shape[3]),
                    (strides[0], strides[2], strides[1], strides[3]))


def _scale_desc(obj, name, keep):
    """The Desc of a static scale tensor, refused when absent."""
    if obj is None:
        raise _bad("%s: an fp8 cache needs the scale tensor", name)
    return _dlpack.describe(obj, name, keep)


def _scale(obj, name, keep):
    """One per-tensor scale (any shape of one element) as a [1] Desc."""
    d = _scale_desc(obj, name, keep)
    count = 1
    for e in d[5]:
        count *= e
    if count != 1:
        raise _bad("%s: expected one scale (shape [] or [1]), got shape %s",
                   name, list(d[5]))
    return d[:5] + ((1,), (1,))


def _flash_scales(ks, vs, kc):
    """(granularity, k_scale Desc, v_scale Desc) of reshape_and_cache_flash's
    fp8 scales, as vLLM takes them: one element each (per_tensor, passed as
    [1]) or [num_heads] each (per_head, element h scales head h), never one
    of each. (None, ks, vs) for a cache that is not [nb, bs, H, D]:
    _flash_plan refuses it."""
    if len(kc[5]) != 4:
        return None, ks, vs
    heads = kc[5][2]
    out = []
    for d, name in ((ks, "k_scale"), (vs, "v_scale")):
        shape = d[5]
        count = 1
        for e in shape:
            count *= e
        if count == 1:
            out.append(("per_tensor", d[:5] + ((1,), (1,))))
        elif len(shape) == 1 and shape[0] == heads > 1:
            if d[6][0] != 1:
                # vLLM reads scale h at data_ptr()[h]: a strided view would
                # scale heads by other elements.
                raise _bad("%s: [%d] with stride %d; a per-head scale must "
                           "be contiguous", name, heads, d[6][0])
            out.append(("per_head", d))
        else:
            raise _bad("%s: shape %s; expected one scale (shape [] or [1]) "
                       "or one per KV head (shape [%d])", name, list(shape),
                       heads)
    if out[0][0] != out[1][0]:
        raise _bad("k_scale %s and v_scale %s: one is %s, the other %s; "
                   "both must be [1] (per tensor) or both [%d] (per head)",
                   list(ks[5]), list(vs[5]), out[0][0], out[1][0], heads)
    return out[0][0], out[0][1], out[1][1]


def _cache_dtype(name, kc, kv_cache_dtype, fp8_names, unsupported):
    """The cache dtype kvgen describes, and the fp8 quantization (or None),
    of cache tensor `name` under vLLM's kv_cache_dtype. `fp8_names` are the
    values the 'auto' refusal suggests; `unsupported` ends the unknown-value
    refusal."""
    cache = _dlpack.dtype_name(kc)
    if kv_cache_dtype == "auto":
        if cache not in _UNQUANTIZED:
            raise _bad("%s: dtype %s with kv_cache_dtype 'auto'; an fp8 cache "
                       "needs kv_cache_dtype %s", name, cache, fp8_names)
        return cache, None
    if kv_cache_dtype not in _FP8:
        raise _bad("kv_cache_dtype: %r is not one of auto, fp8, fp8_e4m3, "
                   "fp8_e5m2" + unsupported, kv_cache_dtype)
    quant = _FP8[kv_cache_dtype]
    stored, accepted = _FP8_CACHE[quant]
    if cache not in accepted:
        raise _bad("%s: dtype %s with kv_cache_dtype %r; expected uint8 or the "
                   "matching float8", name, cache, kv_cache_dtype)
    return stored, quant


def _split_paged(paged_kv_cache, kv_layout):
    if isinstance(paged_kv_cache, (tuple, list)):
        if len(paged_kv_cache) != 2:
            raise _bad("paged_kv_cache: expected (k_cache, v_cache), got %d "
                       "tensors", len(paged_kv_cache))
        return paged_kv_cache[0], paged_kv_cache[1]
    shape = getattr(paged_kv_cache, "shape", None)
    if shape is None:
        raise _bad("paged_kv_cache: expected a (k_cache, v_cache) pair or one "
                   "[max_num_pages, 2, ...] tensor, got a %s",
                   type(paged_kv_cache).__name__)
    if len(shape) != 5 or shape[1] != 2:
        raise _bad("paged_kv_cache: expected a (k_cache, v_cache) pair or one "
                   "[max_num_pages, 2, ...] tensor, got shape %s", list(shape))
    try:
        return paged_kv_cache[:, 0], paged_kv_cache[:, 1]
    except Exception as e:  # a producer without slicing
        raise _bad("paged_kv_cache: a %s that cannot be split into K and V "
                   "([:, 0], [:, 1]): %s", type(paged_kv_cache).__name__,
                   e) from e
