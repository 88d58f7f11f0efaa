#!/usr/bin/env bash
# The wheel on a GPU machine without MLIR, a kvgen build or the CUDA toolkit:
#
#   scripts/build-wheel.sh dist              # on the build machine
#   scripts/wheel-gpu-check.sh dist/kvgen-*.whl   # on the GPU machine
#
# Installs the wheel into a fresh folder on the interpreter's path (which
# has PyTorch; KVGEN_PYTHON names another interpreter), then, with no KVGEN_*
# variable, no CUDA_HOME and no kvgen build: JIT-compiles a GPU bundle with
# the wheel's own compiler (PTX, loaded by the driver: no ptxas), appends
# through it, and runs the package's GPU tests (python/tests/test_gpu.py,
# copied out of the checkout) against the installed package.
set -euo pipefail
wheel=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
cd "$(dirname "$0")/.."
py=$(command -v "${KVGEN_PYTHON:-python3}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Installed into a folder of its own on the interpreter's path, not a venv:
# a venv made from an interpreter that is itself a venv's would not see the
# packages (PyTorch) installed there.
"$py" -m pip install -q --no-deps --disable-pip-version-check \
  --target "$work/site" "$wheel"
cp -r python/tests "$work/tests"
run() {
  (cd "$work" && env -u KVGEN_COMPILER -u KVGEN_KVRT_LIB -u KVGEN_BUILD_DIR \
    -u KVGEN_CACHE_DIR -u CUDA_HOME -u CUDA_PATH -u CUDA_ROOT \
    PATH=/usr/bin:/bin PYTHONPATH="$work/site" "$@")
}
echo "wheel-gpu-check: ptxas on PATH: $(run sh -c 'command -v ptxas || echo none')"
run "$py" - <<'PY'
import torch, kvgen, kvgen._paths as paths
assert paths.bundled(), kvgen.__file__
print("compiler:", kvgen.find_compiler())
dev = "cuda"
kc = torch.zeros(64, 16, 8, 128, dtype=torch.bfloat16, device=dev)
vc = torch.zeros_like(kc)
k = torch.randn(5, 8, 128, dtype=torch.bfloat16, device=dev)
v = torch.randn_like(k)
slots = torch.tensor([0, 17, -1, 63, 1000], dtype=torch.int64, device=dev)
kvgen.ops.reshape_and_cache_flash(k, v, kc, vc, slots)
torch.cuda.synchronize()
fk, fv = kc.view(-1, 8, 128), vc.view(-1, 8, 128)
for t, s in ((0, 0), (1, 17), (3, 63), (4, 1000)):
    assert torch.equal(fk[s], k[t]) and torch.equal(fv[s], v[t]), s
assert int((fk != 0).any(-1).any(-1).sum()) == 4
print("wheel-gpu-check: JIT GPU append through the wheel: every byte right")
PY
run "$py" -m pytest -q -p no:cacheprovider tests/test_gpu.py
