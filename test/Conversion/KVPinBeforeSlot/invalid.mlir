// RUN: kvgen-opt %s -kv-pin-before-slot=nvvm=true -split-input-file -verify-diagnostics

// kv-to-loops marks 64-bit address terms (kv.before_slot), the slot's
// 64-bit token index (kv.keep_wide) and 32-bit block indices
// (kv.keep_narrow). With nvvm=true a mark that cannot be pinned is a
// diagnostic, not a value that silently goes unpinned.

func.func @index(%a: index, %b: index) -> index {
  // expected-error @+1 {{'arith.addi' op is marked kv.before_slot, but only an op with one i64 result can be pinned}}
  %0 = arith.addi %a, %b {kv.before_slot} : index
  return %0 : index
}

// -----

func.func @no_result(%p: memref<?xi64>, %v: i64) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'memref.store' op is marked kv.before_slot, but only an op with one i64 result can be pinned}}
  memref.store %v, %p[%c0] {kv.before_slot} : memref<?xi64>
  return
}

// -----

func.func @wide_block(%a: i64, %b: i64) -> i64 {
  // expected-error @+1 {{'arith.addi' op is marked kv.keep_narrow, but only an op with one i32 result can be pinned}}
  %0 = arith.addi %a, %b {kv.keep_narrow} : i64
  return %0 : i64
}

// -----

func.func @narrow_slot_index(%a: i32) -> i32 {
  // expected-error @+1 {{'arith.addi' op is marked kv.keep_wide, but only an op with one i64 result can be pinned}}
  %0 = arith.addi %a, %a {kv.keep_wide} : i32
  return %0 : i32
}
