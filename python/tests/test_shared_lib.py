"""kvgen --target=host --emit=shared-lib: the object's interface, and its
refusals (a clear message, a non-zero exit, no file)."""

import ctypes
import json
import os
import subprocess

import pytest

FLAGS = ["--layout=paged_nhd", "--num-kv-heads=2", "--head-dim=64",
         "--dtype=f16"]


def _kvgen(compiler, args, env=None):
    return subprocess.run([compiler] + args, capture_output=True, text=True,
                          env=env)


def test_exports_entry_points_bundle_and_version(compiler_path, tmp_path):
    out = tmp_path / "k.so"
    r = _kvgen(compiler_path, FLAGS + ["--target=host", "--emit=shared-lib",
                                       "-o", str(out)])
    assert r.returncode == 0, r.stderr
    lib = ctypes.CDLL(str(out))
    lib.kvgen_bundle_json.restype = ctypes.c_char_p
    lib.kvgen_bundle_json_size.restype = ctypes.c_uint64
    lib.kvgen_compiler_version.restype = ctypes.c_char_p
    text = lib.kvgen_bundle_json()
    assert len(text) == lib.kvgen_bundle_json_size()
    bundle = json.loads(text)
    names = [k["name"] for k in bundle["kernels"]]
    assert {"kv_append", "kv_append_scalar", "kv_append_wide"} <= set(names)
    for name in names:
        assert getattr(lib, "_mlir_" + name)  # the packed entry point
        with pytest.raises(AttributeError):  # the kernel itself is hidden
            getattr(lib, name)
    version = _kvgen(compiler_path, ["--version"]).stdout.strip()
    assert lib.kvgen_compiler_version().decode() == version.splitlines()[-1]


def test_gpu_target_is_refused(compiler_path, tmp_path):
    out = tmp_path / "k.so"
    r = _kvgen(compiler_path, FLAGS + ["--emit=shared-lib", "-o", str(out)])
    assert r.returncode != 0
    assert "--emit=shared-lib needs --target=host" in r.stderr
    assert not out.exists()


def test_no_linker_is_a_clear_error(compiler_path, tmp_path):
    out = tmp_path / "k.so"
    env = {k: v for k, v in os.environ.items() if k != "CC"}
    env["PATH"] = str(tmp_path)  # no cc, gcc or clang here
    r = _kvgen(os.path.abspath(compiler_path),
               FLAGS + ["--target=host", "--emit=shared-lib", "-o", str(out)],
               env=env)
    assert r.returncode != 0
    assert "C compiler driver" in r.stderr and "set CC" in r.stderr
    assert not out.exists()
