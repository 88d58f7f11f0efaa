// The host shared object needs nothing from a compiler runtime library. This
// prologue's NeoX pair and single chunks store bf16 vectors on two branches;
// LLVM merges the stores behind a phi of bf16 values, and the x86 code
// generator, with no bf16 instructions on a generic CPU, widens them to f32
// and narrows them back through compiler-rt's __truncsfbf2, which Debian 12's
// libgcc does not have: the object failed to load ("undefined symbol"). kvgen
// defines the builtin in the object itself, hidden.
// RUN: kvgen %s --target=host --emit=shared-lib -o %t.so
// RUN: llvm-nm -D --undefined-only %t.so > %t.undefined
// RUN: not grep __truncsfbf2 %t.undefined
// RUN: llvm-nm %t.so | FileCheck %s
// RUN: llvm-nm -D --defined-only %t.so | FileCheck %s --check-prefix=EXPORTS
// CHECK: t __truncsfbf2
// EXPORTS-NOT: truncsfbf2
// EXPORTS: T _mlir_a
// EXPORTS-NOT: truncsfbf2
module {
  kv.append @a : !kv.cache<layout = paged_nhd, block_size = 4, num_kv_heads = 2, head_dim = 16, dtype = bf16> from bf16 prologue #kv.prologue<q_heads = 4, norm = rms, rope = neox, rotary_dim = 16>
}
