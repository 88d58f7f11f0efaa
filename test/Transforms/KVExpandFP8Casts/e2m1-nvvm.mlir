// RUN: kvgen-opt %s --pass-pipeline='builtin.module(gpu.module(kv-expand-fp8-casts{nvvm=true}))' | FileCheck %s

// e2m1 (NVFP4's element) with nvvm=true: cvt.rn.satfinite.e2m1x2.f32 only
// on a chip that has it (sm_100 and later with the arch- or family-specific
// features), a NaN made +0 before it; integer ops on sm_90, on the plain
// sm_100 target (whose back end cannot select the cvt) and on a module with
// no target. The decode is integer ops everywhere.

// CHECK-LABEL: gpu.module @sm100a
// CHECK-LABEL: func.func @round(
// CHECK: %[[NAN:.*]] = arith.cmpf uno, %arg0, %arg0 : vector<4xf32>
// CHECK: %[[X:.*]] = arith.select %[[NAN]], %{{.*}}, %arg0
// CHECK-DAG: %[[X0:.*]] = vector.extract %[[X]][0]
// CHECK-DAG: %[[X1:.*]] = vector.extract %[[X]][1]
// CHECK-DAG: %[[X2:.*]] = vector.extract %[[X]][2]
// CHECK-DAG: %[[X3:.*]] = vector.extract %[[X]][3]
// Element 2k in the low nibble: the pair is passed as (odd, even).
// CHECK: %[[P0:.*]] = nvvm.convert.f32x2.to.f4x2 %[[X1]], %[[X0]] : i8(f4E2M1FN)
// CHECK: %[[P1:.*]] = nvvm.convert.f32x2.to.f4x2 %[[X3]], %[[X2]] : i8(f4E2M1FN)
// CHECK: %[[B:.*]] = vector.from_elements %[[P0]], %[[P1]] : vector<2xi8>
// CHECK: %[[N:.*]] = vector.bitcast %[[B]] : vector<2xi8> to vector<4xi4>
// CHECK: %[[R:.*]] = arith.bitcast %[[N]] : vector<4xi4> to vector<4xf4E2M1FN>
// CHECK-NOT: arith.truncf
// CHECK: return %[[R]]
gpu.module @sm100a [#nvvm.target<chip = "sm_100a">] {
  func.func @round(%x: vector<4xf32>) -> vector<4xf4E2M1FN> {
    %0 = arith.truncf %x : vector<4xf32> to vector<4xf4E2M1FN>
    return %0 : vector<4xf4E2M1FN>
  }
  // An odd count pads its last pair with 0 and drops its nibble.
  // CHECK-LABEL: func.func @round_odd(
  // CHECK-COUNT-2: nvvm.convert.f32x2.to.f4x2
  // CHECK: vector.extract_strided_slice {{.*}} {offsets = [0], sizes = [3], strides = [1]} : vector<4xi4> to vector<3xi4>
  func.func @round_odd(%x: vector<3xf32>) -> vector<3xf4E2M1FN> {
    %0 = arith.truncf %x : vector<3xf32> to vector<3xf4E2M1FN>
    return %0 : vector<3xf4E2M1FN>
  }
  // CHECK-LABEL: func.func @widen(
  // CHECK-NOT: nvvm.
  // CHECK-NOT: arith.extf
  // CHECK: return {{.*}} : vector<2xf32>
  func.func @widen(%x: vector<2xf4E2M1FN>) -> vector<2xf32> {
    %0 = arith.extf %x : vector<2xf4E2M1FN> to vector<2xf32>
    return %0 : vector<2xf32>
  }
}

// CHECK-LABEL: gpu.module @sm120f
// CHECK: nvvm.convert.f32x2.to.f4x2
gpu.module @sm120f [#nvvm.target<chip = "sm_120f">] {
  func.func @round(%x: vector<2xf32>) -> vector<2xf4E2M1FN> {
    %0 = arith.truncf %x : vector<2xf32> to vector<2xf4E2M1FN>
    return %0 : vector<2xf4E2M1FN>
  }
}

// The software rounding where there is no cvt; fp8 keeps its cvt on sm_90.
// CHECK-LABEL: gpu.module @sm90
// CHECK-NOT: nvvm.convert.f32x2.to.f4x2
// CHECK: arith.trunci {{.*}} : vector<2xi32> to vector<2xi4>
// CHECK: nvvm.convert.f32x2.to.f8x2
gpu.module @sm90 [#nvvm.target<chip = "sm_90">] {
  func.func @round(%x: vector<2xf32>) -> vector<2xf4E2M1FN> {
    %0 = arith.truncf %x : vector<2xf32> to vector<2xf4E2M1FN>
    return %0 : vector<2xf4E2M1FN>
  }
  func.func @fp8(%x: vector<2xf32>) -> vector<2xf8E4M3FN> {
    %0 = arith.truncf %x : vector<2xf32> to vector<2xf8E4M3FN>
    return %0 : vector<2xf8E4M3FN>
  }
}

// CHECK-LABEL: gpu.module @sm100
// CHECK-NOT: nvvm.convert.f32x2.to.f4x2
// CHECK: arith.trunci {{.*}} : vector<2xi32> to vector<2xi4>
gpu.module @sm100 [#nvvm.target<chip = "sm_100">] {
  func.func @round(%x: vector<2xf32>) -> vector<2xf4E2M1FN> {
    %0 = arith.truncf %x : vector<2xf32> to vector<2xf4E2M1FN>
    return %0 : vector<2xf4E2M1FN>
  }
}

// CHECK-LABEL: gpu.module @untargeted
// CHECK-NOT: nvvm.convert.f32x2.to.f4x2
// CHECK: arith.trunci {{.*}} : i32 to i4
gpu.module @untargeted {
  func.func @round(%x: f32) -> f4E2M1FN {
    %0 = arith.truncf %x : f32 to f4E2M1FN
    return %0 : f4E2M1FN
  }
}
