// RUN: kvgen-opt %s -kv-expand-fp8-casts=nvvm=true | FileCheck %s

// With nvvm=true, f32 -> fp8 truncations become the GPU's saturating cvt,
// two lanes per instruction; fp8 -> f32 extensions stay integer ops (the
// same on both targets); other casts are left alone.

// CHECK-LABEL: func.func @round(
// CHECK-DAG: %[[X0:.*]] = vector.extract %arg0[0]
// CHECK-DAG: %[[X1:.*]] = vector.extract %arg0[1]
// CHECK-DAG: %[[X2:.*]] = vector.extract %arg0[2]
// CHECK-DAG: %[[X3:.*]] = vector.extract %arg0[3]
// CHECK: nvvm.convert.f32x2.to.f8x2 %[[X1]], %[[X0]] {rnd = #nvvm.fp_rnd_mode<rn>, sat = #nvvm.sat_mode<satfinite>} : vector<2xi8>(f8E4M3FN)
// CHECK: nvvm.convert.f32x2.to.f8x2 %[[X3]], %[[X2]] {rnd = #nvvm.fp_rnd_mode<rn>, sat = #nvvm.sat_mode<satfinite>} : vector<2xi8>(f8E4M3FN)
// CHECK-NOT: arith.truncf
// CHECK: %[[R:.*]] = arith.bitcast %{{.*}} : vector<4xi8> to vector<4xf8E4M3FN>
// CHECK: return %[[R]] : vector<4xf8E4M3FN>
func.func @round(%x: vector<4xf32>) -> vector<4xf8E4M3FN> {
  %0 = arith.truncf %x : vector<4xf32> to vector<4xf8E4M3FN>
  return %0 : vector<4xf8E4M3FN>
}

// CHECK-LABEL: func.func @widen(
// CHECK-NOT: nvvm.
// CHECK-NOT: arith.extf
// CHECK: return {{.*}} : vector<2xf32>
func.func @widen(%x: vector<2xf8E5M2>) -> vector<2xf32> {
  %0 = arith.extf %x : vector<2xf8E5M2> to vector<2xf32>
  return %0 : vector<2xf32>
}

// CHECK-LABEL: func.func @other(
// CHECK: arith.truncf %{{.*}} : f32 to bf16
func.func @other(%x: f32) -> bf16 {
  %0 = arith.truncf %x : f32 to bf16
  return %0 : bf16
}
