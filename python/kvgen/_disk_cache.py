"""The on-disk kernel cache: where it lives, what an entry holds, the checks
of an entry before it is used, and the writing of a new one.

The cache lives in $KVGEN_CACHE_DIR, else $XDG_CACHE_HOME/kvgen, else
~/.cache/kvgen:

    <cache>/<target>/<description hash>/<compiler hash>/
        bundle.json | kernels.so, description.mlir, compiler.txt,
        manifest.json

manifest.json, written last, records the size and sha256 of every other
file: an entry is made in a temporary folder beside it (.tmp-*) and renamed
into place, so that a reader sees a whole entry or none. Every entry is
checked before it is used (_check_entry); kvgen.compiler rebuilds a bad one
where there is a compiler (after _discard) and refuses it where there is
none.
"""

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile

from . import errors


def cache_dir():
    env = os.environ.get("KVGEN_CACHE_DIR")
    if env:
        return env
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(
        os.path.expanduser("~"), ".cache")
    return os.path.join(base, "kvgen")


def _cache_root(cache):
    """The cache folder to use, refused (CacheError) when it exists and is
    not a folder."""
    root = os.fspath(cache) if cache is not None else cache_dir()
    if not root:
        # "" would be the working directory, unasked.
        raise errors.CacheError("the kernel cache folder is an empty path",
                                root)
    what = ("KVGEN_CACHE_DIR=%s" % root if cache is None and
            os.environ.get("KVGEN_CACHE_DIR") else "the kernel cache %s"
            % root)
    try:
        st = os.stat(root)
    except FileNotFoundError:
        return root  # made at the first compilation
    except OSError as e:
        raise errors.CacheError("%s cannot be used: %s"
                                % (what, e.strerror or e), root,
                                e.errno) from None
    if not stat.S_ISDIR(st.st_mode):
        raise errors.CacheError("%s is not a directory" % what, root,
                                errno.ENOTDIR)
    return root


# What each target's entry holds.
_ARTIFACTS = {"host": "kernels.so", "gpu": "bundle.json"}
_MANIFEST = "manifest.json"
_MANIFEST_FORMAT = "kvgen-cache-entry"
_MANIFEST_VERSION = 1
# The files of an entry, the manifest aside (written last, it lists them).
_ENTRY_FILES = ("description.mlir", "compiler.txt")
# Past these sizes a file is not one kvgen wrote.
_MAX_MANIFEST_BYTES = 1 << 20
_MAX_FILE_BYTES = 1 << 32


class _Missing(str):
    pass


#: _check_entry's answer for an entry that does not exist.
_MISSING = _Missing("it does not exist")


def _words(problem):
    return str(problem)


def _read_checked(path, limit):
    """The bytes of `path`, a regular file (not a link, a device, a FIFO or
    a folder) of at most `limit` bytes; raises ValueError saying what is
    wrong."""
    name = os.path.basename(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ValueError("%s is missing" % name) from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ValueError("%s is a symbolic link, not a file kvgen "
                             "wrote" % name) from None
        raise ValueError("%s cannot be opened: %s" % (name, e.strerror))\
            from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a directory" if stat.S_ISDIR(st.st_mode) else
                    "a FIFO" if stat.S_ISFIFO(st.st_mode) else
                    "a device" if stat.S_ISCHR(st.st_mode) or
                    stat.S_ISBLK(st.st_mode) else "a socket" if
                    stat.S_ISSOCK(st.st_mode) else "not a regular file")
            raise ValueError("%s is %s, not a file kvgen wrote"
                             % (name, kind))
        if st.st_size > limit:
            raise ValueError("%s has %d bytes, past the %d a cache entry's "
                             "file may have" % (name, st.st_size, limit))
        chunks, left = [], st.st_size + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError as e:
        raise ValueError("%s cannot be read: %s" % (name, e.strerror))\
            from None
    finally:
        os.close(fd)


def _check_entry(entry, want):
    """None when `entry` is a whole entry of the description and target in
    `want`: its manifest lists every file with its size and sha256 and each
    matches, its description is the one asked for, its artifact is of the
    target (an ELF shared object for the host; a bundle JSON for the GPU's
    chip). Else what is wrong, in words (_MISSING for no entry)."""
    artifact, description, tag, kind, chip = want
    try:
        st = os.lstat(entry)
    except FileNotFoundError:
        return _MISSING
    except OSError as e:
        return "it cannot be read: %s" % e.strerror
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    try:
        raw = _read_checked(os.path.join(entry, _MANIFEST),
                            _MAX_MANIFEST_BYTES)
        try:
            manifest = json.loads(raw)
        except ValueError:
            raise ValueError("%s is not JSON (cut short?)" % _MANIFEST)\
                from None
        if (not isinstance(manifest, dict) or
                manifest.get("format") != _MANIFEST_FORMAT or
                manifest.get("version") != _MANIFEST_VERSION):
            raise ValueError("%s is not a version %d %s manifest" % (
                _MANIFEST, _MANIFEST_VERSION, _MANIFEST_FORMAT))
        if manifest.get("target") != tag:
            raise ValueError("it was made for target %r, not %s"
                             % (manifest.get("target"), tag))
        files = manifest.get("files")
        names = (artifact,) + _ENTRY_FILES
        if not isinstance(files, dict) or set(files) != set(names):
            raise ValueError("%s lists %s, not %s" % (
                _MANIFEST, sorted(files) if isinstance(files, dict) else
                type(files).__name__, ", ".join(names)))
        contents = {}
        for name in names:
            record = files[name]
            data = _read_checked(os.path.join(entry, name), _MAX_FILE_BYTES)
            if not isinstance(record, dict):
                raise ValueError("%s's record of %s is not an object"
                                 % (_MANIFEST, name))
            if len(data) != record.get("size"):
                raise ValueError("%s has %d bytes but %s recorded %r" % (
                    name, len(data), _MANIFEST, record.get("size")))
            if hashlib.sha256(data).hexdigest() != record.get("sha256"):
                raise ValueError("%s's sha256 is not the one %s recorded "
                                 "(changed after it was written)"
                                 % (name, _MANIFEST))
            contents[name] = data
        if contents["description.mlir"] != description.encode():
            raise ValueError("it was made for another description "
                             "(description.mlir differs)")
        problem = _artifact_problem(contents[artifact], kind, chip)
        if problem:
            raise ValueError("%s %s" % (artifact, problem))
    except ValueError as e:
        return str(e)
    return None


def _artifact_problem(data, kind, chip):
    """What is wrong with an entry's artifact for its target, or None."""
    is_elf = data[:4] == b"\x7fELF"
    if kind == "host":
        return None if is_elf else "is not an ELF shared object"
    if is_elf:
        return "is a host shared object, not a GPU bundle"
    try:
        bundle = json.loads(data)
    except ValueError:
        return "is not a bundle's JSON"
    if not isinstance(bundle, dict) or not isinstance(bundle.get("target"),
                                                      dict):
        return "is not a bundle (no target)"
    if bundle["target"].get("chip") != chip:
        return "is for chip %r, not %s" % (bundle["target"].get("chip"),
                                           chip)
    return None


# `kv.append @kv_append : !kv.cache<...> from bf16`: the kernels a
# description declares, and its cache's fields.
_KERNEL_DECL = re.compile(r"\bkv\.(\w+)\s+@(\w+)\s*:\s*!kv\.cache<(.*?)>"
                          r"(?:\s+from\s+(\w+))?"
                          r"(?:\s+prologue\s+#kv\.prologue<[^>]*>)?\s*$", re.M)
_INT_FIELDS = ("block_size", "max_seq_len", "num_kv_heads", "head_dim")


def _bundle_problem(bundle, description, kind, chip):
    """None when a loaded bundle holds every kernel `description` declares,
    of its kind, layout, extents and source dtype, for the target; else
    what differs."""
    if kind == "host" and not bundle.has_host_kernels:
        return "it has no host kernels"
    if kind == "gpu":
        if not bundle.has_device_code:
            return "it has no GPU code"
        if bundle.target.get("chip") != chip:
            return "it is for chip %r, not %s" % (bundle.target.get("chip"),
                                                  chip)
    kernels = {k.get("name"): k for k in bundle.kernels}
    for m in _KERNEL_DECL.finditer(description):
        op, name, attrs, source = m.groups()
        k = kernels.get(name)
        if k is None:
            return "it has no kernel '%s'" % name
        if k.get("kind") != op:
            return "its kernel '%s' is a %s, not a %s" % (name, k.get("kind"),
                                                          op)
        cache = k.get("cache", {})
        fields = dict(re.findall(r"(\w+)\s*=\s*(\w+)", attrs.split("<")[0]
                                 if "#kv." in attrs else attrs))
        if fields.get("layout") and cache.get("layout") != fields["layout"]:
            return "its kernel '%s' is for layout %r, not %s" % (
                name, cache.get("layout"), fields["layout"])
        for f in _INT_FIELDS:
            if f in fields and str(cache.get(f)) != fields[f]:
                return "its kernel '%s' has %s %r, not %s" % (
                    name, f, cache.get(f), fields[f])
    return None


def _discard(entry):
    """Moves a bad entry out of the way (then deletes it), so that a fresh
    one can be renamed into its place. Another process may do the same at
    once; whichever rename wins, the entry is gone."""
    trash = "%s/.bad-%s-%d" % (os.path.dirname(entry),
                               os.path.basename(entry), os.getpid())
    try:
        os.rename(entry, trash)
    except FileNotFoundError:
        return
    except OSError:
        trash = entry  # a read-only cache: nothing more can be done
    if os.path.isdir(trash) and not os.path.islink(trash):
        shutil.rmtree(trash, ignore_errors=True)
    else:
        try:
            os.remove(trash)
        except OSError:
            pass


def _newest_entry(desc_dir, want):
    """The newest entry of the description (any compiler's) that passes
    _check_entry; None if there is none; CacheError naming each bad one if
    every entry there is bad. Temporary folders (.tmp-*, left by a killed
    compilation) and discarded ones (.bad-*) are never entries."""
    try:
        names = sorted(os.listdir(desc_dir))
    except FileNotFoundError:
        return None
    except OSError as e:
        raise errors.CacheError("the kernel cache folder %s cannot be read: "
                                "%s" % (desc_dir, e.strerror), desc_dir,
                                e.errno) from None
    good, bad = [], []
    for n in names:
        if n.startswith("."):
            continue
        entry = os.path.join(desc_dir, n)
        problem = _check_entry(entry, want)
        if problem is None:
            good.append(entry)
        elif problem is not _MISSING:
            bad.append("%s: %s" % (entry, problem))
    if good:
        return max(good, key=lambda e: os.stat(os.path.join(e, _MANIFEST))
                   .st_mtime_ns)
    if bad:
        raise errors.CacheError(
            "no usable cached kernels and no kvgen compiler to rebuild them "
            "(set KVGEN_COMPILER, or fill the cache again with python -m "
            "kvgen precompile); the cache holds:\n  " + "\n  ".join(bad),
            desc_dir)
    return None


def _cache_write_error(path, e):
    return errors.CacheError(
        "cannot write the kernel cache at %s: %s" % (path, e.strerror or e),
        path, e.errno)


def _write_file(path, data):
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


@contextlib.contextmanager
def _work_dir(entry):
    """A fresh temporary folder (.tmp-*) beside `entry`, for a new entry to
    be written into; removed on the way out (renamed into place by
    _seal_entry, it is gone already)."""
    parent = os.path.dirname(entry)
    try:
        os.makedirs(parent, exist_ok=True)
        work = tempfile.mkdtemp(prefix=".tmp-", dir=parent)
    except OSError as e:
        raise _cache_write_error(getattr(e, "filename", None) or parent, e)\
            from None
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _seal_entry(work, entry, tag, artifact, data, description, version,
                compiler):
    """Writes compiler.txt and the manifest (last) into `work`, which holds
    the artifact `data` and description.mlir, then renames it to `entry`."""
    try:
        compiler_txt = (version + "\n" + compiler + "\n").encode()
        _write_file(os.path.join(work, "compiler.txt"), compiler_txt)
        files = {}
        for name, blob in ((artifact, data),
                           ("description.mlir", description.encode()),
                           ("compiler.txt", compiler_txt)):
            files[name] = {"size": len(blob),
                           "sha256": hashlib.sha256(blob).hexdigest()}
        manifest = {"format": _MANIFEST_FORMAT,
                    "version": _MANIFEST_VERSION, "target": tag,
                    "files": files}
        _write_file(os.path.join(work, _MANIFEST),
                    (json.dumps(manifest, indent=1, sort_keys=True) +
                     "\n").encode())
    except OSError as e:
        raise _cache_write_error(work, e) from None
    try:
        os.rename(work, entry)
    except OSError as e:
        # Another process made the same entry first: keep theirs if it is
        # whole (the caller checks it), else report.
        if not os.path.isdir(entry):
            raise _cache_write_error(entry, e) from None
