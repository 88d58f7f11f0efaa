"""python -m kvgen precompile: every bad config or flag is one line naming
the field or flag and its value, exit status 2, nothing compiled; a failed
compilation (a refusal or a crash) is a non-zero exit, never a skip; an MLA
config makes the latent cache."""

import json
import os
import subprocess
import sys

import pytest

import kvgen
from kvgen import precompile

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOOD = {"num_attention_heads": 8, "num_key_value_heads": 4,
        "hidden_size": 256, "torch_dtype": "float16"}
# DeepSeek-V3's config.json, the fields that matter here.
DEEPSEEK_V3 = {"architectures": ["DeepseekV3ForCausalLM"],
               "model_type": "deepseek_v3", "hidden_size": 7168,
               "num_attention_heads": 128, "num_key_value_heads": 128,
               "kv_lora_rank": 512, "q_lora_rank": 1536,
               "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
               "v_head_dim": 128, "torch_dtype": "bfloat16"}


def _precompile(args, compiler=None, cwd=PYTHON_DIR):
    env = dict(os.environ)
    if compiler:
        env["KVGEN_COMPILER"] = compiler
    return subprocess.run([sys.executable, "-m", "kvgen", "precompile"] +
                          args, env=env, text=True, capture_output=True,
                          cwd=cwd, timeout=300)


def _with(**changes):
    cfg = dict(GOOD)
    for k, v in changes.items():
        if v is _DROP:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    return json.dumps(cfg)


_DROP = object()

# (config text, the field and value the one-line error must name)
BAD_CONFIGS = [
    ("{", "not a JSON config"),
    ("[1, 2]", "a JSON list"),
    ("\"config\"", "a JSON str"),
    ("null", "a JSON NoneType"),
    ("[" * 100000, "not a JSON config"),
    ("\xff\xfe garbage", "not a JSON config"),
    ("{}", "num_attention_heads is missing"),
    (_with(num_attention_heads=_DROP), "num_attention_heads is missing"),
    (_with(num_attention_heads=0), "num_attention_heads is 0"),
    (_with(num_attention_heads=-8), "num_attention_heads is -8"),
    (_with(num_attention_heads="8"), "num_attention_heads is \"8\""),
    (_with(num_attention_heads=8.5), "num_attention_heads is 8.5"),
    (_with(num_attention_heads=True), "num_attention_heads is true"),
    (_with(num_attention_heads=None), "num_attention_heads is missing"),
    (_with(num_attention_heads=[8]), "num_attention_heads is [8]"),
    (_with(num_attention_heads=float("nan")), "num_attention_heads is NaN"),
    (_with(num_key_value_heads=-8), "num_key_value_heads is -8"),
    (_with(num_key_value_heads=0), "num_key_value_heads is 0"),
    (_with(num_key_value_heads="4"), "num_key_value_heads is \"4\""),
    (_with(num_key_value_heads=3), "num_key_value_heads 3 does not divide"),
    (_with(num_key_value_heads=16), "num_key_value_heads 16 does not divide"),
    (_with(head_dim=0), "head_dim is 0"),
    (_with(head_dim=-128), "head_dim is -128"),
    (_with(head_dim="128"), "head_dim is \"128\""),
    (_with(head_dim=12.5), "head_dim is 12.5"),
    (_with(hidden_size=_DROP), "hidden_size is missing"),
    (_with(hidden_size=0), "hidden_size is 0"),
    (_with(hidden_size=-4096), "hidden_size is -4096"),
    (_with(hidden_size="4096"), "hidden_size is \"4096\""),
    (_with(hidden_size=1001), "hidden_size 1001 is not a multiple"),
    (_with(torch_dtype="float64"), "torch_dtype is \"float64\""),
    (_with(torch_dtype="float8_e4m3fn"), "torch_dtype is \"float8_e4m3fn\""),
    (_with(torch_dtype="int8"), "torch_dtype is \"int8\""),
    (_with(torch_dtype=16), "torch_dtype is 16"),
    (_with(torch_dtype=_DROP), "torch_dtype is missing"),
    (_with(text_config="llama"), "text_config is \"llama\""),
    (json.dumps({"text_config": {"num_attention_heads": -1}}),
     "num_attention_heads is -1"),
    (_with(kv_lora_rank=-512, qk_rope_head_dim=64), "kv_lora_rank is -512"),
    (_with(kv_lora_rank="512", qk_rope_head_dim=64),
     "kv_lora_rank is \"512\""),
    (_with(kv_lora_rank=512), "qk_rope_head_dim is missing"),
    (_with(kv_lora_rank=512, qk_rope_head_dim=0), "qk_rope_head_dim is 0"),
]


@pytest.mark.parametrize("text,named", BAD_CONFIGS,
                         ids=[str(i) for i in range(len(BAD_CONFIGS))])
def test_bad_config_is_one_line_and_exit_2(compiler_path, tmp_path, text,
                                           named):
    config = tmp_path / "config.json"
    config.write_bytes(text.encode("utf-8", "surrogateescape")
                       if not text.startswith("\xff") else b"\xff\xfe x")
    cache = tmp_path / "cache"
    out = _precompile(["--cache-dir", str(cache), "--model", str(config),
                       "--target", "host"], compiler_path)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert named in lines[0] and str(config) in lines[0], lines[0]
    assert "Traceback" not in out.stderr
    assert not cache.exists()  # nothing compiled


def test_missing_and_directory_configs(compiler_path, tmp_path):
    for path in (tmp_path / "absent.json", tmp_path):
        out = _precompile(["--model", str(path)], compiler_path)
        assert out.returncode == 2 and "cannot be read" in out.stderr, \
            out.stderr


BAD_FLAGS = [
    (["--tp", "-2"], "--tp: '-2' is not a positive integer"),
    (["--tp", "0"], "--tp: '0' is not a positive integer"),
    (["--tp", "x"], "--tp: 'x' is not a positive integer"),
    (["--tp", "1,,2"], "--tp: '1,,2' is not a comma-separated list"),
    (["--tp", ""], "--tp: '' is not a comma-separated list"),
    (["--tp", "3"], "--tp 3 does not divide num_attention_heads 8"),
    (["--tp", "16"], "--tp 16 does not divide num_attention_heads 8"),
    (["--dtypes", "f64"], "--dtypes: 'f64' is not one of"),
    (["--dtypes", "float8_e4m3fn"], "--dtypes: 'float8_e4m3fn'"),
    (["--block-size", "-16"], "--block-size: '-16'"),
    (["--block-size", "16.0"], "--block-size: '16.0'"),
    (["--layouts", "foo"], "--layouts: 'foo': --layout=foo: expected one of"),
    (["--layouts", "contiguous"], "--layouts: 'contiguous'"),
    (["--kv-cache-dtypes", "int4"], "--kv-cache-dtypes: 'int4'"),
    (["--target", "tpu"], "--target: 'tpu' is not gpu or host"),
    (["--target", "gpu", "--chip", "gfx90a"], "--chip: 'gfx90a'"),
    (["--chip", "sm_90"], "--chip sm_90 with --target host"),
    (["--mla", "512+64"], "--mla and --model"),
    (["--num-kv-heads", "8"], "--num-kv-heads 8 with --model"),
    (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
]


@pytest.mark.parametrize("flags,named", BAD_FLAGS,
                         ids=[" ".join(f) for f, _ in BAD_FLAGS])
def test_bad_flag_is_one_line_and_exit_2(compiler_path, tmp_path, flags,
                                         named):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(GOOD))
    cache = tmp_path / "cache"
    args = ["--cache-dir", str(cache), "--model", str(config), "--target",
            "host"]
    # A later flag wins over the defaults above.
    out = _precompile(args + flags, compiler_path)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], out.stderr
    assert not cache.exists()


BAD_FLAGS_WITHOUT_MODEL = [
    (["--num-kv-heads", "-8"], "--num-kv-heads: '-8'"),
    (["--head-dim", "0"], "--head-dim: '0'"),
    (["--tp", "2"], "--tp 2 needs --model"),
    (["--mla", "512"], "--mla: '512' is not a kv_lora_rank+rope_dim pair"),
    (["--mla", "512+x"], "--mla: 'x'"),
    (["--mla=-512+64"], "--mla: '-512'"),
    (["--mla", "512+64", "--head-dim", "64"], "--head-dim 64 with --mla"),
    (["--mla", "512+64", "--layouts", "paged_hnd"],
     "a latent (MLA) cache is paged_nhd"),
]


@pytest.mark.parametrize("flags,named", BAD_FLAGS_WITHOUT_MODEL,
                         ids=[" ".join(f) for f, _ in
                              BAD_FLAGS_WITHOUT_MODEL])
def test_bad_shape_flag_is_one_line_and_exit_2(compiler_path, tmp_path,
                                               flags, named):
    cache = tmp_path / "cache"
    out = _precompile(["--cache-dir", str(cache), "--target", "host"] +
                      flags, compiler_path)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], out.stderr


def test_cache_dir_that_is_a_file_is_exit_2(compiler_path, tmp_path):
    f = tmp_path / "file"
    f.write_text("")
    out = _precompile(["--cache-dir", str(f), "--target", "host"],
                      compiler_path)
    assert out.returncode == 2
    assert "--cache-dir" in out.stderr and "not a directory" in out.stderr


def test_tp_divides_and_replicates_kv_heads(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(GOOD))  # 8 heads, 4 KV heads, head_dim 32
    shapes = precompile.model_shapes(str(config), [1, 2, 4, 8])
    assert [s[0] for s in shapes] == [4, 2, 1, 1]
    assert {s[1:] for s in shapes} == {(32, "f16", None)}


def test_deepseek_v3_config_makes_the_latent_cache(compiler_path, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(DEEPSEEK_V3))
    shapes = precompile.model_shapes(str(config), [1, 8])
    # Not a GQA cache of head_dim 7168 / 128 = 56: one latent head of
    # kv_lora_rank 512 + qk_rope_head_dim 64.
    assert set(shapes) == {(1, 576, "bf16", (512, 64))}
    cache = tmp_path / "cache"
    out = _precompile(["--cache-dir", str(cache), "--model", str(config),
                       "--tp", "1,8", "--target", "host", "--block-size",
                       "64"], compiler_path)
    assert out.returncode == 0, out.stderr
    assert "1 descriptions cached, 0 failed" in out.stdout
    b = kvgen.compile(target="host", cache=cache, layout="paged_nhd",
                      block_size=64, num_kv_heads=1, head_dim=576,
                      dtype="bf16", kv_lora_rank=512, rope_dim=64)
    assert b.find("mla_append", latent={"kv_lora_rank": 512, "rope_dim": 64})


def _fake_compiler(tmp_path, body):
    path = tmp_path / "fake-kvgen"
    path.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo "
                    "'kvgen 0.0 (fake)'; exit 0; fi\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("quant", ["auto", "fp8"])
def test_crash_is_a_failure_never_a_skip(tmp_path, quant):
    fake = _fake_compiler(tmp_path, "kill -SEGV $$")
    out = _precompile(["--cache-dir", str(tmp_path / "c"), "--num-kv-heads",
                       "2", "--head-dim", "32", "--target", "host",
                       "--kv-cache-dtypes", quant], fake)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "skipped" not in out.stdout + out.stderr
    assert "CompilerFailedError" in out.stderr and "SIGSEGV" in out.stderr
    assert "0 descriptions cached, 2 failed" in out.stdout


def test_refusal_of_a_quantized_description_is_a_failure(tmp_path):
    fake = _fake_compiler(
        tmp_path, "echo \"$1:1:1: error: quantized kernels are not "
        "generated\" >&2; exit 1")
    out = _precompile(["--cache-dir", str(tmp_path / "c"), "--num-kv-heads",
                       "2", "--head-dim", "32", "--target", "host",
                       "--layouts", "paged_nhd", "--kv-cache-dtypes", "fp8"],
                      fake)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "skipped" not in out.stdout
    assert "FAILED" in out.stderr and "CompilerError" in out.stderr


def test_layouts_are_the_compilers(compiler_path):
    # Every paged layout of the compiler's vocabulary is accepted; the
    # compiler's refusal names one that is not.
    out = subprocess.run([compiler_path, "--layout=?", "--emit=kv"],
                         capture_output=True, text=True)
    names = out.stderr.split("expected one of", 1)[1].strip().split(", ")
    assert len(names) >= 5, out.stderr
    for name in names:
        if name == "contiguous":
            with pytest.raises(precompile.BadInput, match="max-seq-len"):
                precompile._check_layout(name)
        else:
            precompile._check_layout(name)


