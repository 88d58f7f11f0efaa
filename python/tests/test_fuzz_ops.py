"""A fuzzer over the ops' arguments (reshape_and_cache_flash and
concat_and_cache_mla on host kernels). Every call must end one of two ways:

- refused with the package's own exception (a kvgen.KvgenError: an
  InvalidArgumentError or another KvrtError, KernelNotAvailableError for a
  geometry the cache lacks), and not one byte of any tensor changed;
- accepted, and every byte of every buffer equals the reference (NumPy
  indexing, python/tests/reference.py's rule: slots < 0 and blocks past the
  cache write nothing); what the op only reads is unchanged.

Arguments: valid ones, then mutations of each: every dtype (bfloat16 and
other codes through a ctypes DLPack producer), both byte orders, read-only,
non-contiguous, negative strides, zero-size, misaligned (offset views of a
byte buffer), wrong ranks and extents, aliasing, slots that pad, fall past
the cache or repeat (a repeat is the caller's bug, CONTRACT.md: the fuzzer
keeps the slots of one call distinct), objects that are no tensors, broken
__dlpack__ producers (raising, returning no capsule, a consumed capsule, a
negative or huge rank, no shape, two lanes, a DLPack 2.0 or read-only or
copied versioned export), and, where torch is installed, torch tensors of
every layout (sparse COO/CSR, meta, non-contiguous).

The kernels come from a cache filled once for the module; the calls run
with no compiler, so a geometry outside the cache is refused quickly.
Deterministic: seed KVGEN_PY_FUZZ_SEED (default 0). A short run is part of
the normal test run; KVGEN_PY_FUZZ_SECONDS=N runs for N seconds and prints
the figures (docs/FUZZING.md)."""

import ctypes
import os
import time

import numpy as np
import pytest

import kvgen
from kvgen import _dlpack
from kvgen import compiler as kc

NB, BS, H, D = 5, 4, 2, 16
RANK, ROPE = 32, 16
SOURCES = {"f16": "f16", "f32": "f16", "bf16": "bf16"}
# (source, cache) pairs the cache holds, per layout; and the MLA ones.
PAIRS = [("f16", "f16"), ("f32", "f16"), ("f32", "f32"), ("bf16", "bf16"),
         ("f32", "bf16")]
MLA_PAIRS = [("f16", "f16"), ("bf16", "bf16")]
SECONDS = float(os.environ.get("KVGEN_PY_FUZZ_SECONDS", "3"))
SEED = int(os.environ.get("KVGEN_PY_FUZZ_SEED", "0"))


@pytest.fixture(scope="module")
def fuzz_cache(tmp_path_factory):
    from conftest import COMPILER
    if not COMPILER:
        pytest.skip("no kvgen compiler (KVGEN_COMPILER, build/bin/kvgen, "
                    "PATH)")
    cache = str(tmp_path_factory.mktemp("fuzz-cache"))
    for layout in ("paged_nhd", "paged_hnd"):
        for src, dst in PAIRS:
            kc.cache_entry(target="host", cache=cache, layout=layout,
                           block_size=BS, num_kv_heads=H, head_dim=D,
                           dtype=src, cache_dtype=dst)
    for src, dst in MLA_PAIRS:
        kc.cache_entry(target="host", cache=cache, layout="paged_nhd",
                       block_size=BS, num_kv_heads=1, head_dim=RANK + ROPE,
                       dtype=src, cache_dtype=dst, kv_lora_rank=RANK,
                       rope_dim=ROPE)
    return cache


# Tensors ---------------------------------------------------------------------

class Buf:
    """A NumPy array of raw bytes every tensor of a call is a view of, so
    that the check covers every byte (a write outside a view included)."""

    def __init__(self, nbytes):
        self.raw = np.zeros(nbytes + 64, np.uint8)
        # 64-byte aligned start.
        self.start = (-self.raw.ctypes.data) % 64
        self.arr = self.raw[self.start:self.start + nbytes]


class T:
    """A tensor of a call: the object passed, and how the reference sees it
    (a NumPy view over its Buf, in the logical dtype: uint16 bits for
    bfloat16)."""

    def __init__(self, obj, view, kind, buf):
        self.obj, self.view, self.kind, self.buf = obj, view, kind, buf


NP = {"f16": np.float16, "f32": np.float32, "bf16": np.uint16,
      "i64": np.int64, "i32": np.int32}
CODES = {"f16": (2, 16), "f32": (2, 32), "bf16": (4, 16), "i64": (0, 64),
         "i32": (0, 32)}


def pick(rng, seq):
    """One item of a list (of any types), by the generator."""
    return seq[int(rng.integers(len(seq)))]


def _values(rng, kind, shape):
    n = int(np.prod(shape))
    if kind == "f32":
        v = rng.standard_normal(n).astype(np.float32) * 4
        specials = np.array([0.0, -0.0, np.inf, -np.inf, 65504, 65520, 1e-8,
                             -1e-6, 3.4e38, 6e-5], np.float32)
    elif kind == "f16":
        v = rng.standard_normal(n).astype(np.float16)
        specials = np.array([0.0, -0.0, np.inf, -np.inf, 65504, 6e-8],
                            np.float16)
    elif kind == "bf16":
        # Bits of finite bfloat16 values and infinities.
        v = (rng.standard_normal(n).astype(np.float32).view(np.uint32) >>
             16).astype(np.uint16)
        specials = np.array([0, 0x8000, 0x7F80, 0xFF80, 0x0001], np.uint16)
    else:
        return rng.integers(-5, 50, n).astype(NP[kind]).reshape(shape)
    if n:
        picks = rng.random(n) < 0.05
        v[picks] = rng.choice(specials, int(picks.sum()))
    return v.reshape(shape)


def make(rng, kind, shape, fill=True, order=None):
    """A C-contiguous tensor of `kind` (one of NP) in a fresh Buf."""
    item = np.dtype(NP[kind]).itemsize
    buf = Buf(int(np.prod(shape)) * item)
    view = buf.arr.view(NP[kind]).reshape(shape)
    if fill:
        view[...] = _values(rng, kind, shape)
    return T(view if kind != "bf16" else Producer(view, "bf16"), view, kind,
             buf)


class Producer:
    """A DLPack producer over a NumPy view (ctypes), exporting it with any
    dtype code, and broken on demand."""

    def __init__(self, view, kind, broken=None, flags=0, versioned=None):
        self.view, self.kind, self.broken = view, kind, broken
        self.flags, self.versioned = flags, versioned

    def __dlpack__(self, max_version=None, **kw):
        b = self.broken
        if b == "raises":
            raise RuntimeError("export refused")
        if b == "none":
            return None
        if b == "int":
            return 7
        versioned = (self.versioned if self.versioned is not None else
                     max_version is not None)
        if versioned and max_version is None:
            raise TypeError("max_version required")
        a = self.view
        shape = a.shape
        n = len(shape)
        if versioned:
            m = _dlpack._DLManagedTensorVersioned()
            m.major, m.minor = (2, 0) if b == "v2" else (1, 0)
            m.flags = self.flags
            t = m.dl_tensor
        else:
            m = t = _dlpack._DLTensor()
        t.data = a.ctypes.data if a.size else (a.ctypes.data or 64)
        t.device_type, t.device_id = 1, 0
        t.ndim = {"rank-neg": -1, "rank-huge": 1 << 30}.get(b, n)
        t.code, t.bits = CODES[self.kind]
        t.lanes = 2 if b == "lanes" else 1
        item = a.itemsize
        self._shape = (ctypes.c_int64 * max(n, 1))(*shape)
        self._strides = (ctypes.c_int64 * max(n, 1))(
            *[s // item for s in a.strides])
        if b != "no-shape":
            t.shape = ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64))
        t.strides = ctypes.cast(self._strides, ctypes.POINTER(ctypes.c_int64))
        self._keep = m
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        name = b"dltensor_versioned" if versioned else b"dltensor"
        if b == "used":
            name = b"used_dltensor"
        return new(ctypes.addressof(m), name, None)

    def __dlpack_device__(self):
        return (1, 0)


def _as_producer(rng, t):
    """Passes `t` through the ctypes producer (legacy or versioned)."""
    t.obj = Producer(t.view, t.kind, versioned=bool(rng.integers(2)))
    return t


BROKEN = ["raises", "none", "int", "used", "rank-neg", "rank-huge",
          "no-shape", "lanes", "v2"]


def mutate(rng, t, written, events):
    """A random change of tensor `t` (in place or a new T); names what was
    done in `events`, and in `must` what the contract refuses whatever the
    rest of the call (so that an acceptance is a failure too)."""
    what = pick(rng, ["strided", "neg-stride", "zero", "misaligned",
                       "read-only", "big-endian", "dtype", "broken",
                       "not-a-tensor", "rank", "producer", "flags"])
    if t.kind == "other":
        what = pick(rng, ["read-only", "not-a-tensor"])
    events.append(what)
    # What the tensor must be refused for is what this mutation made it:
    # a later mutation of the same tensor replaces the earlier one's object.
    must = []
    new = _mutate(rng, t, written, what, must)
    if new is None:
        events[-1] = "none"
        return t
    new.must = must
    return new


def _mutate(rng, t, written, what, must):
    v = t.view
    v = t.view
    if what == "strided" and v.ndim:
        # Every other element of the last axis: inner stride 2.
        big = make(rng, t.kind, v.shape[:-1] + (v.shape[-1] * 2,))
        big.view[...] = np.repeat(v, 2, axis=-1) if v.size else big.view
        w = big.view[..., ::2]
        if (written or t.kind == "i64") and w.size and w.shape[-1] > 1:
            must.append("inner stride 2 of a cache or an index")
        return T(w if t.kind != "bf16" else Producer(w, "bf16"), w, t.kind,
                 big.buf)
    if what == "neg-stride" and v.ndim and v.shape[0] > 1:
        w = v[::-1]
        if w.strides[0] < 0 and w.size:
            must.append("negative stride")
        return T(w if t.kind != "bf16" else Producer(w, "bf16"), w, t.kind,
                 t.buf)
    if what == "zero" and v.ndim:
        w = v[:0]
        return T(w if t.kind != "bf16" else Producer(w, "bf16"), w, t.kind,
                 t.buf)
    if what == "misaligned":
        item = v.itemsize
        buf = Buf(v.nbytes + item)
        off = 1 if item > 1 else 0
        w = np.frombuffer(buf.arr, NP[t.kind], v.size, off).reshape(v.shape)
        if off:
            must.append("misaligned")
        return T(w if t.kind != "bf16" else Producer(w, "bf16"), w, t.kind,
                 buf)
    if what == "read-only":
        if written:
            must.append("read-only output")
        if isinstance(t.obj, np.ndarray):
            t.obj = t.obj.view()
            t.obj.flags.writeable = False
        else:
            t.obj = Producer(t.view, t.kind, flags=1, versioned=True)
        return t
    if what == "big-endian" and isinstance(t.obj, np.ndarray) and v.itemsize \
            > 1:
        # The same bytes, read as the other byte order.
        t.obj = v.view(v.dtype.newbyteorder())
        must.append("non-native byte order")
        return t
    if what == "dtype":
        other = pick(rng, ["f16", "f32", "bf16", "i64", "i32", "u8", "f64",
                            "bool", "c64"])
        if other in NP:
            return make(rng, other, v.shape)
        dt = {"u8": np.uint8, "f64": np.float64, "bool": np.bool_,
              "c64": np.complex64}[other]
        buf = Buf(int(np.prod(v.shape)) * np.dtype(dt).itemsize)
        w = buf.arr.view(dt).reshape(v.shape)
        must.append("dtype %s" % other)
        return T(w, w, "other", buf)
    if what == "broken":
        t.obj = Producer(t.view, t.kind, broken=pick(rng, BROKEN))
        must.append("broken producer")
        return t
    if what == "not-a-tensor":
        t.obj = pick(rng, [None, 3, "tensor", [1, 2], (1,), b"\0" * 8,
                            object()])
        must.append("not a tensor")
        return t
    if what == "rank" and v.ndim:
        # One axis more, never fewer: two of these in a row must not undo
        # each other.
        w = v.reshape(v.shape + (1,)) if rng.integers(2) else \
            v.reshape((1,) + v.shape)
        must.append("rank")
        return T(w if t.kind != "bf16" else Producer(w, "bf16"), w, t.kind,
                 t.buf)
    if what == "producer":
        return _as_producer(rng, t)
    if what == "flags" and isinstance(t.obj, np.ndarray):
        t.obj = Producer(t.view, t.kind, flags=2, versioned=True)  # a copy
        if written:
            must.append("copied output")
        return t
    return None  # no change


# The reference ---------------------------------------------------------------

def _f32_to(kind, x):
    if kind == "f16":
        return x.astype(np.float16)
    if kind == "f32":
        return x.astype(np.float32)
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return r


def _convert(src_kind, rows, dst_kind):
    """rows (in src_kind's NumPy view) as dst_kind's bits, round to nearest
    even (the kernels' cast)."""
    if src_kind == dst_kind:
        return rows.copy()
    with np.errstate(over="ignore", invalid="ignore"):
        return _cast(src_kind, rows, dst_kind)


def _cast(src_kind, rows, dst_kind):
    if src_kind == "bf16":
        rows = (rows.astype(np.uint32) << 16).view(np.float32)
    return _f32_to(dst_kind, rows.astype(np.float32))


def _slot_rows(slots, nb, bs):
    for i, s in enumerate(slots):
        s = int(s)
        if s < 0 or s // bs >= nb:
            continue
        yield i, s // bs, s % bs


# One call --------------------------------------------------------------------

class Stats:
    def __init__(self):
        self.calls = self.refused = self.passed = 0
        self.by_class = {}
        self.failures = []


def _slots(rng, n, nb, bs):
    total = nb * bs
    base = rng.permutation(max(total, 1))[:n]
    slots = np.array(base if total else np.full(n, -1), np.int64)[:n]
    if len(slots) < n:
        slots = np.concatenate([slots, np.full(n - len(slots), -1)])
    for i in range(n):
        r = rng.random()
        if r < 0.1:
            slots[i] = -1
        elif r < 0.15:
            slots[i] = -int(rng.integers(2, 1 << 40))
        elif r < 0.2:
            slots[i] = total + int(rng.integers(0, 1 << 20))
        elif r < 0.22:
            slots[i] = (1 << 62) + int(rng.integers(0, 100))
    return slots.astype(np.int64)


def one_call(rng, stats, torch=None):
    mla = rng.random() < 0.25
    events, must = [], []
    n = int(rng.integers(0, 9))
    pad = int(rng.integers(0, 3))
    if mla:
        src, dst = MLA_PAIRS[rng.integers(len(MLA_PAIRS))]
        nb = int(rng.integers(1, 4))
        key = make(rng, src, (n + pad, RANK))
        value = make(rng, src, (n + pad, ROPE))
        caches = [make(rng, dst, (nb, BS, RANK + ROPE))]
        hnd = False
        names = ["kv_c", "k_pe", "kv_cache", "slot_mapping"]
    else:
        src, dst = PAIRS[rng.integers(len(PAIRS))]
        nb = int(rng.integers(1, NB + 1))
        key = make(rng, src, (n + pad, H, D))
        value = make(rng, src, (n + pad, H, D))
        hnd = rng.random() < 0.3
        caches = []
        for _ in range(2):
            if hnd:
                c = make(rng, dst, (nb, H, BS, D))
                w = c.view.transpose(0, 2, 1, 3)
                c = T(w if dst != "bf16" else Producer(w, "bf16"), w, dst,
                      c.buf)
            else:
                c = make(rng, dst, (nb, BS, H, D))
            caches.append(c)
        names = ["key", "value", "key_cache", "value_cache", "slot_mapping"]
    slots_arr = _slots(rng, n, nb, BS)
    sm = make(rng, "i64", (n,), fill=False)
    sm.view[...] = slots_arr
    tensors = [key, value] + caches + [sm]
    written = set(range(2, 2 + len(caches)))
    # Mutations: none in about half of the calls, so that the accepted path
    # is exercised as much as the refusals.
    if rng.random() < 0.5:
        for _ in range(int(rng.integers(1, 3))):
            i = int(rng.integers(len(tensors)))
            events.append(names[i])
            tensors[i] = mutate(rng, tensors[i], i in written, events)
    if rng.random() < 0.05 and not mla:
        # Aliasing: V's cache is K's.
        events.append("alias")
        if tensors[2].view.size:
            must.append("aliased outputs")
        tensors[3] = tensors[2]
    if torch is not None and rng.random() < 0.2:
        i = int(rng.integers(len(tensors)))
        t = tensors[i]
        if isinstance(t.obj, np.ndarray) and t.obj.dtype.isnative:
            try:
                # torch refuses negative strides and read-only arrays'
                # writes; such a tensor stays a NumPy array.
                tt = (torch.from_numpy(t.obj) if t.obj.flags.writeable else
                      None)
            except (ValueError, RuntimeError, TypeError):
                tt = None
            if tt is not None:
                how = pick(rng, ["as-is", "sparse", "csr", "meta", "t"])
                events.append("torch-" + how)
                if how == "sparse":
                    tt = tt.to_sparse()
                    must.append("sparse")
                elif how == "csr" and tt.dim() == 2:
                    tt = tt.to_sparse_csr()
                    must.append("sparse")
                elif how == "meta":
                    tt = torch.empty(tt.shape, dtype=tt.dtype, device="meta")
                    must.append("meta")
                t.obj = tt
    kv_cache_dtype = "auto"
    if rng.random() < 0.1:
        kv_cache_dtype = pick(rng, ["fp8", "fp8_e5m2", "int4", "", "AUTO",
                                     None, ["auto"], 3])
        events.append("kv_cache_dtype=%r" % (kv_cache_dtype,))
        must.append("kv_cache_dtype %r" % (kv_cache_dtype,))
    scales = (None, None)
    if rng.random() < 0.05:
        scales = (np.ones(1, np.float32), np.ones(2, np.float32))
        events.append("scales")

    bufs = {id(t.buf): t.buf for t in tensors}
    before = {k: b.arr.copy() for k, b in bufs.items()}
    objs = [t.obj for t in tensors]
    stats.calls += 1
    try:
        if mla:
            kvgen.ops.concat_and_cache_mla(objs[0], objs[1], objs[2], objs[3],
                                           kv_cache_dtype, scales[0])
        else:
            kvgen.ops.reshape_and_cache_flash(
                objs[0], objs[1], objs[2], objs[3], objs[4], kv_cache_dtype,
                scales[0], scales[1])
    except kvgen.KvgenError as e:
        stats.refused += 1
        cls = type(e).__name__
        stats.by_class[cls] = stats.by_class.get(cls, 0) + 1
        changed = [k for k, b in bufs.items()
                   if not np.array_equal(b.arr, before[k])]
        if changed:
            stats.failures.append(("refused (%s: %s) but bytes changed"
                                   % (cls, e), events))
        return
    except Exception as e:  # noqa: anything else is a failure
        stats.failures.append(("raised %s: %s" % (type(e).__name__, e),
                               events))
        return
    must += [m for t in tensors for m in getattr(t, "must", ())]
    if must:
        stats.failures.append(("accepted although: %s" % ", ".join(must),
                               events))
        return
    # Accepted: compute what every buffer must hold.
    expect = {k: v.copy() for k, v in before.items()}

    def ref_view(t):
        """t.view, over the expected copy of its buffer."""
        b = expect[id(t.buf)]
        off = t.view.__array_interface__["data"][0] - \
            t.buf.arr.__array_interface__["data"][0]
        return np.lib.stride_tricks.as_strided(
            b[off:].view(t.view.dtype), t.view.shape, t.view.strides)

    k, v = tensors[0], tensors[1]
    sm_t = tensors[-1]
    slots = sm_t.view.astype(np.int64)
    if mla:
        c = tensors[2]
        out = ref_view(c)
        for i, blk, row in _slot_rows(slots, c.view.shape[0],
                                      c.view.shape[1]):
            out[blk, row, :RANK] = _convert(k.kind, k.view[i], c.kind)
            out[blk, row, RANK:] = _convert(v.kind, v.view[i], c.kind)
    else:
        for src_t, c in ((k, tensors[2]), (v, tensors[3])):
            out = ref_view(c)
            for i, blk, row in _slot_rows(slots, c.view.shape[0],
                                          c.view.shape[1]):
                out[blk, row] = _convert(src_t.kind, src_t.view[i], c.kind)
    for key_, b in bufs.items():
        if not np.array_equal(b.arr, expect[key_]):
            diff = np.flatnonzero(b.arr != expect[key_])
            stats.failures.append(("accepted but %d bytes differ from the "
                                   "reference (first at %d)"
                                   % (len(diff), diff[0]), events))
            return
    stats.passed += 1


def run(seconds, seed, torch=None, max_calls=None):
    rng = np.random.default_rng(seed)
    stats = Stats()
    end = time.monotonic() + seconds
    while time.monotonic() < end and (max_calls is None or
                                      stats.calls < max_calls):
        one_call(rng, stats, torch)
        if len(stats.failures) >= 20:
            break
    return stats


@pytest.fixture
def no_compiler(fuzz_cache, monkeypatch):
    monkeypatch.delenv("KVGEN_COMPILER", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("KVGEN_CACHE_DIR", fuzz_cache)
    kvgen.ops._forget_calls()
    yield
    kvgen.ops._forget_calls()


def _report(stats, what):
    line = ("%s: %d calls, %d refused (%s), %d passed, %d failures"
            % (what, stats.calls, stats.refused, ", ".join(
                "%s %d" % kv for kv in sorted(stats.by_class.items())),
                stats.passed, len(stats.failures)))
    print(line)
    return line


def test_fuzz_ops_numpy(no_compiler):
    stats = run(SECONDS, SEED)
    line = _report(stats, "numpy and DLPack")
    assert not stats.failures, "%s\n%s" % (line, "\n".join(
        "%s after %s" % f for f in stats.failures[:10]))
    # Both outcomes are exercised.
    assert stats.passed > stats.calls // 10 and stats.refused > 0, line


def test_fuzz_ops_torch(no_compiler):
    torch = pytest.importorskip("torch")
    stats = run(SECONDS, SEED + 1, torch)
    line = _report(stats, "with torch")
    assert not stats.failures, "%s\n%s" % (line, "\n".join(
        "%s after %s" % f for f in stats.failures[:10]))
