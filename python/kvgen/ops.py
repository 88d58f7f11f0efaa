"""Drop-in KV-cache appends with the conventions of the serving stacks.

``reshape_and_cache_flash``  vLLM's ``torch.ops._C_cache_ops.reshape_and_cache_flash``
``append_paged_kv_cache``    FlashInfer's ``flashinfer.page.append_paged_kv_cache``
``concat_and_cache_mla``     vLLM's ``torch.ops._C_cache_ops.concat_and_cache_mla``

Each finds its kernel from the tensors' shapes and dtypes: a bundle given to
``register`` if one offers it, else ``kvgen.compile`` (the disk cache, or the
compiler). The choice is memoized per shape, so a steady-state call costs one
dict hit, one DLTensor per tensor and one kvrt call; kvrt validates every
tensor (a bad one raises kvgen.InvalidArgumentError, nothing is written).

With PyTorch, both are also ``torch.ops.kvgen.*`` custom ops with fake
implementations, used automatically under torch.compile; eager calls and
CUDA-graph captures take the direct path. kvgen imports without torch.
"""

import sys
import threading

from . import _dlpack, _ext, _kvrt, compiler, errors
from ._conventions import (_FP8, _UNQUANTIZED, _bad, _cache_dtype,
                           _cache_layout, _flash_scales, _hnd_view, _scale,
                           _scale_desc, _split_paged, _vllm_layout)
from .bundle import Bundle, _stream_of

# torch, once kvgen._torch_ops has registered the custom ops (a global, so
# that torch.compile traces the routing below without a graph break).
_torch = None
_plans = {}
_plans_lock = threading.Lock()
_registered = []
# Bumped by register(): plans and calls remembered under an older generation
# are dropped (see _remember).
_generation = 0


def _not_bound(*args):
    return -1


# The extension's fast calls (kvext_fast.c): -1 where they do not handle a call
# (the Python below does), else kvrt's status. Bound once a call of the op
# has been remembered (_remember_call).
_fast_flash = _fast_paged = _fast_mla = _not_bound
# torch.compiler.is_compiling once torch.ops.kvgen is registered (a traced
# call must reach the custom op, never the extension); bool() is False.
_is_compiling = bool


def register(bundle):
    """Offers `bundle`'s kernels to the ops, before any compilation. Safe to
    call while other threads launch: a call that starts after register()
    returns uses `bundle` where it offers the kernel."""
    global _registered, _generation
    if not isinstance(bundle, Bundle):
        raise _bad("register: expected a kvgen.Bundle, got a %s",
                   type(bundle).__name__)
    with _plans_lock:
        # A new list, never one changed in place: a thread choosing a
        # kernel walks the list it read, whole.
        _registered = [bundle] + _registered
        _generation += 1
        _plans.clear()
        if _ext._ext is not None:
            _ext._ext.forget()


def _remember(table, key, value, generation, limit=None):
    """table[key] = value, unless register() ran since `generation` was
    read: a plan chosen before it may name a bundle it has displaced, and
    must not outlive the clearing."""
    with _plans_lock:
        if generation != _generation:
            return
        if limit is not None and len(table) >= limit:
            table.clear()
        table[key] = value


def _forget_calls():
    """Forgets every plan and every call the extension takes (tests)."""
    with _plans_lock:
        _plans.clear()
        if _ext._ext is not None:
            _ext._ext.forget()


def _remember_call(fast, generation, plan, flags, call):
    """The extension launches calls of `call`'s signature (`call` as its
    fast function takes it) with `plan`'s kernel from now on, unless
    register() ran since `generation` was read. Only calls of the direct
    path with no explicit stream get here, after every check passed."""
    global _fast_flash, _fast_paged, _fast_mla
    torch = _torch
    if torch is not None:
        # A torch subclass (fake, functional, a user's) stays on the Python
        # route, which sends it to torch.ops.kvgen.
        for t in call:
            if isinstance(t, (tuple, list)):
                if any(type(x) is not torch.Tensor and
                       isinstance(x, torch.Tensor) for x in t):
                    return
            elif type(t) is not torch.Tensor and isinstance(t, torch.Tensor):
                return
    ext = _ext.get()
    bundle = plan.bundle
    with _plans_lock:
        if generation != _generation or bundle._address is None:
            return
        if ext.remember(fast, bundle, bundle._address,
                        bundle._name(plan.kernel), flags, call):
            _fast_flash, _fast_paged, _fast_mla = ext.flash, ext.paged, ext.mla


class _Plan:
    __slots__ = ("bundle", "kernel", "hnd", "quantized", "block_size")


_chips = {}


def _chip(device_id):
    chip = _chips.get(device_id)
    if chip is None:
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability(device_id)
            chip = "sm_%d%d" % (major, minor)
        else:
            import os

            chip = os.environ.get("KVGEN_CHIP", "sm_90")
        _chips[device_id] = chip
    return chip


def _kernel_for(kind, device, layout, block_size, heads, head_dim, source,
                cache_dtype, quant, latent=None, granularity="per_tensor",
                v_head_dim=None):
    """(bundle, kernel name) of `kind` for one cache, from a registered
    bundle or kvgen.compile. `latent`: (kv_lora_rank, rope_dim) of an MLA
    cache; `granularity`: the static scales' (per_tensor or per_head) of a
    quantized one; `v_head_dim`: V's head size where it differs from K's."""
    host = device[0] == _dlpack.CPU
    if v_head_dim == head_dim:
        v_head_dim = None
    want = dict(layout=layout, block_size=block_size, num_kv_heads=heads,
                head_dim=head_dim, v_head_dim=v_head_dim or head_dim,
                dtype=cache_dtype, source_dtype=source,
                quant=None if quant is None else {
                    "kind": quant, "granularity": granularity,
                    "mode": "static"})
    extra = {}
    if latent is not None:
        want["latent"] = {"kv_lora_rank": latent[0], "rope_dim": latent[1]}
        # The description's default kernels, as precompile --mla makes them.
        extra = dict(kv_lora_rank=latent[0], rope_dim=latent[1])
    if v_head_dim is not None:
        extra = dict(extra, v_head_dim=v_head_dim)
    for b in _registered:
        if (b.has_host_kernels if host else b.has_device_code):
            name = b.find(kind, **dict(want))
            if name:
                return b, name
    desc_cache = {"f8e4m3": "f8E4M3FN", "f8e5m2": "f8E5M2"}.get(cache_dtype,
                                                                cache_dtype)
    try:
        bundle = compiler.compile(
            layout=layout, block_size=block_size, num_kv_heads=heads,
            head_dim=head_dim, dtype=source, cache_dtype=desc_cache,
            quant=None if quant is None else want["quant"],
            target="host" if host else "gpu",
            chip=None if host else _chip(device[1]), **extra)
    except errors.CompilerError as e:
        if quant is None:
            raise
        raise errors.KernelNotAvailableError(
            "kv_cache_dtype %s needs quantized kernels, which this kvgen "
            "could not generate: %s" % (quant, e)) from e
    name = bundle.find(kind, **dict(want))
    if name is None:
        raise errors.KernelNotAvailableError(
            "%s has no %s kernel for %s" % (bundle.source, kind, want))
    return bundle, name


def _flash_plan(key, k, kc, vc, kv_cache_dtype, granularity):
    if len(k[5]) != 3:
        raise _bad("key: expected [num_tokens, num_heads, head_size], got "
                   "shape %s", list(k[5]))
    for d, n in ((kc, "key_cache"), (vc, "value_cache")):
        if len(d[5]) != 4:
            raise _bad("%s: expected [num_blocks, block_size, num_heads, "
                       "head_size], got shape %s", n, list(d[5]))
    _, bs, heads, head_dim = kc[5]
    if tuple(k[5][1:]) != (heads, head_dim):
        raise _bad("key: [num_tokens, %d, %d] does not match key_cache's "
                   "num_heads %d and head_size %d", k[5][1], k[5][2], heads,
                   head_dim)
    # V may have a head size of its own (value_cache's last extent): kvrt
    # checks value and value_cache against it.
    v_head_dim = vc[5][3]
    source = _dlpack.dtype_name(k)
    if source not in _UNQUANTIZED:
        raise _bad("key: dtype %s; expected float32, float16 or bfloat16",
                   source)
    cache, quant = _cache_dtype(
        "key_cache", kc, kv_cache_dtype, "'fp8', 'fp8_e4m3' or 'fp8_e5m2'", "")
    hnd = _cache_layout(kc, vc, ("key_cache", "value_cache"))
    plan = _Plan()
    plan.bundle, plan.kernel = _kernel_for(
        "append", kc[1:3], _vllm_layout(hnd), bs, heads,
        head_dim, source, cache, quant, granularity=granularity,
        v_head_dim=v_head_dim)
    plan.hnd = hnd
    plan.quantized = quant is not None
    plan.block_size = bs
    return plan


def register_torch_ops():
    """Registers torch.ops.kvgen.* now (imports torch). Done by itself when
    kvgen.ops is imported after torch, or at the first call with a torch
    tensor; call it first if the first call may be inside torch.compile."""
    from . import _torch_ops  # noqa: F401  sets _torch


def _torch_route(t):
    """True when a torch call must go through torch.ops.kvgen (tracing,
    fake or functional tensors), False for the direct path."""
    torch = _torch
    if torch is None:
        if "torch" not in sys.modules:
            return False
        from . import _torch_ops  # noqa: F401  sets _torch

        torch = _torch
    if not isinstance(t, torch.Tensor):
        return False
    return type(t) is not torch.Tensor or torch.compiler.is_compiling()


def reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping,
                            kv_cache_dtype="auto", k_scale=None, v_scale=None,
                            *, stream=None):
    """vLLM's reshape_and_cache_flash: ``key_cache[slot // bs, slot % bs] =
    key[i]`` (and V) for every token i with ``slot_mapping[i] >= 0``.

    key, value: [num_tokens, num_heads, head_size] (any strides; rows past
    slot_mapping's length are CUDA-graph padding and ignored, as in vLLM).
    key_cache, value_cache: [num_blocks, block_size, num_heads, head_size],
    NHD, or HND in memory (a permuted view; the strides say which). V may
    have a head size of its own (value and value_cache's last extent, e.g.
    K 192 / V 128), and the caches may be views of one packed buffer.
    slot_mapping: int64 [num_tokens]. kv_cache_dtype: "auto" (the cache's
    dtype; f32 <-> f16/bf16 casts allowed), "fp8"/"fp8_e4m3"/"fp8_e5m2"
    (cache uint8 or float8; stored = x / k_scale). k_scale, v_scale: float32,
    both of one element (shape [] or [1], per tensor) or both [num_heads]
    (contiguous, per head: head h is stored as x / k_scale[h]); ignored with
    "auto".
    """
    if stream is None:
        if not _is_compiling():
            status = _fast_flash(key, value, key_cache, value_cache,
                                 slot_mapping, kv_cache_dtype, k_scale,
                                 v_scale)
            if status == 0:
                return
            if status > 0:
                _kvrt.check(status)
        if _torch_route(key):
            _torch.ops.kvgen.reshape_and_cache_flash(
                key, value, key_cache, value_cache, slot_mapping,
                kv_cache_dtype, k_scale, v_scale)
            return
    _reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping,
                             kv_cache_dtype, k_scale, v_scale, stream)


def _reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping,
                             kv_cache_dtype, k_scale, v_scale, stream):
    if not isinstance(kv_cache_dtype, str):
        raise _bad("kv_cache_dtype: expected a string (auto, fp8, fp8_e4m3, "
                   "fp8_e5m2), got a %s", type(kv_cache_dtype).__name__)
    generation = _generation
    keep = []
    describe = _dlpack.describe
    sm = describe(slot_mapping, "slot_mapping", keep)
    k = describe(key, "key", keep)
    v = describe(value, "value", keep)
    kc = describe(key_cache, "key_cache", keep, True)
    vc = describe(value_cache, "value_cache", keep, True)
    granularity = ks = vs = None
    if kv_cache_dtype in _FP8:
        # Checked before the plan: the granularity chooses the kernel.
        granularity, ks, vs = _flash_scales(
            _scale_desc(k_scale, "k_scale", keep),
            _scale_desc(v_scale, "v_scale", keep), kc)
    memo = (k[3], k[4], k[5][1:], kc[1], kc[2], kc[3], kc[4], kc[5][1:],
            kc[6], vc[5][1:], vc[6], kv_cache_dtype, granularity)
    plan = _plans.get(memo)
    if plan is None:
        plan = _flash_plan(key, k, kc, vc, kv_cache_dtype, granularity)
        _remember(_plans, memo, plan, generation)
    if len(sm[5]) != 1:
        raise _bad("slot_mapping: expected [num_tokens], got shape %s",
                   list(sm[5]))
    n = sm[5][0]
    for d, name in ((k, "key"), (v, "value")):
        if len(d[5]) != 3 or d[5][0] < n:
            raise _bad("%s: shape %s has fewer rows than slot_mapping (%d)",
                       name, list(d[5]), n)
    if k[5][0] != n:
        k = k[:5] + ((n,) + k[5][1:], k[6])
    if v[5][0] != n:
        v = v[:5] + ((n,) + v[5][1:], v[6])
    if plan.hnd:
        kc, vc = _hnd_view(kc), _hnd_view(vc)
    explicit = stream is not None
    stream = _stream_of(stream, key, k)
    plan.bundle._append(plan.kernel, (k, v, sm, kc, vc, ks, vs, None, None),
                        0, stream)
    if not explicit:
        ext = _ext.get()
        _remember_call(ext.FAST_FLASH, generation, plan,
                       (ext.F_HND if plan.hnd else 0) |
                       (ext.F_SCALES if ks is not None else 0),
                       (key, value, key_cache, value_cache, slot_mapping,
                        kv_cache_dtype, k_scale, v_scale))


# vLLM MLA ---------------------------------------------------------------------

def _mla_plan(c, p, kc, kv_cache_dtype):
    if len(c[5]) != 2 or len(p[5]) != 2:
        raise _bad("kv_c, k_pe: expected [num_tokens, kv_lora_rank] and "
                   "[num_tokens, pe_dim], got shapes %s and %s", list(c[5]),
                   list(p[5]))
    if len(kc[5]) != 3:
        raise _bad("kv_cache: expected [num_blocks, block_size, kv_lora_rank "
                   "+ pe_dim], got shape %s", list(kc[5]))
    rank, rope = c[5][1], p[5][1]
    _, bs, entry = kc[5]
    if rank + rope != entry:
        raise _bad("kv_cache: entry of %d elements, but kv_c's %d + k_pe's "
                   "%d = %d", entry, rank, rope, rank + rope)
    source = _dlpack.dtype_name(c)
    if source not in _UNQUANTIZED or _dlpack.dtype_name(p) != source:
        raise _bad("kv_c, k_pe: dtypes %s and %s; expected one of float32, "
                   "float16 or bfloat16 for both", source,
                   _dlpack.dtype_name(p))
    cache, quant = _cache_dtype(
        "kv_cache", kc, kv_cache_dtype, "'fp8' or 'fp8_e4m3'",
        " (fp8_ds_mla's 656-byte entry is not supported)")
    plan = _Plan()
    plan.bundle, plan.kernel = _kernel_for(
        "mla_append", kc[1:3], _vllm_layout(False), bs, 1, entry,
        source, cache,
        quant, latent=(rank, rope))
    plan.hnd = False
    plan.quantized = quant is not None
    plan.block_size = bs
    return plan


def concat_and_cache_mla(kv_c, k_pe, kv_cache, slot_mapping,
                         kv_cache_dtype="auto", scale=None, *, stream=None):
    """vLLM's concat_and_cache_mla: ``kv_cache[slot // bs, slot % bs] =
    cat(kv_c[i], k_pe[i])`` for every token i with ``slot_mapping[i] >= 0``,
    in one launch (kvrt_mla_append).

    kv_c: [num_tokens, kv_lora_rank], k_pe: [num_tokens, pe_dim] (any
    strides, one dtype; rows past slot_mapping's length are CUDA-graph
    padding and ignored, as in vLLM). kv_cache: [num_blocks, block_size,
    kv_lora_rank + pe_dim]. slot_mapping: int64 [num_tokens].
    kv_cache_dtype: "auto" (the cache's dtype; f32 <-> f16/bf16 casts
    allowed) or "fp8"/"fp8_e4m3"/"fp8_e5m2" (cache uint8 or float8; stored =
    x / scale, one per-tensor scale). Under torch.compile, the custom op
    torch.ops.kvgen.concat_and_cache_mla.
    """
    if stream is None:
        if not _is_compiling():
            status = _fast_mla(kv_c, k_pe, kv_cache, slot_mapping,
                               kv_cache_dtype, scale)
            if status == 0:
                return
            if status > 0:
                _kvrt.check(status)
        if _torch_route(kv_c):
            _torch.ops.kvgen.concat_and_cache_mla(
                kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale)
            return
    _concat_and_cache_mla(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype,
                          scale, stream)


def _concat_and_cache_mla(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype,
                          scale, stream):
    if not isinstance(kv_cache_dtype, str):
        raise _bad("kv_cache_dtype: expected a string (auto, fp8, fp8_e4m3, "
                   "fp8_e5m2), got a %s", type(kv_cache_dtype).__name__)
    generation = _generation
    keep = []
    describe = _dlpack.describe
    sm = describe(slot_mapping, "slot_mapping", keep)
    c = describe(kv_c, "kv_c", keep)
    p = describe(k_pe, "k_pe", keep)
    kc = describe(kv_cache, "kv_cache", keep, True)
    memo = ("mla", c[3], c[4], c[5][1:], p[3], p[4], p[5][1:], kc[1], kc[2],
            kc[3], kc[4], kc[5][1:], kv_cache_dtype)
    plan = _plans.get(memo)
    if plan is None:
        plan = _mla_plan(c, p, kc, kv_cache_dtype)
        _remember(_plans, memo, plan, generation)
    if len(sm[5]) != 1:
        raise _bad("slot_mapping: expected [num_tokens], got shape %s",
                   list(sm[5]))
    n = sm[5][0]
    for d, name in ((c, "kv_c"), (p, "k_pe")):
        if d[5][0] < n:
            raise _bad("%s: shape %s has fewer rows than slot_mapping (%d)",
                       name, list(d[5]), n)
    if c[5][0] != n:
        c = c[:5] + ((n,) + c[5][1:], c[6])
    if p[5][0] != n:
        p = p[:5] + ((n,) + p[5][1:], p[6])
    ks = _scale(scale, "scale", keep) if plan.quantized else None
    explicit = stream is not None
    plan.bundle._mla_append(plan.kernel, (c, p, sm, kc, ks), 0,
                            _stream_of(stream, kv_c, c))
    if not explicit:
        ext = _ext.get()
        _remember_call(ext.FAST_MLA, generation, plan,
                       ext.F_SCALES if plan.quantized else 0,
                       (kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype,
                        scale))


# FlashInfer ------------------------------------------------------------------

def append_paged_kv_cache(append_key, append_value, batch_indices, positions,
                          paged_kv_cache, kv_indices, kv_indptr,
                          kv_last_page_len, kv_layout="NHD", *, stream=None):
    """FlashInfer's append_paged_kv_cache: token i of request
    ``b = batch_indices[i]`` at position ``p = positions[i]`` goes to page
    ``kv_indices[kv_indptr[b] + p // page_size]``, row ``p % page_size``.

    append_key, append_value: [nnz, num_kv_heads, head_dim]. paged_kv_cache:
    (k_cache, v_cache), each [max_num_pages, page_size, num_kv_heads,
    head_dim] (NHD) or [max_num_pages, num_kv_heads, page_size, head_dim]
    (HND), or one [max_num_pages, 2, ...] tensor. batch_indices, positions
    ([nnz]), kv_indices and kv_indptr ([batch_size + 1]): int32, anything
    else is refused (an int64 position is never cut to 32 bits).
    kv_last_page_len is accepted for FlashInfer's signature; the positions
    already say where each token goes.

    One launch of kvgen's paged_kv_append kernel, which reads the page table
    itself: a token whose batch index is outside [0, batch_size), whose
    position is negative or past its request's last page, whose request's
    kv_indptr range leaves kv_indices, or whose page id is negative or past
    the cache writes nothing (kvrt's checked mode refuses the launch
    instead, naming the token).
    """
    if stream is None and not _is_compiling():
        status = _fast_paged(append_key, append_value, batch_indices,
                             positions, paged_kv_cache, kv_indices, kv_indptr,
                             kv_layout)
        if status == 0:
            return
        if status > 0:
            _kvrt.check(status)
    if kv_layout not in ("NHD", "HND"):
        raise _bad("kv_layout: %r is not NHD or HND", kv_layout)
    k_cache, v_cache = _split_paged(paged_kv_cache, kv_layout)
    if stream is None and _torch_route(append_key):
        _torch.ops.kvgen.append_paged_kv_cache(
            append_key, append_value, batch_indices, positions, k_cache,
            v_cache, kv_indices, kv_indptr, kv_last_page_len, kv_layout)
        return
    _append_paged_kv_cache(append_key, append_value, batch_indices, positions,
                           k_cache, v_cache, kv_indices, kv_indptr, kv_layout,
                           stream, paged_kv_cache)


def _append_paged_kv_cache(append_key, append_value, batch_indices, positions,
                           k_cache, v_cache, kv_indices, kv_indptr, kv_layout,
                           stream, paged_kv_cache=None):
    generation = _generation
    keep = []
    describe = _dlpack.describe
    k = describe(append_key, "append_key", keep)
    v = describe(append_value, "append_value", keep)
    kc = describe(k_cache, "k_cache", keep)
    vc = describe(v_cache, "v_cache", keep)
    index = tuple(describe(t, n, keep) for t, n in (
        (batch_indices, "batch_indices"), (positions, "positions"),
        (kv_indices, "kv_indices"), (kv_indptr, "kv_indptr")))
    for d, n in ((kc, "k_cache"), (vc, "v_cache")):
        if len(d[5]) != 4:
            raise _bad("%s: expected a rank-4 %s page cache, got shape %s", n,
                       kv_layout, list(d[5]))
    # FlashInfer's indices are int32; a wider one is refused, never
    # narrowed (an int64 position of 2**32 + 1 would become 1).
    for d, n in zip(index, ("batch_indices", "positions", "kv_indices",
                            "kv_indptr")):
        if len(d[5]) != 1 or (d[3], d[4]) != (_dlpack.INT, 32):
            raise _bad("%s: expected a 1-D int32 tensor, got %s %s", n,
                       _dlpack.dtype_name(d), list(d[5]))
    nnz = k[5][0] if k[5] else 0
    for d, n in zip(index[:2], ("batch_indices", "positions")):
        if d[5][0] != nnz:
            raise _bad("%s: %d entries for %d tokens (append_key has nnz = "
                       "%d): one per token", n, d[5][0], nnz, nnz)
    hnd = kv_layout == "HND"
    memo = ("flashinfer", k[3], k[4], k[5][1:], kc[1], kc[2], kc[3], kc[4],
            kc[5][1:], kv_layout)
    plan = _plans.get(memo)
    if plan is None:
        page = kc[5][2] if hnd else kc[5][1]
        heads = kc[5][1] if hnd else kc[5][2]
        if len(k[5]) != 3 or tuple(k[5][1:]) != (heads, kc[5][3]):
            raise _bad("append_key: shape %s does not match the cache's "
                       "num_kv_heads %d and head_dim %d", list(k[5]), heads,
                       kc[5][3])
        source, cache = _dlpack.dtype_name(k), _dlpack.dtype_name(kc)
        if source not in _UNQUANTIZED or cache not in _UNQUANTIZED:
            raise _bad("append_key %s, k_cache %s: expected float32, float16 "
                       "or bfloat16", source, cache)
        plan = _Plan()
        plan.bundle, plan.kernel = _kernel_for(
            "paged_kv_append", kc[1:3], _vllm_layout(hnd), page,
            heads, kc[5][3], source, cache, None)
        plan.hnd, plan.quantized, plan.block_size = hnd, False, page
        _remember(_plans, memo, plan, generation)
    descs = (k, v) + index + (kc, vc, None, None, None, None)
    explicit = stream is not None
    stream = _stream_of(stream, append_key, k)
    plan.bundle._paged_kv_append(plan.kernel, descs, 0, stream)
    if not explicit:
        ext = _ext.get()
        if paged_kv_cache is None:
            paged_kv_cache = (k_cache, v_cache)
        stacked = not isinstance(paged_kv_cache, (tuple, list))
        _remember_call(ext.FAST_PAGED, generation, plan,
                       ext.F_STACKED if stacked else 0,
                       (append_key, append_value, batch_indices, positions,
                        paged_kv_cache, kv_indices, kv_indptr, kv_layout))


if "torch" in sys.modules:
    from . import _torch_ops  # noqa: F401  registers torch.ops.kvgen.*
