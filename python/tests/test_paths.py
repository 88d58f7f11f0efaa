"""How the package finds its compiler and libkvrt (kvgen/_paths.py): a
wheel's own files first, and a missing or damaged one, or another platform,
named in the error instead of something found elsewhere."""

import json
import os
import platform
import subprocess
import sys

import pytest

import kvgen
from kvgen import _paths


def _fake_wheel(monkeypatch, tmp_path, machine=None, compiler=b"",
                kvrt=b"", sizes=None):
    """Points _paths at a package folder in tmp_path with a _bundled.json."""
    pkg = tmp_path / "kvgen"
    (pkg / "bin").mkdir(parents=True)
    (pkg / "lib").mkdir()
    files = {"compiler": ("bin/kvgen", compiler), "kvrt": ("lib/libkvrt.so",
                                                          kvrt)}
    manifest = {"version": "0.1.0", "system": platform.system(),
                "machine": machine or platform.machine()}
    for part, (rel, data) in files.items():
        if data is not None:
            (pkg / rel).write_bytes(data)
            os.chmod(pkg / rel, 0o755)
        size = (sizes or {}).get(part, len(data or b""))
        manifest[part] = {"path": rel, "size": size}
    (pkg / "_bundled.json").write_text(json.dumps(manifest))
    monkeypatch.setattr(_paths, "_HERE", str(pkg))
    monkeypatch.setattr(_paths, "_MANIFEST", str(pkg / "_bundled.json"))
    monkeypatch.setattr(_paths, "_bundled", None)
    monkeypatch.delenv("KVGEN_COMPILER", raising=False)
    monkeypatch.delenv("KVGEN_KVRT_LIB", raising=False)
    return pkg


ELF = b"\x7fELF" + b"\0" * 60


def test_bundled_files_come_first(monkeypatch, tmp_path):
    pkg = _fake_wheel(monkeypatch, tmp_path, compiler=ELF, kvrt=ELF)
    assert _paths.compiler() == str(pkg / "bin" / "kvgen")
    assert kvgen.find_compiler() == str(pkg / "bin" / "kvgen")
    # Nothing else is tried for libkvrt: not the build tree, not the loader.
    assert _paths.kvrt_candidates() == [str(pkg / "lib" / "libkvrt.so")]


def test_environment_still_overrides_the_bundle(monkeypatch, tmp_path):
    _fake_wheel(monkeypatch, tmp_path, compiler=ELF, kvrt=ELF)
    other = tmp_path / "other-kvgen"
    other.write_bytes(ELF)
    os.chmod(other, 0o755)
    monkeypatch.setenv("KVGEN_COMPILER", str(other))
    monkeypatch.setenv("KVGEN_KVRT_LIB", "/elsewhere/libkvrt.so")
    assert _paths.compiler() == str(other)
    assert _paths.kvrt_candidates() == ["/elsewhere/libkvrt.so"]


def test_missing_bundled_compiler_is_named(monkeypatch, tmp_path):
    pkg = _fake_wheel(monkeypatch, tmp_path, compiler=None, kvrt=ELF,
                      sizes={"compiler": 64})
    with pytest.raises(kvgen.CompilerNotFoundError,
                       match="bundled compiler is missing: .*%s"
                       % os.path.join("bin", "kvgen")):
        _paths.compiler()
    # compile() says the same, and runs nothing else.
    with pytest.raises(kvgen.CompilerNotFoundError, match=str(pkg)):
        kvgen.compile(layout="paged_nhd", num_kv_heads=2, head_dim=64,
                      dtype="f16", target="host")


def test_truncated_bundled_compiler_is_named(monkeypatch, tmp_path):
    _fake_wheel(monkeypatch, tmp_path, compiler=ELF[:10], kvrt=ELF,
                sizes={"compiler": len(ELF)})
    with pytest.raises(kvgen.CompilerNotFoundError,
                       match="compiler is damaged: .*kvgen \\(10 bytes, the "
                       "wheel shipped 64"):
        _paths.compiler()


def test_non_elf_bundled_compiler_is_damaged(monkeypatch, tmp_path):
    _fake_wheel(monkeypatch, tmp_path, compiler=b"#!/bin/sh\n" + b"x" * 54,
                kvrt=ELF)
    with pytest.raises(kvgen.CompilerNotFoundError, match="damaged"):
        _paths.compiler()


def test_non_executable_bundled_compiler_is_named(monkeypatch, tmp_path):
    pkg = _fake_wheel(monkeypatch, tmp_path, compiler=ELF, kvrt=ELF)
    os.chmod(pkg / "bin" / "kvgen", 0o644)
    with pytest.raises(kvgen.CompilerNotFoundError, match="not executable"):
        _paths.compiler()


def test_missing_bundled_libkvrt_is_named(monkeypatch, tmp_path):
    _fake_wheel(monkeypatch, tmp_path, compiler=ELF, kvrt=None,
                sizes={"kvrt": 64})
    with pytest.raises(kvgen.LibraryNotFoundError,
                       match="bundled libkvrt is missing: .*libkvrt.so"):
        _paths.kvrt_candidates()


def test_other_platform_is_named(monkeypatch, tmp_path):
    _fake_wheel(monkeypatch, tmp_path, machine="riscv64", compiler=ELF,
                kvrt=ELF)
    with pytest.raises(kvgen.CompilerNotFoundError,
                       match="built for %s riscv64; this machine is %s %s"
                       % (platform.system(), platform.system(),
                          platform.machine())):
        _paths.compiler()
    with pytest.raises(kvgen.LibraryNotFoundError, match="riscv64"):
        _paths.kvrt_candidates()


def test_damaged_manifest_is_named(monkeypatch, tmp_path):
    pkg = _fake_wheel(monkeypatch, tmp_path, compiler=ELF, kvrt=ELF)
    (pkg / "_bundled.json").write_text("{\"system\": ")
    with pytest.raises(kvgen.CompilerNotFoundError,
                       match="_bundled.json is damaged"):
        _paths.compiler()


def test_installed_wheel_compiles_and_runs_without_environment(tmp_path):
    """The wheel's promise: no KVGEN_* variable, no kvgen on PATH, no build
    tree, and kernels still compile (host target) and run."""
    if not _paths.bundled():
        pytest.skip("this kvgen package ships no compiler (not a wheel)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVGEN_")}
    env["KVGEN_CACHE_DIR"] = str(tmp_path / "cache")
    env["PATH"] = "/usr/bin:/bin"
    code = (
        "import numpy as np, kvgen, kvgen._paths as p\n"
        "b = kvgen.compile(layout='paged_nhd', block_size=16, "
        "num_kv_heads=2, head_dim=64, dtype='f32', target='host')\n"
        "k = np.arange(2 * 2 * 64, dtype=np.float32).reshape(2, 2, 64)\n"
        "kc = np.zeros((2, 16, 2, 64), np.float32); vc = kc.copy()\n"
        "b.append(k, k + 1, np.array([5, -1], np.int64), kc, vc)\n"
        "assert (kc[0, 5] == k[0]).all() and (vc[0, 5] == k[0] + 1).all()\n"
        "assert kc.sum() == k[0].sum()\n"
        "print(kvgen.find_compiler()); print(kvgen._kvrt.lib().path)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, text=True,
                         capture_output=True, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    here = os.path.dirname(os.path.abspath(kvgen.__file__))
    compiler, kvrt = out.stdout.split()
    assert compiler == os.path.join(here, "bin", "kvgen")
    assert kvrt == os.path.join(here, "lib", "libkvrt.so")
