// RUN: kvgen-opt %s --mlir-very-unsafe-disable-verifier-on-parsing -kv-to-loops -canonicalize -cse -convert-scf-to-cf \
// RUN:   -kv-expand-fp8-casts -expand-strided-metadata \
// RUN:   -convert-vector-to-scf=full-unroll=true -convert-scf-to-cf \
// RUN:   -convert-vector-to-llvm -finalize-memref-to-llvm -convert-arith-to-llvm \
// RUN:   -convert-cf-to-llvm -convert-func-to-llvm -reconcile-unrealized-casts \
// RUN:   | sed -e 's/#kv.launch<[^>]*>/unit/g' \
// RUN:   | mlir-runner -e main -entry-point-result=void \
// RUN:       -shared-libs=%mlir_c_runner_utils | FileCheck %s

// A dynamic int8 append (per_token_head) and a gather of the same cache,
// run on the host: paged_hnd, block_size 2, 2 heads of 4. Token 0 (slot 1)
// head 0 is 1, -2, 3, 254: amax 254, scale 2, q = 0 (0.5 rounds to even),
// -1, 2 (1.5 rounds to even), 127; head 1 is NaN, inf, 0, 0: no finite
// value but zeros, so amax 0 and scale 1, NaN writes 0 and inf saturates.
// Token 1 (slot 2) has scales 2.5 / 127 and 100 / 127. The scale cache
// [2, 2, 2] gets the four scales at slot * 2 + head. The gather reads
// slots 2, -1, 1 back as float(q) * s; row 1 (padding) stays 9.0. Caches
// start as -7, scales as -1.0. Expected values (printed as bits) come from
// an independent reference of the convention.

kv.append @i8 : !kv.cache<layout = paged_hnd, block_size = 2,
    num_kv_heads = 2, head_dim = 4, dtype = i8,
    quant = #kv.quant<kind = int8, granularity = per_token_head, mode = dynamic>> from f32
kv.gather @g : !kv.cache<layout = paged_hnd, block_size = 2,
    num_kv_heads = 2, head_dim = 4, dtype = i8,
    quant = #kv.quant<kind = int8, granularity = per_token_head, mode = dynamic>> to f32

func.func @fill(%m: memref<?xf32>, %i: index, %a: f32, %b: f32, %c: f32, %d: f32) {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %i1 = arith.addi %i, %c1 : index
  %i2 = arith.addi %i, %c2 : index
  %i3 = arith.addi %i, %c3 : index
  memref.store %a, %m[%i] : memref<?xf32>
  memref.store %b, %m[%i1] : memref<?xf32>
  memref.store %c, %m[%i2] : memref<?xf32>
  memref.store %d, %m[%i3] : memref<?xf32>
  return
}

func.func @print_i8(%m: memref<?xi8>) {
  %c0 = arith.constant 0 : index
  %v = vector.load %m[%c0] : memref<?xi8>, vector<32xi8>
  %u = arith.extsi %v : vector<32xi8> to vector<32xi32>
  vector.print %u : vector<32xi32>
  return
}

func.func @print_f32(%m: memref<?xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %n step %c1 {
    %v = memref.load %m[%i] : memref<?xf32>
    %b = arith.bitcast %v : f32 to i32
    vector.print %b : i32 punctuation <comma>
  }
  vector.print punctuation <newline>
  return
}

func.func @main() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c12 = arith.constant 12 : index
  %c16 = arith.constant 16 : index
  %c24 = arith.constant 24 : index
  %c32 = arith.constant 32 : index
  %k = memref.alloc(%c16) : memref<?xf32>
  %f1 = arith.constant 1.0 : f32
  %fm2 = arith.constant -2.0 : f32
  %f3 = arith.constant 3.0 : f32
  %f254 = arith.constant 254.0 : f32
  %nan = arith.constant 0x7FC00000 : f32
  %inf = arith.constant 0x7F800000 : f32
  %f0 = arith.constant 0.0 : f32
  %fmh = arith.constant -0.5 : f32
  %fh = arith.constant 0.5 : f32
  %f15 = arith.constant 1.5 : f32
  %fm25 = arith.constant -2.5 : f32
  %f100 = arith.constant 100.0 : f32
  %fm100 = arith.constant -100.0 : f32
  %f50 = arith.constant 50.0 : f32
  %f25 = arith.constant 25.0 : f32
  func.call @fill(%k, %c0, %f1, %fm2, %f3, %f254) : (memref<?xf32>, index, f32, f32, f32, f32) -> ()
  func.call @fill(%k, %c4, %nan, %inf, %f0, %f0) : (memref<?xf32>, index, f32, f32, f32, f32) -> ()
  func.call @fill(%k, %c8, %fmh, %fh, %f15, %fm25) : (memref<?xf32>, index, f32, f32, f32, f32) -> ()
  func.call @fill(%k, %c12, %f100, %fm100, %f50, %f25) : (memref<?xf32>, index, f32, f32, f32, f32) -> ()
  %slots = memref.alloc(%c2) : memref<?xi64>
  %s1 = arith.constant 1 : i64
  %s2 = arith.constant 2 : i64
  memref.store %s1, %slots[%c0] : memref<?xi64>
  memref.store %s2, %slots[%c1] : memref<?xi64>

  %poison = arith.constant -7 : i8
  %kc = memref.alloc(%c32) : memref<?xi8>
  %vc = memref.alloc(%c32) : memref<?xi8>
  scf.for %i = %c0 to %c32 step %c1 {
    memref.store %poison, %kc[%i] : memref<?xi8>
    memref.store %poison, %vc[%i] : memref<?xi8>
  }
  %fm1 = arith.constant -1.0 : f32
  %ksc = memref.alloc(%c8) : memref<?xf32>
  %vsc = memref.alloc(%c8) : memref<?xf32>
  scf.for %i = %c0 to %c8 step %c1 {
    memref.store %fm1, %ksc[%i] : memref<?xf32>
    memref.store %fm1, %vsc[%i] : memref<?xf32>
  }
  %n = arith.constant 2 : i32
  %nb = arith.constant 2 : i32
  %i1 = arith.constant 1 : i32
  %i4 = arith.constant 4 : i32
  %i8 = arith.constant 8 : i32
  %i16 = arith.constant 16 : i32
  // Source [T, 2, 4]: token 8, head 4, dim 1. Cache [nb, H, bs, D]: block
  // 16, head 8, pos 4, dim 1.
  func.call @i8(%k, %k, %slots, %kc, %vc, %ksc, %vsc, %n, %nb,
                %i8, %i4, %i1, %i8, %i4, %i1,
                %i16, %i8, %i4, %i1, %i16, %i8, %i4, %i1)
    : (memref<?xf32>, memref<?xf32>, memref<?xi64>, memref<?xi8>, memref<?xi8>, memref<?xf32>, memref<?xf32>, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32) -> ()
  func.call @print_i8(%kc) : (memref<?xi8>) -> ()
  func.call @print_i8(%vc) : (memref<?xi8>) -> ()
  func.call @print_f32(%ksc, %c8) : (memref<?xf32>, index) -> ()

  %gslots = memref.alloc(%c3) : memref<?xi64>
  %gm1 = arith.constant -1 : i64
  memref.store %s2, %gslots[%c0] : memref<?xi64>
  memref.store %gm1, %gslots[%c1] : memref<?xi64>
  memref.store %s1, %gslots[%c2] : memref<?xi64>
  %f9 = arith.constant 9.0 : f32
  %ko = memref.alloc(%c24) : memref<?xf32>
  %vo = memref.alloc(%c24) : memref<?xf32>
  scf.for %i = %c0 to %c24 step %c1 {
    memref.store %f9, %ko[%i] : memref<?xf32>
    memref.store %f9, %vo[%i] : memref<?xf32>
  }
  %g3 = arith.constant 3 : i32
  func.call @g_scalar(%kc, %vc, %gslots, %ko, %vo, %ksc, %vsc, %g3, %nb,
                      %i8, %i4, %i1, %i8, %i4, %i1,
                      %i16, %i8, %i4, %i1, %i16, %i8, %i4, %i1)
    : (memref<?xi8>, memref<?xi8>, memref<?xi64>, memref<?xf32>, memref<?xf32>, memref<?xf32>, memref<?xf32>, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32) -> ()
  func.call @print_f32(%ko, %c24) : (memref<?xf32>, index) -> ()
  func.call @print_f32(%vo, %c24) : (memref<?xf32>, index) -> ()
  return
}

// CHECK:      ( -7, -7, -7, -7, 0, -1, 2, 127, -7, -7, -7, -7, 0, 127, 0, 0, -25, 25, 76, -127, -7, -7, -7, -7, 127, -127, 64, 32, -7, -7, -7, -7 )
// CHECK-NEXT: ( -7, -7, -7, -7, 0, -1, 2, 127, -7, -7, -7, -7, 0, 127, 0, 0, -25, 25, 76, -127, -7, -7, -7, -7, 127, -127, 64, 32, -7, -7, -7, -7 )
// CHECK-NEXT: -1082130432, -1082130432, 1073741824, 1065353216, 1017201285, 1061786406, -1082130432, -1082130432,
// CHECK-NEXT: -1090783248, 1056700400, 1069514494, -1071644672, 1120403456, -1027080192, 1112118054, 1103729446, 1091567616, 1091567616, 1091567616, 1091567616, 1091567616, 1091567616, 1091567616, 1091567616, 0, -1073741824, 1082130432, 1132331008, 0, 1123942400, 0, 0,
// CHECK-NEXT: -1090783248, 1056700400, 1069514494, -1071644672, 1120403456, -1027080192, 1112118054, 1103729446, 1091567616, 1091567616, 1091567616, 1091567616, 1091567616, 1091567616, 1091567616, 1091567616, 0, -1073741824, 1082130432, 1132331008, 0, 1123942400, 0, 0,
