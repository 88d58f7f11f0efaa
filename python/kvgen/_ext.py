"""kvgen._kvext, the compiled binding every launch goes through.

It fills kvrt.h's args structs in C (python/src/kvext.c), from tensors
described in Python (kvgen/_dlpack.py) or, on the ops' repeated calls, read
through their framework's DLPack C exchange API. It is part of the package,
not an option: missing or unloadable, the first launch raises
kvgen.LibraryNotFoundError naming the file, never another path. It takes
kvrt's entry points from the libkvrt the package loaded (kvgen/_kvrt.py), so
libkvrt is searched for in one place (kvgen/_paths.py).
"""

import ctypes
import importlib.machinery
import importlib.util
import os
import sys
import threading

from . import _kvrt, _paths, errors

_lock = threading.Lock()
_ext = None

# The entry points, in the order of _kvext.init()'s arguments.
_ENTRIES = ("append", "fused_append", "build_slot_mapping", "gather",
            "mla_append", "mla_fused_append", "paged_kv_append")


def _candidates():
    return _paths.extension_candidates()


def _load(path):
    # The suffix decides which loader CPython uses; the file's own name
    # (_kvext.abi3.so) is one every CPython 3 accepts.
    loader = importlib.machinery.ExtensionFileLoader("kvgen._kvext", path)
    spec = importlib.util.spec_from_file_location("kvgen._kvext", path,
                                                  loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def get():
    """The loaded, initialized extension module (loaded on first use)."""
    global _ext
    if _ext is not None:
        return _ext
    with _lock:
        if _ext is not None:
            return _ext
        k = _kvrt.lib()
        tried = []
        module = None
        for path in _candidates():
            if not os.path.isfile(path):
                tried.append("%s (missing)" % path)
                continue
            try:
                module = _load(path)
                break
            except Exception as e:  # ImportError, OSError: the file's fault
                tried.append("%s (%s: %s)" % (path, type(e).__name__, e))
        if module is None:
            raise errors.LibraryNotFoundError(
                "kvgen's compiled binding %s cannot be loaded: %s. It is "
                "built with kvgen (CMake target kvgen_kvext, into "
                "BUILD/lib) and shipped in the wheel; reinstall the wheel or "
                "build it (CPython %d.%d here; a free-threaded CPython cannot "
                "load it)" % (_paths.EXTENSION, "; ".join(tried),
                              sys.version_info[0], sys.version_info[1]))
        module.init(*[_address(getattr(k, name)) for name in _ENTRIES])
        sys.modules.setdefault("kvgen._kvext", module)
        _ext = module
        return module


def _address(fn):
    return None if fn is None else ctypes.cast(fn, ctypes.c_void_p).value
