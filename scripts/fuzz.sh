#!/usr/bin/env bash
# Builds the libFuzzer harnesses of fuzz/ with clang-22 (libFuzzer,
# AddressSanitizer, UndefinedBehaviorSanitizer) into
# ${KVGEN_FUZZ_BUILD_DIR:-build-fuzz} and runs each for N seconds (default
# 60) from the seed corpus: the descriptions of fuzz/corpus, and bundles that
# the same build's kvgen writes from them. Exits non-zero on the first crash,
# leak or sanitizer report; the input that caused it is left in
# <build dir>/fuzz-runs/artifacts. docs/FUZZING.md has the long runs.
#
#   scripts/fuzz.sh [seconds] [description|bundle ...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
harnesses=("$@")
[ ${#harnesses[@]} -eq 0 ] && harnesses=(description bundle)

if ! command -v clang++-22 >/dev/null; then
  echo "fuzz: clang++-22 not found (scripts/setup.sh deps installs it)" >&2
  exit 2
fi

dir=${KVGEN_FUZZ_BUILD_DIR:-build-fuzz}
# Everything is instrumented for coverage and the sanitizers; only the
# harnesses link libFuzzer's main. vptr checks need RTTI, which LLVM and so
# kvgen build without.
flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize=vptr"
flags+=" -fno-sanitize-recover=all -fno-omit-frame-pointer -g1"
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" -DCMAKE_C_FLAGS_RELEASE="-O1 -DNDEBUG" \
  -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
  -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
  -DKVGEN_BUILD_FUZZERS=ON -DKVGEN_BUILD_TESTS=OFF -DKVGEN_BUILD_BENCH=OFF \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
  "${launcher[@]}" >/dev/null
ninja -C "$dir" -j2 kvgen kvgen-description-fuzzer kvrt-bundle-fuzzer

runs=$dir/fuzz-runs
mkdir -p "$runs/artifacts" "$runs/description" "$runs/bundle" "$runs/bundle-seeds"
# Bundle seeds: what this kvgen writes for each seed description, host
# bundles (the manifest alone) and one GPU bundle with its PTX.
for d in fuzz/corpus/description/*.mlir; do
  name=$(basename "$d" .mlir)
  "$dir/bin/kvgen" "$d" --target=host -o "$runs/bundle-seeds/$name.host.json" \
    2>/dev/null || true
done
"$dir/bin/kvgen" --kernels=slot_mapping -o "$runs/bundle-seeds/gpu.json"

# See scripts/test.sh: LLVM's allocators are shared with the prebuilt
# libMLIR, which does not unpoison what it allocates.
export ASAN_OPTIONS=allow_user_poisoning=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}
status=0
for h in "${harnesses[@]}"; do
  case $h in
    description) exe=$dir/bin/kvgen-description-fuzzer
                 seeds=fuzz/corpus/description ;;
    bundle)      exe=$dir/bin/kvrt-bundle-fuzzer
                 seeds=$runs/bundle-seeds ;;
    *) echo "fuzz: unknown harness '$h' (description, bundle)" >&2; exit 2 ;;
  esac
  echo "fuzz: $h for ${seconds}s"
  # The first corpus directory collects new inputs across runs; the seeds
  # are read only.
  "$exe" -max_total_time="$seconds" -dict="fuzz/$h.dict" -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$runs/artifacts/$h-" \
    "$runs/$h" "$seeds" 2>"$runs/$h.log" || status=$?
  grep -E '^stat::(number_of_executed_units|peak_rss_mb)|cov: .*ft:' \
    "$runs/$h.log" | tail -3
  if [ "$status" -ne 0 ]; then
    tail -40 "$runs/$h.log"
    echo "fuzz: $h found a crash (see $runs/artifacts)" >&2
    exit "$status"
  fi
done
