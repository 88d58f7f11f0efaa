// RUN: kvgen-opt %s -kv-to-loops -split-input-file | FileCheck %s

// K and V of different head sizes (v_head_dim): the chunk loop walks a head
// of the longer side, 16 bytes a chunk dividing both; each side's chunk is
// moved unconditionally where its head is the longer one and under
// `d0 < its head size` where it is the shorter.

// K 192 / V 128 bf16, 8 heads: 8 x 192 / 8 = 192 chunks a token. K's load
// and store are unconditional; V's follow a compare with 128.
// CHECK-LABEL: func.func @nhd(
// CHECK-SAME: %[[KEY:[^:]*]]: memref<?xbf16> {kv.name = "key"}
// CHECK-SAME: %[[VALUE:[^:]*]]: memref<?xbf16> {kv.name = "value"}
// CHECK-SAME: %[[KCACHE:[^:]*]]: memref<?xbf16> {kv.name = "key_cache"}
// CHECK-SAME: %[[VCACHE:[^:]*]]: memref<?xbf16> {kv.name = "value_cache"}
// CHECK-SAME: chunks_per_token = 192>
// CHECK: scf.if
// CHECK: vector.load %[[KEY]]
// CHECK: vector.store %{{.*}}, %[[KCACHE]]
// CHECK: %[[IN:.*]] = arith.cmpi ult, %{{.*}}, %c128_i64 : i64
// CHECK-NEXT: scf.if %[[IN]] {
// CHECK: vector.load %[[VALUE]]
// CHECK: vector.store %{{.*}}, %[[VCACHE]]
// CHECK-LABEL: func.func @nhd_scalar(
kv.append @nhd : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 192, v_head_dim = 128, dtype = bf16> from bf16

// -----

// V longer than K (64 / 128 f16 from f32, 4-element chunks): K's side is
// the checked one; 2 x 128 / 4 = 64 chunks a token.
// CHECK-LABEL: func.func @contiguous(
// CHECK-SAME: chunks_per_token = 64>
// CHECK: %[[IN:.*]] = arith.cmpi ult, %{{.*}}, %c64_i64 : i64
// CHECK-NEXT: scf.if %[[IN]] {
// CHECK: vector.store %{{.*}} : memref<?xf16>, vector<4xf16>
// CHECK: }
// CHECK-NOT: arith.cmpi ult, %{{.*}}, %c128_i64
// CHECK: vector.store %{{.*}} : memref<?xf16>, vector<4xf16>
// CHECK-LABEL: func.func @contiguous_scalar(
kv.append @contiguous : !kv.cache<layout = contiguous, max_seq_len = 40,
    num_kv_heads = 2, head_dim = 64, v_head_dim = 128, dtype = f16> from f32

// -----

// The gather reads each side under the same rule: V's rows of 8 elements
// of a 16 / 8 fp8 cache, per-head scales.
// CHECK-LABEL: func.func @gather(
// CHECK-SAME: chunks_per_token = 2>
// CHECK: %[[IN:.*]] = arith.cmpi ult, %{{.*}}, %c8_i64 : i64
// CHECK-NEXT: scf.if %[[IN]] {
// CHECK-LABEL: func.func @gather_scalar(
kv.gather @gather : !kv.cache<layout = paged_hnd, block_size = 16,
    num_kv_heads = 1, head_dim = 16, v_head_dim = 8, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_head, mode = static>> to bf16
