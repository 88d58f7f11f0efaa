// RUN: kvgen-opt %s -kv-to-loops -split-input-file | FileCheck %s

// A cache side whose head_dim elements are not adjacent (the legacy
// vectorized layout's value cache [nb, H, D, bs]: its innermost axis is Pos,
// so consecutive d are s_dim = bs apart) is not chunk contiguous: even the
// vector variant reaches it element by element, at d * s_dim, while its key
// side (innermost axis X) moves whole vectors. Each case ends at the label of
// the scalar variant, so that its element accesses cannot stand in for the
// vector variant's.

// CHECK-LABEL: func.func @append(
// CHECK-SAME: %[[VC:[^:]*]]: memref<?xf16> {kv.name = "value_cache"}
// CHECK-SAME: %[[VC_DIM:[^:]*]]: i32 {kv.name = "value_cache_stride_dim"}
// The key side: one 16-byte store; the value side's offset: d0 * s_dim, in
// i32 (a term within one block).
// CHECK-DAG: vector.store %{{.*}} {alignment = 16 : i64} : memref<?xf16>, vector<8xf16>
// CHECK-DAG: arith.muli %{{.*}}, %[[VC_DIM]] : i32
// CHECK-NOT: vector.store
// CHECK-COUNT-8: memref.store %{{.*}}, %[[VC]][%{{.*}}] : memref<?xf16>
// CHECK-NOT: vector.store
// CHECK-LABEL: func.func @append_scalar(
kv.append @append : !kv.cache<layout = vllm_vectorized, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = f16> from f16

// -----

// The gather reads the value side element by element and assembles the
// chunk for its (unit-stride) output.
// CHECK-LABEL: func.func @gather(
// CHECK-SAME: %[[KC:[^:]*]]: memref<?xf16> {kv.name = "key_cache"}
// CHECK-SAME: %[[VC:[^:]*]]: memref<?xf16> {kv.name = "value_cache"}
// CHECK-SAME: %[[VC_DIM:[^:]*]]: i32 {kv.name = "value_cache_stride_dim"}
// CHECK-DAG: vector.load %[[KC]][%{{.*}}] {alignment = 16 : i64} : memref<?xf16>, vector<8xf16>
// CHECK-DAG: arith.muli %{{.*}}, %[[VC_DIM]] : i32
// CHECK-NOT: vector.load
// CHECK-COUNT-8: memref.load %[[VC]][%{{.*}}] : memref<?xf16>
// CHECK: vector.from_elements
// CHECK-NOT: vector.load
// CHECK-LABEL: func.func @gather_scalar(
kv.gather @gather : !kv.cache<layout = vllm_vectorized, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = f16> to f16
