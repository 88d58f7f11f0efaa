#!/usr/bin/env bash
# Copies what the GPU machine needs (it has no MLIR and builds nothing) into
# .device-carry/: the GPU suite, the multi-GPU test, kvbench, the runtime
# example, libkvrt and the bundles kvgen generated here. Then, from the
# device tool:
#   run(command="bash scripts/device-run.sh suite", carry=[".device-carry"])
#   run(command="bash scripts/device-run.sh bench", carry=[".device-carry"])
set -euo pipefail
cd "$(dirname "$0")/.."
build=${KVGEN_BUILD_DIR:-build}
dst=.device-carry
rm -rf "$dst"
mkdir -p "$dst/bin" "$dst/lib" "$dst/bench"
for b in kvgen-gpu-suite kvgen-multi-gpu-test kvbench kvrt-example-paged-append; do
  [ -x "$build/bin/$b" ] && cp "$build/bin/$b" "$dst/bin/"
done
cp "$build"/bin/*.bundle.json "$dst/bin/"
cp -P "$build"/lib/libkvrt.so* "$dst/lib/"
cp "$build"/bench/*.bundle.json "$dst/bench/" 2>/dev/null || true
"$build/bin/kvgen" --emit=bundle --with-cubin -o "$dst/bin/default.bundle.json"
du -sh "$dst"
