#!/usr/bin/env bash
# bench/stage_formats.sh VLLM_SRC [BUILD_DIR] [DEST]
#
# Stages what bench/formats_gpu.py needs on a CUDA machine that has no kvgen
# compiler into DEST (default BUILD_DIR/gpu-stage, the folder of
# scripts/stage-gpu.sh; added to it when it is there):
#   DEST/lib          libkvrt and the package's binding (when not there yet)
#   DEST/kvgen-cache  the rows' kernels for $KVGEN_CHIP (default sm_90): the
#                     rows run at tiny sizes on this CPU (--precompile), every
#                     description they used is compiled for the GPU, then the
#                     rows run again with no compiler (--cpu-dry-run), which
#                     checks them and finds every GPU kernel in the cache
#   DEST/vllm_src     vLLM 0.26's csrc/ and LICENSE from VLLM_SRC, for
#                     bench/peers/vllm_formats/build.py on the CUDA machine
#                     (third-party code: DEST is ignored by git)
# Then, there: scripts/gpu-run.sh formats DEST.
# $KVGEN_PYTHON (default python3) must import torch.
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:?usage: bench/stage_formats.sh VLLM_SRC [BUILD_DIR] [DEST]}
build=${2:-${KVGEN_BUILD_DIR:-build}}
dst=${3:-$build/gpu-stage}
py=${KVGEN_PYTHON:-python3}
if [ ! -f "$src/csrc/libtorch_stable/cache_kernels.cu" ]; then
  echo "stage_formats: $src/csrc/libtorch_stable/cache_kernels.cu not found" \
    "(VLLM_SRC is vLLM 0.26's sdist, extracted)" >&2
  exit 1
fi
mkdir -p "$dst/lib" "$dst/kvgen-cache"
build=$(cd "$build" && pwd)
dst=$(cd "$dst" && pwd)
if [ ! -e "$dst/lib/libkvrt.so" ]; then cp -P "$build"/lib/libkvrt.so* "$dst/lib/"; fi
if [ ! -e "$dst/lib/_kvext.abi3.so" ]; then cp "$build"/lib/_kvext.abi3.so "$dst/lib/"; fi
export KVGEN_KVRT_LIB=$build/lib/libkvrt.so PYTHONPATH=$PWD/python
KVGEN_COMPILER=$build/bin/kvgen "$py" bench/formats_gpu.py \
  --precompile "$dst/kvgen-cache" | tail -n 2
env -u KVGEN_COMPILER KVGEN_CACHE_DIR="$dst/kvgen-cache" "$py" \
  bench/formats_gpu.py --cpu-dry-run | tail -n 2
rm -rf "$dst/vllm_src"
mkdir -p "$dst/vllm_src"
cp -r "$src/csrc" "$dst/vllm_src/"
cp "$src/LICENSE" "$dst/vllm_src/" 2>/dev/null || true
du -sh "$dst"
