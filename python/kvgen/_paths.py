"""Where the package's native parts are: the kvgen compiler and libkvrt.

A wheel ships both inside the package, kvgen/bin/kvgen (linked statically
against MLIR and LLVM) and kvgen/lib/libkvrt.so, with kvgen/_bundled.json,
which lists them with their sizes and names the platform they were built
for. Such a package uses its own files: a missing or damaged one, or a
machine of another platform, is an error that names the file or the
platform, never a compiler or library found elsewhere instead.

The order, for each of the two:

1. the environment variable, an explicit choice: $KVGEN_COMPILER,
   $KVGEN_KVRT_LIB (a path that is not a usable file is an error);
2. the bundled file, where the package has a _bundled.json;
3. without one (a source checkout, ``pip install`` of the Python files
   alone): the compiler on PATH; libkvrt in $KVGEN_BUILD_DIR/lib, the
   build/lib folder of the checkout, then the dynamic loader's search path.
"""

import json
import os
import platform
import shutil
import sys

from . import errors

_HERE = os.path.dirname(os.path.abspath(__file__))
_MANIFEST = os.path.join(_HERE, "_bundled.json")
_ELF_MAGIC = b"\x7fELF"

_bundled = None


def _read_manifest(error):
    """The wheel's _bundled.json, or None for a package without a bundle;
    refuses a manifest it cannot read and a machine the wheel is not for."""
    global _bundled
    if _bundled is None:
        if not os.path.exists(_MANIFEST):
            _bundled = {}
        else:
            try:
                with open(_MANIFEST) as f:
                    manifest = json.load(f)
                for key in ("system", "machine", "compiler", "kvrt"):
                    manifest[key]
                for part in ("compiler", "kvrt"):
                    manifest[part]["path"], int(manifest[part]["size"])
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise error(
                    "the kvgen package's %s is damaged (%s: %s); reinstall "
                    "the kvgen wheel" % (_MANIFEST, type(e).__name__, e)
                ) from None
            _bundled = manifest
    if not _bundled:
        return None
    here = (platform.system(), platform.machine())
    wanted = (_bundled["system"], _bundled["machine"])
    if here != wanted:
        raise error(
            "this kvgen package was built for %s %s; this machine is %s %s "
            "(its compiler and libkvrt cannot run here: install the kvgen "
            "wheel built for this platform, or build kvgen from source)"
            % (wanted + here))
    return _bundled


def _bundled_file(part, error, executable):
    """The path of the bundled compiler or libkvrt, checked; None for a
    package without a bundle."""
    manifest = _read_manifest(error)
    if manifest is None:
        return None
    entry = manifest[part]
    path = os.path.join(_HERE, *entry["path"].split("/"))
    what = "compiler" if part == "compiler" else "libkvrt"
    if not os.path.isfile(path):
        raise error("the kvgen package's bundled %s is missing: %s (a damaged "
                    "install; reinstall the kvgen wheel)" % (what, path))
    size = os.path.getsize(path)
    try:
        with open(path, "rb") as f:
            magic = f.read(len(_ELF_MAGIC))
    except OSError as e:
        raise error("the kvgen package's bundled %s cannot be read: %s (%s)"
                    % (what, path, e)) from None
    if size != int(entry["size"]) or magic != _ELF_MAGIC:
        raise error("the kvgen package's bundled %s is damaged: %s (%d bytes, "
                    "the wheel shipped %d; reinstall the kvgen wheel)"
                    % (what, path, size, int(entry["size"])))
    if executable and not os.access(path, os.X_OK):
        raise error("the kvgen package's bundled %s is not executable: %s "
                    "(reinstall the kvgen wheel)" % (what, path))
    return path


def bundled():
    """True when this package ships its own compiler and libkvrt (a wheel)."""
    return _read_manifest(errors.LibraryNotFoundError) is not None


def compiler():
    """The kvgen compiler's path, or None where there is none (a package
    without a bundle and no kvgen on PATH: only precompiled kernels)."""
    env = os.environ.get("KVGEN_COMPILER")
    if env:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            raise errors.CompilerNotFoundError(
                "KVGEN_COMPILER=%s is not an executable file" % env)
        return env
    path = _bundled_file("compiler", errors.CompilerNotFoundError,
                         executable=True)
    if path is not None:
        return path
    return shutil.which("kvgen")


def kvrt_candidates():
    """The paths (or loader names) to try for libkvrt, in order."""
    env = os.environ.get("KVGEN_KVRT_LIB")
    if env:
        return [env]
    path = _bundled_file("kvrt", errors.LibraryNotFoundError,
                         executable=False)
    if path is not None:
        return [path]
    import glob

    dirs = [os.path.join(_HERE, "lib")]
    build = os.environ.get("KVGEN_BUILD_DIR")
    if build:
        dirs.append(os.path.join(build, "lib"))
    dirs.append(os.path.join(_HERE, os.pardir, os.pardir, "build", "lib"))
    found = []
    for d in dirs:
        for pattern in ("libkvrt.so", "libkvrt.so.*", "libkvrt.dylib"):
            found.extend(sorted(glob.glob(os.path.join(d, pattern))))
    # The loader's own search path: an installed kvrt.
    return found + ["libkvrt.so", "libkvrt.so.0.1"]


EXTENSION = "_kvext.abi3.so"


def extension_candidates():
    """The paths to try for the compiled binding, kvgen._kvext, in order:
    the package's own (a wheel: that one only); in a source checkout, the
    folder of $KVGEN_KVRT_LIB (a build's lib/ holds both), $KVGEN_BUILD_DIR/lib
    and the checkout's build/lib, where CMake builds it."""
    own = os.path.join(_HERE, EXTENSION)
    if bundled() or os.path.exists(own):
        return [own]
    found = []
    kvrt = os.environ.get("KVGEN_KVRT_LIB")
    if kvrt:
        found.append(os.path.join(os.path.dirname(os.path.abspath(kvrt)),
                                  EXTENSION))
    build = os.environ.get("KVGEN_BUILD_DIR")
    if build:
        found.append(os.path.join(build, "lib", EXTENSION))
    found.append(os.path.normpath(os.path.join(
        _HERE, os.pardir, os.pardir, "build", "lib", EXTENSION)))
    return found


def main():
    """The `kvgen` command of a wheel install: runs the bundled compiler."""
    try:
        path = compiler()
    except errors.CompilerNotFoundError as e:
        print("kvgen: %s" % e, file=sys.stderr)
        return 2
    if path is None or os.path.realpath(path) == os.path.realpath(
            sys.argv[0]):
        print("kvgen: this kvgen package has no compiler of its own (install "
              "the kvgen wheel, or set KVGEN_COMPILER)", file=sys.stderr)
        return 2
    os.execv(path, [path] + sys.argv[1:])
