"""For scripts that call libkvrt through ctypes directly (the GPU
bit-exactness test, the side-by-side benchmark): DLPack's DLTensor as a ctypes
type, and kvrt's args structs built by the package's extension from kvrt.h
itself (no layout is spelled here).

    from kvgen import capi
    t = capi.Tensor(data_ptr, capi.CUDA, 0, capi.BFLOAT, 16, shape, strides)
    args = capi.append_args(b"kv_append", t, ...)
    lib.kvrt_append(bundle, args.address, stream)   # argtypes: 3 x c_void_p
"""

import ctypes

from ._dlpack import (BFLOAT, CPU, CUDA, FLOAT, FLOAT8_E4M3FN, FLOAT8_E5M2,
                      INT, UINT)

__all__ = [
    "DLDevice", "DLDataType", "DLTensor", "TensorPtr", "Args", "append_args",
    "paged_kv_append_args",
    "Tensor", "torch_tensor", "VARIANT_AUTO", "VARIANT_VECTOR",
    "VARIANT_SCALAR", "VARIANT_WIDE", "CPU", "CUDA", "INT",
    "UINT", "FLOAT", "BFLOAT", "FLOAT8_E4M3FN", "FLOAT8_E5M2",
]

# kvrt_variant, runtime/include/kvrt/kvrt.h
VARIANT_AUTO = 0
VARIANT_VECTOR = 1
VARIANT_SCALAR = 2
VARIANT_WIDE = 3


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice),
                ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


TensorPtr = ctypes.POINTER(DLTensor)


class Args:
    """One of kvrt.h's args structs, filled by kvgen's extension: that of
    kind `kind` (its name, "append", or in capitals). `address` is valid
    while this object and the tensors it names live."""

    def __init__(self, kind, kernel, variant, tensors):
        from . import _ext, _kinds

        found = _kinds.by_name(kind.lower())
        if found is None:
            raise ValueError("kind: %r is not one of %s" % (
                kind, ", ".join(k.name for k in _kinds.all_kinds())))
        self._kernel = None if kernel is None else ctypes.create_string_buffer(
            kernel)
        self._tensors = tensors
        data = _ext.get().args_struct(
            found.index,
            None if kernel is None else ctypes.addressof(self._kernel),
            variant, tuple(_address(t) for t in tensors))
        self._buf = ctypes.create_string_buffer(data, len(data))
        self.address = ctypes.addressof(self._buf)


def _address(t):
    if t is None:
        return None
    if isinstance(t, Tensor):
        return ctypes.addressof(t.dl)
    if isinstance(t, DLTensor):
        return ctypes.addressof(t)
    return ctypes.cast(t, ctypes.c_void_p).value  # a pointer to a DLTensor


def append_args(kernel, key, value, slot_mapping, key_cache, value_cache,
                variant=VARIANT_AUTO, key_scale=None, value_scale=None,
                key_scale_cache=None, value_scale_cache=None, query=None,
                q_out=None, rope_positions=None, cos_sin_cache=None,
                k_norm_weight=None, q_norm_weight=None, epsilon=None,
                q_scale=None):
    """kvrt_append_args (tensors: Tensor, DLTensor, a pointer, or None);
    query .. q_scale are a fused prologue's (docs/KERNEL-ABI.md)."""
    return Args("append", kernel, variant,
                (key, value, slot_mapping, key_cache, value_cache, key_scale,
                 value_scale, key_scale_cache, value_scale_cache, query,
                 q_out, rope_positions, cos_sin_cache, k_norm_weight,
                 q_norm_weight, epsilon, q_scale))


def paged_kv_append_args(kernel, key, value, batch_indices, positions,
                         kv_indices, kv_indptr, key_cache, value_cache,
                         variant=VARIANT_AUTO, key_scale=None,
                         value_scale=None, key_scale_cache=None,
                         value_scale_cache=None, query=None, q_out=None,
                         rope_positions=None, cos_sin_cache=None,
                         k_norm_weight=None, q_norm_weight=None,
                         epsilon=None, q_scale=None):
    """kvrt_paged_kv_append_args, as append_args."""
    return Args("paged_kv_append", kernel, variant,
                (key, value, batch_indices, positions, kv_indices, kv_indptr,
                 key_cache, value_cache, key_scale, value_scale,
                 key_scale_cache, value_scale_cache, query, q_out,
                 rope_positions, cos_sin_cache, k_norm_weight, q_norm_weight,
                 epsilon, q_scale))


class Tensor:
    """A DLTensor over memory the caller keeps alive (a torch tensor's
    data_ptr, say), owning its shape and strides (in elements)."""

    def __init__(self, data, device_type, device_id, code, bits, shape,
                 strides):
        n = len(shape)
        self.shape = (ctypes.c_int64 * n)(*shape)
        self.strides = (ctypes.c_int64 * n)(*strides)
        as_pointer = ctypes.POINTER(ctypes.c_int64)
        self.dl = DLTensor(ctypes.c_void_p(data),
                           DLDevice(device_type, device_id), n,
                           DLDataType(code, bits, 1),
                           ctypes.cast(self.shape, as_pointer),
                           ctypes.cast(self.strides, as_pointer), 0)

    def ref(self):
        """A pointer to the DLTensor, valid while this object lives."""
        return ctypes.pointer(self.dl)


def torch_tensor(t, code, bits):
    """A Tensor over a torch tensor on its device, as (code, bits)."""
    device_type = CUDA if t.is_cuda else CPU
    return Tensor(t.data_ptr(), device_type, t.device.index or 0, code, bits,
                  list(t.shape), list(t.stride()))
