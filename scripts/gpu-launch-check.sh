#!/usr/bin/env bash
# scripts/gpu-launch-check.sh [STAGE_DIR] [OUT_DIR]
#
# The launch side on a CUDA machine, over a folder made by scripts/stage-gpu.sh
# (default build/gpu-stage): programmatic dependent launch in a graph after a
# producer (bench/pdl_graph_gpu.py, bytes checked), the Python GPU test of it,
# kvbench's launch path (kvrt eager over an empty kernel) for the headline
# kernel and the slowest one, and the Python per-call times
# (python/bench_eager.py).
# Prints a summary; exits non-zero on a wrong byte or a failed test.
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-kernels.sh
. scripts/bench-kernels.sh
# The one kernel this script names: beside the headline kernel, the one
# whose eager path was slowest in the last run (a measured choice, not a
# rule the descriptions could give).
eager_kernel=bench_dual_stacked
stage=${1:-build/gpu-stage}
out=${2:-$stage/launch-logs}
mkdir -p "$out"
export KVGEN_KVRT_LIB=$PWD/$stage/lib/libkvrt.so PYTHONPATH=$PWD/python \
  KVGEN_CACHE_DIR=$PWD/$stage/kvgen-cache KVGEN_BUILD_DIR=$stage
rc=0
echo "== programmatic dependent launch, graph of layers (us per layer)"
timeout 70 python3 bench/pdl_graph_gpu.py --stage "$stage" \
  --json "$out/pdl_graph.json" 2>&1 | tee "$out/pdl_graph.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
echo "== pytest: programmatic launch after a producer"
timeout 35 python3 -m pytest -q -rs -k programmatic python/tests/test_gpu.py \
  > "$out/pytest_pdl.log" 2>&1 || rc=1
tail -n 2 "$out/pytest_pdl.log"
echo "== kvbench launch path (kvrt eager / empty kernel)"
# The full run for the headline kernel (bench/bench.mlir's first,
# scripts/bench-kernels.sh); eager_kernel with --quick, to stay within a
# few minutes. A kvbench failure is reported, not counted: its
# sweeps are the kernels' business.
for kernel in "$(bench_headline_kernel):65" "$eager_kernel:35:--quick"; do
  IFS=: read -r name limit quick <<< "$kernel"
  LD_LIBRARY_PATH=$stage/lib timeout "$limit" "$stage/bin/kvbench" \
    --bundle "$stage/bench/bench.bundle.json" --kernel "$name" $quick \
    "$out/kvbench-$name" > "$out/kvbench-$name.log" 2>&1 ||
    echo "$name: kvbench rc=$?"
  echo "$name: $(grep -m1 'launch path' "$out/kvbench-$name.log")"
done
echo "== Python eager per call (us)"
timeout 35 python3 python/bench_eager.py --iters 2000 --tokens 1,64,4096 \
  --json "$out/bench_eager.json" 2>&1 | tee "$out/bench_eager.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
echo "gpu-launch-check: rc=$rc"
exit $rc
