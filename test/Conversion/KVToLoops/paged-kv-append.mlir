// RUN: kvgen-opt %s -kv-to-loops -split-input-file | FileCheck %s

// paged_kv_append reads FlashInfer's page table in the kernel: the batch
// index and the position of the token, then, only for a batch index in
// [0, batch_size), the request's kv_indptr range, then, only for a position
// in [0, ...) whose page lies inside that range and a range inside
// kv_indices, the page id. The K/V loads come after every check: no K or V
// element is read for a token whose slot is not known valid.

// CHECK-LABEL: func.func @paged(
// CHECK-SAME: %[[K:[^:]*]]: memref<?xbf16> {kv.name = "key"}
// CHECK-SAME: %[[V:[^:]*]]: memref<?xbf16> {kv.name = "value"}
// CHECK-SAME: %[[BATCH:[^:]*]]: memref<?xi32> {kv.name = "batch_indices"}
// CHECK-SAME: %[[POS:[^:]*]]: memref<?xi32> {kv.name = "positions"}
// CHECK-SAME: %[[IDX:[^:]*]]: memref<?xi32> {kv.name = "kv_indices"}
// CHECK-SAME: %[[PTR:[^:]*]]: memref<?xi32> {kv.name = "kv_indptr"}
// CHECK-SAME: %{{[^:]*}}: i32 {kv.name = "num_blocks"}
// CHECK-SAME: %[[BS:[^:]*]]: i32 {kv.name = "batch_size"}
// CHECK-SAME: %[[NI:[^:]*]]: i32 {kv.name = "num_indices"}
// CHECK-NOT: slot_mapping
// CHECK-NOT: vector.load
// CHECK: %[[B:.*]] = arith.extsi {{.*}} : i32 to i64
// CHECK-NOT: vector.load
// CHECK: %[[P:.*]] = arith.extsi {{.*}} : i32 to i64
// CHECK-NOT: vector.load
// CHECK: %[[BS64:.*]] = arith.extui %[[BS]] : i32 to i64
// CHECK-NEXT: %[[INB:.*]] = arith.cmpi ult, %[[B]], %[[BS64]] : i64
// CHECK-NEXT: scf.if %[[INB]] -> (i64) {
// CHECK-NOT: vector.load
// CHECK: memref.load %[[PTR]]
// CHECK-NOT: vector.load
// CHECK: memref.load %[[PTR]]
// CHECK-NOT: vector.load
// CHECK: arith.cmpi sge, %[[P]], %c0_i64
// CHECK: arith.cmpi sge
// CHECK: arith.extui %[[NI]]
// CHECK: arith.cmpi sle
// CHECK: arith.cmpi slt
// CHECK: scf.if %{{.*}} -> (i64) {
// CHECK-NOT: vector.load
// CHECK: memref.load %[[IDX]]
// CHECK-NOT: vector.load
// CHECK: arith.cmpi sge, %{{.*}}, %c0_i64
// CHECK: arith.select %{{.*}}, %{{.*}}, %c-1_i64
// CHECK: } else {
// CHECK-NOT: memref.load
// CHECK: scf.yield %c-1_i64
// CHECK: } else {
// CHECK-NOT: memref.load
// CHECK: scf.yield %c-1_i64
// The usual slot check (num_blocks), then the loads.
// CHECK: arith.cmpi ult
// CHECK: scf.if
// CHECK: vector.load %[[K]]
// CHECK: vector.load %[[V]]
// CHECK-LABEL: func.func @paged_scalar(
kv.paged_kv_append @paged : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16

// -----

// A block size that is not a power of two: the page and the row are a
// division and a remainder by the constant.
// CHECK-LABEL: func.func @paged_3(
// CHECK: arith.divui %{{.*}}, %c3_i64
// CHECK: memref.load
// CHECK: arith.remui %{{.*}}, %c3_i64
kv.paged_kv_append @paged_3 : !kv.cache<layout = paged_hnd, block_size = 3,
    num_kv_heads = 2, head_dim = 64, dtype = f32> from f32
