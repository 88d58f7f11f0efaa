"""kvgen.capi's ctypes structs describe the bytes the package packs with
struct (what kvrt reads): the same DLTensor, the same kvrt_append_args."""

import ctypes

from kvgen import _dlpack, bundle, capi


def test_dltensor_is_the_packed_header():
    assert ctypes.sizeof(capi.DLTensor) == _dlpack.HEADER_BYTES
    s = _dlpack.Scratch()
    desc = (0x1000, capi.CUDA, 3, capi.BFLOAT, 16, (5, 8, 64), (512, 64, 1))
    addr = s.pack(0, desc)
    packed = capi.DLTensor.from_address(addr)
    t = capi.Tensor(0x1000, capi.CUDA, 3, capi.BFLOAT, 16, [5, 8, 64],
                    [512, 64, 1])
    header = bytes(s.buf[:_dlpack.HEADER_BYTES])
    mine = ctypes.string_at(ctypes.addressof(t.dl), _dlpack.HEADER_BYTES)
    # Equal but for the shape and strides pointers, which point at each
    # one's own arrays.
    assert mine[:24] == header[:24] and mine[-8:] == header[-8:]
    assert (packed.data, packed.ndim, packed.dtype.code, packed.dtype.bits,
            packed.dtype.lanes) == (0x1000, 3, capi.BFLOAT, 16, 1)
    assert (packed.device.device_type, packed.device.device_id) == (capi.CUDA,
                                                                    3)
    assert list(packed.shape[:3]) == list(t.dl.shape[:3]) == [5, 8, 64]
    assert list(packed.strides[:3]) == list(t.dl.strides[:3]) == [512, 64, 1]


def test_append_args_is_the_packed_struct():
    assert ctypes.sizeof(capi.AppendArgs) == bundle._APPEND_ARGS.size
    pointers = [0x100 * (i + 1) for i in range(9)]
    buf = bytearray(bundle._APPEND_ARGS.size)
    bundle._APPEND_ARGS.pack_into(buf, 0, 0x42, *pointers[:5],
                                  capi.VARIANT_VECTOR, *pointers[5:])
    args = capi.AppendArgs.from_buffer(buf)
    names = ["key", "value", "slot_mapping", "key_cache", "value_cache",
             "key_scale", "value_scale", "key_scale_cache",
             "value_scale_cache"]
    for name, want in zip(names, pointers):
        got = ctypes.cast(getattr(args, name), ctypes.c_void_p).value
        assert got == want, name
    assert args.variant == capi.VARIANT_VECTOR
    # The name's address, read without following it.
    kernel = ctypes.c_void_p.from_buffer(buf, capi.AppendArgs.kernel.offset)
    assert kernel.value == 0x42
