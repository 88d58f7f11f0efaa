// RUN: kvgen-opt %s -split-input-file -verify-diagnostics | FileCheck %s

// `kv.name` on a kernel parameter names it by its ABI name
// (include/kvgen/ABI/Params.def), on any function-like op: the kv dialect
// verifies it wherever it appears.

// CHECK-LABEL: func.func @named(
// CHECK-SAME: {kv.name = "key"}
// CHECK-SAME: {kv.name = "num_tokens"}
// CHECK-SAME: {kv.name = "k_pe_stride_dim"}
func.func @named(%k: memref<?xbf16> {kv.name = "key"},
                 %n: i64 {kv.name = "num_tokens"},
                 %s: i64 {kv.name = "k_pe_stride_dim"}) {
  return
}

// -----

// CHECK-LABEL: llvm.func @declared(
// CHECK-SAME: {kv.name = "key_cache"}
llvm.func @declared(!llvm.ptr {kv.name = "key_cache"})

// -----

// expected-error @+1 {{'kv.name' of argument 1 must be a string naming a kernel parameter, got 7 : i64}}
func.func @number(%k: memref<?xbf16> {kv.name = "key"}, %n: i64 {kv.name = 7 : i64}) {
  return
}

// -----

// expected-error @+1 {{'kv.name' of argument 0 must be a string naming a kernel parameter, got ["key"]}}
llvm.func @array(!llvm.ptr {kv.name = ["key"]})

// -----

// expected-error @+1 {{'kv.name' of argument 0: 'out' is not a parameter of the kernel ABI; expected one of key, value, slot_mapping,}}
func.func @unknown(%out: memref<?xf32> {kv.name = "out"}) {
  return
}

// -----

// Names are the ABI's exactly: no case folding.
// expected-error @+1 {{'Key' is not a parameter of the kernel ABI}}
func.func @case(%k: memref<?xf32> {kv.name = "Key"}) {
  return
}

// -----

// expected-error @+1 {{'kv.name' names a kernel parameter: it belongs on a function argument, not on an operation}}
func.func @on_op() attributes {kv.name = "key"} {
  return
}

// -----

// expected-error @+1 {{'kv.name' of result 0 names a kernel parameter: it belongs on a function argument, not on a result}}
func.func @on_result() -> (i64 {kv.name = "num_tokens"}) {
  %c0 = arith.constant 0 : i64
  return %c0 : i64
}
