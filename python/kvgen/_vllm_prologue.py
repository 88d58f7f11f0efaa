"""vLLM's fused_qk_norm_rope followed by reshape_and_cache_flash, as one
launch of kvgen's append with a fused prologue (docs/CONTRACT.md, "The fused
prologue"): Q normalized and rotated in place in qkv, K normalized, rotated
and stored in the cache, V stored. kvgen.vllm exports it.

vLLM's own fused op of 0.34, fused_qknorm_rope_cache, is not provided: it
rounds the norm's output to the qkv dtype before the rotation and returns
new q, k and v tensors, and kvgen's prologue keeps fp32 from the load to the
store (docs/VLLM.md)."""

import math
import numbers
import threading

import torch

from . import _dlpack
from ._conventions import (_cache_dtype, _cache_layout, _flash_scales,
                           _hnd_view, _scale_desc, _vllm_layout)
from ._vllm_common import _bad, _check_dtype, _prologue_kernel, _target
from .bundle import _stream_of

_OP = "fused_qk_norm_rope_and_reshape_and_cache_flash"
_FLOATS = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
_bundles = {}
_bundles_lock = threading.Lock()
# One epsilon tensor per (device, value): the kernel reads it from memory.
_epsilons = {}


def _count(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) \
            or value <= 0:
        raise _bad("%s: %s: expected a positive integer, got %r", _OP, name,
                   value)
    return int(value)


def _tensor(t, name):
    if not isinstance(t, torch.Tensor):
        raise _bad("%s: %s: expected a torch.Tensor, got %s", _OP, name,
                   type(t).__name__)
    return t


def _kernel(device, layout, block_size, heads, head_dim, source, cache,
            quant, granularity, q_heads, rotary_dim, rope):
    """(bundle, kernel name) of the append with this prologue, compiled
    once per process."""
    target, chip = _target(device)
    memo = (target, chip, layout, block_size, heads, head_dim, source, cache,
            quant, granularity, q_heads, rotary_dim, rope)
    found = _bundles.get(memo)
    if found is not None:
        return found
    desc_cache = {"f8e4m3": "f8E4M3FN", "f8e5m2": "f8E5M2"}.get(cache, cache)
    prologue = dict(q_heads=q_heads, norm="rms", rope=rope,
                    rotary_dim=rotary_dim)
    bundle, name = _prologue_kernel(
        _OP, "append",
        "the append with a prologue (q_heads %d, rms, %s, rotary_dim %d)"
        % (q_heads, rope, rotary_dim),
        layout=layout, block_size=block_size, num_kv_heads=heads,
        head_dim=head_dim, dtype=source, cache_dtype=desc_cache,
        quant=None if quant is None else (quant, granularity, "static"),
        name="kv_prologue", prologue=prologue, target=target, chip=chip)
    with _bundles_lock:
        found = _bundles.setdefault(memo, (bundle, name))
    return found


def _epsilon(eps, device):
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise _bad("%s: eps: expected a float, got %s", _OP,
                   type(eps).__name__)
    value = float(eps)
    if not math.isfinite(value) or value < 0:
        raise _bad("%s: eps: %r; RMSNorm's epsilon must be finite and not "
                   "negative", _OP, eps)
    memo = (device, value)
    t = _epsilons.get(memo)
    if t is None:
        t = torch.tensor([value], dtype=torch.float32, device=device)
        _epsilons[memo] = t
    return t


def fused_qk_norm_rope_and_reshape_and_cache_flash(
        qkv, num_heads_q, num_heads_k, num_heads_v, head_dim, eps, q_weight,
        k_weight, cos_sin_cache, is_neox, position_ids, key_cache,
        value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale):
    """vLLM's ``fused_qk_norm_rope(qkv, num_heads_q, num_heads_k,
    num_heads_v, head_dim, eps, q_weight, k_weight, cos_sin_cache, is_neox,
    position_ids)`` then ``reshape_and_cache_flash(k, v, key_cache,
    value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale)`` of qkv's
    K and V sections, in one launch.

    qkv: [num_tokens, (num_heads_q + num_heads_k + num_heads_v) * head_dim],
    f32, f16 or bf16, rows of any stride, the head dimension contiguous.
    Each head of Q and K is normalized (RMSNorm with q_weight / k_weight
    [head_dim] and eps) and its first rotary_dim = cos_sin_cache.shape[-1]
    elements rotated (NeoX pairs i, i + rotary_dim / 2 if is_neox, else
    GPT-J pairs 2i, 2i + 1) at position_ids[t] (int64 [num_tokens]) of
    cos_sin_cache [max_position, rotary_dim] (cos then sin, qkv's dtype), in
    fp32, rounded once at the end. Q is written back into qkv for every
    token whose position is in range; K (normalized and rotated) and V go to
    the caches at slot_mapping (int64 [num_tokens], -1 pads), as
    reshape_and_cache_flash stores them (kv_cache_dtype "auto" or fp8 with
    per-tensor or per-head k_scale / v_scale).

    The one difference from vLLM's two ops: qkv's K section is left as it
    was; the rotated K is in the cache only (vLLM's attention reads K from
    the cache). A position outside [0, max_position) writes nothing for its
    token (no Q, K or V). Every argument is checked before anything is
    written; a refusal names the argument."""
    op = _OP
    _check_dtype(op, kv_cache_dtype)
    for t, name in ((qkv, "qkv"), (q_weight, "q_weight"),
                    (k_weight, "k_weight"), (cos_sin_cache, "cos_sin_cache"),
                    (position_ids, "position_ids"), (key_cache, "key_cache"),
                    (value_cache, "value_cache"),
                    (slot_mapping, "slot_mapping")):
        _tensor(t, name)
    hq = _count(num_heads_q, "num_heads_q")
    hk = _count(num_heads_k, "num_heads_k")
    hv = _count(num_heads_v, "num_heads_v")
    d = _count(head_dim, "head_dim")
    if hv != hk:
        raise _bad("%s: num_heads_v %d differs from num_heads_k %d; the cache "
                   "holds one V head per K head", op, hv, hk)
    if hq % hk:
        raise _bad("%s: num_heads_q %d is not a multiple of num_heads_k %d",
                   op, hq, hk)
    if not isinstance(is_neox, bool):
        raise _bad("%s: is_neox: expected a bool, got %r", op, is_neox)
    if qkv.dtype not in _FLOATS:
        raise _bad("%s: qkv: dtype %s; expected float32, float16 or "
                   "bfloat16", op, qkv.dtype)
    row = (hq + hk + hv) * d
    if qkv.dim() != 2 or qkv.shape[1] != row:
        raise _bad("%s: qkv: shape %s; expected [num_tokens, (num_heads_q + "
                   "num_heads_k + num_heads_v) * head_dim] = [num_tokens, "
                   "%d]", op, list(qkv.shape), row)
    n = qkv.shape[0]
    if qkv.shape[1] > 1 and qkv.stride(1) != 1:
        raise _bad("%s: qkv: strides %s; its second dimension must have "
                   "stride 1", op, list(qkv.stride()))
    for t, name in ((q_weight, "q_weight"), (k_weight, "k_weight")):
        if t.dtype != qkv.dtype or list(t.shape) != [d]:
            raise _bad("%s: %s: %s of shape %s; expected %s [head_dim] = "
                       "[%d]", op, name, t.dtype, list(t.shape), qkv.dtype, d)
    if cos_sin_cache.dtype != qkv.dtype or cos_sin_cache.dim() != 2:
        raise _bad("%s: cos_sin_cache: %s of shape %s; expected %s "
                   "[max_position, rotary_dim] (vLLM converts it to the "
                   "query's dtype)", op, cos_sin_cache.dtype,
                   list(cos_sin_cache.shape), qkv.dtype)
    for t, name in ((q_weight, "q_weight"), (k_weight, "k_weight"),
                    (cos_sin_cache, "cos_sin_cache"),
                    (position_ids, "position_ids"),
                    (slot_mapping, "slot_mapping")):
        if not t.is_contiguous():
            raise _bad("%s: %s: strides %s; it must be contiguous (as vLLM's "
                       "kernel requires)", op, name, list(t.stride()))
    rotary_dim = cos_sin_cache.shape[1]
    if rotary_dim <= 0 or rotary_dim % 2 or rotary_dim > d:
        raise _bad("%s: cos_sin_cache: rotary_dim %d (its last extent) must "
                   "be even, positive and at most head_dim %d", op,
                   rotary_dim, d)
    if position_ids.dtype != torch.int64 or list(position_ids.shape) != [n]:
        raise _bad("%s: position_ids: %s of shape %s; expected int64 "
                   "[num_tokens] = [%d]", op, position_ids.dtype,
                   list(position_ids.shape), n)
    if slot_mapping.dtype != torch.int64 or list(slot_mapping.shape) != [n]:
        raise _bad("%s: slot_mapping: %s of shape %s; expected int64 "
                   "[num_tokens] = [%d], one slot per row of qkv (-1 pads)",
                   op, slot_mapping.dtype, list(slot_mapping.shape), n)
    devices = {t.device for t in (qkv, q_weight, k_weight, cos_sin_cache,
                                  position_ids, key_cache, value_cache,
                                  slot_mapping)}
    if len(devices) != 1:
        raise _bad("%s: the tensors are on %s; all must be on one device",
                   op, ", ".join(sorted(str(x) for x in devices)))

    query = qkv[:, :hq * d].unflatten(1, (hq, d))
    key = qkv[:, hq * d:(hq + hk) * d].unflatten(1, (hk, d))
    value = qkv[:, (hq + hk) * d:].unflatten(1, (hv, d))
    epsilon = _epsilon(eps, qkv.device)

    keep = []
    describe = _dlpack.describe
    kc = describe(key_cache, "key_cache", keep, True)
    vc = describe(value_cache, "value_cache", keep, True)
    for desc, name in ((kc, "key_cache"), (vc, "value_cache")):
        if len(desc[5]) != 4 or tuple(desc[5][2:]) != (hk, d):
            raise _bad("%s: %s: shape %s; expected [num_blocks, block_size, "
                       "num_heads_k, head_dim] = [num_blocks, block_size, "
                       "%d, %d]", op, name, list(desc[5]), hk, d)
    cache, quant = _cache_dtype("key_cache", kc, kv_cache_dtype,
                                "'fp8', 'fp8_e4m3' or 'fp8_e5m2'", "")
    granularity = ks = vs = None
    if quant is not None:
        granularity, ks, vs = _flash_scales(
            _scale_desc(k_scale, "k_scale", keep),
            _scale_desc(v_scale, "v_scale", keep), kc)
    hnd = _cache_layout(kc, vc, ("key_cache", "value_cache"))
    bundle, kernel = _kernel(
        qkv.device, _vllm_layout(hnd), kc[5][1], hk, d, _FLOATS[qkv.dtype],
        cache, quant, granularity or "per_tensor", hq, rotary_dim,
        "neox" if is_neox else "gptj")
    if hnd:
        kc, vc = _hnd_view(kc), _hnd_view(vc)
    q = describe(query, "query", keep, True)
    descs = (describe(key, "key", keep), describe(value, "value", keep),
             describe(slot_mapping, "slot_mapping", keep), kc, vc, ks, vs,
             None, None, q, q,
             describe(position_ids, "rope_positions", keep),
             describe(cos_sin_cache, "cos_sin_cache", keep),
             describe(k_weight, "k_norm_weight", keep),
             describe(q_weight, "q_norm_weight", keep),
             describe(epsilon, "epsilon", keep))
    bundle._append(kernel, descs, 0, _stream_of(None, qkv, q))
