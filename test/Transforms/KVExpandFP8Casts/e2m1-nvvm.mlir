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
// Element 2k in the low nibble: the pair is passed as (odd, even), and
// each byte's nibbles become scalar codes (no vector of i4, which the
// NVPTX back end would take apart through a stack slot).
// CHECK: %[[P0:.*]] = nvvm.convert.f32x2.to.f4x2 %[[X1]], %[[X0]] : i8(f4E2M1FN)
// CHECK: %[[L0:.*]] = arith.trunci %[[P0]] : i8 to i4
// CHECK: %[[E0:.*]] = arith.bitcast %[[L0]] : i4 to f4E2M1FN
// CHECK: %[[S0:.*]] = arith.shrui %[[P0]], %{{.*}} : i8
// CHECK: %[[H0:.*]] = arith.trunci %[[S0]] : i8 to i4
// CHECK: %[[E1:.*]] = arith.bitcast %[[H0]] : i4 to f4E2M1FN
// CHECK: %[[P1:.*]] = nvvm.convert.f32x2.to.f4x2 %[[X3]], %[[X2]] : i8(f4E2M1FN)
// CHECK: %[[R:.*]] = vector.from_elements %[[E0]], %[[E1]], %{{.*}}, %{{.*}} : vector<4xf4E2M1FN>
// CHECK-NOT: arith.truncf
// CHECK: return %[[R]]
gpu.module @sm100a [#nvvm.target<chip = "sm_100a">] {
  func.func @round(%x: vector<4xf32>) -> vector<4xf4E2M1FN> {
    %0 = arith.truncf %x : vector<4xf32> to vector<4xf4E2M1FN>
    return %0 : vector<4xf4E2M1FN>
  }
  // An odd count pads its last pair with 0 and drops its high nibble.
  // CHECK-LABEL: func.func @round_odd(
  // CHECK-COUNT-2: nvvm.convert.f32x2.to.f4x2
  // CHECK: vector.from_elements {{.*}} : vector<3xf4E2M1FN>
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
