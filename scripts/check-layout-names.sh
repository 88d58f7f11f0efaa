#!/usr/bin/env bash
# scripts/check-layout-names.sh [REPO_ROOT]
#
# Checks that no code names a layout outside the ABI's vocabulary (README,
# "How to add a layout"): every place that depends on a layout asks its
# traits, so that a layout is one line of include/kvgen/ABI/Layouts.def. The
# names are read from Layouts.def. Allowed: the vocabulary, the tests, the
# docs, data (the .mlir descriptions, a `!kv.cache<layout = ...>` written
# anywhere, bench/targets.json, the fuzz dictionaries and corpora), one
# constant per adapter of an external layout (_VLLM_LAYOUTS, PEER_LAYOUT).
# A name that is also an English word (contiguous) counts where it is a
# name: quoted, after `layout =` or `--layout=`, or inside an identifier
# (not PyTorch's `Tensor.is_contiguous()`).
# Prints each offending line and exits 1; needs a git checkout.
set -uo pipefail
cd "${1:-$(dirname "$0")/..}" || exit 2
git rev-parse --is-inside-work-tree > /dev/null 2>&1 || {
  echo "check-layout-names.sh: not a git checkout" >&2
  exit 2
}
names=$(sed -n 's/^KVGEN_ABI_LAYOUT([A-Za-z]*, "\([a-z_]*\)".*/\1/p' \
  include/kvgen/ABI/Layouts.def)
[ -n "$names" ] || { echo "check-layout-names.sh: no layout in Layouts.def" >&2; exit 2; }
patterns=()
for name in $names; do
  case $name in
  *_*) patterns+=(-e "$name") ;;
  *) patterns+=(-e "[\"'\`]${name}[\"'\`]" -e "layout *= *$name\\b" -e "[A-Za-z0-9]_$name\\b") ;;
  esac
done
hits=$(git grep -n -E "${patterns[@]}" -- . \
  ':!include/kvgen/ABI/Layouts.def' ':!docs' ':!*.md' ':!test' ':!*/test/*' \
  ':!python/tests' ':!*.mlir' ':!fuzz' ':!bench/targets.json' |
  grep -v -E 'kv\.cache<layout = |^[^:]*:[0-9]+:(_VLLM_LAYOUTS|PEER_LAYOUT) = ' |
  while IFS= read -r line; do
    if grep -q -E "${patterns[@]}" <<< "${line//is_contiguous(/}"; then
      echo "$line"
    fi
  done)
if [ -n "$hits" ]; then
  echo "check-layout-names.sh: code names a layout; ask its traits (abi::layoutInfo) instead:"
  echo "$hits"
  exit 1
fi
echo "check-layout-names.sh: no layout names outside the vocabulary ($(echo "$names" | wc -w) layouts)"
