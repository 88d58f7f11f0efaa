// RUN: kvgen-opt %s -kv-pin-addresses | FileCheck %s

// kv-pin-addresses on hand-written kernels: a pinned source offset
// (token term + within the token) read only by GEPs of a parameter becomes,
// at the pin, the token's row and then the element, both global addresses
// through opaque movs; the load through a noalias parameter says it reads
// invariant memory, which keeps it on the non-coherent path. Where the
// offset has another use, or is not a sum of a token term and a term within
// the token (a zero extension of an i32, as kv-to-loops computes it, or a
// constant), it stays a pinned offset; every kv.source_offset_pin mark goes.
// The terms are told apart by what they are, whatever their order in the
// sum.

// CHECK-LABEL: llvm.func @split(
// CHECK-SAME: %[[BASE:[^:]*]]: !llvm.ptr {llvm.noalias}, %[[ROWTERM:[^:]*]]: i64, %{{[^:]*}}: i32
// CHECK: %[[WITHIN:.*]] = llvm.zext
// CHECK: %[[G:.*]] = llvm.addrspacecast %[[BASE]] : !llvm.ptr to !llvm.ptr<1>
// CHECK-NEXT: %[[R:.*]] = llvm.getelementptr %[[G]][%[[ROWTERM]]] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, bf16
// CHECK-NEXT: %[[RP:.*]] = llvm.inline_asm has_side_effects "mov.b64 $0, $1;", "=l,l" %[[R]] : (!llvm.ptr<1>) -> !llvm.ptr<1>
// CHECK-NEXT: %[[A:.*]] = llvm.getelementptr %[[RP]][%[[WITHIN]]] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, bf16
// CHECK-NEXT: %[[AP:.*]] = llvm.inline_asm has_side_effects "mov.b64 $0, $1;", "=l,l" %[[A]] : (!llvm.ptr<1>) -> !llvm.ptr<1>
// CHECK-NEXT: %[[P:.*]] = llvm.addrspacecast %[[AP]] : !llvm.ptr<1> to !llvm.ptr
// CHECK: llvm.cond_br
// CHECK: llvm.load %[[P]] invariant {alignment = 16 : i64} : !llvm.ptr -> vector<8xbf16>
// CHECK-NOT: kv.source_offset_pin
llvm.func @split(%base: !llvm.ptr {llvm.noalias}, %row: i64, %within32: i32,
                 %valid: i1) -> vector<8xbf16> {
  %within = llvm.zext %within32 : i32 to i64
  %sum = llvm.add %row, %within : i64
  %pin = llvm.inline_asm has_side_effects {kv.source_offset_pin}
      "mov.b64 $0, $1;", "=l,l" %sum : (i64) -> i64
  llvm.cond_br %valid, ^load, ^skip
^load:
  %p = llvm.getelementptr %base[%pin] : (!llvm.ptr, i64) -> !llvm.ptr, bf16
  %v = llvm.load %p {alignment = 16 : i64} : !llvm.ptr -> vector<8xbf16>
  llvm.return %v : vector<8xbf16>
^skip:
  %z = llvm.mlir.zero : vector<8xbf16>
  llvm.return %z : vector<8xbf16>
}

// Without noalias the load is not marked invariant.
// CHECK-LABEL: llvm.func @aliased(
// CHECK: llvm.load %{{.*}} {alignment = 2 : i64} : !llvm.ptr -> bf16
llvm.func @aliased(%base: !llvm.ptr, %row: i64, %within32: i32) -> bf16 {
  %within = llvm.zext %within32 : i32 to i64
  %sum = llvm.add %row, %within : i64
  %pin = llvm.inline_asm has_side_effects {kv.source_offset_pin}
      "mov.b64 $0, $1;", "=l,l" %sum : (i64) -> i64
  %p = llvm.getelementptr %base[%pin] : (!llvm.ptr, i64) -> !llvm.ptr, bf16
  %v = llvm.load %p {alignment = 2 : i64} : !llvm.ptr -> bf16
  llvm.return %v : bf16
}

// An offset with a use that is not a GEP keeps its pin; the mark goes.
// CHECK-LABEL: llvm.func @other_use(
// CHECK: %[[S:.*]] = llvm.add
// CHECK-NEXT: %[[P:.*]] = llvm.inline_asm has_side_effects "mov.b64 $0, $1;", "=l,l" %[[S]] : (i64) -> i64
// CHECK-NEXT: llvm.getelementptr %{{.*}}[%[[P]]]
// CHECK-NEXT: llvm.add %[[P]]
// CHECK-NOT: llvm.addrspacecast
llvm.func @other_use(%base: !llvm.ptr, %row: i64, %within: i64) -> i64 {
  %sum = llvm.add %row, %within : i64
  %pin = llvm.inline_asm has_side_effects {kv.source_offset_pin}
      "mov.b64 $0, $1;", "=l,l" %sum : (i64) -> i64
  %p = llvm.getelementptr %base[%pin] : (!llvm.ptr, i64) -> !llvm.ptr, bf16
  %next = llvm.add %pin, %row : i64
  llvm.return %next : i64
}

// An offset that is not a sum keeps its pin.
// CHECK-LABEL: llvm.func @not_a_sum(
// CHECK: llvm.inline_asm has_side_effects "mov.b64 $0, $1;", "=l,l" %{{.*}} : (i64) -> i64
// CHECK-NOT: llvm.addrspacecast
// CHECK: llvm.return
llvm.func @not_a_sum(%base: !llvm.ptr, %row: i64, %within: i64) -> bf16 {
  %prod = llvm.mul %row, %within : i64
  %pin = llvm.inline_asm has_side_effects {kv.source_offset_pin}
      "mov.b64 $0, $1;", "=l,l" %prod : (i64) -> i64
  %p = llvm.getelementptr %base[%pin] : (!llvm.ptr, i64) -> !llvm.ptr, bf16
  %v = llvm.load %p : !llvm.ptr -> bf16
  llvm.return %v : bf16
}

// A kernel that holds two tokens in a block (its kv.launch) keeps its pinned
// offset: the row differs between threads; the mark goes.
// CHECK-LABEL: llvm.func @two_tokens_a_block(
// CHECK: %[[S:.*]] = llvm.add
// CHECK-NEXT: %[[P:.*]] = llvm.inline_asm has_side_effects "mov.b64 $0, $1;", "=l,l" %[[S]] : (i64) -> i64
// CHECK-NEXT: llvm.getelementptr %{{.*}}[%[[P]]]
// CHECK-NOT: llvm.addrspacecast
// CHECK-NOT: kv.source_offset_pin
// CHECK: llvm.return
llvm.func @two_tokens_a_block(%base: !llvm.ptr {llvm.noalias}, %row: i64,
                              %within: i64) -> bf16 attributes {
    kv.launch = #kv.launch<threads_x = 64, tokens_per_block = 2,
                           chunks_per_token = 128>} {
  %sum = llvm.add %row, %within : i64
  %pin = llvm.inline_asm has_side_effects {kv.source_offset_pin}
      "mov.b64 $0, $1;", "=l,l" %sum : (i64) -> i64
  %p = llvm.getelementptr %base[%pin] : (!llvm.ptr, i64) -> !llvm.ptr, bf16
  %v = llvm.load %p : !llvm.ptr -> bf16
  llvm.return %v : bf16
}

// One token a block, as its kv.launch says: split as in @split.
// CHECK-LABEL: llvm.func @one_token_a_block(
// CHECK: llvm.addrspacecast %{{.*}} : !llvm.ptr to !llvm.ptr<1>
// CHECK: llvm.load %{{.*}} invariant
llvm.func @one_token_a_block(%base: !llvm.ptr {llvm.noalias}, %row: i64,
                             %within32: i32) -> bf16 attributes {
    kv.launch = #kv.launch<threads_x = 128, tokens_per_block = 1,
                           chunks_per_token = 128>} {
  %within = llvm.zext %within32 : i32 to i64
  %sum = llvm.add %row, %within : i64
  %pin = llvm.inline_asm has_side_effects {kv.source_offset_pin}
      "mov.b64 $0, $1;", "=l,l" %sum : (i64) -> i64
  %p = llvm.getelementptr %base[%pin] : (!llvm.ptr, i64) -> !llvm.ptr, bf16
  %v = llvm.load %p : !llvm.ptr -> bf16
  llvm.return %v : bf16
}

// The sum's operands in the other order (as the canonicalizer may leave
// them): the row is still the token's term, the element the zero extension.
// CHECK-LABEL: llvm.func @swapped(
// CHECK-SAME: %[[BASE:[^:]*]]: !llvm.ptr {llvm.noalias}, %[[ROWTERM:[^:]*]]: i64, %{{[^:]*}}: i32
// CHECK: %[[WITHIN:.*]] = llvm.zext
// CHECK: %[[G:.*]] = llvm.addrspacecast %[[BASE]] : !llvm.ptr to !llvm.ptr<1>
// CHECK-NEXT: %[[R:.*]] = llvm.getelementptr %[[G]][%[[ROWTERM]]] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, bf16
// CHECK-NEXT: %[[RP:.*]] = llvm.inline_asm has_side_effects "mov.b64 $0, $1;", "=l,l" %[[R]]
// CHECK-NEXT: %[[A:.*]] = llvm.getelementptr %[[RP]][%[[WITHIN]]] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, bf16
llvm.func @swapped(%base: !llvm.ptr {llvm.noalias}, %row: i64, %within32: i32)
    -> bf16 {
  %within = llvm.zext %within32 : i32 to i64
  %sum = llvm.add %within, %row : i64
  %pin = llvm.inline_asm has_side_effects {kv.source_offset_pin}
      "mov.b64 $0, $1;", "=l,l" %sum : (i64) -> i64
  %p = llvm.getelementptr %base[%pin] : (!llvm.ptr, i64) -> !llvm.ptr, bf16
  %v = llvm.load %p : !llvm.ptr -> bf16
  llvm.return %v : bf16
}

// A constant offset within the token (the extension of a constant, folded)
// is the element's.
// CHECK-LABEL: llvm.func @constant_within(
// CHECK-SAME: %[[BASE:[^:]*]]: !llvm.ptr {llvm.noalias}, %[[ROWTERM:[^:]*]]: i64
// CHECK: %[[C:.*]] = llvm.mlir.constant(8 : i64) : i64
// CHECK: %[[G:.*]] = llvm.addrspacecast %[[BASE]] : !llvm.ptr to !llvm.ptr<1>
// CHECK-NEXT: llvm.getelementptr %[[G]][%[[ROWTERM]]]
// CHECK-NEXT: %[[RP:.*]] = llvm.inline_asm
// CHECK-NEXT: llvm.getelementptr %[[RP]][%[[C]]]
llvm.func @constant_within(%base: !llvm.ptr {llvm.noalias}, %row: i64)
    -> bf16 {
  %c8 = llvm.mlir.constant(8 : i64) : i64
  %sum = llvm.add %c8, %row : i64
  %pin = llvm.inline_asm has_side_effects {kv.source_offset_pin}
      "mov.b64 $0, $1;", "=l,l" %sum : (i64) -> i64
  %p = llvm.getelementptr %base[%pin] : (!llvm.ptr, i64) -> !llvm.ptr, bf16
  %v = llvm.load %p : !llvm.ptr -> bf16
  llvm.return %v : bf16
}

// A sum whose terms cannot be told apart (both, or neither, within the
// token) keeps its pin.
// CHECK-LABEL: llvm.func @ambiguous(
// CHECK: %[[S:.*]] = llvm.add
// CHECK-NEXT: %[[P:.*]] = llvm.inline_asm has_side_effects "mov.b64 $0, $1;", "=l,l" %[[S]] : (i64) -> i64
// CHECK-NEXT: llvm.getelementptr %{{.*}}[%[[P]]]
// CHECK-NOT: llvm.addrspacecast
// CHECK: llvm.return
llvm.func @ambiguous(%base: !llvm.ptr {llvm.noalias}, %a32: i32, %b32: i32)
    -> bf16 {
  %a = llvm.zext %a32 : i32 to i64
  %b = llvm.zext %b32 : i32 to i64
  %sum = llvm.add %a, %b : i64
  %pin = llvm.inline_asm has_side_effects {kv.source_offset_pin}
      "mov.b64 $0, $1;", "=l,l" %sum : (i64) -> i64
  %p = llvm.getelementptr %base[%pin] : (!llvm.ptr, i64) -> !llvm.ptr, bf16
  %v = llvm.load %p : !llvm.ptr -> bf16
  llvm.return %v : bf16
}
