"""vllm.model_executor.layers.quantization.utils.quant_utils: the fp8 range
and per-tensor dequantization the cache test's reference uses."""

import torch

from vllm.platforms import current_platform


def get_fp8_min_max():
    """(min, max) of the platform's fp8 dtype."""
    finfo = torch.finfo(current_platform.fp8_dtype())
    return finfo.min, finfo.max


def group_broadcast(t, shape):
    """`t` repeated along each dimension where it is smaller than `shape`
    (by a whole factor), then broadcast to `shape`."""
    for i, size in enumerate(shape):
        if t.dim() > i and t.shape[i] != size and t.shape[i] != 1:
            t = t.repeat_interleave(size // t.shape[i], dim=i)
    return t.expand(shape) if t.dim() == len(shape) else t


def scaled_dequantize(x_q, x_s, group_shape=None, out_dtype=torch.float32):
    """x_q * x_s in float32, cast to out_dtype. The stand-in takes the
    per-tensor form only (group_shape None and one scale)."""
    if group_shape is not None or x_s.numel() != 1:
        raise NotImplementedError(
            "the vLLM stand-in's scaled_dequantize takes one per-tensor "
            "scale, not group_shape=%s with %d scales"
            % (group_shape, x_s.numel()))
    return (x_q.to(torch.float32) * x_s.to(torch.float32)).to(out_dtype)
