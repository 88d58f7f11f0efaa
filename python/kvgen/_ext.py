"""kvgen._kvext, the compiled binding every launch goes through.

It fills kvrt.h's args structs in C (python/src/kvext.c), from tensors
described in Python (kvgen/_dlpack.py) or, on the ops' repeated calls, read
through their framework's DLPack C exchange API. It is part of the package,
not an option: missing or unloadable, the first launch raises
kvgen.LibraryNotFoundError naming the file, never another path. It takes
kvrt's entry points from the libkvrt the package loaded (kvgen/_kvrt.py), so
libkvrt is searched for in one place (kvgen/_paths.py).
"""

import importlib.machinery
import importlib.util
import os
import sys
import threading

from . import _kvrt, _paths, errors

_lock = threading.Lock()
_ext = None
# The module as loaded for its tables alone (kinds()), without libkvrt.
_tables = None
# kvrt's entry point with no kind and no bundle: its block copy.
COPY_BLOCKS = "kvrt_copy_blocks"


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


def _find(candidates):
    """The extension module loaded from the first of `candidates` that loads;
    LibraryNotFoundError naming each one tried otherwise."""
    tried = []
    for path in candidates:
        if not os.path.isfile(path):
            tried.append("%s (missing)" % path)
            continue
        try:
            return _load(path)
        except Exception as e:  # ImportError, OSError: the file's fault
            tried.append("%s (%s: %s)" % (path, type(e).__name__, e))
    raise errors.LibraryNotFoundError(
        "kvgen's compiled binding %s cannot be loaded: %s. It is "
        "built with kvgen (CMake target kvgen_kvext, into "
        "BUILD/lib) and shipped in the wheel; reinstall the wheel or "
        "build it (CPython %d.%d here; a free-threaded CPython cannot "
        "load it)" % (_paths.EXTENSION, "; ".join(tried),
                      sys.version_info[0], sys.version_info[1]))


def get():
    """The loaded, initialized extension module (loaded on first use)."""
    global _ext
    if _ext is not None:
        return _ext
    with _lock:
        if _ext is not None:
            return _ext
        k = _kvrt.lib()
        module = _find(_candidates())
        # kvrt's entry point of each kind, in the order of its KINDS, then
        # its block copy's (kvgen.copy_blocks).
        module.init(*[k.entry(kind[4]) for kind in module.KINDS],
                    k.entry(COPY_BLOCKS))
        sys.modules.setdefault("kvgen._kvext", module)
        _ext = module
        return module


def kinds():
    """The extension's KINDS table (python/src/kvext.c says what a row
    holds). It is the binding's static data: reading it needs no libkvrt,
    so that describing a cache works where nothing can launch."""
    global _tables
    if _ext is not None:
        return _ext.KINDS
    with _lock:
        if _tables is None:
            _tables = _find(_paths.extension_candidates())
    return _tables.KINDS
