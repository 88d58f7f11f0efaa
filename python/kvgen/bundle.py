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
import sys

from . import _dlpack, _ext, _kinds, _kvrt, errors
from ._load_checks import (_ELF_MAGIC, _refuse_special_file,
                           check_shared_object)

_VARIANTS = {"auto": 0, "vector": 1, "scalar": 2, "wide": 3}


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
        # The exchange API's current stream (the capture stream under
        # CUDA-graph capture), as the ops' fast path takes it.
        stream = _ext.get().work_stream(obj, desc[1], desc[2])
        if stream is not None:
            return stream
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
        # A manifest writes v_head_dim only where V's head size differs.
        have = (cache.get(key, cache.get("head_dim")) if key == "v_head_dim"
                else cache.get(key))
        if have != value:
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
        # The kvrt_bundle's address, as the extension takes it.
        self._address = handle.value
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
            ext = _ext._ext
            if ext is not None:
                # The ops' call tables hold this bundle's kernels.
                ext.forget()
            _kvrt.lib().bundle_destroy(self._handle)
            self._handle = None
            self._address = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        return "<kvgen.Bundle %s: %d kernels>" % (self.source, len(self.kernels))

    # Kernels ------------------------------------------------------------

    def find(self, kind, **cache):
        """The name of the kernel of `kind` (a kind's name: "append",
        "gather", ...) whose cache matches every given field (layout,
        block_size, num_kv_heads, head_dim, dtype, quant, latent, ...);
        ``source_dtype=`` matches the source. The vector variant's name, which
        is how kvrt names a description. ``prologue=`` (the manifest's
        prologue: q_heads, norm, rope, rotary_dim) matches a kernel with that
        fused prologue; without it, only kernels without one match, since
        they take other tensors. None if absent."""
        source = cache.pop("source_dtype", None)
        prologue = {k: v for k, v in (cache.pop("prologue", None) or
                                      {}).items() if v is not None}
        found = None
        for k in self.kernels:
            if k.get("kind") != kind:
                continue
            if source is not None and k.get("source_dtype", source) != source:
                continue
            if (k.get("prologue") or {}) != prologue:
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
        """kvrt's checked mode (slot ranges and duplicates, and a prologue's
        RoPE positions, checked on the host before each launch); needs a kvrt
        of bundle format 2 or later."""
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
        """The kernel name as kvrt takes it (bytes, checked), or None."""
        if kernel is None:
            return None
        name = self._names.get(kernel) if type(kernel) is str else None
        if name is None:
            name = self._names[kernel] = _kernel_name(kernel)
        return name

    # Launches -------------------------------------------------------------
    #
    # Each kind has two methods, made from its row of the kinds table
    # (kvgen/_kinds.py) on first use: `<method>` (append, gather, ...: the
    # entry point's name without "kvrt_") takes tensors, its args struct's in
    # order (those only a quantized description takes as keywords), and
    # `_<method>` takes them described (kvgen/_dlpack.py), the ops' path.

    def __getattr__(self, name):
        kind = None if name.startswith("__") else _kinds.by_method(
            name[1:] if name.startswith("_") else name)
        if kind is None:
            raise AttributeError("%r object has no attribute %r"
                                 % (type(self).__name__, name))
        _add_launches(kind)
        return getattr(self, name)

    def __dir__(self):
        names = set(super().__dir__())
        for kind in _kinds.all_kinds():
            names.update((kind.method, "_" + kind.method))
        return sorted(names)

    def _launch(self, kind, kernel, descs, variant, stream):
        """One kvrt launch through the extension: `descs` the tensors of
        `kind` in the order of kvrt.h's args struct (None where absent)."""
        if self._address is None:
            raise errors.KvgenError("the bundle %s is closed" % self.source)
        k = _kvrt.lib()
        if k.entry(kind.entry_point) is None:
            raise errors.KvgenError("this libkvrt has no %s" % kind.entry_point)
        if not k.has_scales and any(
                d is not None and t in kind.optional
                for d, t in zip(descs, kind.tensors)):
            raise errors.KvgenError(
                "this libkvrt predates scale tensors (bundle format 2)")
        ext = _ext.get()
        _kvrt.check(ext.launch(kind.index, self._address, self._name(kernel),
                               variant, stream, tuple(descs)))

    def _launch_tensors(self, kind, objs, kernel, variant, stream):
        keep = []
        descs = _dlpack.describe_all(objs, kind.tensors, keep, kind.writes)
        variant = _variant(variant) if kind.has_variant else 0
        i = kind.stream_tensor
        self._launch(kind, kernel, descs, variant,
                     _stream_of(stream, objs[i], descs[i]))


def _add_launches(kind):
    """Adds kind's two launch methods to Bundle. Their source is made from
    the kind's row, as collections.namedtuple makes its class, so that each
    has the signature, argument errors and help() of a method written out."""
    if kind.method in Bundle.__dict__:
        return
    required = [t for t in kind.tensors if t not in kind.optional]
    keywords = (["kernel=None"] +
                (['variant="auto"'] if kind.has_variant else []) +
                ["%s=None" % t for t in kind.optional] + ["stream=None"])
    source = (
        "def {m}(self, {req}, *, {kw}):\n"
        "    return self._launch_tensors(kind, ({tensors},), kernel, "
        "{variant}, stream)\n"
        "def _{m}(self, kernel, descs, variant, stream):\n"
        "    return self._launch(kind, kernel, descs, variant, stream)\n"
    ).format(m=kind.method, req=", ".join(required), kw=", ".join(keywords),
             tensors=", ".join(kind.tensors),
             variant="variant" if kind.has_variant else "0")
    namespace = {"kind": kind}
    exec(source, namespace)  # noqa: S102 -- names from the kinds table only
    public, private = namespace[kind.method], namespace["_" + kind.method]
    public.__qualname__ = "Bundle." + kind.method
    public.__doc__ = (
        "%s: a launch of kind %s on tensors (%s); the caller's stream, or "
        "the current stream of the framework of %s." % (
            kind.entry_point, kind.name, ", ".join(kind.tensors),
            kind.tensors[kind.stream_tensor]))
    private.__qualname__ = "Bundle._" + kind.method
    private.__doc__ = ("descs: %s, described (None where absent)."
                       % ", ".join(kind.tensors))
    setattr(Bundle, "_" + kind.method, private)
    setattr(Bundle, kind.method, public)


def _kernel_name(kernel):
    """A kernel name as kvrt takes it: a C string (bytes), so
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
    return data


def _variant(variant):
    try:
        return _VARIANTS[variant]
    except (KeyError, TypeError):  # TypeError: an unhashable value
        raise errors.InvalidArgumentError(
            "variant: expected one of auto, vector, scalar, wide, got %r"
            % (variant,)) from None
