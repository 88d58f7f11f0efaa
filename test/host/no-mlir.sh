#!/usr/bin/env bash
# no-mlir.sh BINARY: fails if BINARY needs libMLIR or libLLVM (ldd), which
# the GPU machine does not have.
set -u
out=$(ldd "$1") || exit 1
if printf '%s\n' "$out" | grep -iE 'lib(MLIR|LLVM)'; then
  echo "$1 needs MLIR or LLVM"
  exit 1
fi
echo "$1: no MLIR or LLVM"
