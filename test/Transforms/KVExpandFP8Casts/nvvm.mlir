// RUN: kvgen-opt %s -kv-expand-fp8-casts=nvvm=true | FileCheck %s

// With nvvm=true, f32 -> fp8 truncations become the GPU's saturating cvt,
// two lanes per instruction; fp8 -> f32 extensions stay integer ops (the
// same on both targets); other casts are left alone.

// CHECK-LABEL: func.func @round(
// CHECK-DAG: %[[X0:.*]] = vector.extract %arg0[0]
// CHECK-DAG: %[[X1:.*]] = vector.extract %arg0[1]
// CHECK-DAG: %[[X2:.*]] = vector.extract %arg0[2]
// CHECK-DAG: %[[X3:.*]] = vector.extract %arg0[3]
// CHECK: %[[P0:.*]] = nvvm.convert.f32x2.to.f8x2 %[[X1]], %[[X0]] {rnd = #nvvm.fp_rnd_mode<rn>, sat = #nvvm.sat_mode<satfinite>} : i16(f8E4M3FN)
// CHECK: %[[P1:.*]] = nvvm.convert.f32x2.to.f8x2 %[[X3]], %[[X2]] {rnd = #nvvm.fp_rnd_mode<rn>, sat = #nvvm.sat_mode<satfinite>} : i16(f8E4M3FN)
// CHECK-NOT: arith.truncf
// The pairs stay halfwords (element 2k in the low byte, first in memory).
// CHECK: %[[H:.*]] = vector.from_elements %[[P0]], %[[P1]] : vector<2xi16>
// CHECK: %[[B:.*]] = vector.bitcast %[[H]] : vector<2xi16> to vector<4xi8>
// CHECK: %[[R:.*]] = arith.bitcast %[[B]] : vector<4xi8> to vector<4xf8E4M3FN>
// CHECK: return %[[R]] : vector<4xf8E4M3FN>
func.func @round(%x: vector<4xf32>) -> vector<4xf8E4M3FN> {
  %0 = arith.truncf %x : vector<4xf32> to vector<4xf8E4M3FN>
  return %0 : vector<4xf8E4M3FN>
}

// An odd count pads its last pair with 0 and is put together from bytes.
// CHECK-LABEL: func.func @round_odd(
// CHECK: nvvm.convert.f32x2.to.f8x2 {{.*}} : vector<2xi8>(f8E5M2)
// CHECK: nvvm.convert.f32x2.to.f8x2 {{.*}} : vector<2xi8>(f8E5M2)
// CHECK: vector.from_elements {{.*}} : vector<3xi8>
func.func @round_odd(%x: vector<3xf32>) -> vector<3xf8E5M2> {
  %0 = arith.truncf %x : vector<3xf32> to vector<3xf8E5M2>
  return %0 : vector<3xf8E5M2>
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
