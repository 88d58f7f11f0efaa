"""The kernel cache on disk: keyed on the description, the compiler and the
target; found by another process, also one without the compiler."""

import os
import subprocess
import sys

import pytest

import kvgen

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIELDS = dict(layout="paged_nhd", block_size=16, num_kv_heads=2,
              head_dim=32, dtype="f16")

RUN_APPEND = """
import sys, numpy as np, kvgen
fields = dict(layout="paged_nhd", block_size=16, num_kv_heads=2,
              head_dim=%d, dtype="f16")
try:
    b = kvgen.compile(target="host", **fields)
except kvgen.KernelNotAvailableError as e:
    print("miss"); sys.exit(0)
print("hit", b.source)
k = np.ones((1, 2, fields["head_dim"]), np.float16)
kc = np.zeros((2, 16, 2, fields["head_dim"]), np.float16)
b.append(k, k, np.array([3], np.int64), kc, kc.copy())
assert (kc[0, 3] == 1).all() and kc.sum() == k.size
print("ran")
"""


def _run(code, cache, compiler):
    env = dict(os.environ, KVGEN_CACHE_DIR=cache)
    env.pop("KVGEN_COMPILER", None)
    if compiler:
        env["KVGEN_COMPILER"] = compiler
    else:
        # No compiler anywhere: not in the environment, not on PATH.
        env["PATH"] = "/nonexistent"
    out = subprocess.run([sys.executable, "-c", code], env=env, text=True,
                         capture_output=True, cwd=PYTHON_DIR)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_second_process_without_compiler_finds_the_entry(compiler_path,
                                                         tmp_path):
    cache = str(tmp_path / "cache")
    first = _run(RUN_APPEND % 32, cache, compiler_path)
    assert first[0] == "hit" and first[-1] == "ran"
    second = _run(RUN_APPEND % 32, cache, None)
    assert second == first  # the same entry, and its kernels ran


def test_changed_description_misses(compiler_path, tmp_path):
    if kvgen._paths.bundled():
        pytest.skip("an installed wheel has its own compiler in every process")
    cache = str(tmp_path / "cache")
    _run(RUN_APPEND % 32, cache, compiler_path)
    assert _run(RUN_APPEND % 64, cache, None) == ["miss"]


def test_hit_does_not_run_the_compiler(compiler_path, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    b = kvgen.compile(target="host", cache=cache, **FIELDS)
    calls = []
    real = kvgen.compiler._compile_into
    monkeypatch.setattr(kvgen.compiler, "_compile_into",
                        lambda *a: calls.append(a) or real(*a))
    assert kvgen.compile(target="host", cache=cache, **FIELDS) is b
    kvgen.compiler._loaded.clear()
    again = kvgen.compile(target="host", cache=cache, **FIELDS)
    assert again.source == b.source and not calls
    # Another target is another entry.
    gpu = kvgen.compile(target="gpu", cache=cache, **FIELDS)
    assert len(calls) == 1 and gpu.has_device_code


def test_key_includes_the_compiler(compiler_path, tmp_path):
    cache = tmp_path / "cache"
    b = kvgen.compile(target="host", cache=cache, **FIELDS)
    version, ident = kvgen.compiler.compiler_identity(compiler_path)
    assert "kvgen 0." in version  # kvgen --version names kvgen
    assert os.path.basename(os.path.dirname(b.source)) == ident
    with open(os.path.join(os.path.dirname(b.source), "compiler.txt")) as f:
        assert f.read().startswith(version + "\n")


def test_description_text_is_the_key(compiler_path, tmp_path):
    cache = tmp_path / "cache"
    text = kvgen.describe(**FIELDS)
    b1 = kvgen.compile(text, target="host", cache=cache)
    b2 = kvgen.compile(target="host", cache=cache, **FIELDS)
    assert b1 is b2
    b3 = kvgen.compile(text.replace("@kv_", "@other_"), target="host",
                       cache=cache)
    assert b3.source != b1.source


def test_precompile_fills_a_cache_for_a_model_config(compiler_path,
                                                     tmp_path):
    config = tmp_path / "config.json"
    config.write_text('{"num_attention_heads": 8, "num_key_value_heads": 4, '
                      '"hidden_size": 256, "torch_dtype": "float16"}')
    cache = str(tmp_path / "cache")
    env = dict(os.environ, KVGEN_COMPILER=compiler_path)
    out = subprocess.run(
        [sys.executable, "-m", "kvgen", "precompile", "--cache-dir", cache,
         "--model", str(config), "--tp", "1,2", "--target", "host",
         "--layouts", "paged_nhd", "--kv-cache-dtypes", "auto"],
        env=env, text=True, capture_output=True, cwd=PYTHON_DIR)
    assert out.returncode == 0, out.stderr
    assert "2 descriptions cached" in out.stdout
    # head_dim 256 / 8 = 32, KV heads 4 (tp 1) and 2 (tp 2): the second is
    # FIELDS, which a process without the compiler now finds.
    assert _run(RUN_APPEND % 32, cache, None)[-1] == "ran"
