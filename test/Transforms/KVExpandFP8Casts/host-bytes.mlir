// RUN: kvgen-opt %s --kv-expand-fp8-casts --convert-vector-to-scf=full-unroll=true --convert-scf-to-cf --convert-vector-to-llvm --convert-cf-to-llvm --convert-arith-to-llvm --convert-func-to-llvm --reconcile-unrealized-casts \
// RUN:   | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_c_runner_utils | FileCheck %s

// The host target's fp8 rounding (kv-expand-fp8-casts without nvvm) gives
// the bytes of cvt.rn.satfinite: round to nearest even (ties: 1.0625,
// 1.1875, 2^-10), subnormals, saturation of finite values and infinities,
// the sign of zero, NaN -> 0x7F. The expected bytes come from an exact
// rational rounding of each input, not from the pass. Then the decode
// (extf) of every byte back and forth: each code reads back to itself.

func.func @main() {
  %v0 = arith.constant 0x00000000 : f32
  %v1 = arith.constant 0x80000000 : f32
  %v2 = arith.constant 0x3F800000 : f32
  %v3 = arith.constant 0xBF800000 : f32
  %v4 = arith.constant 0x43E00000 : f32
  %v5 = arith.constant 0x43E08000 : f32
  %v6 = arith.constant 0x43E80000 : f32
  %v7 = arith.constant 0x4E6E6B28 : f32
  %v8 = arith.constant 0xCE6E6B28 : f32
  %v9 = arith.constant 0x7F800000 : f32
  %v10 = arith.constant 0xFF800000 : f32
  %v11 = arith.constant 0x7FC00000 : f32
  %v12 = arith.constant 0x3C800000 : f32
  %v13 = arith.constant 0x3B000000 : f32
  %v14 = arith.constant 0x3A800000 : f32
  %v15 = arith.constant 0x3AC00000 : f32
  %v16 = arith.constant 0x3B400000 : f32
  %v17 = arith.constant 0x3C080000 : f32
  %v18 = arith.constant 0x3F880000 : f32
  %v19 = arith.constant 0x3F980000 : f32
  %v20 = arith.constant 0x3E99999A : f32
  %v21 = arith.constant 0x47600000 : f32
  %v22 = arith.constant 0x47700000 : f32
  %v23 = arith.constant 0x38800000 : f32
  %v24 = arith.constant 0x37800000 : f32
  %v25 = arith.constant 0x37000000 : f32
  %v26 = arith.constant 0x37C00000 : f32
  %v27 = arith.constant 0x37A00000 : f32
  %x = vector.from_elements %v0, %v1, %v2, %v3, %v4, %v5, %v6, %v7, %v8, %v9, %v10, %v11, %v12, %v13, %v14, %v15, %v16, %v17, %v18, %v19, %v20, %v21, %v22, %v23, %v24, %v25, %v26, %v27 : vector<28xf32>
  %e4m3 = arith.truncf %x : vector<28xf32> to vector<28xf8E4M3FN>
  %e4m3_i8 = arith.bitcast %e4m3 : vector<28xf8E4M3FN> to vector<28xi8>
  %e4m3_u = arith.extui %e4m3_i8 : vector<28xi8> to vector<28xi32>
  vector.print %e4m3_u : vector<28xi32>
  %e4m3_back = arith.extf %e4m3 : vector<28xf8E4M3FN> to vector<28xf32>
  %e4m3_again = arith.truncf %e4m3_back : vector<28xf32> to vector<28xf8E4M3FN>
  %e4m3_again_i8 = arith.bitcast %e4m3_again : vector<28xf8E4M3FN> to vector<28xi8>
  %e4m3_same = arith.cmpi eq, %e4m3_again_i8, %e4m3_i8 : vector<28xi8>
  vector.print %e4m3_same : vector<28xi1>
  %e5m2 = arith.truncf %x : vector<28xf32> to vector<28xf8E5M2>
  %e5m2_i8 = arith.bitcast %e5m2 : vector<28xf8E5M2> to vector<28xi8>
  %e5m2_u = arith.extui %e5m2_i8 : vector<28xi8> to vector<28xi32>
  vector.print %e5m2_u : vector<28xi32>
  %e5m2_back = arith.extf %e5m2 : vector<28xf8E5M2> to vector<28xf32>
  %e5m2_again = arith.truncf %e5m2_back : vector<28xf32> to vector<28xf8E5M2>
  %e5m2_again_i8 = arith.bitcast %e5m2_again : vector<28xf8E5M2> to vector<28xi8>
  %e5m2_same = arith.cmpi eq, %e5m2_again_i8, %e5m2_i8 : vector<28xi8>
  vector.print %e5m2_same : vector<28xi1>
  return
}

// Inputs: 0.0, -0.0, 1.0, -1.0, 448.0, 449.0, 464.0, 1000000000.0, -1000000000.0, inf, -inf, nan, 0.015625, 0.001953125, 0.0009765625, 0.00146484375, 0.0029296875, 0.00830078125, 1.0625, 1.1875, 0.30000001192092896, 57344.0, 61440.0, 6.103515625e-05, 1.52587890625e-05, 7.62939453125e-06, 2.288818359375e-05, 1.9073486328125e-05
// CHECK: ( 0, 128, 56, 184, 126, 126, 126, 126, 254, 126, 254, 127, 8, 1, 0, 1, 2, 4, 56, 58, 42, 126, 126, 0, 0, 0, 0, 0 )
// CHECK-NEXT: ( 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 )
// CHECK-NEXT: ( 0, 128, 60, 188, 95, 95, 95, 123, 251, 123, 251, 127, 36, 24, 20, 22, 26, 32, 60, 61, 53, 123, 123, 4, 1, 0, 2, 1 )
// CHECK-NEXT: ( 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 )
