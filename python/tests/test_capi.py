"""kvgen.capi: kvrt's args structs for scripts that call libkvrt through
ctypes, filled by the extension from kvrt.h (no layout spelled in Python).
A raw kvrt_append through them writes what Bundle.append writes."""

import ctypes

import numpy as np
import pytest

import kvgen
from kvgen import _kvrt, capi

H, D, BS, NB = 2, 32, 16, 4


def _tensor(a, code, bits):
    item = a.itemsize
    return capi.Tensor(a.__array_interface__["data"][0], capi.CPU, 0, code,
                       bits, list(a.shape), [s // item for s in a.strides])


def test_append_args_launch_through_ctypes():
    b = kvgen.compile(layout="paged_nhd", block_size=BS, num_kv_heads=H,
                      head_dim=D, dtype="f32", target="host")
    rng = np.random.default_rng(5)
    key = rng.standard_normal((3, H, D)).astype(np.float32)
    value = rng.standard_normal((3, H, D)).astype(np.float32)
    slots = np.array([1, 17, -1], np.int64)
    kc, vc = np.zeros((NB, BS, H, D), np.float32), np.zeros((NB, BS, H, D),
                                                             np.float32)
    want_k, want_v = np.zeros_like(kc), np.zeros_like(vc)
    b.append(key, value, slots, want_k, want_v)
    ts = [_tensor(key, capi.FLOAT, 32), _tensor(value, capi.FLOAT, 32),
          _tensor(slots, capi.INT, 64), _tensor(kc, capi.FLOAT, 32),
          _tensor(vc, capi.FLOAT, 32)]
    name = b.find("append").encode()
    args = capi.append_args(name, *[t.ref() for t in ts[:3]], ts[3], ts[4].dl,
                            variant=capi.VARIANT_SCALAR)
    fn = _kvrt.lib().handle.kvrt_append
    fn.argtypes = [ctypes.c_void_p] * 3
    fn.restype = ctypes.c_int
    assert fn(b._address, args.address, None) == 0
    assert (kc.view(np.uint32) == want_k.view(np.uint32)).all()
    assert (vc.view(np.uint32) == want_v.view(np.uint32)).all()
    # A tensor left out is NULL: kvrt names it.
    args = capi.append_args(name, ts[0], ts[1], ts[2], ts[3], None)
    assert fn(b._address, args.address, None) != 0
    assert b"value_cache" in _kvrt.lib().last_error()


def test_args_struct_refuses_too_many_tensors():
    with pytest.raises(ValueError, match="kvrt_append takes 17 tensors"):
        capi.Args("APPEND", None, 0, (None,) * 18)
