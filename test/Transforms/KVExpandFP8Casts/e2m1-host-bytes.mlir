// RUN: kvgen-opt %s --kv-expand-fp8-casts --convert-vector-to-scf=full-unroll=true --convert-scf-to-cf --convert-vector-to-llvm --convert-cf-to-llvm --convert-arith-to-llvm --convert-func-to-llvm --reconcile-unrealized-casts \
// RUN:   | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_c_runner_utils | FileCheck %s

// The host target's e2m1 rounding (NVFP4's element; kv-expand-fp8-casts
// without nvvm, which sm_90 takes too) gives the bits of
// cvt.rn.satfinite.e2m1x2.f32: round to nearest even at each midpoint
// (0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4)
// and one ulp past it, saturation to 6 (large values, infinities), the sign
// of a zero and of a value rounding to zero kept, NaN -> +0. The expected
// codes come from an exact rational rounding of each input to the nearest
// of 0, 0.5, 1, 1.5, 2, 3, 4, 6 (ties to the even code), not from the pass.
// Then every code decoded (extf) and rounded again: each comes back.

func.func @main() {
  %v0 = arith.constant 0x00000000 : f32
  %v1 = arith.constant 0x80000000 : f32
  %v2 = arith.constant 0x3DCCCCCD : f32
  %v3 = arith.constant 0xBDCCCCCD : f32
  %v4 = arith.constant 0x3E800000 : f32
  %v5 = arith.constant 0x3E800003 : f32
  %v6 = arith.constant 0x3F000000 : f32
  %v7 = arith.constant 0x3F400000 : f32
  %v8 = arith.constant 0xBF400000 : f32
  %v9 = arith.constant 0x3F3FFFFE : f32
  %v10 = arith.constant 0x3F800000 : f32
  %v11 = arith.constant 0x3FA00000 : f32
  %v12 = arith.constant 0x3FA00001 : f32
  %v13 = arith.constant 0x3FC00000 : f32
  %v14 = arith.constant 0x3FE00000 : f32
  %v15 = arith.constant 0x40000000 : f32
  %v16 = arith.constant 0x40200000 : f32
  %v17 = arith.constant 0x40200001 : f32
  %v18 = arith.constant 0x40400000 : f32
  %v19 = arith.constant 0x40600000 : f32
  %v20 = arith.constant 0xC0600000 : f32
  %v21 = arith.constant 0x40800000 : f32
  %v22 = arith.constant 0x40A00000 : f32
  %v23 = arith.constant 0x40A00001 : f32
  %v24 = arith.constant 0x40C00000 : f32
  %v25 = arith.constant 0x40E00000 : f32
  %v26 = arith.constant 0x7149F2CA : f32
  %v27 = arith.constant 0x7F800000 : f32
  %v28 = arith.constant 0xFF800000 : f32
  %v29 = arith.constant 0x7FC00000 : f32
  %v30 = arith.constant 0x800116C2 : f32
  %v31 = arith.constant 0x00800000 : f32
  %x = vector.from_elements %v0, %v1, %v2, %v3, %v4, %v5, %v6, %v7, %v8, %v9, %v10, %v11, %v12, %v13, %v14, %v15, %v16, %v17, %v18, %v19, %v20, %v21, %v22, %v23, %v24, %v25, %v26, %v27, %v28, %v29, %v30, %v31 : vector<32xf32>
  %q = arith.truncf %x : vector<32xf32> to vector<32xf4E2M1FN>
  %q_i4 = arith.bitcast %q : vector<32xf4E2M1FN> to vector<32xi4>
  %q_u = arith.extui %q_i4 : vector<32xi4> to vector<32xi32>
  vector.print %q_u : vector<32xi32>
  %codes = arith.constant dense<[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]> : vector<16xi4>
  %all = arith.bitcast %codes : vector<16xi4> to vector<16xf4E2M1FN>
  %back = arith.extf %all : vector<16xf4E2M1FN> to vector<16xf32>
  vector.print %back : vector<16xf32>
  %again = arith.truncf %back : vector<16xf32> to vector<16xf4E2M1FN>
  %again_i4 = arith.bitcast %again : vector<16xf4E2M1FN> to vector<16xi4>
  %same = arith.cmpi eq, %again_i4, %codes : vector<16xi4>
  vector.print %same : vector<16xi1>
  %s = arith.constant 0xC0400000 : f32
  %sq = arith.truncf %s : f32 to f4E2M1FN
  %sq_i4 = arith.bitcast %sq : f4E2M1FN to i4
  %sq_u = arith.extui %sq_i4 : i4 to i32
  vector.print %sq_u : i32
  return
}

// CHECK: ( 0, 8, 0, 8, 0, 1, 1, 2, 10, 1, 2, 2, 3, 3, 4, 4, 4, 5, 5, 6, 14, 6, 6, 7, 7, 7, 7, 7, 15, 0, 8, 0 )
// CHECK-NEXT: ( 0, 0.5, 1, 1.5, 2, 3, 4, 6, -0, -0.5, -1, -1.5, -2, -3, -4, -6 )
// CHECK-NEXT: ( 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 )
// A scalar: -3 is code 0b1101.
// CHECK-NEXT: 13
