// RUN: kvgen-opt %s -kv-to-loops -kv-loops-to-gpu -split-input-file | FileCheck %s

// Tokens map to blocks (and thread_id.y), chunks to thread_id.x; the loop
// body is the loop nest's, cloned. No func.func is left behind.

// CHECK: module attributes {gpu.container_module}
// CHECK-NOT: func.func
// CHECK-LABEL: gpu.module @kv_kernels
// CHECK-LABEL: gpu.func @nhd(
// CHECK-SAME: kernel attributes {known_block_size = array<i32: 128, 1, 1>
// CHECK-DAG: %[[BX:.*]] = gpu.block_id x
// CHECK-DAG: %[[TX:.*]] = gpu.thread_id x
// CHECK-DAG: %[[TY:.*]] = gpu.thread_id y
// CHECK: %[[MUL:.*]] = arith.muli %[[BX]], %c1
// CHECK: %[[T:.*]] = arith.addi %[[MUL]], %[[TY]]
// CHECK: arith.cmpi ult, %[[T]], %{{.*}}
// CHECK: scf.if
// One chunk per thread: no loop.
// CHECK-NOT: scf.for
// CHECK: memref.load
// CHECK: vector.load
// CHECK: gpu.return
// CHECK-LABEL: gpu.func @nhd_scalar(
kv.append @nhd : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16

// -----

// 32 heads x 256 f32 = 2048 chunks: 256 threads, each looping over 8.
// CHECK-LABEL: gpu.func @big(
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// CHECK: %[[TX:.*]] = gpu.thread_id x
// CHECK: scf.for %{{.*}} = %[[TX]] to %c2048{{.*}} step %c256
// CHECK: vector.load {{.*}} vector<4xf32>
kv.append @big : !kv.cache<layout = paged_hnd, block_size = 16,
    num_kv_heads = 32, head_dim = 256, dtype = f32> from f32

// -----

// MQA, head_dim 64, bf16: 8 chunks a token, 16 tokens a block.
// CHECK-LABEL: gpu.func @mqa(
// CHECK-SAME: known_block_size = array<i32: 8, 16, 1>
// CHECK: arith.muli %{{.*}}, %c16
kv.append @mqa : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 64, dtype = bf16> from bf16
