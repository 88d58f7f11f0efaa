"""vLLM's concat_and_cache_mla_rope_fused on kvgen's MLA append with a RoPE
prologue (docs/CONTRACT.md, "The MLA appends' prologue"): q_pe and k_pe
rotated in place, the latent entry [kv_c, rotated k_pe] stored at each
token's slot, in one launch. kvgen.vllm exports it."""

import threading

import torch

from . import _dlpack
from ._conventions import _cache_dtype, _scale, _vllm_layout
from ._vllm_common import _bad, _check_dtype, _prologue_kernel, _target
from .bundle import _stream_of

_OP = "concat_and_cache_mla_rope_fused"
_FLOATS = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
_bundles = {}
_bundles_lock = threading.Lock()


def _tensor(t, name):
    if not isinstance(t, torch.Tensor):
        raise _bad("%s: %s: expected a torch.Tensor, got %s", _OP, name,
                   type(t).__name__)
    return t


def _kernel(device, block_size, rank, rope_dim, source, cache, quant,
            q_heads, rope):
    """(bundle, kernel name) of the MLA append with this prologue, compiled
    once per process."""
    target, chip = _target(device)
    memo = (target, chip, block_size, rank, rope_dim, source, cache, quant,
            q_heads, rope)
    found = _bundles.get(memo)
    if found is not None:
        return found
    desc_cache = {"f8e4m3": "f8E4M3FN", "f8e5m2": "f8E5M2"}.get(cache, cache)
    prologue = dict(q_heads=q_heads, rope=rope, rotary_dim=rope_dim)
    bundle, name = _prologue_kernel(
        _OP, "mla_append",
        "the MLA append with a prologue (q_heads %d, %s, rope_dim %d)"
        % (q_heads, rope, rope_dim),
        layout=_vllm_layout(False), block_size=block_size, num_kv_heads=1,
        head_dim=rank + rope_dim, dtype=source, cache_dtype=desc_cache,
        quant=None if quant is None else (quant, "per_tensor", "static"),
        name="kv_mla_rope", kv_lora_rank=rank, rope_dim=rope_dim,
        prologue=prologue, target=target, chip=chip)
    with _bundles_lock:
        found = _bundles.setdefault(memo, (bundle, name))
    return found


def concat_and_cache_mla_rope_fused(positions, q_pe, k_pe, kv_c,
                                    cos_sin_cache, is_neox, slot_mapping,
                                    kv_cache, kv_cache_dtype, kv_cache_scale):
    """vLLM's ``concat_and_cache_mla_rope_fused(positions, q_pe!, k_pe!,
    kv_c, cos_sin_cache, is_neox, slot_mapping, kv_cache!, kv_cache_dtype,
    kv_cache_scale)``: for each of the first num_tokens =
    len(slot_mapping) tokens whose slot is not negative, q_pe [num_tokens
    (or more: CUDA-graph padding), num_q_heads, rope_dim] and k_pe
    [num_tokens, rope_dim] are rotated in place at positions[t] (int64) of
    cos_sin_cache [max_position, rope_dim] (cos then sin, q_pe's dtype):
    NeoX pairs i, i + rope_dim / 2 if is_neox, else GPT-J pairs 2i, 2i + 1;
    then kv_cache [num_blocks, block_size, kv_lora_rank + rope_dim] gets
    kv_c[t] followed by the rotated k_pe[t] at slot_mapping[t], as
    concat_and_cache_mla stores them (kv_cache_dtype "auto", or "fp8" /
    "fp8_e4m3" / "fp8_e5m2" with the per-tensor kv_cache_scale).

    As vLLM's kernel: a token with a negative slot is left alone (its q_pe
    and k_pe are not rotated), rows past num_tokens are not read, and q_pe
    and k_pe may have any strides. The differences (docs/VLLM.md): the
    rotation is computed in fp32 and rounded once (vLLM rounds after each
    bf16/fp16 operation), so values differ within docs/CONTRACT.md's bound;
    a position outside [0, max_position) writes nothing of its token (vLLM
    reads past its cos/sin cache); a slot past the cache writes nothing of
    its token either. Every argument is checked before anything is
    written; a refusal names the argument."""
    op = _OP
    for t, name in ((positions, "positions"), (q_pe, "q_pe"), (k_pe, "k_pe"),
                    (kv_c, "kv_c"), (cos_sin_cache, "cos_sin_cache"),
                    (slot_mapping, "slot_mapping"), (kv_cache, "kv_cache"),
                    (kv_cache_scale, "kv_cache_scale")):
        _tensor(t, name)
    if not isinstance(is_neox, bool):
        raise _bad("%s: is_neox: expected a bool, got %r", op, is_neox)
    if not isinstance(kv_cache_dtype, str):
        raise _bad("%s: kv_cache_dtype: expected a string (auto, fp8, "
                   "fp8_e4m3, fp8_e5m2), got a %s", op,
                   type(kv_cache_dtype).__name__)
    # fp8_ds_mla's entry with inline scales: a NotProvidedError naming it.
    _check_dtype(op, kv_cache_dtype)
    if q_pe.dtype not in _FLOATS:
        raise _bad("%s: q_pe: dtype %s; expected float32, float16 or "
                   "bfloat16", op, q_pe.dtype)
    if q_pe.dim() != 3:
        raise _bad("%s: q_pe: shape %s; expected [num_tokens, num_q_heads, "
                   "rope_dim]", op, list(q_pe.shape))
    padded, q_heads, rope_dim = q_pe.shape
    if q_heads <= 0 or rope_dim <= 0 or rope_dim % 2:
        raise _bad("%s: q_pe: shape %s; num_q_heads must be positive and "
                   "rope_dim even and positive", op, list(q_pe.shape))
    if k_pe.dtype != q_pe.dtype or list(k_pe.shape) != [padded, rope_dim]:
        raise _bad("%s: k_pe: %s of shape %s; expected %s [num_tokens, "
                   "rope_dim] = [%d, %d] (q_pe's)", op, k_pe.dtype,
                   list(k_pe.shape), q_pe.dtype, padded, rope_dim)
    if kv_c.dtype != q_pe.dtype or kv_c.dim() != 2 or kv_c.shape[0] != padded:
        raise _bad("%s: kv_c: %s of shape %s; expected %s [num_tokens, "
                   "kv_lora_rank] with num_tokens %d (q_pe's)", op, kv_c.dtype,
                   list(kv_c.shape), q_pe.dtype, padded)
    rank = kv_c.shape[1]
    if positions.dtype != torch.int64 or list(positions.shape) != [padded]:
        raise _bad("%s: positions: %s of shape %s; expected int64 "
                   "[num_tokens] = [%d]", op, positions.dtype,
                   list(positions.shape), padded)
    if cos_sin_cache.dtype != q_pe.dtype or cos_sin_cache.dim() != 2 or \
            cos_sin_cache.shape[1] != rope_dim:
        raise _bad("%s: cos_sin_cache: %s of shape %s; expected %s "
                   "[max_position, rope_dim] = [max_position, %d] (q_pe's "
                   "dtype)", op, cos_sin_cache.dtype,
                   list(cos_sin_cache.shape), q_pe.dtype, rope_dim)
    if slot_mapping.dtype != torch.int64 or slot_mapping.dim() != 1 or \
            slot_mapping.shape[0] > padded:
        raise _bad("%s: slot_mapping: %s of shape %s; expected int64 "
                   "[num_tokens] with num_tokens at most q_pe's %d", op,
                   slot_mapping.dtype, list(slot_mapping.shape), padded)
    if kv_cache.dim() != 3 or kv_cache.shape[2] != rank + rope_dim:
        raise _bad("%s: kv_cache: shape %s; expected [num_blocks, "
                   "block_size, kv_lora_rank + rope_dim] = [num_blocks, "
                   "block_size, %d]", op, list(kv_cache.shape),
                   rank + rope_dim)
    if kv_cache_scale.dtype != torch.float32 or kv_cache_scale.numel() != 1:
        raise _bad("%s: kv_cache_scale: %s with %d elements; expected one "
                   "float32", op, kv_cache_scale.dtype, kv_cache_scale.numel())
    for t, name in ((cos_sin_cache, "cos_sin_cache"),
                    (positions, "positions"), (slot_mapping, "slot_mapping")):
        if not t.is_contiguous():
            raise _bad("%s: %s: strides %s; it must be contiguous (as vLLM's "
                       "kernel reads it)", op, name, list(t.stride()))
    devices = {t.device for t in (positions, q_pe, k_pe, kv_c, cos_sin_cache,
                                  slot_mapping, kv_cache, kv_cache_scale)}
    if len(devices) != 1:
        raise _bad("%s: the tensors are on %s; all must be on one device",
                   op, ", ".join(sorted(str(x) for x in devices)))

    keep = []
    describe = _dlpack.describe
    kc = describe(kv_cache, "kv_cache", keep, True)
    cache, quant = _cache_dtype(
        "kv_cache", kc, kv_cache_dtype, "'fp8' or 'fp8_e4m3'", "")
    bundle, kernel = _kernel(
        q_pe.device, kc[5][1], rank, rope_dim, _FLOATS[q_pe.dtype], cache,
        quant, q_heads, "neox" if is_neox else "gptj")
    # Rows past slot_mapping's length are CUDA-graph padding: not read, not
    # written (vLLM launches one block per slot_mapping entry).
    n = slot_mapping.shape[0]
    if n == 0:
        return
    q = describe(q_pe[:n], "q_pe", keep, True)
    p = describe(k_pe[:n], "k_pe", keep, True)
    descs = (describe(kv_c[:n], "kv_c", keep), p,
             describe(slot_mapping, "slot_mapping", keep), kc,
             _scale(kv_cache_scale, "kv_cache_scale", keep)
             if quant is not None else None,
             q, q, p, describe(positions[:n], "positions", keep),
             describe(cos_sin_cache, "cos_sin_cache", keep))
    bundle._mla_append(kernel, descs, 0, _stream_of(None, q_pe, q))
