"""libkvrt, loaded through ctypes, and its calls that take no args struct
(bundles, errors). The launches go through the compiled binding
(kvgen/_ext.py), which fills kvrt.h's args structs in C and calls the entry
points of the library loaded here, so that it is found in one place.

libkvrt is found, in order, at: $KVGEN_KVRT_LIB (a file); the wheel's own
(kvgen/lib/libkvrt.so, and nothing else where the package ships one);
$KVGEN_BUILD_DIR/lib; the build/lib folder of the source tree this package
sits in; the dynamic loader's search path (an installed kvrt,
LD_LIBRARY_PATH). See kvgen/_paths.py.
"""

import ctypes
import os
import threading

from . import _paths, errors

c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p
c_int = ctypes.c_int
c_size_t = ctypes.c_size_t

_lock = threading.Lock()
_lib = None

# The statuses kvrt.h declares, by name (kvrt_status_name gives them too).
SUCCESS = 0


def _candidates():
    return _paths.kvrt_candidates()


def _declare(lib):
    def fn(name, restype, argtypes, optional=False):
        try:
            f = getattr(lib, name)
        except AttributeError:
            if optional:
                return None
            raise errors.LibraryNotFoundError(
                "the libkvrt at %s lacks %s; it is older than this package"
                % (lib._name, name))
        f.restype = restype
        f.argtypes = argtypes
        return f

    ns = {}
    ns["last_error"] = fn("kvrt_last_error", c_char_p, [])
    ns["status_name"] = fn("kvrt_status_name", c_char_p, [c_int])
    ns["bundle_load_file"] = fn("kvrt_bundle_load_file", c_int,
                                [c_char_p, ctypes.POINTER(c_void_p)])
    ns["bundle_load_memory"] = fn("kvrt_bundle_load_memory", c_int,
                                  [c_char_p, c_size_t,
                                   ctypes.POINTER(c_void_p)])
    ns["bundle_destroy"] = fn("kvrt_bundle_destroy", None, [c_void_p])
    ns["bundle_num_kernels"] = fn("kvrt_bundle_num_kernels", c_size_t,
                                  [c_void_p])
    ns["bundle_kernel_name"] = fn("kvrt_bundle_kernel_name", c_char_p,
                                  [c_void_p, c_size_t])
    ns["bundle_set_host_kernel"] = fn("kvrt_bundle_set_host_kernel", c_int,
                                      [c_void_p, c_char_p, c_void_p])
    # The launches' entry points are found by kind (Kvrt.entry): the
    # compiled binding calls them (kvgen/_ext.py).
    ns["bundle_set_checked"] = fn("kvrt_bundle_set_checked", c_int,
                                  [c_void_p, c_int], optional=True)
    ns["bundle_kernel_manifest"] = fn("kvrt_bundle_kernel_manifest",
                                      c_char_p, [c_void_p, c_size_t],
                                      optional=True)
    # Programmatic dependent launch (an optional manifest field, format 3).
    ns["bundle_set_programmatic_launch"] = fn(
        "kvrt_bundle_set_programmatic_launch", c_int, [c_void_p, c_int],
        optional=True)

    entries = {}

    def entry(name):
        """The address of entry point `name`, or None where this libkvrt
        lacks it."""
        try:
            return entries[name]
        except KeyError:
            fn = getattr(lib, name, None)
            address = (None if fn is None else
                       ctypes.cast(fn, ctypes.c_void_p).value)
            return entries.setdefault(name, address)

    ns["entry"] = staticmethod(entry)
    return type("Kvrt", (), ns)


def lib():
    """The loaded libkvrt's entry points (loaded on first use)."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in _candidates():
            try:
                handle = ctypes.CDLL(path)
            except OSError as e:
                tried.append("%s (%s)" % (path, e))
                continue
            k = _declare(handle)
            k.handle = handle
            k.path = path
            # Bundle format 2 brought scales and checked mode together.
            k.has_scales = k.bundle_set_checked is not None
            _lib = k
            return _lib
        raise errors.LibraryNotFoundError(
            "libkvrt not found; set KVGEN_KVRT_LIB to its path, or "
            "KVGEN_BUILD_DIR to a kvgen build folder. Tried: " +
            "; ".join(tried))


def check(status):
    """Raises the exception of a failed kvrt call, with kvrt's message."""
    if status == SUCCESS:
        return
    k = lib()
    message = (k.last_error() or b"").decode("utf-8", "replace")
    name = k.status_name(status)
    name = name.decode() if name else "kvrt status %d" % status
    raise errors.error_for_status(status, message, name)
