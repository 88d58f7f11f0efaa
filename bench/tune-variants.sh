#!/usr/bin/env bash
# bench/tune-variants.sh [BUILD_DIR] [DEST]
#
# Builds the kernel-plan alternatives that docs/dev/TUNING.md compares, one
# bundle each, for bench/side_by_side.py to time in one process beside the
# peer: the bench's paged NHD descriptions (8 x 128, block 16, from bf16) in
# bf16, fp8 e4m3 per tensor (static) and int8 per (token, head) (dynamic),
# each built with the plan's own choices (t_*) and with the tuning overrides
# of kvgen (--kvgen-noalias, --kvgen-min-blocks-per-sm,
# --kvgen-fast-division, --kvgen-chunks-per-thread,
# --kvgen-tokens-per-block, --kvgen-wide-min-tokens; --kvgen-elide-token-check
# is another). With BASE_KVGEN set to another kvgen, the same
# descriptions are also built by it (base_*): the kernels before a change,
# timed in the same run. Kernel names are <variant>_append; DEST gets
# tune-<variant>.bundle.json and variants.txt (variant, kernel, flags).
# Runs where kvgen runs (the build machine); the GPU machine needs only DEST.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-kernels.sh
. scripts/bench-kernels.sh
build=${1:-${KVGEN_BUILD_DIR:-build}}
dst=${2:-$build/gpu-stage/tune}
kvgen=$build/bin/kvgen
mkdir -p "$dst"
: > "$dst/variants.txt"

shape=(--layout="$(bench_headline_layout)" --block-size=16 --num-kv-heads=8 --head-dim=128
  --dtype=bf16 --kernels=append)
declare -A quant=(
  [bf16]=""
  [fp8]="--quant=fp8_e4m3,per_tensor,static"
  [i8]="--quant=int8,per_token_head,dynamic"
)

# variant cache flags...
variant() {
  local name=$1 cache=$2 compiler=$3
  shift 3
  # shellcheck disable=SC2086 # the quant flag is one word or none
  "$compiler" "${shape[@]}" ${quant[$cache]} --name="$name" "$@" \
    --emit=bundle --with-cubin -o "$dst/tune-$name.bundle.json"
  echo "$name ${name}_append $*" >> "$dst/variants.txt"
}

if [ -n "${BASE_KVGEN:-}" ]; then
  for cache in bf16 fp8 i8; do
    variant "base_$cache" "$cache" "$BASE_KVGEN"
  done
fi
for cache in bf16 fp8 i8; do
  variant "t_$cache" "$cache" "$kvgen"
done
# This round's alternatives (docs/dev/TUNING.md, the wide kernel): the
# wide kernel's shape, each built as the only kernel of its bundle (no wide
# variant, so kvrt launches it at every size): one chunk a thread (the
# vector kernel), two chunks and 2 tokens a block (the wide kernel before
# four chunks), four chunks and 2, 4 (the wide kernel since) or 8 tokens a
# block; fp8 e4m3 per tensor with one, two and four chunks.
alone=(--kvgen-wide-min-tokens=0)
variant c1_bf16 bf16 "$kvgen" "${alone[@]}"
variant c2t2_bf16 bf16 "$kvgen" "${alone[@]}" --kvgen-chunks-per-thread=2 \
  --kvgen-tokens-per-block=2
for t in 2 4 8; do
  variant "c4t${t}_bf16" bf16 "$kvgen" "${alone[@]}" \
    --kvgen-chunks-per-thread=4 --kvgen-tokens-per-block=$t
done
for c in 1 2 4; do
  variant "c${c}_fp8" fp8 "$kvgen" "${alone[@]}" --kvgen-chunks-per-thread=$c
done
cat "$dst/variants.txt"
