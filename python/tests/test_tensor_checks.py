"""The package's own checks of the tensors and arguments of the ops, before
kvrt: what a kernel writes must be writable, byte order must be the
machine's, a broken __dlpack__ or an argument of the wrong type is refused
with kvgen.InvalidArgumentError (never a raw ValueError, TypeError or
AttributeError, never a crash) and nothing is written."""

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

import kvgen
from kvgen import _dlpack

pytestmark = pytest.mark.usefixtures("compiler_path")

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NB, BS, H, D = 4, 16, 2, 32


@pytest.fixture
def args():
    rng = np.random.default_rng(1)
    key = rng.standard_normal((3, H, D)).astype(np.float16)
    kc = rng.standard_normal((NB, BS, H, D)).astype(np.float16)
    return key, key.copy(), kc, kc.copy(), np.array([1, 5, 40], np.int64)


def _refused(fn, *a, match=None, **kw):
    with pytest.raises(kvgen.InvalidArgumentError, match=match) as e:
        fn(*a, **kw)
    return e.value


def _run(code):
    """Runs `code` in a fresh interpreter (a reproducer that crashed it)."""
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-c", code], env=env, text=True,
                         capture_output=True, cwd=PYTHON_DIR, timeout=120)
    assert out.returncode == 0, "exit %d\n%s%s" % (out.returncode,
                                                   out.stdout, out.stderr)
    return out.stdout


# Written tensors must be writable --------------------------------------------

def test_read_only_cache_is_refused_and_unchanged(args):
    key, value, kc, vc, slots = args
    before = kc.copy()
    kc.flags.writeable = False
    e = _refused(kvgen.ops.reshape_and_cache_flash, key, value, kc, vc,
                 slots, match="key_cache")
    assert "read-only" in str(e)
    assert (kc == before).all()
    # A read-only input is fine: kvgen only reads it.
    key.flags.writeable = False
    kc.flags.writeable = True
    kvgen.ops.reshape_and_cache_flash(key, value, kc, vc, slots)


def test_read_only_value_cache_and_mla_cache_are_refused(args):
    key, value, kc, vc, slots = args
    vc.flags.writeable = False
    _refused(kvgen.ops.reshape_and_cache_flash, key, value, kc, vc, slots,
             match="value_cache")
    kv_c = np.ones((2, 16), np.float16)
    k_pe = np.ones((2, 16), np.float16)
    cache = np.zeros((2, BS, 32), np.float16)
    cache.flags.writeable = False
    _refused(kvgen.ops.concat_and_cache_mla, kv_c, k_pe, cache,
             np.array([0, 1], np.int64), match="kv_cache")
    assert not cache.any()


READ_ONLY_MAPPING = """
import mmap, os, sys, tempfile, numpy as np, kvgen
NB, BS, H, D = 4, 16, 2, 32
path = os.path.join(tempfile.mkdtemp(), "cache.bin")
np.zeros(NB * BS * H * D, np.float16).tofile(path)
f = open(path, "rb")
m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
kc = np.frombuffer(m, np.float16).reshape(NB, BS, H, D)
key = np.ones((2, H, D), np.float16)
slots = np.array([0, 1], np.int64)
try:
    kvgen.ops.reshape_and_cache_flash(key, key, kc, np.zeros_like(kc), slots)
except kvgen.InvalidArgumentError as e:
    assert "key_cache" in str(e) and "read-only" in str(e), e
    print("refused")
# Immutable bytes: a literal NumPy would share with the interpreter.
blob = bytes(NB * BS * H * D * 2)
kc = np.frombuffer(blob, np.float16).reshape(NB, BS, H, D)
try:
    kvgen.ops.reshape_and_cache_flash(key, key, kc, np.zeros_like(kc), slots)
except kvgen.InvalidArgumentError as e:
    assert "key_cache" in str(e), e
    print("refused")
assert blob == bytes(len(blob))
"""


def test_read_only_mapping_and_bytes_are_refused():
    # Before the check, the host kernel wrote into the read-only mapping
    # (SIGSEGV) and into the bytes object: a subprocess.
    assert _run(READ_ONLY_MAPPING).split() == ["refused", "refused"]


def test_bundle_launches_refuse_read_only_outputs(args):
    key, value, kc, vc, slots = args
    b = kvgen.compile(layout="paged_nhd", block_size=BS, num_kv_heads=H,
                      head_dim=D, dtype="f16", target="host")
    kc.flags.writeable = False
    _refused(b.append, key, value, slots, kc, vc, match="key_cache")
    kc.flags.writeable = True
    out = np.zeros((3, H, D), np.float16)
    out.flags.writeable = False
    _refused(b.gather, kc, vc, slots, out, out.copy(), match="key_out")
    table = np.zeros((1, 1), np.int32)
    qsl = np.array([0, 1], np.int32)
    ctx = np.array([1], np.int32)
    sm = np.zeros(1, np.int64)
    sm.flags.writeable = False
    _refused(b.build_slot_mapping, table, qsl, ctx, sm, match="slot_mapping")


# Byte order ------------------------------------------------------------------

def test_big_endian_tensors_are_refused(args):
    key, value, kc, vc, slots = args
    before = kc.copy()
    e = _refused(kvgen.ops.reshape_and_cache_flash, key.astype(">f2"), value,
                 kc, vc, slots, match="key: dtype >f2")
    assert "byte order" in str(e)
    _refused(kvgen.ops.reshape_and_cache_flash, key, value, kc, vc,
             slots.astype(">i8"), match="slot_mapping")
    _refused(kvgen.ops.reshape_and_cache_flash, key, value,
             kc.astype(">f2"), vc.astype(">f2"), slots, match="key_cache")
    assert (kc == before).all() and (vc == before).all()
    # The same values in native order are taken.
    kvgen.ops.reshape_and_cache_flash(key.astype(">f2").astype("=f2"), value,
                                      kc, vc, slots)
    assert (kc[0, 1] == key[0]).all()


# Broken or foreign __dlpack__ producers --------------------------------------

class _Producer:
    def __init__(self, result=None, error=None):
        self.result, self.error = result, error

    def __dlpack__(self, **kw):
        if self.error is not None:
            raise self.error
        return self.result

    def __dlpack_device__(self):
        return (1, 0)


def _used_capsule():
    cap = np.zeros(3, np.int64).__dlpack__()
    # What a consumer leaves: the capsule renamed "used_dltensor".
    ctypes.pythonapi.PyCapsule_SetName.argtypes = [ctypes.py_object,
                                                   ctypes.c_char_p]
    ctypes.pythonapi.PyCapsule_SetName(cap, b"used_dltensor")
    return cap


@pytest.mark.parametrize("producer", [
    _Producer(result=None),
    _Producer(result=42),
    _Producer(result="dltensor"),
    _Producer(error=RuntimeError("no export today")),
    _Producer(error=TypeError("always")),
    _Producer(error=BufferError("busy")),
], ids=["none", "int", "str", "raises", "type-error", "buffer-error"])
def test_broken_dlpack_is_invalid_argument(args, producer):
    key, value, kc, vc, slots = args
    before = kc.copy()
    _refused(kvgen.ops.reshape_and_cache_flash, key, value, kc, vc, producer,
             match="slot_mapping")
    assert (kc == before).all()


def test_consumed_capsule_is_invalid_argument(args):
    key, value, kc, vc, slots = args
    e = _refused(kvgen.ops.reshape_and_cache_flash, key, value, kc, vc,
                 _Producer(result=_used_capsule()), match="slot_mapping")
    assert "not a live DLPack tensor" in str(e)


class _Versioned:
    """A DLPack 1.0 producer (ctypes): a DLManagedTensorVersioned over a
    NumPy array, with the flags given."""

    def __init__(self, arr, flags=0, major=1):
        self.arr, self.flags, self.major = arr, flags, major

    def __dlpack__(self, max_version=None, **kw):
        if max_version is None:
            raise BufferError("only versioned")
        a = self.arr
        m = _dlpack._DLManagedTensorVersioned()
        m.major, m.minor, m.flags = self.major, 0, self.flags
        t = m.dl_tensor
        t.data = a.ctypes.data
        t.device_type, t.device_id, t.ndim = 1, 0, a.ndim
        code, bits = _dlpack._numpy_code(a.dtype, "x")
        t.code, t.bits, t.lanes = code, bits, 1
        self._shape = (ctypes.c_int64 * a.ndim)(*a.shape)
        self._strides = (ctypes.c_int64 * a.ndim)(
            *[s // a.itemsize for s in a.strides])
        t.shape = ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64))
        t.strides = ctypes.cast(self._strides, ctypes.POINTER(ctypes.c_int64))
        self._managed = m
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(m), b"dltensor_versioned", None)


def test_versioned_dlpack_read_only_and_copies_are_refused_for_writes(args):
    key, value, kc, vc, slots = args
    before = kc.copy()
    for flags, word in ((1, "read-only"), (2, "a copy")):
        e = _refused(kvgen.ops.reshape_and_cache_flash, key, value,
                     _Versioned(kc, flags), vc, slots, match="key_cache")
        assert word in str(e)
    _refused(kvgen.ops.reshape_and_cache_flash, key, value, _Versioned(kc, 0,
                                                                       2),
             vc, slots, match="DLPack 2.0")
    assert (kc == before).all()
    # Read-only inputs, and a writable versioned cache, are fine.
    kvgen.ops.reshape_and_cache_flash(_Versioned(key, 1), value,
                                      _Versioned(kc), vc, slots)
    assert (kc[0, 1] == key[0]).all()


# Arguments of the wrong type -------------------------------------------------

@pytest.mark.parametrize("bad", [["auto"], {"auto": 1}, None, 8, b"auto"])
def test_kv_cache_dtype_of_the_wrong_type_is_invalid_argument(args, bad):
    key, value, kc, vc, slots = args
    _refused(kvgen.ops.reshape_and_cache_flash, key, value, kc, vc, slots,
             bad, match="kv_cache_dtype")
    _refused(kvgen.ops.concat_and_cache_mla, np.ones((1, 16), np.float16),
             np.ones((1, 16), np.float16), np.zeros((1, BS, 32), np.float16),
             np.zeros(1, np.int64), bad, match="kv_cache_dtype")


@pytest.mark.parametrize("bad", [None, 3, "cache", object()])
def test_paged_kv_cache_not_a_tensor_is_invalid_argument(args, bad):
    key = args[0]
    idx = np.zeros(1, np.int32)
    _refused(kvgen.ops.append_paged_kv_cache, key, key, idx, idx, bad, idx,
             np.array([0, 1], np.int32), idx, match="paged_kv_cache")


@pytest.mark.parametrize("name", ["kv_append\0evil", "kv_append\0", "\0",
                                  "", "kv_\udc80", b"kv_append", 7,
                                  ["kv_append"]])
def test_kernel_name_that_is_no_c_string_is_refused(args, name):
    key, value, kc, vc, slots = args
    b = kvgen.compile(layout="paged_nhd", block_size=BS, num_kv_heads=H,
                      head_dim=D, dtype="f16", target="host")
    before = kc.copy()
    # Before, "kv_append\0evil" was cut at the NUL and launched kv_append.
    _refused(b.append, key, value, slots, kc, vc, kernel=name,
             match="kernel")
    assert (kc == before).all()


@pytest.mark.parametrize("variant", [["auto"], {}, None, 1])
def test_variant_of_the_wrong_type_is_invalid_argument(args, variant):
    key, value, kc, vc, slots = args
    b = kvgen.compile(layout="paged_nhd", block_size=BS, num_kv_heads=H,
                      head_dim=D, dtype="f16", target="host")
    _refused(b.append, key, value, slots, kc, vc, variant=variant,
             match="variant")


@pytest.mark.parametrize("stream", [-1, 1 << 64, True])
def test_stream_handle_out_of_range_is_invalid_argument(args, stream):
    key, value, kc, vc, slots = args
    _refused(kvgen.ops.reshape_and_cache_flash, key, value, kc, vc, slots,
             stream=stream, match="stream")


def test_register_takes_bundles_only():
    _refused(kvgen.ops.register, "kernels.json", match="register")


def test_numpy_scalar_is_not_taken_as_an_array(args):
    key, value, kc, vc, slots = args
    _refused(kvgen.ops.reshape_and_cache_flash, key, value, kc, vc,
             np.int64(3), match="slot_mapping")


# torch (skipped without it) --------------------------------------------------

def test_sparse_and_meta_torch_tensors_are_invalid_argument(args):
    torch = pytest.importorskip("torch")
    key, value, kc, vc, slots = (torch.from_numpy(a) for a in args)
    before = kc.clone()
    sparse = slots.to_sparse()
    _refused(kvgen.ops.reshape_and_cache_flash, key, value, kc, vc, sparse,
             match="slot_mapping")
    _refused(kvgen.ops.reshape_and_cache_flash, key, value,
             kc.to_sparse(), vc, slots, match="key_cache")
    _refused(kvgen.ops.reshape_and_cache_flash, key, value, kc, vc,
             torch.empty(3, dtype=torch.int64, device="meta"),
             match="slot_mapping")
    assert torch.equal(kc, before)


# Bundle files that are no files ------------------------------------------

def test_bundle_load_refuses_fifos_and_devices(tmp_path):
    fifo = tmp_path / "bundle.json"
    os.mkfifo(fifo)
    # Before, each blocked (the FIFO) or read without end (/dev/zero): a
    # subprocess with a time limit.
    code = ("import kvgen, sys\ntry:\n kvgen.Bundle.load(sys.argv[1])\n"
            "except kvgen.BundleIOError as e:\n print(e)\n")
    for path, word in ((str(fifo), "a FIFO"), ("/dev/zero", "a device")):
        out = subprocess.run([sys.executable, "-c", code, path], text=True,
                             capture_output=True, cwd=PYTHON_DIR, timeout=60)
        assert path in out.stdout and word in out.stdout, out.stderr
    with pytest.raises(kvgen.BundleIOError, match="a device"):
        kvgen.Bundle.load_json_file("/dev/zero")


def test_bundle_path_with_a_nul_is_refused(compiler_path, tmp_path):
    b = kvgen.compile(layout="paged_nhd", block_size=BS, num_kv_heads=H,
                      head_dim=D, dtype="f16", target="gpu")
    # Before, kvrt loaded the file named by the path cut at the NUL.
    for load in (kvgen.Bundle.load, kvgen.Bundle.load_json_file):
        with pytest.raises(kvgen.InvalidArgumentError, match="NUL"):
            load(b.source + "\0.evil")


@pytest.mark.parametrize("field", ["block_size", "num_kv_heads", "head_dim"])
def test_describe_refuses_non_integers(field):
    # Before, 16.5 became 16.
    for bad in (16.5, "16", True, None):
        with pytest.raises(ValueError, match=field):
            kvgen.describe(**{field: bad})
    assert "%s = 16" % field in kvgen.describe(**{field: np.int64(16)})
