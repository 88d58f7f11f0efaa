#!/usr/bin/env bash
# Runs on the GPU machine over .device-carry/ (scripts/prepare-device.sh):
#   device-run.sh suite   the GPU suite, under compute-sanitizer too, and the
#                         runtime example
#   device-run.sh bench   kvbench for every layout, with the ceilings
#   device-run.sh all     both, in one call (one machine start), with time
#                         limits that keep the call under 10 minutes
# Everything it writes under $OUT is packed into one archive (the device tool
# returns at most 8 files), plus the summary in plain text.
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:-suite}
carry=.device-carry
logs=$(mktemp -d)
export KVGEN_BUILD_DIR=$carry
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
} > "$logs/device.txt" 2>&1
rc=0
case $what in
suite)
  KVRT_EXAMPLE_BUNDLES="$carry/bin/default.bundle.json" OUT=$logs \
    bash scripts/gpu-suite.sh "$carry" || rc=$?
  ;;
bench)
  OUT=$logs bash scripts/bench.sh "$carry/bench/bench.bundle.json" || rc=$?
  ;;
all)
  GPU_SUITE_TIMEOUT=${GPU_SUITE_TIMEOUT:-150} \
    GPU_SUITE_SANITIZER_TIMEOUT=${GPU_SUITE_SANITIZER_TIMEOUT:-90} \
    KVRT_EXAMPLE_BUNDLES="$carry/bin/default.bundle.json" OUT=$logs/suite \
    bash scripts/gpu-suite.sh "$carry" || rc=$?
  KVBENCH_BUDGET=${KVBENCH_BUDGET:-250} OUT=$logs/bench \
    bash scripts/bench.sh "$carry/bench/bench.bundle.json" || rc=$?
  cat "$logs/suite/summary.txt" "$logs/bench/summary.txt" > "$logs/summary.txt" 2>/dev/null
  ;;
*)
  echo "usage: device-run.sh suite|bench|all" >&2
  exit 2
  ;;
esac
if [ -n "${OUT:-}" ]; then
  tar -C "$logs" -czf "$OUT/$what-logs.tar.gz" .
  for f in summary.txt device.txt; do
    [ -f "$logs/$f" ] && cp "$logs/$f" "$OUT/$what-$f"
  done
  # The plots, for docs/ (the rest is in the archive).
  for f in kvbench-summary.png kvbench-bench_paged_nhd.png; do
    found=$(find "$logs" -maxdepth 2 -name "$f" | head -n 1)
    [ -n "$found" ] && cp "$found" "$OUT/"
  done
fi
exit $rc
