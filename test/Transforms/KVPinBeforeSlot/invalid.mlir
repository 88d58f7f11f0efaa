// RUN: kvgen-opt %s -kv-pin-before-slot=nvvm=true -split-input-file -verify-diagnostics

// The marks kv-to-loops leaves for kv-pin-before-slot, and the one
// kv-pin-before-slot leaves for kv-pin-addresses, are the kv dialect's
// attributes (KVDialect.td), verified wherever they appear: 64-bit address
// terms (kv.before_slot), the slot's 64-bit token index (kv.keep_wide),
// 32-bit block and token indices (kv.keep_narrow), the opaque copy of a
// source offset (kv.source_offset_pin), and the plan's occupancy bound
// (kv.min_blocks_per_sm). A mark that cannot be pinned is a diagnostic,
// not a value that silently goes unpinned; so is a kv. name that is none
// of the dialect's.

func.func @index(%a: index, %b: index) -> index {
  // expected-error @+1 {{'kv.before_slot' marks an address term computed before the slot load: it belongs on an operation of one i64 result}}
  %0 = arith.addi %a, %b {kv.before_slot} : index
  return %0 : index
}

// -----

func.func @no_result(%p: memref<?xi64>, %v: i64) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'kv.before_slot' marks an address term computed before the slot load: it belongs on an operation of one i64 result}}
  memref.store %v, %p[%c0] {kv.before_slot} : memref<?xi64>
  return
}

// -----

func.func @wide_block(%a: i64, %b: i64) -> i64 {
  // expected-error @+1 {{'kv.keep_narrow' marks a narrowed 32-bit index: it belongs on an operation of one i32 result}}
  %0 = arith.addi %a, %b {kv.keep_narrow} : i64
  return %0 : i64
}

// -----

func.func @narrow_slot_index(%a: i32) -> i32 {
  // expected-error @+1 {{'kv.keep_wide' marks the slot's 64-bit token index: it belongs on an operation of one i64 result}}
  %0 = arith.addi %a, %a {kv.keep_wide} : i32
  return %0 : i32
}

// -----

func.func @not_unit(%a: i64) -> i64 {
  // expected-error @+1 {{'kv.before_slot' is a unit attribute, got 1 : i64}}
  %0 = arith.addi %a, %a {kv.before_slot = 1} : i64
  return %0 : i64
}

// -----

func.func @pin_not_a_copy(%a: i64) -> i64 {
  // expected-error @+1 {{'kv.source_offset_pin' marks the opaque copy of a source offset: it belongs on an 'llvm.inline_asm' of one i64 operand and one i64 result}}
  %0 = arith.addi %a, %a {kv.source_offset_pin} : i64
  return %0 : i64
}

// -----

// expected-error @+1 {{'kv.min_blocks_per_sm' must be a positive i64 (blocks a kernel keeps room for on one SM), got 0 : i64}}
func.func @no_bound() attributes {kv.min_blocks_per_sm = 0 : i64} {
  return
}

// -----

func.func @bound_on_an_op(%a: i64) -> i64 {
  // expected-error @+1 {{'kv.min_blocks_per_sm' is a kernel's occupancy bound: it belongs on a function, not on 'arith.addi'}}
  %0 = arith.addi %a, %a {kv.min_blocks_per_sm = 8 : i64} : i64
  return %0 : i64
}

// -----

func.func @typo(%a: i64) -> i64 {
  // expected-error @+1 {{'kv.before_slots' is not an attribute of the kv dialect; expected kv.launch, kv.min_blocks_per_sm, kv.before_slot, kv.keep_wide, kv.keep_narrow, kv.source_offset_pin or kv.param_names (kv.name belongs on a function argument)}}
  %0 = arith.addi %a, %a {kv.before_slots} : i64
  return %0 : i64
}
