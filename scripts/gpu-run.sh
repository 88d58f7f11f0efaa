#!/usr/bin/env bash
# scripts/gpu-run.sh WHAT [STAGE_DIR] [OUT_DIR]
#
# Runs on a CUDA machine over a folder made by scripts/stage-gpu.sh (default
# build/gpu-stage); logs go to OUT_DIR (default STAGE_DIR/logs):
#   suite   the GPU suite, under compute-sanitizer too, the runtime example
#           and kvrt's GPU test
#   python  the Python package's GPU tests, its eager benchmark and example
#   bench   kvbench and the side-by-side comparison (scripts/bench.sh)
#   dropins the drop-in ops beside the ops they replace (bench/dropins_gpu.py;
#           FlashInfer where it imports, vLLM's ops where DROPINS_VLLM_EXT
#           names their torch extension, built by the peer's build script)
#   formats the new cache formats and ops beside vLLM's kernels for them
#           (bench/formats_gpu.py; kernels and vLLM's source staged by
#           bench/stage_formats.sh; vLLM's ops built first from
#           STAGE_DIR/vllm_src, or FORMATS_VLLM_EXT names them built;
#           FORMATS_ARGS adds arguments, e.g. --quick)
#   prologue the fused prologue beside the unfused sequence and its peers
#           (bench/prologue_gpu.py; vLLM's kernels where PROLOGUE_VLLM_EXT
#           names their torch extension and it loads, else where
#           PROLOGUE_VLLM_SRC names the sources that
#           bench/peers/build_vllm_prologue.py builds it from; vLLM's
#           reshape_and_cache_flash where DROPINS_VLLM_EXT names it,
#           FlashInfer where it imports; PROLOGUE_QUICK=1 for a smoke run);
#           prologue.json and prologue.md are copied to OUT_DIR
#   all     suite, python and bench
# The logs are also packed into OUT_DIR/WHAT-logs.tar.gz, with the summaries
# and plots copied beside it: the record of a run, ready to copy back.
#
# Environment: the limits of scripts/gpu-suite.sh and scripts/bench.sh
# (GPU_SUITE_TIMEOUT, KVBENCH_BUDGET, ...); KVBENCH_PEER names the peer's
# Triton append for the side-by-side comparison.
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:-suite}
stage=${2:-build/gpu-stage}
out=${3:-$stage/logs}
mkdir -p "$out"
logs=$(mktemp -d)
export KVGEN_BUILD_DIR=$stage
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
} > "$logs/device.txt" 2>&1
rc=0
run_suite() {
  KVRT_EXAMPLE_BUNDLES="$stage/bin/default.bundle.json" \
    bash scripts/gpu-suite.sh "$stage" "$1" || rc=$?
  KVRT_REFERENCE_BUNDLE="$stage/bin/reference.bundle.json" \
    LD_LIBRARY_PATH="$stage/lib" "$stage/bin/kvrt_gpu_test" \
    > "$1/kvrt_gpu_test.log" 2>&1 || rc=$?
  tail -n 3 "$1/kvrt_gpu_test.log" | sed 's/^/kvrt_gpu_test: /' >> "$1/summary.txt"
}
run_python() {
  mkdir -p "$1"
  (
    export KVGEN_CACHE_DIR=$PWD/$stage/kvgen-cache \
      KVGEN_KVRT_LIB=$PWD/$stage/lib/libkvrt.so PYTHONPATH=$PWD/python
    python3 -m pytest -v -rs python/tests/test_gpu.py > "$1/pytest.log" 2>&1
    status=$?
    python3 python/bench_eager.py --json "$1/bench_eager.json" \
      > "$1/bench_eager.log" 2>&1 || status=1
    python3 python/examples/vllm_reshape_and_cache.py > "$1/example.log" 2>&1 ||
      status=1
    exit $status
  ) || rc=$?
  { tail -n 1 "$1/pytest.log"; cat "$1/bench_eager.log"; } | sed 's/^/python: /' \
    >> "$1/summary.txt"
}
run_dropins() {
  mkdir -p "$1"
  (
    export KVGEN_CACHE_DIR=$PWD/$stage/kvgen-cache \
      KVGEN_KVRT_LIB=$PWD/$stage/lib/libkvrt.so \
      PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
    python3 bench/dropins_gpu.py ${DROPINS_VLLM_EXT:+--vllm-ext "$DROPINS_VLLM_EXT"} \
      --json "$1/dropins.json" > "$1/dropins.log" 2>&1
  ) || rc=$?
  sed 's/^/dropins: /' "$1/dropins.log" >> "$1/summary.txt"
}
run_formats() {
  mkdir -p "$1"
  (
    export KVGEN_CACHE_DIR=$PWD/$stage/kvgen-cache \
      KVGEN_KVRT_LIB=$PWD/$stage/lib/libkvrt.so \
      PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
    ext=${FORMATS_VLLM_EXT:-}
    if [ -z "$ext" ] && [ -d "$stage/vllm_src" ]; then
      python3 bench/peers/vllm_formats/build.py --src "$stage/vllm_src" \
        --build-dir "${TMPDIR:-/tmp}/vllm_formats" --status "$1/vllm_formats.json" \
        > "$1/vllm_formats_build.log" 2>&1 &&
        ext=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["so"])' \
          "$1/vllm_formats.json")
      tail -n 1 "$1/vllm_formats_build.log" > "$1/summary.txt"
    fi
    # shellcheck disable=SC2086
    python3 bench/formats_gpu.py ${ext:+--vllm-ext "$ext"} ${FORMATS_ARGS:-} \
      --json "$1/formats.json" --md "$1/formats.md" > "$1/formats.log" 2>&1
  ) || rc=$?
  sed 's/^/formats: /' "$1/formats.log" >> "$1/summary.txt"
}
run_prologue() {
  mkdir -p "$1"
  local ext=${PROLOGUE_VLLM_EXT:-}
  # A library built elsewhere (against the same torch) saves the build; one
  # that does not load here is rebuilt from the sources where they are given.
  if [ -n "$ext" ] && [ -n "${PROLOGUE_VLLM_SRC:-}" ] &&
    ! python3 -c 'import sys, torch; torch.ops.load_library(sys.argv[1])' "$ext" \
      > "$1/vllm_prologue_load.log" 2>&1; then
    ext=
  fi
  if [ -z "$ext" ] && [ -n "${PROLOGUE_VLLM_SRC:-}" ]; then
    python3 bench/peers/build_vllm_prologue.py --src "$PROLOGUE_VLLM_SRC" \
      --build-dir "${TMPDIR:-/tmp}/vllm_prologue_peer" \
      --status "$1/vllm_prologue_build.json" > "$1/vllm_prologue_build.log" 2>&1
    ext=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["so"] or "")' \
      "$1/vllm_prologue_build.json" 2>/dev/null)
  fi
  local abs
  abs=$(cd "$stage" && pwd)
  (
    export KVGEN_CACHE_DIR=$abs/kvgen-cache KVGEN_KVRT_LIB=$abs/lib/libkvrt.so \
      PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
    python3 bench/prologue_gpu.py --bundle "$abs/bench/bench-prologue.bundle.json" \
      ${ext:+--vllm-prologue-ext "$ext"} \
      ${DROPINS_VLLM_EXT:+--vllm-cache-ext "$DROPINS_VLLM_EXT"} \
      ${PROLOGUE_QUICK:+--quick} --out "$1" > "$1/prologue.log" 2>&1
  ) || rc=$?
  sed -n '/^## Targets/,$p' "$1/prologue.md" 2>/dev/null | sed 's/^/prologue: /' \
    >> "$1/summary.txt"
  tail -n 3 "$1/prologue.log" | sed 's/^/prologue: /' >> "$1/summary.txt"
  for f in prologue.json prologue.md; do
    if [ -f "$1/$f" ]; then cp "$1/$f" "$out/"; fi
  done
}
run_bench() {
  bash scripts/bench.sh --budget "${KVBENCH_BUDGET:-540}" \
    ${KVBENCH_PEER:+--peer "$KVBENCH_PEER"} "$stage" "$1" || rc=$?
}
case $what in
suite) run_suite "$logs" ;;
python) run_python "$logs" ;;
bench) run_bench "$logs" ;;
dropins) run_dropins "$logs" ;;
formats) run_formats "$logs" ;;
prologue) run_prologue "$logs" ;;
all)
  GPU_SUITE_TIMEOUT=${GPU_SUITE_TIMEOUT:-150} \
    GPU_SUITE_SANITIZER_TIMEOUT=${GPU_SUITE_SANITIZER_TIMEOUT:-90} \
    run_suite "$logs/suite"
  run_python "$logs/python"
  KVBENCH_BUDGET=${KVBENCH_BUDGET:-250} run_bench "$logs/bench"
  cat "$logs/suite/summary.txt" "$logs/python/summary.txt" \
    "$logs/bench/summary.txt" \
    > "$logs/summary.txt" 2>/dev/null
  ;;
*)
  echo "usage: gpu-run.sh suite|python|bench|dropins|formats|prologue|all [STAGE_DIR] [OUT_DIR]" >&2
  exit 2
  ;;
esac
tar -C "$logs" -czf "$out/$what-logs.tar.gz" .
for f in summary.txt device.txt; do
  if [ -f "$logs/$f" ]; then cp "$logs/$f" "$out/$what-$f"; fi
done
# shellcheck source=scripts/bench-kernels.sh
. scripts/bench-kernels.sh
for f in kvbench-summary.png "kvbench-$(bench_headline_kernel).png"; do
  found=$(find "$logs" -maxdepth 2 -name "$f" | head -n 1)
  if [ -n "$found" ]; then cp "$found" "$out/"; fi
done
exit $rc
