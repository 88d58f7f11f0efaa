"""Every refusal raises the exception of its kvrt status (or of the package's
own checks), with a message naming the tensor; nothing is written."""

import os

import numpy as np
import pytest

import kvgen
from kvgen import _dlpack, _kvrt, errors

NB, BS, H, D = 4, 16, 2, 64


@pytest.fixture
def tensors():
    rng = np.random.default_rng(0)
    key = rng.standard_normal((3, H, D)).astype(np.float16)
    kc = rng.standard_normal((NB, BS, H, D)).astype(np.float16)
    vc = kc.copy()
    return key, kc, vc, np.array([1, 2, 3], np.int64)


def test_every_status_has_its_class():
    k = _kvrt.lib()
    for status, cls in errors.STATUS_ERRORS.items():
        name = k.status_name(status).decode()
        # INTERNAL and OUT_OF_MEMORY came with bundle format 2's kvrt.
        if status < 9 or name != "KVRT_ERROR_UNKNOWN":
            assert name == cls.status_name
        e = errors.error_for_status(status, "m")
        assert type(e) is cls and e.status == status
    assert errors.InvalidArgumentError.status == 1
    assert issubclass(errors.InvalidArgumentError, ValueError)
    assert type(errors.error_for_status(99, "m")) is errors.KvrtError


def test_slot_mapping_of_the_wrong_dtype_is_invalid_argument(
        compiler_path, tensors):
    key, kc, vc, slots = tensors
    before = kc.copy()
    with pytest.raises(kvgen.InvalidArgumentError) as e:
        kvgen.ops.reshape_and_cache_flash(key, key, kc, vc,
                                          slots.astype(np.int32))
    assert "slot_mapping" in str(e.value)
    assert e.value.status_name == "KVRT_ERROR_INVALID_ARGUMENT"
    assert (kc == before).all()


def test_cache_of_another_shape_is_invalid_argument(compiler_path, tensors):
    key, kc, vc, slots = tensors
    with pytest.raises(kvgen.InvalidArgumentError, match="value_cache"):
        kvgen.ops.reshape_and_cache_flash(key, key, kc, vc[:, :8], slots)


def test_mismatched_heads_are_invalid_argument(compiler_path, tensors):
    key, kc, vc, slots = tensors
    with pytest.raises(kvgen.InvalidArgumentError, match="key"):
        kvgen.ops.reshape_and_cache_flash(key[:, :1], key[:, :1], kc, vc,
                                          slots)


def test_fewer_key_rows_than_slots_is_invalid_argument(compiler_path,
                                                       tensors):
    key, kc, vc, slots = tensors
    with pytest.raises(kvgen.InvalidArgumentError, match="fewer rows"):
        kvgen.ops.reshape_and_cache_flash(key[:2], key[:2], kc, vc, slots)


def test_unknown_kv_cache_dtype_is_refused_by_name(compiler_path, tensors):
    key, kc, vc, slots = tensors
    with pytest.raises(kvgen.InvalidArgumentError, match="'int4'"):
        kvgen.ops.reshape_and_cache_flash(key, key, kc, vc, slots, "int4")


def test_fp8_without_quantized_kernels_is_refused_by_name(compiler_path,
                                                          tensors):
    key, _, _, slots = tensors
    kc = np.zeros((NB, BS, H, D), np.uint8)
    vc = np.zeros_like(kc)
    scale = np.ones(1, np.float32)
    try:
        kvgen.ops.reshape_and_cache_flash(key, key, kc, vc, slots, "fp8",
                                          scale, scale)
    except kvgen.KernelNotAvailableError as e:
        assert "fp8_e4m3" in str(e)
    else:
        pytest.skip("this kvgen generates fp8 kernels (tested elsewhere)")


def test_fp8_cache_with_auto_is_refused(compiler_path, tensors):
    key, _, _, slots = tensors
    kc = np.zeros((NB, BS, H, D), np.uint8)
    with pytest.raises(kvgen.InvalidArgumentError, match="kv_cache_dtype"):
        kvgen.ops.reshape_and_cache_flash(key, key, kc, kc.copy(), slots)


def test_not_a_tensor_is_invalid_argument(compiler_path, tensors):
    key, kc, vc, slots = tensors
    with pytest.raises(kvgen.InvalidArgumentError, match="slot_mapping"):
        kvgen.ops.reshape_and_cache_flash(key, key, kc, vc, [1, 2, 3])


def test_missing_bundle_file_is_io_error(tmp_path):
    with pytest.raises(kvgen.BundleIOError) as e:
        kvgen.Bundle.load(tmp_path / "absent.json")
    assert "absent.json" in str(e.value)


def test_malformed_bundle_is_invalid_bundle(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"format": "kvgen-bundle", "kernels": 3}')
    with pytest.raises(kvgen.InvalidBundleError):
        kvgen.Bundle.load(path)
    with pytest.raises(kvgen.InvalidBundleError):
        kvgen.Bundle.from_json("not json")


def test_a_file_that_is_no_host_object_is_invalid_bundle(tmp_path):
    path = tmp_path / "x.so"
    path.write_bytes(b"\x7fELF" + b"\0" * 60)
    with pytest.raises(kvgen.InvalidBundleError, match="x.so"):
        kvgen.Bundle.load(path)


def test_unknown_kernel_is_not_found(compiler_path, tensors):
    key, kc, vc, slots = tensors
    b = kvgen.compile(layout="paged_nhd", block_size=BS, num_kv_heads=H,
                      head_dim=D, dtype="f16", target="host")
    with pytest.raises(kvgen.NotFoundError, match="no_such_kernel"):
        b.append(key, key, slots, kc, vc, kernel="no_such_kernel")


class _FakeCudaTensor:
    """A DLPack producer claiming a CUDA tensor: kvrt must refuse it without
    touching its (bogus) memory."""

    def __init__(self, base, device_type=_dlpack.CUDA):
        self.base = base
        self.device_type = device_type

    def __dlpack__(self, stream=None):
        return self.base.__dlpack__()


def test_gpu_tensors_without_a_driver_raise_its_status(compiler_path):
    # Build CUDA-tagged DLTensors by hand: kvrt validates them, then finds no
    # driver (this machine) or no device; either way the matching class.
    b = kvgen.compile(layout="paged_nhd", block_size=BS, num_kv_heads=H,
                      head_dim=D, dtype="f16", target="gpu")
    fake = 1 << 40  # never dereferenced
    key = (fake, _dlpack.CUDA, 0, _dlpack.FLOAT, 16, (3, H, D),
           (H * D, D, 1))
    slots = (fake + (1 << 30), _dlpack.CUDA, 0, _dlpack.INT, 64, (3,), (1,))
    cache = (fake + (1 << 31), _dlpack.CUDA, 0, _dlpack.FLOAT, 16,
             (NB, BS, H, D), (BS * H * D, H * D, D, 1))
    value_cache = (fake + (1 << 32),) + cache[1:]
    try:
        b._append("kv_append", (key, key, slots, cache, value_cache, None,
                                None, None, None), 0, 0)
    except (kvgen.NoDriverError, kvgen.NoDeviceError) as e:
        assert e.message
    except kvgen.KvrtError as e:  # a machine with a GPU: the driver refuses
        assert isinstance(e, (kvgen.DriverError, kvgen.InvalidArgumentError))
    else:
        pytest.fail("a launch on bogus CUDA memory succeeded")


def test_compiler_refusal_is_compiler_error(compiler_path):
    with pytest.raises(kvgen.CompilerError, match="head_dim"):
        kvgen.compile(layout="paged_nhd", block_size=16, num_kv_heads=2,
                      head_dim=0, dtype="f16", target="host")


def test_bad_compiler_path_is_compiler_not_found(monkeypatch, tmp_path):
    monkeypatch.setenv("KVGEN_COMPILER", str(tmp_path / "nope"))
    with pytest.raises(kvgen.CompilerNotFoundError, match="KVGEN_COMPILER"):
        kvgen.compile(layout="paged_nhd", num_kv_heads=2, head_dim=64,
                      dtype="f16", target="host")


def test_missing_libkvrt_is_library_not_found(tmp_path):
    import subprocess
    import sys

    env = dict(os.environ, KVGEN_KVRT_LIB=str(tmp_path / "libkvrt.so"))
    code = ("import kvgen\n"
            "try:\n kvgen.Bundle.from_json('{}')\n"
            "except kvgen.LibraryNotFoundError as e:\n print('refused', e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, text=True,
                         capture_output=True,
                         cwd=os.path.dirname(os.path.dirname(__file__)))
    assert out.stdout.startswith("refused libkvrt not found"), out.stderr
