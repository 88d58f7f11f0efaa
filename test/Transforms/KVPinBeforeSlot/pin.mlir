// RUN: kvgen-opt %s -kv-pin-before-slot=nvvm=true | FileCheck %s --check-prefix=NVVM
// RUN: kvgen-opt %s -kv-pin-before-slot | FileCheck %s --check-prefix=HOST

// kv-pin-before-slot on a hand-written kernel: with nvvm=true each value
// marked kv.before_slot (a source offset) goes through an opaque mov.b64 that
// its later uses read, tagged kv.source_offset_pin for kv-pin-addresses; the
// slot's index marked kv.keep_wide through the same mov, untagged; and each
// i32 marked kv.keep_narrow (a block index narrowed past the slot check)
// through an opaque mov.b32. Without nvvm the marks are only removed. Either
// way no mark remains.

// NVVM-LABEL: func.func @chunk(
// NVVM: %[[A:.*]] = arith.addi %arg0, %arg1 : i64
// NVVM-NEXT: %[[P:.*]] = llvm.inline_asm has_side_effects {kv.source_offset_pin} "mov.b64 $0, $1;", "=l,l" %[[A]] : (i64) -> i64
// NVVM-NEXT: %[[U:.*]] = arith.muli %arg1, %arg1 : i64
// NVVM-NEXT: arith.addi %[[P]], %[[U]] : i64
// NVVM-NOT: kv.before_slot

// HOST-LABEL: func.func @chunk(
// HOST-NEXT: %[[A:.*]] = arith.addi %arg0, %arg1 : i64
// HOST-NEXT: %[[U:.*]] = arith.muli %arg1, %arg1 : i64
// HOST-NEXT: arith.addi %[[A]], %[[U]] : i64
// HOST-NOT: llvm.inline_asm
// HOST-NOT: kv.before_slot
func.func @chunk(%a: i64, %b: i64) -> i64 {
  %0 = arith.addi %a, %b {kv.before_slot} : i64
  %1 = arith.muli %b, %b : i64
  %2 = arith.addi %0, %1 : i64
  return %2 : i64
}

// NVVM-LABEL: func.func @slot_index(
// NVVM: %[[W:.*]] = arith.extui %arg0 : i32 to i64
// NVVM-NEXT: %[[P:.*]] = llvm.inline_asm has_side_effects "mov.b64 $0, $1;", "=l,l" %[[W]] : (i64) -> i64
// NVVM-NEXT: %[[S:.*]] = arith.shli %[[P]]
// NVVM-NOT: kv.keep_wide
// NVVM-NOT: kv.source_offset_pin

// HOST-LABEL: func.func @slot_index(
// HOST: %[[W:.*]] = arith.extui %arg0 : i32 to i64
// HOST-NEXT: arith.shli %[[W]]
// HOST-NOT: kv.keep_wide
func.func @slot_index(%t: i32) -> i64 {
  %c3 = arith.constant 3 : i64
  %0 = arith.extui %t {kv.keep_wide} : i32 to i64
  %1 = arith.shli %0, %c3 : i64
  return %1 : i64
}

// NVVM-LABEL: func.func @block(
// NVVM-NEXT: %[[N:.*]] = arith.trunci %arg0 : i64 to i32
// NVVM-NEXT: %[[P:.*]] = llvm.inline_asm has_side_effects "mov.b32 $0, $1;", "=r,r" %[[N]] : (i32) -> i32
// NVVM-NEXT: %[[W:.*]] = arith.extui %[[P]] : i32 to i64
// NVVM-NEXT: return %[[W]] : i64
// NVVM-NOT: kv.keep_narrow

// HOST-LABEL: func.func @block(
// HOST-NEXT: %[[N:.*]] = arith.trunci %arg0 : i64 to i32
// HOST-NEXT: %[[W:.*]] = arith.extui %[[N]] : i32 to i64
// HOST-NEXT: return %[[W]] : i64
// HOST-NOT: kv.keep_narrow
func.func @block(%a: i64) -> i64 {
  %0 = arith.trunci %a {kv.keep_narrow} : i64 to i32
  %1 = arith.extui %0 : i32 to i64
  return %1 : i64
}
