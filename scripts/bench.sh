#!/usr/bin/env bash
# Runs the bench on a CUDA machine over build outputs made elsewhere (the CUDA
# machine needs no MLIR: nothing is built here). From the repository root:
#
#   scripts/bench.sh [--budget S] [--quick] [--peer PATH] [BUILD_DIR [OUT_DIR]]
#   scripts/bench.sh BUNDLE [OUT_DIR]        (the older form: one bundle file)
#
# BUILD_DIR (default $KVGEN_BUILD_DIR, else build) holds bin/kvbench,
# lib/libkvrt.so* and bench/*.bundle.json (what bench/CMakeLists.txt builds,
# or what scripts/stage-gpu.sh copies). Everything goes under OUT_DIR
# (default ./bench-out).
#
# What runs, most important first, each only while the budget lasts (a run
# that would start with less than 30 s left is reported as skipped). The
# kernels are those bench/*.mlir define, in their order
# (scripts/bench-kernels.sh); the headline kernel is bench/bench.mlir's first
# (bf16, paged NHD, 8 x 128, block 16):
#   1. kvbench on the headline kernel;
#   2. side_by_side.py: the same kernel (and bench-quant.mlir's first, fp8,
#      if built) beside the peer's Triton append in one process, if --peer
#      (or $KVBENCH_PEER) names the peer's file;
#   3. kvbench on the quantized rows (bench-quant.mlir), on the headline
#      kernel's other shapes in bench.mlir (named after it: block 512), on
#      bench-shapes.mlir's (block 528) and on the MLA latent rows, bf16,
#      fp8 and fp8_ds_mla (bench-mla.mlir): a bundle or kernel that is not
#      there is skipped, saying which CMake option builds it;
#   4. kvbench on bench.mlir's other kernels: the other layouts.
# Without any bundle it times the hand-written reference and the ceilings
# only. The tables are printed last, the most important at the very end
# (where a reader of a long log looks first), and kept in OUT_DIR/summary.txt.
#
# Options and environment:
#   --budget S       seconds for all runs together (default $KVBENCH_BUDGET,
#                    else 540)
#   --quick          every run with --quick: a smoke test, not a measurement
#   --peer PATH      the peer's kv_append_triton.py (default $KVBENCH_PEER)
#   KVBENCH_KERNELS  kvbench kernels to run instead of the list above
#   KVBENCH_ARGS     extra kvbench arguments
#   KVBENCH_RUN_TIMEOUT  seconds one run may take (default 240)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
# shellcheck source=scripts/bench-kernels.sh
. scripts/bench-kernels.sh

usage() {
  sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
}

budget=${KVBENCH_BUDGET:-540}
quick=
peer=${KVBENCH_PEER:-}
positional=()
while [ $# -gt 0 ]; do
  case $1 in
  --budget)
    [ $# -ge 2 ] || { echo "bench.sh: --budget needs seconds" >&2; exit 2; }
    budget=$2
    shift 2
    ;;
  --quick) quick=--quick; shift ;;
  --peer)
    [ $# -ge 2 ] || { echo "bench.sh: --peer needs a path" >&2; exit 2; }
    peer=$2
    shift 2
    ;;
  -h | --help) usage; exit 0 ;;
  -*) echo "bench.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  *) positional+=("$1"); shift ;;
  esac
done
case $budget in
'' | *[!0-9]*) echo "bench.sh: --budget takes whole seconds, not '$budget'" >&2; exit 2 ;;
esac
if [ ${#positional[@]} -gt 2 ]; then
  echo "bench.sh: at most BUILD_DIR and OUT_DIR, got: ${positional[*]}" >&2
  exit 2
fi

# The older form names a bundle file; the build is then $KVGEN_BUILD_DIR and
# the other bundles are looked for beside the one given.
build=${KVGEN_BUILD_DIR:-build}
out=$PWD/bench-out
bundle_dir=
main_bundle=
if [ ${#positional[@]} -ge 1 ]; then
  if [ -f "${positional[0]}" ] || [[ ${positional[0]} == *.json ]]; then
    main_bundle=${positional[0]}
    bundle_dir=$(dirname "$main_bundle")
  else
    build=${positional[0]}
  fi
fi
[ ${#positional[@]} -ge 2 ] && out=${positional[1]}
bundle_dir=${bundle_dir:-$build/bench}
main_bundle=${main_bundle:-$bundle_dir/bench.bundle.json}
quant_bundle=$bundle_dir/bench-quant.bundle.json
shapes_bundle=$bundle_dir/bench-shapes.bundle.json
mla_bundle=$bundle_dir/bench-mla.bundle.json
run_timeout=${KVBENCH_RUN_TIMEOUT:-240}
extra_args=${KVBENCH_ARGS:-}
mkdir -p "$out"
out=$(cd "$out" && pwd)

# kvrt's checked mode copies the slots to the host before every launch: it
# would time a different path and cannot be captured in a graph.
if [ -n "${KVRT_CHECKED:-}" ]; then
  echo "bench.sh: KVRT_CHECKED is set; unset for the bench (it times kvrt's plain path)"
  unset KVRT_CHECKED
fi

kvbench=$build/bin/kvbench
if [ ! -x "$kvbench" ]; then
  echo "bench.sh: no $kvbench. Build it where MLIR is (ninja -C BUILD kvbench" \
       "kvbench_bundle), or stage a build with scripts/stage-gpu.sh, and copy" \
       "bin/kvbench, lib/libkvrt.so* and bench/*.bundle.json here." >&2
  exit 2
fi
build=$(cd "$build" && pwd)
kvbench=$build/bin/kvbench
# kvbench finds libkvrt through $ORIGIN/../lib; this covers a moved binary.
export LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# A copy that dropped the soname symlink (libkvrt.so.0.1 -> .so.0.1.0) would
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

echo "== bench.sh: $(date -u +%FT%TZ), kvbench $kvbench, out $out, budget ${budget}s${quick:+, QUICK}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw,memory.used \
  --format=csv 2>&1 | tee "$out/nvidia-smi-before.csv"
nvidia-smi -q -d CLOCK,PERFORMANCE > "$out/nvidia-smi-before.txt" 2>&1 || true

start=$(date +%s)
status=0
failed=()
skipped=()
ran=()

# The seconds a run may take now, or nothing if too little is left.
limit_now() {
  local left=$((budget - ($(date +%s) - start)))
  [ "$left" -ge 30 ] || return 1
  echo $((left < run_timeout ? left : run_timeout))
}

# One kvbench run: its own log, a deadline from what is left of the budget.
run_kvbench() {
  local tag=$1
  shift
  local limit
  if ! limit=$(limit_now); then
    skipped+=("$tag (out of time: $(($(date +%s) - start))s of ${budget}s used)")
    return
  fi
  echo "== kvbench $tag (limit ${limit}s): $*"
  local t0
  t0=$(date +%s)
  # shellcheck disable=SC2086 # extra_args and quick are lists of words
  timeout -k 10 "$limit" "$kvbench" "$@" --targets bench/targets.json $quick \
    $extra_args "$out" > "$out/kvbench-$tag.log" 2>&1
  local rc=$?
  echo "   rc=$rc in $(($(date +%s) - t0))s; log $out/kvbench-$tag.log"
  case $rc in
  0) ran+=("$tag") ;;
  4) skipped+=("$tag (not in the bundle: $(tail -n 1 "$out/kvbench-$tag.log" | cut -c1-160))") ;;
  124 | 137) ran+=("$tag"); failed+=("$tag (timed out after ${limit}s)"); status=1 ;;
  3) ran+=("$tag"); failed+=("$tag (the generated kernel failed its check or was refused)"); status=1 ;;
  *) ran+=("$tag"); failed+=("$tag (rc $rc)"); status=1 ;;
  esac
}

# A kernel of a bundle that may not have been built: skipped, saying how.
run_kernel() {
  local bundle=$1 kernel=$2 how=$3
  if [ ! -f "$bundle" ]; then
    skipped+=("$kernel (no $(basename "$bundle"): $how)")
    return
  fi
  run_kvbench "$kernel" --bundle "$bundle" --kernel "$kernel"
}

run_side_by_side() {
  if [ -z "$peer" ]; then
    skipped+=("side_by_side (no --peer and no KVBENCH_PEER: the peer's file is not part of the repository)")
    return
  fi
  local limit
  if ! limit=$(limit_now); then
    skipped+=("side_by_side (out of time)")
    return
  fi
  local args=(--peer "$peer" --bundle "$main_bundle" --kernel "$headline"
              --out "$out")
  if [ -f "$quant_bundle" ]; then
    args+=(--bundle "$quant_bundle" --kernel "$(bench_kernels bench-quant | head -n 1)")
  fi
  echo "== side_by_side (limit ${limit}s): ${args[*]}"
  local t0
  t0=$(date +%s)
  # side_by_side_gpu.py takes kvrt's ctypes structs from the Python package.
  PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" \
    timeout -k 10 "$limit" python3 bench/side_by_side.py "${args[@]}" $quick \
    --kvrt-lib "$(find "$build/lib" -maxdepth 1 -type f -name 'libkvrt.so*' | head -n 1)" \
    > "$out/side_by_side.log" 2>&1
  local rc=$?
  echo "   rc=$rc in $(($(date +%s) - t0))s; log $out/side_by_side.log"
  if [ "$rc" -ne 0 ]; then
    status=1
    failed+=("side_by_side (rc $rc$([ "$rc" -eq 3 ] && echo ': kvgen and the peer disagree'))")
  fi
}

headline=$(bench_headline_kernel)
quant_how="configure with -DKVBENCH_QUANT_ROWS=ON (a kvgen that lowers quantized caches)"
shapes_how="configure with -DKVBENCH_SHAPE_ROWS=ON (a kvgen that takes any block size)"
mla_how="configure with -DKVBENCH_MLA_ROWS=ON (a kvgen that has kv.mla_append)"
if [ -n "${KVBENCH_KERNELS:-}" ]; then
  # Each kernel from the bundle whose description defines it.
  for k in $KVBENCH_KERNELS; do
    b=$main_bundle how="build the bench bundle"
    if bench_kernels bench-quant | grep -qx -- "$k"; then
      b=$quant_bundle how=$quant_how
    elif bench_kernels bench-shapes | grep -qx -- "$k"; then
      b=$shapes_bundle how=$shapes_how
    elif bench_kernels bench-mla | grep -qx -- "$k"; then
      b=$mla_bundle how=$mla_how
    fi
    run_kernel "$b" "$k" "$how"
  done
elif [ -f "$main_bundle" ]; then
  run_kernel "$main_bundle" "$headline" "build the bench bundle"
  run_side_by_side
  for k in $(bench_kernels bench-quant); do
    run_kernel "$quant_bundle" "$k" "$quant_how"
  done
  for k in $(bench_kernels bench | grep -x -- "${headline}_.*"); do
    run_kernel "$main_bundle" "$k" "build the bench bundle"
  done
  for k in $(bench_kernels bench-shapes); do
    run_kernel "$shapes_bundle" "$k" "$shapes_how"
  done
  for k in $(bench_kernels bench-mla); do
    run_kernel "$mla_bundle" "$k" "$mla_how"
  done
  for k in $(bench_kernels bench | grep -vx -e "$headline" -e "${headline}_.*"); do
    run_kernel "$main_bundle" "$k" "build the bench bundle"
  done
else
  echo "bench.sh: NO BUNDLE at $main_bundle: timing the hand-written reference" \
       "and the ceilings only (no generated kernel)"
  # The headline kernel's layout first: the layout the targets are set for.
  layout=$(bench_headline_layout)
  for l in "$layout" $("$kvbench" --list-layouts | grep -vx -- "$layout"); do
    run_kvbench "reference_$l" --layout "$l"
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

# The end of the output: what was skipped and what failed (with the end of
# its log), every kvbench table but the first without its targets, the first
# with them, the side-by-side table, then the one-table summary of all.
{
  echo
  echo "===================== bench results ($(($(date +%s) - start))s of ${budget}s) ====================="
  for s in "${skipped[@]+"${skipped[@]}"}"; do
    echo "-- SKIPPED: $s"
  done
  for f in "${failed[@]+"${failed[@]}"}"; do
    tag=${f%% *}
    echo "!! FAILED: $f"
    log=$out/kvbench-$tag.log
    [ "$tag" = side_by_side ] && log=$out/side_by_side.log
    [ -f "$log" ] && tail -n 25 "$log" | sed 's/^/   | /'
  done
  first=${ran[0]:-}
  for tag in "${ran[@]+"${ran[@]}"}"; do
    [ "$tag" = "$first" ] && continue
    [ -f "$out/kvbench-$tag.txt" ] && sed '/^targets of /,$d' "$out/kvbench-$tag.txt"
  done
  [ -n "$first" ] && [ -f "$out/kvbench-$first.txt" ] && cat "$out/kvbench-$first.txt"
  [ -f "$out/side_by_side.md" ] && { echo; cat "$out/side_by_side.md"; }
  if [ ${#jsons[@]} -gt 0 ]; then
    python3 bench/plot.py --print-summary "${jsons[@]}" --summary "$out/kvbench-summary.png" 2>&1 |
      grep -v '^plot.py: wrote'
  fi
  echo "bench.sh: everything is under $out; exit $status"
} 2>&1 | tee "$out/summary.txt"
exit $status
