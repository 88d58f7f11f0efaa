#!/usr/bin/env bash
# scripts/stage-gpu.sh [BUILD_DIR] [DEST]
#
# Copies what a CUDA machine needs to run kvgen's GPU checks into DEST
# (default: BUILD_DIR/gpu-stage): the GPU suite and its bundles, the multi-GPU
# test, kvrt's GPU test and its reference bundles, kvbench and its bundles,
# the runtime example, libkvrt, the Python package's precompiled kernels and
# the default bundle (with a cubin), the prologue benchmark's bundle, and the
# fused prologue's runners (kvgen-prologue-gpu, kvgen-prologue-mla-gpu) with
# their kernels' PTX in DEST/prologue and DEST/prologue-mla. The CUDA
# machine needs no MLIR and builds nothing: it runs scripts/gpu-run.sh over
# DEST.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-${KVGEN_BUILD_DIR:-build}}
dst=${2:-$build/gpu-stage}
rm -rf "$dst"
mkdir -p "$dst/bin" "$dst/lib" "$dst/bench"
for b in kvgen-gpu-suite kvgen-multi-gpu-test kvbench kvrt-example-paged-append \
  kvrt_gpu_test kvgen-prologue-gpu kvgen-prologue-mla-gpu; do
  if [ -x "$build/bin/$b" ]; then cp "$build/bin/$b" "$dst/bin/"; fi
done
cp "$build"/bin/*.bundle.json "$dst/bin/" 2>/dev/null || true
cp -P "$build"/lib/libkvrt.so* "$dst/lib/"
cp "$build"/lib/_kvext.abi3.so "$dst/lib/"
cp "$build"/bench/*.bundle.json "$dst/bench/" 2>/dev/null || true
cp "$build"/test/gpu/kvrt/reference*.bundle.json "$dst/bin/" 2>/dev/null || true
# The Python package's GPU tests find their kernels in a cache filled here:
# the CUDA machine has no compiler. precompile's layouts default to vLLM's
# two (NHD and HND).
KVGEN_COMPILER="$build/bin/kvgen" PYTHONPATH=python python3 -m kvgen precompile \
  --cache-dir "$dst/kvgen-cache" --target gpu --chip sm_90 --num-kv-heads 8 \
  --head-dim 128 --block-size 16 --dtypes bf16,f16,f32 \
  --kv-cache-dtypes auto,fp8_e4m3,fp8_e5m2 --scales per_tensor,per_head
# ... and DeepSeek-V3's MLA latent cache (concat_and_cache_mla's tests).
KVGEN_COMPILER="$build/bin/kvgen" PYTHONPATH=python python3 -m kvgen precompile \
  --cache-dir "$dst/kvgen-cache" --target gpu --chip sm_90 --mla 512+64 \
  --block-size 64 --dtypes bf16 --kv-cache-dtypes auto,fp8_e4m3
"$build/bin/kvgen" --emit=bundle --with-cubin -o "$dst/bin/default.bundle.json"
# The fused prologue's benchmark (bench/prologue_gpu.py): its kernels beside
# the plain appends of the same caches, with a cubin.
"$build/bin/kvgen" bench/bench-prologue.mlir --emit=bundle --with-cubin \
  -o "$dst/bench/bench-prologue.bundle.json"
# ... and the kernels its drop-in rows compile on first use
# (kvgen.vllm.fused_qk_norm_rope_and_reshape_and_cache_flash, Qwen3's shapes,
# bf16 and fp8 caches, the fields it passes kvgen.compile), in the cache,
# since the CUDA machine has no compiler.
KVGEN_COMPILER="$build/bin/kvgen" PYTHONPATH=python python3 - "$dst/kvgen-cache" <<'EOF'
import sys

from kvgen import compiler

prologue = dict(q_heads=32, norm="rms", rope="neox", rotary_dim=128)
for cache_dtype, quant in (("bf16", None),
                           ("f8E4M3FN", ("fp8_e4m3", "per_tensor", "static"))):
    compiler.cache_entry(
        layout=compiler._VLLM_LAYOUTS["NHD"], block_size=16, num_kv_heads=8,
        head_dim=128, dtype="bf16", cache_dtype=cache_dtype, quant=quant,
        kernels=("append",), name="kv_prologue", prologue=prologue,
        target="gpu", chip="sm_90", cache=sys.argv[1])
# kvgen.flashinfer.rope_quantize_fp8_append_paged_kv_cache's kernel, the
# benchmark's shapes (its _kernel's fields).
compiler.cache_entry(
    layout=compiler._VLLM_LAYOUTS["NHD"], block_size=16, num_kv_heads=8,
    head_dim=128, dtype="bf16", cache_dtype="f8E4M3FN",
    quant=("fp8_e4m3", "per_tensor", "static"), kernels=("paged_kv_append",),
    name="kv_flashinfer_rope",
    prologue=dict(q_heads=32, rope="neox", rotary_dim=128, q_quant="fp8_e4m3",
                  cos_sin="f32"),
    target="gpu", chip="sm_90", cache=sys.argv[1])
EOF
# The fused prologue's suites: their kernels' PTX, plans and input seeds, for
# kvgen-prologue-gpu and kvgen-prologue-mla-gpu (the CUDA machine cannot
# compile the descriptions).
if [ -x "$build/bin/kvgen-prologue-suite" ]; then
  "$build/bin/kvgen-prologue-suite" --emit-gpu="$dst/prologue" --chip=sm_90
fi
if [ -x "$build/bin/kvgen-prologue-mla-suite" ]; then
  "$build/bin/kvgen-prologue-mla-suite" --emit-gpu="$dst/prologue-mla" --chip=sm_90
fi
du -sh "$dst"
