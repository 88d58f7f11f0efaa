#!/usr/bin/env bash
# The README's test command: set up, build, run every suite. The lit suite
# checks the IR of every stage and the PTX; the unit tests check the manifest
# and kvrt's validation; the host suite runs every description on the CPU
# against the C++ reference; the GPU suite runs where there is a GPU and says
# that it skipped where there is none.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build=${KVGEN_BUILD_DIR:-build}
ctest --test-dir "$build" --output-on-failure -j2 "$@"
