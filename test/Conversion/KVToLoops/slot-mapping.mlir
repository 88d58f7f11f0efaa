// RUN: kvgen-opt %s -kv-to-loops -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @slots(
// CHECK-SAME: %[[BT:[^:]*]]: memref<?xi32> {kv.name = "block_table"}
// CHECK-SAME: %[[QSL:[^:]*]]: memref<?xi32> {kv.name = "query_start_loc"}
// CHECK-SAME: %[[CTX:[^:]*]]: memref<?xi32> {kv.name = "context_lens"}
// CHECK-SAME: %[[OUT:[^:]*]]: memref<?xi64> {kv.name = "slot_mapping"}
// CHECK-SAME: kv.launch = #kv.launch<threads_x = 1, tokens_per_block = 256, chunks_per_token = 1>
// Tokens past query_start_loc[num_reqs] are padding: slot -1.
// CHECK: memref.load %[[QSL]]
// CHECK: scf.if %{{.*}} -> (i64)
// The request: a binary search over query_start_loc.
// CHECK: scf.while
// CHECK: memref.load %[[QSL]]
// CHECK: arith.select
// Pre-increment: position = context_len + (t - query_start_loc[r]).
// CHECK: memref.load %[[QSL]]
// CHECK: arith.subi
// CHECK: memref.load %[[CTX]]
// CHECK: arith.addi
// CHECK: scf.if %{{.*}} -> (i64)
// CHECK: memref.load %[[BT]]
// CHECK: arith.select %{{.*}}, %{{.*}}, %c-1_i64
// CHECK: } else {
// CHECK: scf.yield %c-1_i64
// CHECK: memref.store %{{.*}}, %[[OUT]]
kv.slot_mapping @slots : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = bf16>

// -----

// The fused append computes the same slot, then appends: no slot_mapping
// buffer at all.
// CHECK-LABEL: func.func @fused(
// CHECK-NOT: slot_mapping
// CHECK: scf.while
// CHECK: scf.if
// CHECK: vector.load {{.*}} : memref<?xf16>, vector<8xf16>
// CHECK-LABEL: func.func @fused_scalar(
kv.fused_append @fused : !kv.cache<layout = paged_hnd, block_size = 32,
    num_kv_heads = 8, head_dim = 64, dtype = f16> from f16

