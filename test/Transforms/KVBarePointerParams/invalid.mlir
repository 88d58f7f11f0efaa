// RUN: kvgen-opt %s -kv-bare-pointer-params -split-input-file -verify-diagnostics

// kv-bare-pointer-params on kernels it cannot rewrite: a diagnostic, nothing
// silently left in the memref form.

// expected-error @+1 {{parameter 0 of a kv kernel is a pointer that does not start an expanded 1-D memref descriptor}}
llvm.func @lone_pointer(%p: !llvm.ptr, %n: i64)
    attributes {kv.launch = #kv.launch<threads_x = 1, tokens_per_block = 1,
                                       chunks_per_token = 1>} {
  llvm.return
}

// -----

// A descriptor cut short by the end of the list is a lone pointer too.
// expected-error @+1 {{parameter 1 of a kv kernel is a pointer that does not start an expanded 1-D memref descriptor}}
llvm.func @short(%n: i64, %p0: !llvm.ptr, %p1: !llvm.ptr, %off: i64)
    attributes {kv.launch = #kv.launch<threads_x = 1, tokens_per_block = 1,
                                       chunks_per_token = 1>} {
  llvm.return
}

// -----

// expected-error @+1 {{kv-bare-pointer-params runs on kv kernels lowered to llvm.func (after convert-func-to-llvm or convert-gpu-to-nvvm), got 'func.func'}}
func.func @not_lowered(%buf: memref<?xf32>)
    attributes {kv.launch = #kv.launch<threads_x = 1, tokens_per_block = 1,
                                       chunks_per_token = 1>} {
  return
}
