// RUN: kvgen-opt %s -kv-bare-pointer-params | FileCheck %s

// kv-bare-pointer-params on hand-written LLVM-dialect kernels: each expanded
// 1-D memref descriptor of a function with kv.launch becomes one pointer
// (the allocated pointer, which kvrt passes), offset and stride the
// constants 0 and 1, the size poison; scalars and their attributes stay in
// order. Functions without kv.launch, and declarations, are left alone.

// CHECK-LABEL: llvm.func @kernel(
// CHECK-SAME: %[[K:[a-z0-9]+]]: !llvm.ptr {llvm.noalias},
// CHECK-SAME: %[[N:[a-z0-9]+]]: i64 {kv.name = "num_tokens"},
// CHECK-SAME: %[[C:[a-z0-9]+]]: !llvm.ptr)
// CHECK-DAG: %[[ZERO:.*]] = llvm.mlir.constant(0 : i64) : i64
// CHECK-DAG: %[[ONE:.*]] = llvm.mlir.constant(1 : i64) : i64
// CHECK-DAG: %[[SIZE:.*]] = llvm.mlir.poison : i64
// CHECK: llvm.getelementptr %[[K]][%[[ZERO]]]
// CHECK: llvm.mul %[[N]], %[[ONE]]
// CHECK: llvm.add %[[SIZE]], %[[N]]
// CHECK: llvm.store {{.*}}, %[[C]]
llvm.func @kernel(%k0: !llvm.ptr, %k1: !llvm.ptr {llvm.noalias}, %koff: i64,
                  %ksize: i64, %kstride: i64,
                  %n: i64 {kv.name = "num_tokens"},
                  %c0: !llvm.ptr, %c1: !llvm.ptr, %coff: i64, %csize: i64,
                  %cstride: i64)
    attributes {kv.launch = #kv.launch<threads_x = 1, tokens_per_block = 1,
                                       chunks_per_token = 1>} {
  %p = llvm.getelementptr %k1[%koff] : (!llvm.ptr, i64) -> !llvm.ptr, f32
  %s = llvm.mul %n, %kstride : i64
  %t = llvm.add %ksize, %n : i64
  %v = llvm.load %p : !llvm.ptr -> f32
  llvm.store %v, %c1 : f32, !llvm.ptr
  llvm.return
}

// CHECK-LABEL: llvm.func @not_a_kernel(
// CHECK-SAME: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64)
llvm.func @not_a_kernel(%a0: !llvm.ptr, %a1: !llvm.ptr, %off: i64,
                        %size: i64, %stride: i64) {
  llvm.return
}

// CHECK: llvm.func @declared(!llvm.ptr, !llvm.ptr, i64, i64, i64)
llvm.func @declared(!llvm.ptr, !llvm.ptr, i64, i64, i64)
    attributes {kv.launch = #kv.launch<threads_x = 1, tokens_per_block = 1,
                                       chunks_per_token = 1>}
