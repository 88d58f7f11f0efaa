#!/usr/bin/env bash
# The README's test command. On a fresh machine it installs what is missing,
# builds, and runs every suite:
#
#   1. ctest in build/: lit (the IR of every stage, the PTX, the driver's
#      refusals), the unit tests (manifest, kvrt's validation), the host suite
#      (every description run on the CPU against the C++ reference), and the
#      GPU suite where there is a GPU (it says that it skipped where not);
#   2. the kvrt unit tests and the host suite (its reduced matrix) again,
#      built with AddressSanitizer and UndefinedBehaviorSanitizer in
#      build-asan/;
#   3. each libFuzzer harness for KVGEN_FUZZ_SECONDS (default 60) seconds,
#      where clang-22 is installed;
#   4. the wheel (scripts/wheel-test.sh): built with the compiler linked
#      statically (build-wheel/, reusing build/'s objects through ccache),
#      installed into a fresh venv, the Python CPU tests run against it;
#   5. vLLM 0.34.0's cache test file through kvgen.vllm on the host kernels
#      (scripts/vllm-tests.sh; it installs PyPI's torch into build/vllm-venv
#      when no python3 has it).
#
# Arguments go to the first ctest (e.g. -L lit). Each step prints its time.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${KVGEN_BUILD_DIR:-build}
asan_build=${KVGEN_ASAN_BUILD_DIR:-build-asan}

step() {
  local name=$1 start=$SECONDS
  shift
  echo "test: $name"
  "$@"
  echo "test: $name took $((SECONDS - start)) s"
}

step "dependencies" scripts/setup.sh deps
step "build" scripts/setup.sh build
step "ctest" ctest --test-dir "$build" --output-on-failure -j2 "$@"
step "sanitizer build" scripts/setup.sh asan
# A leak, an overflow or undefined behaviour fails the test that caused it.
# allow_user_poisoning=0: LLVM's allocators poison their free memory only in
# the code built with ASan (kvgen's), not in the prebuilt libMLIR that shares
# them, which would read its own allocations as poisoned.
export ASAN_OPTIONS=detect_leaks=1:allow_user_poisoning=0:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
step "sanitizer ctest" ctest --test-dir "$asan_build" --output-on-failure -j2 \
  -L unit
# The host suite's reduced matrix (a sample of every class of description,
# what the GPU suite runs under compute-sanitizer): the whole matrix under
# the sanitizers is JIT-bound and would double the test command's time.
step "sanitizer host suite" "$asan_build/bin/kvgen-host-suite" --reduced
step "sanitizer host default" "$asan_build/bin/kvgen-host-suite" --default
unset ASAN_OPTIONS UBSAN_OPTIONS
if command -v clang++-22 >/dev/null; then
  step "fuzzers" scripts/fuzz.sh "${KVGEN_FUZZ_SECONDS:-60}"
else
  echo "test: fuzzers skipped (no clang++-22; scripts/setup.sh deps installs it)"
fi
step "wheel" scripts/wheel-test.sh
# vLLM 0.34.0's own cache test, unchanged, through kvgen.vllm on the host
# kernels (docs/VLLM.md): every op, format, layout and dtype kvgen provides,
# without the num_blocks=10000 twins and the 256-wide heads, which repeat the
# same kernels on larger caches and would double this step on 2 cores.
step "vllm cache test" scripts/vllm-tests.sh -k "not 10000 and not -256-"
