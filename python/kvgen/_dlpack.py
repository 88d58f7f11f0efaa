"""Tensors as kvrt sees them: DLPack DLTensors, built without copies.

Any object with ``__dlpack__`` is accepted (CuPy, JAX, NumPy, PyTorch). Two
producers are read directly, because they are the hot path and asking them for
a capsule costs more than the launch: PyTorch tensors (data_ptr, shape,
stride) and NumPy arrays (the array interface; this also takes ml_dtypes'
bfloat16, which NumPy's own DLPack export refuses).

A tensor is described by a plain tuple, ``Desc``:
    (data, device_type, device_id, dtype_code, dtype_bits, shape, strides)
with strides in elements. The ops reshape descriptions (drop padding rows,
permute an HND cache's view); the extension (kvgen/_ext.py) turns them into
DLTensors.
"""

import ctypes
import sys

from . import errors

# DLDeviceType
CPU = 1
CUDA = 2
CUDA_HOST = 3
CUDA_MANAGED = 13

# DLDataTypeCode
INT = 0
UINT = 1
FLOAT = 2
BFLOAT = 4
FLOAT8_E4M3FN = 10
FLOAT8_E5M2 = 12

#: (code, bits) -> the dtype name kvgen's descriptions and bundles use.
DTYPE_NAMES = {
    (FLOAT, 32): "f32",
    (FLOAT, 16): "f16",
    (BFLOAT, 16): "bf16",
    (FLOAT8_E4M3FN, 8): "f8e4m3",
    (FLOAT8_E5M2, 8): "f8e5m2",
    (INT, 8): "i8",
    (UINT, 8): "u8",
    (INT, 32): "i32",
    (INT, 64): "i64",
}

_NUMPY_KINDS = {"f": FLOAT, "i": INT, "u": UINT}

# kvrt's tensors have rank 5 at most (the extension's limit too).
MAX_RANK = 5


# DLPack's structs, to read a __dlpack__ capsule (the producer's memory, not
# a launch's: the extension fills those from kvrt.h).
class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("code", ctypes.c_uint8),
        ("bits", ctypes.c_uint8),
        ("lanes", ctypes.c_uint16),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


# DLPack 1.0's DLManagedTensorVersioned.flags.
_FLAG_READ_ONLY = 1 << 0
_FLAG_IS_COPIED = 1 << 1

_capsule_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get_pointer.restype = ctypes.c_void_p
_capsule_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype = ctypes.c_int
_capsule_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]

_torch_tensor = None
_torch_dtypes = None
_torch_strided = None


def _torch_setup():
    """Binds the torch fast path once torch has been imported by anyone."""
    global _torch_tensor, _torch_dtypes, _torch_strided
    torch = sys.modules.get("torch")
    if torch is None or _torch_tensor is not None:
        return
    table = {
        torch.float32: (FLOAT, 32),
        torch.float16: (FLOAT, 16),
        torch.bfloat16: (BFLOAT, 16),
        torch.int64: (INT, 64),
        torch.int32: (INT, 32),
        torch.int8: (INT, 8),
        torch.uint8: (UINT, 8),
    }
    for name, code in (("float8_e4m3fn", FLOAT8_E4M3FN),
                       ("float8_e5m2", FLOAT8_E5M2)):
        if hasattr(torch, name):
            table[getattr(torch, name)] = (code, 8)
    _torch_dtypes = table
    _torch_strided = torch.strided
    _torch_tensor = torch.Tensor


def is_torch(obj):
    if _torch_tensor is None:
        _torch_setup()
    return _torch_tensor is not None and isinstance(obj, _torch_tensor)


def describe(obj, name, keep, written=False):
    """The Desc of `obj`; objects that must outlive the launch go in `keep`.
    `written`: the launch writes into it, so it must be writable memory (a
    read-only NumPy array, one over an immutable bytes object or a read-only
    mapping, or a DLPack export marked read-only or copied, is refused)."""
    if _torch_tensor is None:
        _torch_setup()
    if _torch_tensor is not None and isinstance(obj, _torch_tensor):
        if obj.layout is not _torch_strided:
            # A sparse or blocked tensor has no strides and no one data
            # pointer of its elements.
            raise errors.InvalidArgumentError(
                "%s: a %s tensor; kvgen takes strided (dense) tensors only"
                % (name, obj.layout))
        dt = _torch_dtypes.get(obj.dtype)
        if dt is None:
            raise errors.InvalidArgumentError(
                "%s: dtype %s has no DLPack code kvgen uses" % (name, obj.dtype))
        # get_device() is an int (-1 on the host): cheaper than .device.
        did = obj.get_device()
        if did < 0:
            if not obj.is_cpu:
                raise errors.InvalidArgumentError(
                    "%s: tensors on %s are not supported (cpu or cuda)"
                    % (name, obj.device))
            dtype, did = CPU, 0
        elif obj.is_cuda:
            dtype = CUDA
        else:
            raise errors.InvalidArgumentError(
                "%s: tensors on %s are not supported (cpu or cuda)"
                % (name, obj.device))
        return (obj.data_ptr(), dtype, did, dt[0], dt[1], tuple(obj.shape),
                obj.stride())
    if (type(obj).__module__ == "numpy" and
            isinstance(obj, sys.modules["numpy"].ndarray)):
        # Arrays only: a NumPy scalar's array interface points at a
        # temporary copy.
        return _describe_numpy(obj, name, written)
    if hasattr(obj, "__dlpack__"):
        return _describe_dlpack(obj, name, keep, written)
    raise errors.InvalidArgumentError(
        "%s: a %s is not a tensor (it has no __dlpack__)"
        % (name, type(obj).__name__))


_numpy_codes = {}



def describe_all(objs, names, keep, written=()):
    """The Descs of `objs` (None for a None), named by `names`, as a list;
    what must outlive the launch goes in `keep`; the names in `written` are
    the tensors the launch writes."""
    return [None if o is None else describe(o, n, keep, n in written)
            for o, n in zip(objs, names)]

def _numpy_code(dt, name):
    """(code, bits) of a NumPy dtype; memoized (dtype.name is slow). A dtype
    of the other byte order is another key (NumPy's dtypes of both orders
    compare unequal), so it never hits a native one's entry."""
    code = _numpy_codes.get(dt)
    if code is not None:
        return code
    if not dt.isnative:
        # kvrt and the kernels read memory in the machine's byte order: a
        # '>f2' array read as it lies would be other numbers.
        raise errors.InvalidArgumentError(
            "%s: dtype %s is in non-native byte order (%s); kvgen reads "
            "tensors in the machine's byte order (%s-endian): convert it "
            "first (arr.astype(arr.dtype.newbyteorder('=')))"
            % (name, dt.str, "big-endian" if dt.byteorder == ">" else
               "little-endian", sys.byteorder))
    special = {"bfloat16": BFLOAT, "float8_e4m3fn": FLOAT8_E4M3FN,
               "float8_e5m2": FLOAT8_E5M2}
    c = special.get(dt.name, _NUMPY_KINDS.get(dt.kind))
    if c is None:
        raise errors.InvalidArgumentError(
            "%s: dtype %s has no DLPack code kvgen uses" % (name, dt))
    code = _numpy_codes[dt] = (c, dt.itemsize * 8)
    return code


def _describe_numpy(arr, name, written):
    code, bits = _numpy_code(arr.dtype, name)
    if written and not arr.flags.writeable:
        # NumPy's own __dlpack__ refuses such arrays; a kernel writing one
        # (a read-only mapping, an immutable bytes object) crashes or
        # changes memory the owner promised nobody would.
        raise errors.InvalidArgumentError(
            "%s: the array is read-only (flags.writeable is False) but the "
            "kernel writes it" % name)
    item = bits // 8
    strides = []
    for s in arr.strides:
        if s % item:
            raise errors.InvalidArgumentError(
                "%s: stride of %d bytes is not a whole number of %d-byte "
                "elements" % (name, s, item))
        strides.append(s // item)
    data = arr.__array_interface__["data"][0]
    return (data, CPU, 0, code, bits, arr.shape, tuple(strides))


def _export(obj, name):
    """obj.__dlpack__(), asking for a versioned capsule (DLPack 1.x, which
    says whether the memory is read-only or a copy) from producers that take
    max_version, a plain one from the others."""
    try:
        try:
            return obj.__dlpack__(max_version=(1, 0))
        except TypeError:
            # A producer that predates max_version (NumPy < 2.1, older
            # PyTorch); a real failure raises again below.
            return obj.__dlpack__()
    except Exception as e:  # the producer refused (dtype, device, ...)
        raise errors.InvalidArgumentError(
            "%s: its __dlpack__ failed: %s: %s"
            % (name, type(e).__name__, e)) from e


def _describe_dlpack(obj, name, keep, written):
    capsule = _export(obj, name)
    # Checked before the capsule is dereferenced: anything but a live DLPack
    # capsule (None, another object, a capsule already consumed or of
    # another kind) would be a wild pointer.
    if _capsule_is_valid(capsule, b"dltensor_versioned"):
        keep.append(capsule)
        ptr = _capsule_get_pointer(capsule, b"dltensor_versioned")
        managed = _DLManagedTensorVersioned.from_address(ptr)
        if managed.major != 1:
            raise errors.InvalidArgumentError(
                "%s: its __dlpack__ gave a DLPack %d.%d tensor; kvgen reads "
                "DLPack 1.x" % (name, managed.major, managed.minor))
        if written and managed.flags & (_FLAG_READ_ONLY | _FLAG_IS_COPIED):
            raise errors.InvalidArgumentError(
                "%s: its DLPack export is %s but the kernel writes it" % (
                    name, "read-only" if managed.flags & _FLAG_READ_ONLY
                    else "a copy (the kernel's writes would not reach the "
                    "tensor)"))
        t = managed.dl_tensor
    elif _capsule_is_valid(capsule, b"dltensor"):
        keep.append(capsule)
        # A DLManagedTensor starts with its DLTensor.
        t = _DLTensor.from_address(
            _capsule_get_pointer(capsule, b"dltensor"))
    else:
        what = type(capsule).__name__
        if what == "PyCapsule":
            what = "capsule that is not a live DLPack tensor (already " \
                   "consumed, or of another kind)"
        raise errors.InvalidArgumentError(
            "%s: its __dlpack__ returned a %s, not a DLPack capsule"
            % (name, what))
    n = t.ndim
    if n < 0 or n > MAX_RANK:
        raise errors.InvalidArgumentError(
            "%s: a tensor of rank %d: kvgen's tensors have rank %d at most"
            % (name, n, MAX_RANK))
    if n and not t.shape:
        raise errors.InvalidArgumentError(
            "%s: its DLPack tensor has rank %d but no shape (NULL)"
            % (name, n))
    if t.lanes != 1:
        raise errors.InvalidArgumentError(
            "%s: dtype of %d lanes; kvgen's tensors have one lane"
            % (name, t.lanes))
    shape = tuple(t.shape[i] for i in range(n))
    if t.strides:
        strides = tuple(t.strides[i] for i in range(n))
    else:
        strides, acc = [], 1
        for extent in reversed(shape):
            strides.append(acc)
            acc *= extent
        strides = tuple(reversed(strides))
    data = (t.data or 0) + t.byte_offset
    if data >= 1 << 64:
        raise errors.InvalidArgumentError(
            "%s: data (0x%x) + byte_offset (%d) passes 2^64"
            % (name, t.data or 0, t.byte_offset))
    return (data, t.device_type, t.device_id, t.code, t.bits, shape, strides)


def dtype_name(desc):
    return DTYPE_NAMES.get((desc[3], desc[4]),
                           "code %d, %d bits" % (desc[3], desc[4]))
