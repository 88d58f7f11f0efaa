#!/usr/bin/env bash
# scripts/stage-gpu.sh [BUILD_DIR] [DEST]
#
# Copies what a CUDA machine needs to run kvgen's GPU checks into DEST
# (default: BUILD_DIR/gpu-stage): the GPU suite and its bundles, the multi-GPU
# test, kvbench and its bundle, the runtime example, libkvrt, the Python
# package's pieces and the default bundle (with a cubin). The CUDA machine
# needs no MLIR and builds nothing: it runs scripts/gpu-run.sh over DEST.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-${KVGEN_BUILD_DIR:-build}}
dst=${2:-$build/gpu-stage}
rm -rf "$dst"
mkdir -p "$dst/bin" "$dst/lib" "$dst/bench"
for b in kvgen-gpu-suite kvgen-multi-gpu-test kvbench kvrt-example-paged-append; do
  if [ -x "$build/bin/$b" ]; then cp "$build/bin/$b" "$dst/bin/"; fi
done
cp "$build"/bin/*.bundle.json "$dst/bin/" 2>/dev/null || true
cp -P "$build"/lib/libkvrt.so* "$dst/lib/"
cp "$build"/bench/*.bundle.json "$dst/bench/" 2>/dev/null || true
"$build/bin/kvgen" --emit=bundle --with-cubin -o "$dst/bin/default.bundle.json"
du -sh "$dst"
