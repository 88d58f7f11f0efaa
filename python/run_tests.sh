#!/usr/bin/env bash
# python/run_tests.sh [BUILD_DIR] [PYTEST_ARGS...]
#
# The Python package's CPU tests: the ops on host kernels that the build's
# kvgen generates, through the build's libkvrt. Exits 77 (ctest: skipped),
# with a message, when no Python 3 with pytest and numpy is found.
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
shift || true
export KVGEN_BUILD_DIR=$(cd "$build" && pwd)
export KVGEN_COMPILER=${KVGEN_COMPILER:-$KVGEN_BUILD_DIR/bin/kvgen}
for py in ${KVGEN_PYTHON:-} python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null 2>&1 &&
    "$py" -c 'import pytest, numpy' >/dev/null 2>&1; then
    cd "$here" && exec "$py" -m pytest -q -p no:cacheprovider \
      --ignore=tests/test_gpu.py tests "$@"
  fi
done
echo "SKIPPED: no python3 with pytest and numpy (Debian: apt-get install" \
  "python3-pytest python3-numpy)"
exit 77
