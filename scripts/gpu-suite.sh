#!/usr/bin/env bash
# scripts/gpu-suite.sh [BUILD_DIR [OUT_DIR]]
#
# Runs the GPU suite on a machine with a CUDA device, over build outputs made
# elsewhere (nothing is built here: the GPU machine has no MLIR). From the
# repository root:
#
#   1. kvgen-gpu-suite: the whole conformance matrix + the GPU-only tests
#   2. the same under compute-sanitizer --tool memcheck (reduced matrix)
#   3. the same under compute-sanitizer --tool racecheck (reduced matrix)
#   4. the runtime examples, if built (BUILD_DIR/bin/paged_append,
#      BUILD_DIR/bin/kvrt-example*), on the bundles in BUILD_DIR/bundles
#   5. test/gpu/torch_fp8_bitexact.py: the fp8 e4m3 append bit for bit
#      against PyTorch's float8 conversion (skipped, not failed, without
#      python3 and torch)
#   6. kvgen-prologue-gpu: the fused prologue's kernels (their PTX in
#      BUILD_DIR/prologue, from kvgen-prologue-suite --emit-gpu) against the
#      reference, every byte (noted, not failed, where the stage has none)
#
# BUILD_DIR (default: build) must hold bin/kvgen-gpu-suite,
# bin/conformance-matrix.bundle.json and lib/libkvrt.so* (the runtime
# examples too, if any). Logs go to OUT_DIR (default BUILD_DIR/gpu-suite-logs).
#
# Environment:
#   KVGEN_GPU_BUNDLE            another bundle
#   GPU_SUITE_SANITIZERS=0      skip steps 2 and 3
#   GPU_SUITE_TIMEOUT=S         limit of step 1 (default 300 s)
#   GPU_SUITE_SANITIZER_TIMEOUT=S   limit of steps 2 and 3 each (default 180 s)
#   GPU_SUITE_SANITIZER_FULL=1  the whole matrix under the sanitizers too
#   GPU_SUITE_EXAMPLE_TIMEOUT=S     limit of each example (default 60 s)
#   GPU_SUITE_PYTHON=python3    the interpreter of step 5 (with torch)
#   GPU_SUITE_PROLOGUE_TIMEOUT=S    limit of step 6 (default 120 s)
#   GPU_SUITE_ARGS="..."        extra arguments for every suite run
#   KVRT_EXAMPLE_BUNDLES="a b"  bundles for the runtime examples
#
# Exit status: 0 if every step passed, 77 if the suite found no device, 1
# otherwise.

set -u -o pipefail

build=${1:-build}
build=${build%/}
logs=${2:-$build/gpu-suite-logs}
mkdir -p "$logs"

suite=$build/bin/kvgen-gpu-suite
bundle=${KVGEN_GPU_BUNDLE:-$build/bin/conformance-matrix.bundle.json}
suite_timeout=${GPU_SUITE_TIMEOUT:-300}
sanitizer_timeout=${GPU_SUITE_SANITIZER_TIMEOUT:-180}
sanitizer_matrix=--reduced
[[ ${GPU_SUITE_SANITIZER_FULL:-0} != 0 ]] && sanitizer_matrix=
extra=${GPU_SUITE_ARGS:-}
export LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

summary=()
failed=0
skipped=0

note() { summary+=("$(printf '%-10s %s' "$1" "$2")"); }

# A check's own closing line ("gpu suite: N descriptions, M cases ...",
# "kvgen-prologue-gpu (sm_90): N descriptions, M kernels, F failed").
counts() {
  grep -a -E '^(gpu suite|kvgen-prologue-gpu \([^)]*\)): [0-9]' "$1" |
    tail -n 1 | sed -e 's/^gpu suite: //' -e 's/^kvgen-prologue-gpu //'
}

# run_step NAME LOG TIMEOUT COMMAND...: runs, logs, records the outcome.
run_step() {
  local name=$1 log=$2 limit=$3
  shift 3
  echo "=== $name: $*" | tee "$log"
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$log"
  local rc=$?
  local took=$((SECONDS - start))
  local detail
  detail=$(counts "$log")
  case $rc in
  0) note PASS "$name (${took}s) ${detail}" ;;
  77)
    skipped=1
    note SKIP "$name: $(grep -a -m1 '^SKIPPED' "$log")"
    ;;
  124 | 137)
    failed=1
    note FAIL "$name: timed out after ${limit}s ${detail}"
    ;;
  *)
    failed=1
    note FAIL "$name: exit $rc (${took}s) ${detail}; see $log"
    ;;
  esac
  return $rc
}

for f in "$suite" "$bundle"; do
  if [[ ! -e $f ]]; then
    echo "error: $f is missing (build with the CUDA toolkit, or stage a build" \
      "with scripts/stage-gpu.sh and copy it here)" | tee "$logs/summary.txt"
    exit 1
  fi
done

{
  echo "host: $(uname -srm)"
  command -v nvidia-smi >/dev/null && nvidia-smi -L
  echo "bundle: $bundle ($(stat -c %s "$bundle") bytes)"
} 2>&1 | tee "$logs/environment.txt"

# shellcheck disable=SC2086 # GPU_SUITE_ARGS is a word list on purpose
run_step "gpu suite" "$logs/gpu-suite.log" "$suite_timeout" \
  "$suite" --bundle="$bundle" $extra
suite_rc=$?

if [[ $suite_rc -eq 77 ]]; then
  echo "no CUDA device: the sanitizer runs and examples are skipped"
elif [[ ${GPU_SUITE_SANITIZERS:-1} != 0 ]]; then
  sanitizer=$(command -v compute-sanitizer)
  for candidate in /usr/local/cuda/bin/compute-sanitizer \
    /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    [[ -z $sanitizer && -x $candidate ]] && sanitizer=$candidate
  done
  if [[ -z $sanitizer ]]; then
    failed=1
    note FAIL "compute-sanitizer not found"
  else
    # The reduced matrix keeps every layout, kind and dtype pair; the
    # 17 GB large-cache tests are left to step 1.
    # memcheck also reports device memory the suite never freed.
    declare -A leak_check=([memcheck]="--leak-check full")
    for tool in memcheck racecheck; do
      # shellcheck disable=SC2086
      run_step "$tool" "$logs/$tool.log" "$sanitizer_timeout" \
        "$sanitizer" --tool "$tool" --error-exitcode 86 --print-limit 50 \
        ${leak_check[$tool]:-} \
        "$suite" --bundle="$bundle" $sanitizer_matrix \
        --gtest_filter='-LargeCache.*' $extra
    done
  fi
fi

if [[ $suite_rc -ne 77 ]]; then
  # The runtime's examples take bundles as arguments: those in
  # BUILD_DIR/bundles (or $KVRT_EXAMPLE_BUNDLES); with none, their default.
  shopt -s nullglob
  examples=("$build"/bin/paged_append "$build"/bin/kvrt-example*)
  example_bundles=("$build"/bundles/*.bundle.json)
  shopt -u nullglob
  if [[ -n ${KVRT_EXAMPLE_BUNDLES:-} ]]; then
    read -r -a example_bundles <<<"$KVRT_EXAMPLE_BUNDLES"
  fi
  if [[ ${#examples[@]} -eq 0 ]]; then
    note NONE "no runtime example in $build/bin"
  fi
  for example in "${examples[@]}"; do
    [[ -x $example && -f $example ]] || continue
    name=$(basename "$example")
    run_step "$name" "$logs/$name.log" "${GPU_SUITE_EXAMPLE_TIMEOUT:-60}" \
      "$example" "${example_bundles[@]}"
    # An example that skips (no bundle here) is noted, not a failure, and
    # does not turn the run into "no device".
    [[ $? -eq 77 ]] && skipped=0
  done
fi

if [[ $suite_rc -ne 77 ]]; then
  python=${GPU_SUITE_PYTHON:-python3}
  torch_test=$(dirname "$0")/../test/gpu/torch_fp8_bitexact.py
  libkvrt=$(ls "$build"/lib/libkvrt.so* 2>/dev/null | head -n 1)
  if ! command -v "$python" >/dev/null; then
    note SKIP "torch fp8 bit-exactness: no $python"
  else
    # The test takes kvrt's ctypes structs from the Python package.
    PYTHONPATH="$(cd "$(dirname "$0")/.." && pwd)/python${PYTHONPATH:+:$PYTHONPATH}" \
      run_step "torch fp8" "$logs/torch-fp8.log" 300 \
      "$python" "$torch_test" --libkvrt "$libkvrt" --bundle "$bundle"
    # No torch there is noted, not a failure, and not "no device".
    [[ $? -eq 77 ]] && skipped=0
  fi
fi

if [[ $suite_rc -ne 77 ]]; then
  prologue_runner=$build/bin/kvgen-prologue-gpu
  if [[ ! -x $prologue_runner || ! -f $build/prologue/prologue.manifest ]]; then
    note NONE "fused prologue: no $prologue_runner or $build/prologue \
(scripts/stage-gpu.sh writes them)"
  else
    run_step "prologue" "$logs/prologue.log" \
      "${GPU_SUITE_PROLOGUE_TIMEOUT:-120}" \
      "$prologue_runner" "$build/prologue"
  fi
fi

{
  echo
  echo "=== summary (logs in $logs)"
  printf '%s\n' "${summary[@]}"
} | tee "$logs/summary.txt"

if [[ $failed -ne 0 ]]; then
  exit 1
fi
if [[ $skipped -ne 0 ]]; then
  exit 77
fi
exit 0
