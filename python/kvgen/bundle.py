"""kvgen.Bundle: a loaded bundle of generated kernels, and its launches.

A bundle is what the kvgen compiler writes (docs/KERNEL-ABI.md): the manifest
of every kernel and the PTX (GPU bundles), or, for the host target, a shared
object with the kernels compiled for the CPU and the manifest embedded
(``kvgen --target=host --emit=shared-lib``). kvrt validates every tensor
against the manifest before it launches anything. A bundle file is checked
before kvrt reads it or dlopen maps it (kvgen/_load_checks.py).
"""

import ctypes
import json
import os
import struct
import sys

from . import _dlpack, _kvrt, errors
from ._load_checks import (_ELF_MAGIC, _refuse_special_file,
                           check_shared_object)

_VARIANTS = {"auto": 0, "vector": 1, "scalar": 2, "wide": 3}

# The args structs of kvrt.h, packed in one call. Fields: struct_size, the
# kernel name, the tensors, the variant (an enum: int32 plus padding), then
# the four scale tensors bundle format 2 added at the end.
class _Args(struct.Struct):
    """An args struct led by its struct_size (kvrt.h's KVRT_ARGS_INIT), which
    pack_into fills in: the callers pass the fields after it."""

    def __init__(self, fields):
        super().__init__("<Q" + fields)

    def pack_into(self, buf, offset, *values):
        super().pack_into(buf, offset, self.size, *values)


_APPEND_ARGS = _Args("6Qi4x4Q")
_FUSED_ARGS = _Args("8Qi4x4Q")
_SLOT_ARGS = _Args("5Q")
_GATHER_ARGS = _Args("6Qi4x4Q")
_MLA_ARGS = _Args("5Qi4xQ")
_MLA_FUSED_ARGS = _Args("7Qi4xQ")
_PAGED_ARGS = _Args("9Qi4x4Q")


class _PagedScratch(_dlpack.Scratch):
    """A launch's memory with room for paged_kv_append's twelve tensors."""

    SLOTS = 12


# What an append writes: the caches, and a dynamic description's scale
# caches.
_WRITES_CACHES = ("key_cache", "value_cache", "key_scale_cache",
                  "value_scale_cache")

# Packed launches a bundle remembers before it forgets them all: an eager
# loop reuses a handful (one per layer's cache), a varying batch a few more.
_PACKED_ENTRIES = 256


def _stream_of(stream, obj, desc):
    """The stream to launch on, as an integer handle (0: legacy default)."""
    if stream is not None:
        if isinstance(stream, int) and not isinstance(stream, bool):
            value = stream
        else:
            for attr in ("cuda_stream", "ptr", "handle"):
                value = getattr(stream, attr, None)
                if isinstance(value, int):
                    break
            else:
                value = None
        if value is not None:
            if not 0 <= value < 1 << 64:
                raise errors.InvalidArgumentError(
                    "stream: handle %d is not a pointer-sized handle" % value)
            return value
        raise errors.InvalidArgumentError(
            "stream: expected an int handle or an object with cuda_stream or "
            "ptr, got %s" % type(stream).__name__)
    if desc[1] == _dlpack.CPU:
        return 0
    if _dlpack.is_torch(obj):
        return torch_current_stream(desc[2])
    module = type(obj).__module__ or ""
    if module.startswith("cupy"):
        import cupy  # noqa: the tensor's own framework, already imported

        return cupy.cuda.get_current_stream().ptr
    return 0


_raw_stream = None


def torch_current_stream(device_index):
    """torch's current CUDA stream of a device, as a raw handle (cheap)."""
    global _raw_stream
    if _raw_stream is None:
        torch = sys.modules["torch"]
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        _raw_stream = raw or (
            lambda i: torch.cuda.current_stream(i).cuda_stream)
    return _raw_stream(device_index)


def _cache_matches(cache, want):
    for key, value in want.items():
        if value is None:
            continue
        if key == "quant":
            q = cache.get("quant")
            if (q or None) != (value or None):
                if not (q and value and all(q.get(k) == v
                                            for k, v in value.items())):
                    return False
            continue
        if cache.get(key) != value:
            return False
    return True


class Bundle:
    """A loaded bundle. Use ``Bundle.load(path)`` (a bundle JSON file or a
    host shared object), ``Bundle.from_json(text)``, or ``kvgen.compile``."""

    def __init__(self, handle, manifest, source, host_lib=None):
        self._handle = handle
        self._manifest = manifest
        self._host_lib = host_lib
        self._names = {}
        # Packed args structs by their descriptions (see _append).
        self._packed = {}
        self._lib_append = _kvrt.lib().append
        self.source = source
        self.kernels = list(manifest.get("kernels", []))
        self.version = manifest.get("version")
        self.target = manifest.get("target", {})
        #: True when the CPU entry points are registered (a host bundle).
        self.has_host_kernels = host_lib is not None
        #: True when the bundle carries GPU code (PTX or a cubin).
        self.has_device_code = bool(manifest.get("ptx") or
                                    manifest.get("cubin_base64"))

    # Loading ------------------------------------------------------------

    @classmethod
    def load(cls, path):
        """Loads a bundle JSON file or a host shared object (by content)."""
        path = os.fspath(path)
        _refuse_special_file(path)
        try:
            with open(path, "rb") as f:
                head = f.read(4)
        except OSError:
            head = b""
        if head == _ELF_MAGIC:
            return cls.load_shared_lib(path)
        return cls.load_json_file(path)

    @classmethod
    def load_json_file(cls, path):
        """Loads a bundle JSON file (never a shared object)."""
        path = os.fspath(path)
        _refuse_special_file(path)
        k = _kvrt.lib()
        handle = ctypes.c_void_p()
        _kvrt.check(k.bundle_load_file(path.encode(), ctypes.byref(handle)))
        try:
            with open(path, "rb") as f:
                manifest = json.loads(f.read())
        except (OSError, ValueError) as e:
            # kvrt read it a moment ago: it changed under us.
            k.bundle_destroy(handle)
            raise errors.BundleIOError(
                "cannot read bundle '%s' again: %s" % (path, e)) from None
        return cls(handle, manifest, path)

    @classmethod
    def from_json(cls, data, source="<memory>"):
        """Loads a bundle from its JSON text (str or bytes)."""
        if isinstance(data, str):
            data = data.encode()
        k = _kvrt.lib()
        handle = ctypes.c_void_p()
        _kvrt.check(k.bundle_load_memory(data, len(data), ctypes.byref(handle)))
        return cls(handle, json.loads(data), source)

    @classmethod
    def load_shared_lib(cls, path):
        """Loads a host shared object: its embedded bundle, with every
        kernel's packed entry point registered as kvrt's host kernel."""
        path = os.fspath(path)
        # dlopen maps the object's segments as its headers say: a truncated
        # file faults (SIGBUS) inside the loader, which no handler survives.
        problem = check_shared_object(path)
        if problem:
            raise errors.InvalidBundleError(
                "%s is not a kvgen host shared object (kvgen --target=host "
                "--emit=shared-lib): %s" % (path, problem))
        try:
            lib = ctypes.CDLL(os.path.abspath(path))
            getter = lib.kvgen_bundle_json
            size = lib.kvgen_bundle_json_size
        except (OSError, AttributeError) as e:
            raise errors.InvalidBundleError(
                "%s is not a kvgen host shared object (kvgen --target=host "
                "--emit=shared-lib): %s" % (path, e)) from None
        getter.restype = ctypes.c_void_p
        size.restype = ctypes.c_uint64
        data = ctypes.string_at(getter(), size())
        bundle = cls.from_json(data, source=path)
        bundle._host_lib = lib
        k = _kvrt.lib()
        for kernel in bundle.kernels:
            name = kernel["name"]
            try:
                entry = getattr(lib, "_mlir_" + name)
            except AttributeError:
                raise errors.InvalidBundleError(
                    "%s: the bundle names kernel '%s' but the object has no "
                    "_mlir_%s" % (path, name, name)) from None
            address = ctypes.cast(entry, ctypes.c_void_p).value
            _kvrt.check(k.bundle_set_host_kernel(bundle._handle,
                                                 name.encode(), address))
        bundle.has_host_kernels = True
        return bundle

    def close(self):
        if self._handle:
            _kvrt.lib().bundle_destroy(self._handle)
            self._handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        return "<kvgen.Bundle %s: %d kernels>" % (self.source, len(self.kernels))

    # Kernels ------------------------------------------------------------

    def find(self, kind, **cache):
        """The name of the kernel of `kind` ("append", "slot_mapping",
        "fused_append", "gather", "mla_append", "mla_fused_append",
        "paged_kv_append") whose
        cache matches every given field (layout, block_size, num_kv_heads,
        head_dim, dtype, quant, latent, ...);
        ``source_dtype=`` matches the source. The vector variant's name, which
        is how kvrt names a description. None if absent."""
        source = cache.pop("source_dtype", None)
        found = None
        for k in self.kernels:
            if k.get("kind") != kind:
                continue
            if source is not None and k.get("source_dtype", source) != source:
                continue
            if not _cache_matches(k.get("cache", {}), cache):
                continue
            variant = k.get("variant")
            if variant == "wide" and k["name"].endswith("_wide"):
                # kvrt names a description by its vector variant's name.
                return k["name"][:-len("_wide")]
            if variant != "scalar":
                return k["name"]
            found = found or k["name"]
        return found

    def set_checked(self, enabled=True):
        """kvrt's checked mode (slot ranges and duplicates checked on the
        host before each launch); needs a kvrt of bundle format 2 or later."""
        k = _kvrt.lib()
        if k.bundle_set_checked is None:
            raise errors.KvgenError("this libkvrt has no checked mode")
        _kvrt.check(k.bundle_set_checked(self._handle, int(bool(enabled))))

    def set_programmatic_launch(self, enabled=True):
        """kvrt's programmatic dependent launch: kernels compiled with
        ``kvgen --programmatic-launch`` (manifest ``programmatic_launch``)
        launch so that they overlap the previous kernel in the stream, graph
        capture included; other kernels launch as before. Refused for a
        bundle with no such kernel."""
        k = _kvrt.lib()
        if k.bundle_set_programmatic_launch is None:
            raise errors.KvgenError(
                "this libkvrt has no programmatic dependent launch")
        _kvrt.check(k.bundle_set_programmatic_launch(self._handle,
                                                     int(bool(enabled))))

    @property
    def waits_for_producer(self):
        """Names of the kernels that wait for the previous kernel in their
        stream (manifest ``programmatic_launch``)."""
        return [k["name"] for k in self.kernels
                if k.get("programmatic_launch")]

    def _name(self, kernel):
        if kernel is None:
            return 0
        entry = self._names.get(kernel) if type(kernel) is str else None
        if entry is None:
            # setdefault, not an assignment: of threads naming a kernel
            # first at once, each gets the one buffer kept here. An
            # overwritten one would be freed while a remembered args struct
            # still points at it.
            entry = self._names.setdefault(kernel, _kernel_name(kernel))
        return entry[1]

    # Launches on descriptions (the ops' fast path) -----------------------

    def _remember_args(self, key, scratch):
        if len(self._packed) >= _PACKED_ENTRIES:
            self._packed.clear()
        self._packed[key] = scratch

    def _append(self, kernel, descs, variant, stream):
        """descs: key, value, slot_mapping, key_cache, value_cache, then the
        four scale tensors (None where absent), as a tuple.

        The packed args struct and its DLTensors are remembered by the key
        (kernel, variant, descs): a description holds every field kvrt reads
        (data pointer, device, dtype, shape, strides), so the same key packs
        the same bytes and only the packing is skipped; kvrt validates every
        launch."""
        if kernel is not None and type(kernel) is not str:
            self._name(kernel)  # refuses it (and an unhashable key)
        key = (kernel, variant, descs)
        s = self._packed.get(key)
        if s is None:
            s = _dlpack.Scratch()
            a = [s.pack(i, d) if d is not None else 0
                 for i, d in enumerate(descs)]
            if any(a[5:]) and not _kvrt.lib().has_scales:
                raise errors.KvgenError(
                    "this libkvrt predates scale tensors (bundle format 2)")
            _APPEND_ARGS.pack_into(s.buf, s.args_offset, self._name(kernel),
                                   a[0], a[1], a[2], a[3], a[4], variant,
                                   a[5], a[6], a[7], a[8])
            self._remember_args(key, s)
        _kvrt.check(self._lib_append(self._handle, s.args, stream))
        return s

    def _fused_append(self, kernel, descs, variant, stream):
        """descs: key, value, block_table, query_start_loc, context_lens,
        key_cache, value_cache, then the four scale tensors."""
        s = _dlpack.scratch()
        a = [s.pack(i, d) if d is not None else 0 for i, d in enumerate(descs)]
        if any(a[7:]) and not _kvrt.lib().has_scales:
            raise errors.KvgenError(
                "this libkvrt predates scale tensors (bundle format 2)")
        _FUSED_ARGS.pack_into(s.buf, s.args_offset, self._name(kernel),
                              *a[:7], variant, *a[7:])
        _kvrt.check(_kvrt.lib().fused_append(self._handle, s.args, stream))

    def _mla_append(self, kernel, descs, variant, stream):
        """descs: kv_c, k_pe, slot_mapping, key_cache, key_scale (None
        where absent)."""
        k = _kvrt.lib()
        if k.mla_append is None:
            raise errors.KvgenError("this libkvrt has no kvrt_mla_append")
        s = _dlpack.scratch()
        a = [s.pack(i, d) if d is not None else 0 for i, d in enumerate(descs)]
        _MLA_ARGS.pack_into(s.buf, s.args_offset, self._name(kernel), *a[:4],
                            variant, a[4])
        _kvrt.check(k.mla_append(self._handle, s.args, stream))

    # Launches on tensors --------------------------------------------------

    def mla_append(self, kv_c, k_pe, slot_mapping, key_cache, *, kernel=None,
                   variant="auto", key_scale=None, stream=None):
        """kvrt_mla_append: entry slot_mapping[t] of the latent cache
        [num_blocks, block_size, kv_lora_rank + rope_dim] becomes kv_c[t]
        followed by k_pe[t]."""
        keep = []
        objs = (kv_c, k_pe, slot_mapping, key_cache, key_scale)
        names = ("kv_c", "k_pe", "slot_mapping", "key_cache", "key_scale")
        descs = _dlpack.describe_all(objs, names, keep, ("key_cache",))
        self._mla_append(kernel, descs, _variant(variant),
                         _stream_of(stream, kv_c, descs[0]))

    def mla_fused_append(self, kv_c, k_pe, block_table, query_start_loc,
                         context_lens, key_cache, *, kernel=None,
                         variant="auto", key_scale=None, stream=None):
        """kvrt_mla_fused_append: mla_append with the slots from the block
        table and positions, in one launch."""
        k = _kvrt.lib()
        if k.mla_fused_append is None:
            raise errors.KvgenError("this libkvrt has no kvrt_mla_fused_append")
        keep = []
        s = _dlpack.scratch()
        objs = (kv_c, k_pe, block_table, query_start_loc, context_lens,
                key_cache, key_scale)
        names = ("kv_c", "k_pe", "block_table", "query_start_loc",
                 "context_lens", "key_cache", "key_scale")
        descs = _dlpack.describe_all(objs, names, keep, ("key_cache",))
        a = [s.pack(i, d) if d is not None else 0 for i, d in enumerate(descs)]
        _MLA_FUSED_ARGS.pack_into(s.buf, s.args_offset, self._name(kernel),
                                  *a[:6], _variant(variant), a[6])
        _kvrt.check(k.mla_fused_append(self._handle, s.args,
                                       _stream_of(stream, kv_c, descs[0])))

    def append(self, key, value, slot_mapping, key_cache, value_cache, *,
               kernel=None, variant="auto", key_scale=None, value_scale=None,
               key_scale_cache=None, value_scale_cache=None, stream=None):
        """kvrt_append: K/V rows into the caches through slot_mapping. For a
        stacked layout (K and V in one tensor), key_cache is that tensor and
        value_cache None."""
        keep = []
        objs = (key, value, slot_mapping, key_cache, value_cache, key_scale,
                value_scale, key_scale_cache, value_scale_cache)
        names = ("key", "value", "slot_mapping", "key_cache", "value_cache",
                 "key_scale", "value_scale", "key_scale_cache",
                 "value_scale_cache")
        descs = tuple(_dlpack.describe_all(objs, names, keep,
                                           _WRITES_CACHES))
        self._append(kernel, descs, _variant(variant),
                     _stream_of(stream, key, descs[0]))

    def fused_append(self, key, value, block_table, query_start_loc,
                     context_lens, key_cache, value_cache, *, kernel=None,
                     variant="auto", key_scale=None, value_scale=None,
                     key_scale_cache=None, value_scale_cache=None, stream=None):
        """kvrt_fused_append: the append with slots from the block table."""
        keep = []
        objs = (key, value, block_table, query_start_loc, context_lens,
                key_cache, value_cache, key_scale, value_scale,
                key_scale_cache, value_scale_cache)
        names = ("key", "value", "block_table", "query_start_loc",
                 "context_lens", "key_cache", "value_cache", "key_scale",
                 "value_scale", "key_scale_cache", "value_scale_cache")
        descs = _dlpack.describe_all(objs, names, keep, _WRITES_CACHES)
        self._fused_append(kernel, descs, _variant(variant),
                           _stream_of(stream, key, descs[0]))

    def _paged_kv_append(self, kernel, descs, variant, stream):
        """descs: key, value, batch_indices, positions, kv_indices,
        kv_indptr, key_cache, value_cache, then the four scale tensors (None
        where absent), as a tuple. Packed once per key, as _append does."""
        key = ("paged", kernel, variant, descs)
        s = self._packed.get(key)
        if s is None:
            if _kvrt.lib().paged_kv_append is None:
                raise errors.KvgenError(
                    "this libkvrt has no kvrt_paged_kv_append")
            s = _PagedScratch()
            a = [s.pack(i, d) if d is not None else 0
                 for i, d in enumerate(descs)]
            _PAGED_ARGS.pack_into(s.buf, s.args_offset, self._name(kernel),
                                  *a[:8], variant, *a[8:])
            self._remember_args(key, s)
        _kvrt.check(_kvrt.lib().paged_kv_append(self._handle, s.args, stream))
        return s

    def paged_kv_append(self, key, value, batch_indices, positions,
                        kv_indices, kv_indptr, key_cache, value_cache, *,
                        kernel=None, variant="auto", key_scale=None,
                        value_scale=None, key_scale_cache=None,
                        value_scale_cache=None, stream=None):
        """kvrt_paged_kv_append: the append with slots from FlashInfer's
        page table (token i at position positions[i] of request
        batch_indices[i], whose pages are kv_indices[kv_indptr[b] ..
        kv_indptr[b + 1])); every index is checked in the kernel."""
        keep = []
        objs = (key, value, batch_indices, positions, kv_indices, kv_indptr,
                key_cache, value_cache, key_scale, value_scale,
                key_scale_cache, value_scale_cache)
        names = ("key", "value", "batch_indices", "positions", "kv_indices",
                 "kv_indptr", "key_cache", "value_cache", "key_scale",
                 "value_scale", "key_scale_cache", "value_scale_cache")
        descs = tuple(_dlpack.describe_all(objs, names, keep))
        self._paged_kv_append(kernel, descs, _variant(variant),
                              _stream_of(stream, key, descs[0]))

    def build_slot_mapping(self, block_table, query_start_loc, context_lens,
                           slot_mapping, *, kernel=None, stream=None):
        """kvrt_build_slot_mapping: slot_mapping from the block table."""
        keep = []
        s = _dlpack.scratch()
        objs = (block_table, query_start_loc, context_lens, slot_mapping)
        names = ("block_table", "query_start_loc", "context_lens",
                 "slot_mapping")
        descs = [_dlpack.describe(o, n, keep, n == "slot_mapping")
                 for o, n in zip(objs, names)]
        a = [s.pack(i, d) for i, d in enumerate(descs)]
        _SLOT_ARGS.pack_into(s.buf, s.args_offset, self._name(kernel), *a)
        _kvrt.check(_kvrt.lib().build_slot_mapping(
            self._handle, s.args, _stream_of(stream, slot_mapping, descs[3])))

    def gather(self, key_cache, value_cache, slot_mapping, key_out, value_out,
               *, kernel=None, variant="auto", key_scale=None,
               value_scale=None, key_scale_cache=None, value_scale_cache=None,
               stream=None):
        """kvrt_gather: rows of given slots read back (dequantized)."""
        k = _kvrt.lib()
        if k.gather is None:
            raise errors.KvgenError("this libkvrt has no kvrt_gather")
        keep = []
        s = _dlpack.scratch()
        objs = (key_cache, value_cache, slot_mapping, key_out, value_out,
                key_scale, value_scale, key_scale_cache, value_scale_cache)
        names = ("key_cache", "value_cache", "slot_mapping", "key_out",
                 "value_out", "key_scale", "value_scale", "key_scale_cache",
                 "value_scale_cache")
        descs = _dlpack.describe_all(objs, names, keep,
                                     ("key_out", "value_out"))
        a = [s.pack(i, d) if d is not None else 0 for i, d in enumerate(descs)]
        _GATHER_ARGS.pack_into(s.buf, s.args_offset, self._name(kernel),
                               *a[:5], _variant(variant), *a[5:])
        _kvrt.check(k.gather(self._handle, s.args,
                             _stream_of(stream, key_out, descs[3])))


def _kernel_name(kernel):
    """(buffer, address) of a kernel name as kvrt takes it: a C string, so
    a name that cannot be one (not a str, a NUL inside, not encodable) is
    refused rather than cut."""
    if not isinstance(kernel, str):
        raise errors.InvalidArgumentError(
            "kernel: expected a kernel name (str), got a %s"
            % type(kernel).__name__)
    try:
        data = kernel.encode()
    except UnicodeError:
        data = b""
    if not data or b"\0" in data:
        raise errors.InvalidArgumentError(
            "kernel: %r is not a kernel name (%s)" % (
                kernel, "it contains a NUL byte" if "\0" in kernel else
                "it is empty" if not kernel else "not UTF-8"))
    buf = ctypes.create_string_buffer(data)
    return buf, ctypes.addressof(buf)


def _variant(variant):
    try:
        return _VARIANTS[variant]
    except (KeyError, TypeError):  # TypeError: an unhashable value
        raise errors.InvalidArgumentError(
            "variant: expected one of auto, vector, scalar, wide, got %r"
            % (variant,)) from None
