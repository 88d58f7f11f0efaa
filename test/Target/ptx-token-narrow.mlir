// A block of several tokens (here 16 of 8 chunks each): the token index is
// the block index times 16 plus a thread index, which LLVM would widen back
// into i64 math. kv-to-loops pins it narrow, so that the source's token
// term is one mul.wide.u32 and no 64-bit multiply is left.
// RUN: kvgen %s --emit=ptx -o - | FileCheck %s

// CHECK-LABEL: .entry small_heads(
// CHECK: mov.u32 {{.*}}%ctaid.x
// CHECK: begin inline asm
// CHECK-NEXT: mov.b32 [[T:%r[0-9]+]], %r{{[0-9]+}};
// CHECK: mul.wide.u32 {{%rd[0-9]+}}, [[T]], {{%r[0-9]+}};
// CHECK-NOT: mul.lo.s64
// CHECK-NOT: mad.lo.s64
// CHECK: ret;
module {
  kv.append @small_heads : !kv.cache<layout = paged_nhd, block_size = 16,
      num_kv_heads = 1, head_dim = 64, dtype = bf16> from bf16
}
