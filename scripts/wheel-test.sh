#!/usr/bin/env bash
# The wheel as a user gets it: builds it (scripts/build-wheel.sh), installs it
# into a fresh venv, and runs the package's CPU tests (python/tests, copied
# elsewhere so that the checkout is not on sys.path) against the installed
# package, with no build tree visible, no KVGEN_* variable and no kvgen on
# PATH: the package must use its own compiler and libkvrt. Then a GPU bundle
# (the default PTX path) is compiled the same way, and must not have run
# ptxas.
#
#   scripts/wheel-test.sh [PYTEST_ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

start=$SECONDS
wheel=$(scripts/build-wheel.sh "$work/dist" | tail -n 1)
echo "wheel-test: built $(basename "$wheel") in $((SECONDS - start)) s"

# pytest and numpy: Debian's (scripts/setup.sh deps installs them) through
# --system-site-packages, so the venv needs nothing from PyPI; elsewhere from
# PyPI. Neither site has a kvgen.
py=/usr/bin/python3
if "$py" -c 'import ensurepip, pytest, numpy' >/dev/null 2>&1; then
  "$py" -m venv --system-site-packages "$work/venv"
else
  python3 -m venv "$work/venv"
  "$work/venv/bin/pip" install -q --disable-pip-version-check pytest numpy
fi
"$work/venv/bin/pip" install -q --no-deps --disable-pip-version-check "$wheel"
cp -r python/tests "$work/tests"

# A clean environment: no KVGEN_*, no CUDA_HOME, a PATH of the system's
# tools (cc for the host target's link) without kvgen.
run() {
  (cd "$work" && env -i HOME="$work/home" PATH=/usr/bin:/bin LANG=C.UTF-8 \
    KVGEN_CACHE_DIR="$work/cache" "$@")
}
where=$(run "$work/venv/bin/python" -c \
  'import kvgen, kvgen._paths as p; assert p.bundled(); print(kvgen.__file__)')
case $where in
  "$work/venv/"*) echo "wheel-test: kvgen from $where" ;;
  *) echo "wheel-test: kvgen imported from $where, not the venv" >&2; exit 1 ;;
esac
# The wheel's `kvgen` command runs the bundled compiler.
run "$work/venv/bin/kvgen" --version
if command -v kvgen >/dev/null && [ "$(command -v kvgen)" != "$work/venv/bin/kvgen" ]; then
  echo "wheel-test: note: a kvgen on this PATH ($(command -v kvgen)) is hidden"
fi

# KVGEN_CACHE_DIR is the tests' own (conftest.py makes one per session).
run env -u KVGEN_CACHE_DIR "$work/venv/bin/python" -m pytest -q \
  -p no:cacheprovider --ignore=tests/test_gpu.py tests "$@"

# The GPU target's default bundle is PTX, which the driver loads: compiling
# it must not need ptxas (a machine with the driver but no CUDA toolkit).
gpu=$(run "$work/venv/bin/python" -c '
import json, kvgen
path = kvgen.compiler.cache_entry(block_size=16,
                                  num_kv_heads=8, head_dim=128, dtype="bf16")
b = json.load(open(path))
assert b.get("ptx") and not b.get("cubin_base64"), sorted(b)
print(path)')
echo "wheel-test: GPU bundle (PTX, no cubin) at ${gpu#$work/}"
if command -v strace >/dev/null; then
  rm -rf "$work/cache"
  run strace -f -qq -e trace=execve -o "$work/execs" "$work/venv/bin/python" -c '
import kvgen
kvgen.compiler.cache_entry(num_kv_heads=8, head_dim=128,
                           dtype="bf16")'
  if grep -q ptxas "$work/execs"; then
    echo "wheel-test: compiling the default GPU bundle ran ptxas" >&2
    exit 1
  fi
  echo "wheel-test: the default GPU bundle ran no ptxas (strace)"
fi
echo "wheel-test: passed in $((SECONDS - start)) s"
