"""The disk cache checks what it loads: every entry carries a manifest
(size and sha256 of each file, written last); a bad entry is rebuilt where
the compiler is, refused by path (kvgen.CacheError) where it is not;
temporary folders are never entries; what is loaded describes the
description and target it is filed under. Compiler crashes and OS errors are
reported as what they are, never as a refusal."""

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

import kvgen
from kvgen import _disk_cache
from kvgen import compiler as kc

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIELDS = dict(layout="paged_nhd", block_size=16, num_kv_heads=2, head_dim=32,
              dtype="f16")
OTHER = dict(FIELDS, head_dim=64)

# Loads FIELDS' host kernels and runs one append; prints what happened.
LOAD = """
import sys, numpy as np, kvgen
try:
    b = kvgen.compile(target=sys.argv[1], layout="paged_nhd", block_size=16,
                      num_kv_heads=2, head_dim=32, dtype="f16")
except kvgen.KvgenError as e:
    print("refused", type(e).__name__, str(e).replace("\\n", " | "))
    sys.exit(0)
if sys.argv[1] == "host":
    k = np.ones((1, 2, 32), np.float16)
    kc = np.zeros((2, 16, 2, 32), np.float16)
    b.append(k, k, np.array([3], np.int64), kc, kc.copy())
    assert (kc[0, 3] == 1).all() and kc.sum() == k.size
print("ran", b.source)
"""


def _run(cache, compiler, target="host", code=LOAD, timeout=120):
    env = dict(os.environ, KVGEN_CACHE_DIR=str(cache))
    env.pop("KVGEN_COMPILER", None)
    if compiler:
        env["KVGEN_COMPILER"] = compiler
    else:
        if kvgen._paths.bundled():
            pytest.skip("an installed wheel has its own compiler in every "
                        "process")
        env["PATH"] = "/nonexistent"
    out = subprocess.run([sys.executable, "-c", code, target], env=env,
                         text=True, capture_output=True, cwd=PYTHON_DIR,
                         timeout=timeout)
    assert out.returncode == 0, "exit %d\n%s%s" % (out.returncode,
                                                   out.stdout, out.stderr)
    return out.stdout.strip()


def _entry(cache, target="host", **fields):
    path = kc.cache_entry(target=target, cache=cache, **(fields or FIELDS))
    return os.path.dirname(path), path


# Truncated host objects: SIGBUS inside dlopen before -------------------------

def test_truncated_kernels_so_in_the_cache(compiler_path, tmp_path):
    cache = tmp_path / "cache"
    entry, so = _entry(cache)
    data = open(so, "rb").read()
    with open(so, "wb") as f:
        f.write(data[:len(data) // 2])
    out = _run(cache, None)
    assert out.startswith("refused CacheError"), out
    assert entry in out and "kernels.so has" in out
    # With the compiler, the entry is rebuilt and runs.
    assert _run(cache, compiler_path).startswith("ran " + so)
    assert open(so, "rb").read() == data
    assert _run(cache, None).startswith("ran " + so)


def test_truncated_shared_object_given_to_bundle_load(compiler_path,
                                                      tmp_path):
    _, so = _entry(tmp_path / "cache")
    data = open(so, "rb").read()
    for n in (64, 200, 4096, len(data) - 1):
        cut = tmp_path / ("cut%d.so" % n)
        cut.write_bytes(data[:n])
        code = ("import kvgen, sys\ntry:\n kvgen.Bundle.load(sys.argv[1])\n"
                "except kvgen.InvalidBundleError as e:\n print(e)\n")
        out = _run(tmp_path, None, str(cut), code)
        assert str(cut) in out and "truncated" in out, out


# Entries that are not whole --------------------------------------------------

def test_temporary_folder_is_never_an_entry(compiler_path, tmp_path):
    cache = tmp_path / "cache"
    entry, so = _entry(cache)
    # A killed compilation's folder, newer than the entry, holding another
    # description's kernels.
    _, other = _entry(cache, **OTHER)
    tmp = os.path.join(os.path.dirname(entry), ".tmp-killed")
    shutil.copytree(os.path.dirname(other), tmp)
    os.utime(os.path.join(tmp, "kernels.so"))
    assert _run(cache, None) == "ran " + so
    # A whole one (killed between its manifest and the rename), newer: still
    # not an entry.
    whole = os.path.join(os.path.dirname(entry), ".tmp-whole")
    shutil.copytree(entry, whole)
    os.utime(os.path.join(whole, "manifest.json"), (2e9, 2e9))
    assert _run(cache, None) == "ran " + so
    shutil.rmtree(entry)
    out = _run(cache, None)
    assert out.startswith("refused KernelNotAvailableError"), out


def test_compiler_that_writes_nothing(compiler_path, tmp_path, monkeypatch):
    monkeypatch.setenv("KVGEN_COMPILER", "/bin/true")
    cache = tmp_path / "cache"
    with pytest.raises(kvgen.CompilerFailedError,
                       match="kernels.so is missing"):
        kvgen.compile(target="host", cache=cache, **FIELDS)
    # No entry was left behind.
    for root, dirs, files in os.walk(cache):
        assert "compiler.txt" not in files, root


@pytest.mark.parametrize("damage", ["directory", "dangling-link",
                                    "dev-zero", "fifo", "empty",
                                    "no-manifest", "bad-manifest",
                                    "bit-flip"])
def test_damaged_entry_is_rebuilt_or_refused_by_path(compiler_path, tmp_path,
                                                     damage):
    cache = tmp_path / "cache"
    entry, so = _entry(cache)
    data = open(so, "rb").read()
    os.remove(so)
    if damage == "directory":
        os.mkdir(so)
    elif damage == "dangling-link":
        os.symlink(str(tmp_path / "gone"), so)
    elif damage == "dev-zero":
        os.symlink("/dev/zero", so)
    elif damage == "fifo":
        os.mkfifo(so)
    elif damage == "empty":
        open(so, "wb").close()
    elif damage == "no-manifest":
        open(so, "wb").write(data)
        os.remove(os.path.join(entry, "manifest.json"))
    elif damage == "bad-manifest":
        open(so, "wb").write(data)
        with open(os.path.join(entry, "manifest.json"), "w") as f:
            f.write("{\"format\": ")
    else:
        flipped = bytearray(data)
        flipped[len(data) // 3] ^= 0x40
        open(so, "wb").write(bytes(flipped))
    # Before, each raised a raw OSError, hung on the FIFO or loaded the
    # damaged object, in every later process.
    out = _run(cache, None, timeout=60)
    assert out.startswith("refused CacheError"), out
    assert entry in out
    assert _run(cache, compiler_path).startswith("ran " + so)
    assert _run(cache, None).startswith("ran " + so)


def test_another_descriptions_entry_is_not_taken(compiler_path, tmp_path):
    cache = tmp_path / "cache"
    for target in ("host", "gpu"):
        entry, path = _entry(cache, target)
        _, other = _entry(cache, target, **OTHER)
        shutil.rmtree(entry)
        shutil.copytree(os.path.dirname(other), entry)
        out = _run(cache, None, target)
        assert out.startswith("refused CacheError"), out
        assert "another description" in out
        assert _run(cache, compiler_path, target).startswith("ran " + path)
        b = kvgen.compile(target=target, cache=cache, **FIELDS)
        assert b.find("append", head_dim=32) and not b.find("append",
                                                            head_dim=64)


def test_old_style_entry_of_another_bundle_is_not_taken(compiler_path,
                                                        tmp_path):
    # Another description's bundle.json copied over an entry's: the sizes
    # and checksums of the manifest no longer match.
    cache = tmp_path / "cache"
    entry, path = _entry(cache, "gpu")
    _, other = _entry(cache, "gpu", **OTHER)
    shutil.copy(other, path)
    assert "bundle.json has" in _run(cache, None, "gpu")
    assert _run(cache, compiler_path, "gpu").startswith("ran " + path)


def test_host_object_in_a_gpu_entry_is_not_taken(compiler_path, tmp_path):
    cache = tmp_path / "cache"
    entry, path = _entry(cache, "gpu")
    _, so = _entry(cache)
    shutil.copy(so, path)
    # A manifest that agrees with the swap: the content is still checked.
    manifest = json.load(open(os.path.join(entry, "manifest.json")))
    import hashlib
    data = open(path, "rb").read()
    manifest["files"]["bundle.json"] = {
        "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    json.dump(manifest, open(os.path.join(entry, "manifest.json"), "w"))
    out = _run(cache, None, "gpu")
    assert out.startswith("refused CacheError"), out
    assert "host shared object, not a GPU bundle" in out
    assert _run(cache, compiler_path, "gpu").startswith("ran " + path)


def _rewrite_manifest(entry, name):
    """Makes manifest.json agree with the file `name` as it is now."""
    import hashlib
    path = os.path.join(entry, "manifest.json")
    manifest = json.load(open(path))
    data = open(os.path.join(entry, name), "rb").read()
    manifest["files"][name] = {"size": len(data),
                               "sha256": hashlib.sha256(data).hexdigest()}
    json.dump(manifest, open(path, "w"))


@pytest.mark.parametrize("target", ["gpu", "host"])
def test_loaded_bundle_must_hold_the_descriptions_kernels(compiler_path,
                                                          tmp_path, target):
    # Another description's artifact with a manifest that agrees with it:
    # only the loaded bundle's kernels tell.
    cache = tmp_path / "cache"
    entry, path = _entry(cache, target)
    _, other = _entry(cache, target, **OTHER)
    shutil.copy(other, path)
    _rewrite_manifest(entry, os.path.basename(path))
    out = _run(cache, None, target)
    assert out.startswith("refused CacheError"), out
    assert "does not hold the kernels it is filed for" in out
    assert "head_dim 64, not 32" in out
    out = _run(cache, compiler_path, target)
    if target == "gpu":
        # Rebuilt where the compiler is, and loaded.
        assert out.startswith("ran " + path), out
    else:
        # Rebuilt on disk, but the process that loaded the wrong object
        # keeps it (the dynamic loader hands back a loaded path's object):
        # refused there, and the next process loads the rebuilt one.
        assert out.startswith("refused CacheError"), out
    assert _run(cache, None, target).startswith("ran " + path)


def test_gpu_entry_of_another_chip_is_not_taken(compiler_path, tmp_path):
    cache = tmp_path / "cache"
    entry, path = _entry(cache, "gpu")
    other = kc.cache_entry(target="gpu", chip="sm_80", cache=cache, **FIELDS)
    # sm_80's entry filed under sm_90's folder, manifest and all.
    shutil.rmtree(entry)
    shutil.copytree(os.path.dirname(other), entry)
    out = _run(cache, None, "gpu")
    assert out.startswith("refused CacheError") and "gpu-sm_80" in out, out


# The compiler crashing, or the disk failing ----------------------------------

def _fake_compiler(tmp_path, body):
    """A script that answers --version as kvgen does and runs `body` for a
    compilation."""
    path = tmp_path / "fake-kvgen"
    path.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo "
                    "'kvgen 0.0 (fake)'; exit 0; fi\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def test_compiler_killed_by_a_signal_is_not_a_refusal(tmp_path):
    fake = _fake_compiler(tmp_path, "echo 'about to crash' >&2; kill -SEGV $$")
    with pytest.raises(kvgen.CompilerFailedError) as e:
        kvgen.compile(target="host", cache=tmp_path / "c", compiler=fake,
                      **FIELDS)
    assert not isinstance(e.value, kvgen.CompilerError)
    assert "SIGSEGV" in str(e.value) and "refused" not in str(e.value)
    assert e.value.signal == signal.SIGSEGV


def test_compiler_past_the_file_size_limit_is_not_a_refusal(compiler_path,
                                                           tmp_path):
    # ulimit -f 1: kvgen's output passes 1 KiB. kvgen ignores SIGXFSZ, so the
    # write fails with EFBIG and kvgen says so; the package reports the
    # compiler's failure, never "kvgen refused the description".
    code = textwrap.dedent("""
        import resource, sys, kvgen
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))
        try:
            kvgen.compile(target="host", cache=sys.argv[1], layout="paged_nhd",
                          block_size=16, num_kv_heads=2, head_dim=32,
                          dtype="f16")
        except kvgen.CompilerFailedError as e:
            print(type(e).__name__, e.signal, str(e))
        """)
    out = _run(tmp_path, compiler_path, str(tmp_path / "c"), code)
    assert out.startswith("CompilerFailedError None"), out
    assert "File too large" in out and "refused" not in out, out


def test_compiler_output_on_a_full_disk_is_not_a_refusal(tmp_path):
    fake = _fake_compiler(
        tmp_path, "echo \"kvgen: cannot write '$4': No space left on "
        "device\" >&2; exit 1")
    with pytest.raises(kvgen.CompilerFailedError,
                       match="No space left on device"):
        kvgen.compile(target="host", cache=tmp_path / "c", compiler=fake,
                      **FIELDS)


def test_package_writes_on_a_full_disk_are_cache_errors(compiler_path,
                                                        tmp_path,
                                                        monkeypatch):
    def full(path, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    monkeypatch.setattr(_disk_cache, "_write_file", full)
    with pytest.raises(kvgen.CacheError, match="No space left on device") as e:
        kvgen.compile(target="host", cache=tmp_path / "c", **FIELDS)
    assert e.value.errno == errno.ENOSPC and str(tmp_path) in str(e.value)


def test_a_real_refusal_is_still_compiler_error(compiler_path, tmp_path):
    with pytest.raises(kvgen.CompilerError, match="refused"):
        kvgen.compile(target="host", cache=tmp_path / "c",
                      **dict(FIELDS, head_dim=0))


# The cache folder itself -----------------------------------------------------

def test_cache_dir_that_is_a_file(compiler_path, tmp_path, monkeypatch):
    path = tmp_path / "file"
    path.write_text("x")
    monkeypatch.setenv("KVGEN_CACHE_DIR", str(path))
    with pytest.raises(kvgen.CacheError, match="not a directory") as e:
        kvgen.compile(target="host", **FIELDS)
    assert "KVGEN_CACHE_DIR=%s" % path in str(e.value)
    monkeypatch.setenv("KVGEN_CACHE_DIR", str(path / "below"))
    with pytest.raises(kvgen.CacheError, match="below") as e:
        kvgen.compile(target="host", **FIELDS)


def test_cache_dir_that_is_empty_is_refused(compiler_path):
    with pytest.raises(kvgen.CacheError, match="empty path"):
        kvgen.compile(target="host", cache="", **FIELDS)


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES, errno.EPERM])
def test_cache_dir_that_cannot_be_written(compiler_path, tmp_path,
                                          monkeypatch, code):
    def refuse(*a, **kw):
        raise OSError(code, os.strerror(code), str(tmp_path / "ro"))

    monkeypatch.setattr(_disk_cache.tempfile, "mkdtemp", refuse)
    with pytest.raises(kvgen.CacheError, match=os.strerror(code)) as e:
        kvgen.compile(target="host", cache=tmp_path / "ro", **FIELDS)
    assert str(tmp_path / "ro") in str(e.value)


def test_cache_dir_under_sysfs_is_a_cache_error(compiler_path, monkeypatch):
    if not os.path.isdir("/sys/kernel"):
        pytest.skip("no /sys")
    monkeypatch.setenv("KVGEN_CACHE_DIR", "/sys/kernel/kvgen-cache")
    with pytest.raises(kvgen.CacheError, match="/sys/kernel"):
        kvgen.compile(target="host", **FIELDS)


def test_read_only_cache_without_compiler_still_serves(compiler_path,
                                                       tmp_path):
    cache = tmp_path / "cache"
    _, so = _entry(cache)
    for root, dirs, files in os.walk(cache):
        for n in dirs + files:
            os.chmod(os.path.join(root, n), 0o555)
    try:
        assert _run(cache, None) == "ran " + so
    finally:
        for root, dirs, files in os.walk(cache):
            for n in dirs + files:
                os.chmod(os.path.join(root, n), 0o755)
