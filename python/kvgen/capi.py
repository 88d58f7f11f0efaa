"""kvrt's C structs and DLPack's, as ctypes types, for callers of the C API.

The package itself packs tensors and arguments with ``struct`` (the faster
path, see _dlpack.py and bundle.py); these types describe the same bytes for
scripts that call libkvrt through ctypes directly (the GPU bit-exactness test,
the side-by-side benchmark). test_capi.py checks that both agree.

    from kvgen import capi
    t = capi.tensor(data_ptr, capi.CUDA, 0, capi.BFLOAT, 16, shape, strides)
    args = capi.AppendArgs(b"kv_append", ctypes.pointer(t), ...)
"""

import ctypes

from ._dlpack import (BFLOAT, CPU, CUDA, FLOAT, FLOAT8_E4M3FN, FLOAT8_E5M2,
                      INT, UINT)

__all__ = [
    "DLDevice", "DLDataType", "DLTensor", "TensorPtr", "AppendArgs",
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


class _Args(ctypes.Structure):
    """An args struct of kvrt.h: struct_size first, set to the struct's size
    (KVRT_ARGS_INIT); the positional arguments fill the fields after it."""

    def __init__(self, *args, **kwargs):
        super().__init__(ctypes.sizeof(self), *args, **kwargs)


class AppendArgs(_Args):
    """kvrt_append_args. The scale tensors come last, as bundle format 2
    added them; NULL where the kernel takes none."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("kernel", ctypes.c_char_p), ("key", TensorPtr),
                ("value", TensorPtr), ("slot_mapping", TensorPtr),
                ("key_cache", TensorPtr), ("value_cache", TensorPtr),
                ("variant", ctypes.c_int), ("key_scale", TensorPtr),
                ("value_scale", TensorPtr), ("key_scale_cache", TensorPtr),
                ("value_scale_cache", TensorPtr)]


class PagedKvAppendArgs(_Args):
    """kvrt_paged_kv_append_args: FlashInfer's page table for the slots."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("kernel", ctypes.c_char_p), ("key", TensorPtr),
                ("value", TensorPtr), ("batch_indices", TensorPtr),
                ("positions", TensorPtr), ("kv_indices", TensorPtr),
                ("kv_indptr", TensorPtr), ("key_cache", TensorPtr),
                ("value_cache", TensorPtr), ("variant", ctypes.c_int),
                ("key_scale", TensorPtr), ("value_scale", TensorPtr),
                ("key_scale_cache", TensorPtr),
                ("value_scale_cache", TensorPtr)]


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
