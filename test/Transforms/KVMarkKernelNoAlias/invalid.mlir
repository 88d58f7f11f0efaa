// RUN: kvgen-opt %s -pass-pipeline='builtin.module(gpu.module(kv-mark-kernel-noalias))' -verify-diagnostics

// A kernel still in the GPU dialect has memrefs, not pointers: marking
// nothing would lose the promise silently, so it is a diagnostic.

gpu.module @kv_kernels {
  // expected-error @+1 {{kv-mark-kernel-noalias runs on kv kernels lowered to llvm.func (after convert-gpu-to-nvvm)}}
  gpu.func @kernel(%buf: memref<?xf32>) kernel
      attributes {kv.launch = #kv.launch<threads_x = 1, tokens_per_block = 1,
                                         chunks_per_token = 1>} {
    gpu.return
  }
}
