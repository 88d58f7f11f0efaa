#!/usr/bin/env bash
# The README's main job: generate the default kernels from the embedded
# default description (a Llama-3-8B-like paged NHD bf16 cache), then run them
# where we can: on this CPU through kvgen's host target and kvrt (always),
# and on the GPU through the runtime example (when there is one).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build=${KVGEN_BUILD_DIR:-build}
out=${KVGEN_OUT:-$build/out}
mkdir -p "$out"

echo "== kvgen: the default description"
"$build/bin/kvgen" --emit=kv
"$build/bin/kvgen" --emit=bundle -o "$out/default.bundle.json"
"$build/bin/kvgen" --emit=ptx -o "$out/default.ptx"
echo "wrote $out/default.bundle.json and $out/default.ptx ($(grep -c '^.visible .entry' "$out/default.ptx") kernels)"

echo "== host target: append into host caches through kvrt, check every byte"
"$build/bin/kvgen-host-suite" --default

echo "== GPU: the runtime example"
if [ -x "$build/bin/kvrt-example-paged-append" ]; then
  "$build/bin/kvrt-example-paged-append" "$out/default.bundle.json" || {
    rc=$?; [ $rc -eq 77 ] || exit $rc; }
else
  echo "skipped: the runtime example was not built"
fi
