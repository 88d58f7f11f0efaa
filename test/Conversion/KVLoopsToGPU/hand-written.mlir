// RUN: kvgen-opt %s -kv-loops-to-gpu | FileCheck %s

// kv-loops-to-gpu on its own input (not kv-to-loops' output): the launch
// geometry comes from #kv.launch, the body is cloned under the token guard
// and a chunk loop strides by threads_x. The parameter names also ride on
// the kernel (kv.param_names), which convert-gpu-to-nvvm keeps.

// CHECK: module attributes {gpu.container_module}
// CHECK-LABEL: gpu.func @copy(
// CHECK-SAME: kernel attributes {known_block_size = array<i32: 2, 4, 1>, kv.launch = #kv.launch<threads_x = 2, tokens_per_block = 4, chunks_per_token = 6>, kv.param_names = ["key_cache", "num_tokens"]}
// CHECK-DAG: %[[BX:.*]] = gpu.block_id x
// CHECK-DAG: %[[TX:.*]] = gpu.thread_id x
// CHECK-DAG: %[[TY:.*]] = gpu.thread_id y
// CHECK: %[[MUL:.*]] = arith.muli %[[BX]], %c4
// CHECK: %[[T:.*]] = arith.addi %[[MUL]], %[[TY]]
// CHECK: scf.if
// CHECK: scf.for %[[C:.*]] = %[[TX]] to %c6{{.*}} step %c2
// CHECK: memref.store %{{.*}}, %arg0[%[[C]]]
// CHECK: gpu.return
func.func @copy(%out: memref<?xf32> {kv.name = "key_cache"},
                %n: i64 {kv.name = "num_tokens"})
    attributes {kv.launch = #kv.launch<threads_x = 2, tokens_per_block = 4,
                                       chunks_per_token = 6>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c6 = arith.constant 6 : index
  %t = arith.index_cast %n : i64 to index
  %one = arith.constant 1.0 : f32
  scf.parallel (%i, %j) = (%c0, %c0) to (%t, %c6) step (%c1, %c1) {
    memref.store %one, %out[%j] : memref<?xf32>
    scf.reduce
  }
  return
}
