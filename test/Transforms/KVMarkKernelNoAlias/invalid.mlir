// RUN: kvgen-opt %s -pass-pipeline='builtin.module(gpu.module(kv-mark-kernel-noalias))' -verify-diagnostics -split-input-file

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

// -----

// kv.param_names names each argument of the bare-pointer kernel: a count
// that differs (the pass run before kv-bare-pointer-params) cannot say which
// pointer is query.

gpu.module @kv_kernels {
  // expected-error @+1 {{kv.param_names names 2 parameters, the kernel has 3 (kv-mark-kernel-noalias runs after kv-bare-pointer-params)}}
  llvm.func @kernel(%q: !llvm.ptr, %qo: !llvm.ptr, %x: !llvm.ptr)
      attributes {kv.launch = #kv.launch<threads_x = 1, tokens_per_block = 1,
                                         chunks_per_token = 1>,
                  kv.param_names = ["query", "q_out"]} {
    llvm.return
  }
}

// -----

// The verifier: kv.param_names is an array of the kernel ABI's names, on a
// function.

// expected-error @+1 {{'kv.param_names' 'qkv' is not a parameter of the kernel ABI}}
llvm.func @unknown(%q: !llvm.ptr) attributes {kv.param_names = ["qkv"]} {
  llvm.return
}

// -----

// expected-error @+1 {{'kv.param_names' must be an array of parameter names, got "query"}}
llvm.func @not_an_array(%q: !llvm.ptr) attributes {kv.param_names = "query"} {
  llvm.return
}

// -----

llvm.func @on_an_op(%a: i64) -> i64 {
  // expected-error @+1 {{'kv.param_names' names a kernel's parameters: it belongs on a function, not on 'llvm.add'}}
  %0 = llvm.add %a, %a {kv.param_names = ["query"]} : i64
  llvm.return %0 : i64
}
