"""What kvgen.vllm's ops share: vLLM's kv_cache_dtype values, the error
for what kvgen does not provide, and the target a tensor's device runs on."""

import torch

from . import compiler, errors


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


_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
           torch.uint8: "u8", torch.float8_e4m3fn: "f8e4m3",
           torch.float8_e5m2: "f8e5m2"}
_DESC_FP8 = {"fp8": ("fp8_e4m3", "f8E4M3FN", torch.float8_e4m3fn),
             "fp8_e4m3": ("fp8_e4m3", "f8E4M3FN", torch.float8_e4m3fn),
             "fp8_e5m2": ("fp8_e5m2", "f8E5M2", torch.float8_e5m2)}

def _bad(message, *args):
    return errors.InvalidArgumentError(message % args)


def _target(device):
    if device.type == "cpu":
        return "host", None
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return "gpu", "sm_%d%d" % (major, minor)
    raise _bad("tensors on %s: kvgen runs on CPU and CUDA tensors", device)


class VllmCheckError(errors.InvalidArgumentError, RuntimeError):
    """A call that vLLM's own op refuses with a RuntimeError (its
    TORCH_CHECKs, whose words the message keeps): kvgen refuses it before
    anything is written, as an InvalidArgumentError that is also the
    RuntimeError code written against vLLM catches."""


def _prologue_kernel(op, kind, what, **fields):
    """(bundle, kernel name) of `kind` with a fused prologue, compiled from
    compiler.compile's `fields` (`prologue` among them); the drop-ins keep
    the result in their memo. `what` names the kernel in the error when
    kvgen cannot generate it for this cache."""
    try:
        bundle = compiler.compile(kernels=(kind,), **fields)
    except errors.CompilerError as e:
        raise errors.KernelNotAvailableError(
            "%s: kvgen could not generate %s for this cache: %s"
            % (op, what, e)) from e
    name = bundle.find(kind, prologue=fields["prologue"])
    if name is None:
        raise errors.KernelNotAvailableError(
            "%s: %s has no %s kernel" % (op, bundle.source, kind))
    return bundle, name
