// RUN: kvgen-opt %s -kv-to-loops -kv-loops-to-gpu -split-input-file | FileCheck %s

// Tokens map to blocks (and thread_id.y where a block holds several), chunks
// to thread_id.x; the loop body is the loop nest's, cloned. No func.func is
// left behind.

// CHECK: module attributes {gpu.container_module}
// CHECK-NOT: func.func
// CHECK-LABEL: gpu.module @kv_kernels
// CHECK-LABEL: gpu.func @nhd(
// CHECK-SAME: kernel attributes {known_block_size = array<i32: 128, 1, 1>
// One token a block: the token is the block id, with no thread_id.y and no
// token < num_tokens test (the grid has num_tokens blocks); the slot load
// comes first.
// CHECK-DAG: %[[BX:.*]] = gpu.block_id x
// CHECK-DAG: %[[TX:.*]] = gpu.thread_id x
// CHECK-NOT: gpu.thread_id y
// CHECK-NOT: scf.if
// One chunk per thread: no loop.
// CHECK-NOT: scf.for
// CHECK: memref.load
// CHECK: scf.if
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
// CHECK: gpu.thread_id y
// CHECK: arith.muli %{{.*}}, %c16
// The last block may hold fewer than 16 tokens: the token test stays.
// CHECK: arith.cmpi ult
// CHECK-NEXT: scf.if
kv.append @mqa : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 64, dtype = bf16> from bf16

// -----

// A dynamic scale's group (a head: 16 chunks of 8 bf16) takes 16 adjacent
// lanes: head = thread_id.x / 16, lane = thread_id.x mod 16. 32 heads x 16
// lanes are 512 threads, so 256 threads loop over the heads 16 at a time.
// Each amax's scf.reduce becomes four butterfly shuffles over the group's
// 16 lanes of the warp (member mask 0xffff shifted to the group's half);
// no lane loop is left.
// CHECK-LABEL: gpu.func @dyn(
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// CHECK: %[[TX:.*]] = gpu.thread_id x
// CHECK: %[[HEAD:.*]] = arith.divui %[[TX]], %c16
// CHECK: %[[LANE:.*]] = arith.remui %[[TX]], %c16
// CHECK: scf.for %{{.*}} = %[[HEAD]] to %c32{{.*}} step %c16
// CHECK-NOT: scf.parallel
// CHECK: arith.index_cast %[[LANE]]
// CHECK: vector.load
// CHECK: %[[ID:.*]] = gpu.lane_id
// CHECK: %[[ID32:.*]] = arith.index_cast %[[ID]] : index to i32
// CHECK: %[[FIRST:.*]] = arith.andi %[[ID32]], %c16_i32
// CHECK: %[[MASK:.*]] = arith.shli %c65535_i32, %[[FIRST]]
// CHECK-COUNT-4: nvvm.shfl.sync {{ *}}bfly %[[MASK]]
// CHECK-NOT: scf.parallel
// CHECK-COUNT-4: nvvm.shfl.sync {{ *}}bfly %[[MASK]]
// CHECK-NOT: nvvm.shfl.sync
// CHECK-NOT: scf.parallel
// CHECK: gpu.return
kv.append @dyn : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 32, head_dim = 128, dtype = i8,
    quant = #kv.quant<kind = int8, granularity = per_token_head, mode = dynamic>> from bf16

// -----

// Dynamic per token, 8 heads x 128 bf16 = 128 chunks: a whole warp of
// lanes with 4 chunks each; the member mask is the whole warp.
// CHECK-LABEL: gpu.func @dyn_token(
// CHECK-SAME: known_block_size = array<i32: 32, 4, 1>
// CHECK: arith.remui %{{.*}}, %c32
// CHECK-NOT: gpu.lane_id
// CHECK-COUNT-5: nvvm.shfl.sync {{ *}}bfly %c-1_i32
// CHECK-NOT: gpu.lane_id
// CHECK-COUNT-5: nvvm.shfl.sync {{ *}}bfly %c-1_i32
// CHECK: gpu.return
kv.append @dyn_token : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_token, mode = dynamic>> from bf16
