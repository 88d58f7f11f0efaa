# shellcheck shell=bash
# Sourced by the scripts that run kvbench. A bench bundle's kernels are read
# off its description (bench/NAME.mlir, which bench/CMakeLists.txt compiles
# into NAME.bundle.json), in the description's order, so that the scripts
# name no kernel and no layout: a row added to a description is run, and
# the headline row is whatever bench/bench.mlir defines first (the row
# bench/targets.json's first target is set for). The descriptions are read
# even where a bundle was not built, to say which of its kernels are skipped.

bench_descriptions=$(cd "$(dirname "${BASH_SOURCE[0]}")/../bench" && pwd)

# bench_kernels NAME: the kernels bench/NAME.mlir defines, one a line (each
# kv op's symbol; the scalar variants NAME_scalar are not listed).
bench_kernels() {
  sed -n 's/^[[:space:]]*kv\.[a-z_]*[[:space:]]*@\([A-Za-z0-9_]*\).*/\1/p' \
    "$bench_descriptions/$1.mlir"
}

# bench_headline_kernel: the first kernel of bench/bench.mlir.
bench_headline_kernel() {
  bench_kernels bench | head -n 1
}

# bench_headline_layout: that kernel's layout (its description states it on
# the op's first line).
bench_headline_layout() {
  sed -n 's/^[[:space:]]*kv\.[a-z_]*[[:space:]]*@.*layout = \([a-z_]*\).*/\1/p' \
    "$bench_descriptions/bench.mlir" | head -n 1
}
