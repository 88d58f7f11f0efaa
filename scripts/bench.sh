#!/usr/bin/env bash
# Runs kvbench on the GPU machine over build outputs carried from the build
# machine (the GPU machine has no MLIR: nothing is built here). From the repo
# root:
#
#   scripts/bench.sh [BUNDLE]
#
# BUNDLE defaults to $KVGEN_BUILD_DIR/bench/bench.bundle.json (what the bench's
# CMake generates from bench/bench.mlir). It needs, under $KVGEN_BUILD_DIR
# (default build): bin/kvbench, lib/libkvrt.so*, and the bundle. Without a
# bundle it times the hand-written reference and the ceilings only.
#
# Everything goes under $OUT (default ./bench-out): per kernel a log, JSON,
# CSV, table and PNG, plus a summary PNG and nvidia-smi's view before and
# after. The tables are printed last, the most important (paged_nhd and the
# cross-layout summary) at the very end, because only the end of the output
# may come back.
#
# Environment:
#   KVBENCH_KERNELS  kernels to run (default: all five layouts, paged_nhd first)
#   KVBENCH_ARGS     extra kvbench arguments, e.g. --quick for a smoke test
#   KVBENCH_BUDGET   seconds for all runs together (default 540: the GPU
#                    tool's 600 s per command, minus plotting)
#   KVBENCH_RUN_TIMEOUT  seconds one kvbench run may take (default 240)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

build=${KVGEN_BUILD_DIR:-build}
bundle=${1:-$build/bench/bench.bundle.json}
out=${OUT:-$PWD/bench-out}
kvbench=$build/bin/kvbench
kernels=${KVBENCH_KERNELS:-bench_paged_nhd bench_paged_hnd bench_contiguous bench_vllm_vectorized bench_dual_stacked}
layouts="paged_nhd paged_hnd contiguous vllm_vectorized dual_stacked"
budget=${KVBENCH_BUDGET:-540}
run_timeout=${KVBENCH_RUN_TIMEOUT:-240}
extra_args=${KVBENCH_ARGS:-}
mkdir -p "$out"

if [ ! -x "$kvbench" ]; then
  echo "bench.sh: no $kvbench. Build it on the build machine" \
       "(ninja -C $build kvbench kvbench_bundle) and carry $build/bin/kvbench," \
       "$build/lib/libkvrt.so* and $build/bench/bench.bundle.json." >&2
  exit 2
fi
build=$(cd "$build" && pwd)
kvbench=$build/bin/kvbench
# kvbench finds libkvrt through $ORIGIN/../lib; this covers a moved binary.
export LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# A carry that dropped the soname symlink (libkvrt.so.0.1 -> .so.0.1.0) would
# leave kvbench unable to start: point the soname at the real file.
missing=$(ldd "$kvbench" 2>/dev/null | awk '/libkvrt[^ ]* => not found/ {print $1}')
if [ -n "$missing" ]; then
  real=$(find "$build/lib" -maxdepth 1 -type f -name 'libkvrt.so.*' | head -n 1)
  if [ -n "$real" ]; then
    shim=$(mktemp -d)
    ln -s "$real" "$shim/$missing"
    export LD_LIBRARY_PATH="$shim:$LD_LIBRARY_PATH"
    echo "bench.sh: $missing was missing; using $real"
  fi
fi
ldd "$kvbench" > "$out/ldd-kvbench.txt" 2>&1 || true
if grep -q 'not found' "$out/ldd-kvbench.txt"; then
  echo "bench.sh: kvbench cannot find its libraries:" >&2
  grep 'not found' "$out/ldd-kvbench.txt" >&2
  exit 2
fi

echo "== bench.sh: $(date -u +%FT%TZ), kvbench $kvbench, out $out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw,memory.used \
  --format=csv 2>&1 | tee "$out/nvidia-smi-before.csv"
nvidia-smi -q -d CLOCK,PERFORMANCE > "$out/nvidia-smi-before.txt" 2>&1 || true

start=$(date +%s)
status=0
failed=()
ran=()

# One kvbench run: its own log, a deadline from what is left of the budget.
run_one() {
  local tag=$1
  shift
  local elapsed=$(($(date +%s) - start))
  local left=$((budget - elapsed))
  if [ "$left" -lt 30 ]; then
    echo "== $tag: SKIPPED, ${elapsed}s of the ${budget}s budget used"
    failed+=("$tag (skipped: out of time)")
    status=1
    return
  fi
  local limit=$((left < run_timeout ? left : run_timeout))
  echo "== kvbench $tag (limit ${limit}s): $*"
  local t0
  t0=$(date +%s)
  timeout -k 10 "$limit" "$kvbench" "$@" "$out" > "$out/kvbench-$tag.log" 2>&1
  local rc=$?
  echo "   rc=$rc in $(($(date +%s) - t0))s; log $out/kvbench-$tag.log"
  ran+=("$tag")
  if [ "$rc" -ne 0 ]; then
    status=1
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
      failed+=("$tag (timed out after ${limit}s)")
    elif [ "$rc" -eq 3 ]; then
      failed+=("$tag (the generated kernel failed its check)")
    else
      failed+=("$tag (rc $rc)")
    fi
  fi
}

if [ -f "$bundle" ]; then
  for k in $kernels; do
    # shellcheck disable=SC2086 # extra_args is a list of words
    run_one "$k" --bundle "$bundle" --kernel "$k" $extra_args
  done
else
  echo "bench.sh: NO BUNDLE at $bundle: timing the hand-written reference and" \
       "the ceilings only (no generated kernel)"
  for l in $layouts; do
    # shellcheck disable=SC2086
    run_one "reference_$l" --layout "$l" $extra_args
  done
fi

nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw,memory.used \
  --format=csv > "$out/nvidia-smi-after.csv" 2>&1 || true

jsons=()
for tag in "${ran[@]+"${ran[@]}"}"; do
  [ -f "$out/kvbench-$tag.json" ] && jsons+=("$out/kvbench-$tag.json")
done
if [ ${#jsons[@]} -gt 0 ]; then
  python3 bench/plot.py "${jsons[@]}" --summary "$out/kvbench-summary.png" \
    > "$out/plot.log" 2>&1 || echo "bench.sh: plot.py failed, see $out/plot.log"
fi

# The end of the output: what failed (with the end of its log), every table
# but the first kernel's without its targets, then the first kernel's table
# with its targets, then the one-table summary of all. The same text goes to
# $OUT/summary.txt.
{
  echo
  echo "===================== kvbench results ($(($(date +%s) - start))s) ====================="
  for f in "${failed[@]+"${failed[@]}"}"; do
    tag=${f%% *}
    echo "!! FAILED: $f"
    [ -f "$out/kvbench-$tag.log" ] && tail -n 25 "$out/kvbench-$tag.log" | sed 's/^/   | /'
  done
  first=${ran[0]:-}
  for tag in "${ran[@]+"${ran[@]}"}"; do
    [ "$tag" = "$first" ] && continue
    [ -f "$out/kvbench-$tag.txt" ] && sed '/^targets of /,$d' "$out/kvbench-$tag.txt"
  done
  [ -n "$first" ] && [ -f "$out/kvbench-$first.txt" ] && cat "$out/kvbench-$first.txt"
  if [ ${#jsons[@]} -gt 0 ]; then
    python3 bench/plot.py --print-summary "${jsons[@]}" --summary "$out/kvbench-summary.png" 2>&1 |
      grep -v '^plot.py: wrote'
  fi
  echo "bench.sh: everything is under $out; exit $status"
} 2>&1 | tee "$out/summary.txt"
exit $status
