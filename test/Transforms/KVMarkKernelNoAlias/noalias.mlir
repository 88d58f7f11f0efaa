// RUN: kvgen-opt %s -pass-pipeline='builtin.module(gpu.module(kv-mark-kernel-noalias))' | FileCheck %s

// kv-mark-kernel-noalias on hand-written kernels: every pointer parameter of
// a function with kv.launch gets llvm.noalias (kvrt refuses overlapping
// buffers); scalars, and functions without kv.launch, are left alone.

// CHECK-LABEL: llvm.func @kernel(
// CHECK-SAME: %{{.*}}: !llvm.ptr {llvm.noalias},
// CHECK-SAME: %{{.*}}: i64 {kv.name = "num_tokens"},
// CHECK-SAME: %{{.*}}: !llvm.ptr {llvm.align = 16 : i64, llvm.noalias})
// CHECK-LABEL: llvm.func @helper(
// CHECK-SAME: %{{.*}}: !llvm.ptr)
gpu.module @kv_kernels {
  llvm.func @kernel(%k: !llvm.ptr, %n: i64 {kv.name = "num_tokens"},
                    %c: !llvm.ptr {llvm.align = 16 : i64})
      attributes {kv.launch = #kv.launch<threads_x = 1, tokens_per_block = 1,
                                         chunks_per_token = 1>} {
    llvm.return
  }
  llvm.func @helper(%p: !llvm.ptr) {
    llvm.return
  }
}

// With the kernel's parameter names (kv.param_names, which kv-loops-to-gpu
// writes): query and q_out are not noalias, since q_out may be query itself
// (the prologue rotates Q in place); every other buffer is.

// CHECK-LABEL: llvm.func @prologue(
// CHECK-SAME: %{{[a-z0-9]+}}: !llvm.ptr {llvm.noalias},
// CHECK-SAME: %{{[a-z0-9]+}}: !llvm.ptr, %{{[a-z0-9]+}}: !llvm.ptr,
// CHECK-SAME: %{{[a-z0-9]+}}: !llvm.ptr {llvm.noalias}, %{{[a-z0-9]+}}: i32)
gpu.module @kv_prologue {
  llvm.func @prologue(%k: !llvm.ptr, %q: !llvm.ptr, %qo: !llvm.ptr,
                      %kc: !llvm.ptr, %n: i32)
      attributes {kv.launch = #kv.launch<threads_x = 1, tokens_per_block = 1,
                                         chunks_per_token = 1>,
                  kv.param_names = ["key", "query", "q_out", "key_cache",
                                    "num_tokens"]} {
    llvm.return
  }
}
