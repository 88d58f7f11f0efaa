// RUN: kvgen-opt %s --mlir-very-unsafe-disable-verifier-on-parsing -kv-to-loops -canonicalize -cse -convert-scf-to-cf \
// RUN:   -kv-expand-fp8-casts -expand-strided-metadata \
// RUN:   -convert-vector-to-scf=full-unroll=true -convert-scf-to-cf \
// RUN:   -convert-vector-to-llvm -finalize-memref-to-llvm -convert-arith-to-llvm \
// RUN:   -convert-cf-to-llvm -convert-func-to-llvm -reconcile-unrealized-casts \
// RUN:   | sed -e 's/#kv.launch<[^>]*>/unit/g' \
// RUN:   | mlir-runner -e main -entry-point-result=void \
// RUN:       -shared-libs=%mlir_c_runner_utils | FileCheck %s

// A quantized append run on the host, both variants, through the host
// target's passes: fp8 e4m3, per_token static scales, paged_nhd with
// block_size 2, one head of 4. Token 0 (slot 3, scale 2) holds 1, 500
// (saturates to 448), -0 (keeps its sign), NaN (0x7F); token 1 (slot 0,
// scale 0.5) 0.001 (a subnormal), -3, inf (saturates), 2^-10 (2^-9 after
// the division); token 2 is padding (slot -1). V is K with scale 1. The
// cache starts as 0x55 (85) everywhere. The expected bytes come from an
// exact rational rounding of x / s, not from the kernel. (mlir-runner does
// not know the kv dialect: sed drops the launch geometry it cannot parse.)

kv.append @fp8 : !kv.cache<layout = paged_nhd, block_size = 2,
    num_kv_heads = 1, head_dim = 4, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_token, mode = static>> from f32


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

func.func @print(%m: memref<?xf8E4M3FN>) {
  %c0 = arith.constant 0 : index
  %v = vector.load %m[%c0] : memref<?xf8E4M3FN>, vector<16xf8E4M3FN>
  %b = arith.bitcast %v : vector<16xf8E4M3FN> to vector<16xi8>
  %u = arith.extui %b : vector<16xi8> to vector<16xi32>
  vector.print %u : vector<16xi32>
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
  %k = memref.alloc(%c12) : memref<?xf32>
  %one = arith.constant 1.0 : f32
  %big = arith.constant 500.0 : f32
  %nz = arith.constant -0.0 : f32
  %nan = arith.constant 0x7FC00000 : f32
  %milli = arith.constant 0.001 : f32
  %m3 = arith.constant -3.0 : f32
  %inf = arith.constant 0x7F800000 : f32
  %tiny = arith.constant 0x3A800000 : f32
  %seven = arith.constant 7.0 : f32
  func.call @fill(%k, %c0, %one, %big, %nz, %nan) : (memref<?xf32>, index, f32, f32, f32, f32) -> ()
  func.call @fill(%k, %c4, %milli, %m3, %inf, %tiny) : (memref<?xf32>, index, f32, f32, f32, f32) -> ()
  func.call @fill(%k, %c8, %seven, %seven, %seven, %seven) : (memref<?xf32>, index, f32, f32, f32, f32) -> ()
  %slots = memref.alloc(%c3) : memref<?xi64>
  %s3 = arith.constant 3 : i64
  %s0 = arith.constant 0 : i64
  %sm1 = arith.constant -1 : i64
  memref.store %s3, %slots[%c0] : memref<?xi64>
  memref.store %s0, %slots[%c1] : memref<?xi64>
  memref.store %sm1, %slots[%c2] : memref<?xi64>
  %ks = memref.alloc(%c3) : memref<?xf32>
  %vs = memref.alloc(%c3) : memref<?xf32>
  %two = arith.constant 2.0 : f32
  %half = arith.constant 0.5 : f32
  memref.store %two, %ks[%c0] : memref<?xf32>
  memref.store %half, %ks[%c1] : memref<?xf32>
  memref.store %one, %ks[%c2] : memref<?xf32>
  memref.store %one, %vs[%c0] : memref<?xf32>
  memref.store %one, %vs[%c1] : memref<?xf32>
  memref.store %one, %vs[%c2] : memref<?xf32>

  %poison = arith.constant 85 : i8
  %p = arith.bitcast %poison : i8 to f8E4M3FN
  %kc = memref.alloc(%c16) : memref<?xf8E4M3FN>
  %vc = memref.alloc(%c16) : memref<?xf8E4M3FN>
  %kc2 = memref.alloc(%c16) : memref<?xf8E4M3FN>
  %vc2 = memref.alloc(%c16) : memref<?xf8E4M3FN>
  scf.for %i = %c0 to %c16 step %c1 {
    memref.store %p, %kc[%i] : memref<?xf8E4M3FN>
    memref.store %p, %vc[%i] : memref<?xf8E4M3FN>
    memref.store %p, %kc2[%i] : memref<?xf8E4M3FN>
    memref.store %p, %vc2[%i] : memref<?xf8E4M3FN>
  }
  %n = arith.constant 3 : i32
  %nb = arith.constant 2 : i32
  %i1 = arith.constant 1 : i32
  %i4 = arith.constant 4 : i32
  %i8 = arith.constant 8 : i32
  // Strides: source [T, 1, 4]; cache [nb, bs, H, D] = block 8, head 4, pos 4, dim 1.
  func.call @fp8(%k, %k, %slots, %kc, %vc, %ks, %vs, %n, %nb,
                 %i4, %i4, %i1, %i4, %i4, %i1,
                 %i8, %i4, %i4, %i1, %i8, %i4, %i4, %i1)
    : (memref<?xf32>, memref<?xf32>, memref<?xi64>, memref<?xf8E4M3FN>, memref<?xf8E4M3FN>, memref<?xf32>, memref<?xf32>, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32) -> ()
  func.call @fp8_scalar(%k, %k, %slots, %kc2, %vc2, %ks, %vs, %n, %nb,
                 %i4, %i4, %i1, %i4, %i4, %i1,
                 %i8, %i4, %i4, %i1, %i8, %i4, %i4, %i1)
    : (memref<?xf32>, memref<?xf32>, memref<?xi64>, memref<?xf8E4M3FN>, memref<?xf8E4M3FN>, memref<?xf32>, memref<?xf32>, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32) -> ()
  func.call @print(%kc) : (memref<?xf8E4M3FN>) -> ()
  func.call @print(%vc) : (memref<?xf8E4M3FN>) -> ()
  func.call @print(%kc2) : (memref<?xf8E4M3FN>) -> ()
  func.call @print(%vc2) : (memref<?xf8E4M3FN>) -> ()
  return
}

// CHECK:      ( 1, 204, 126, 1, 85, 85, 85, 85, 85, 85, 85, 85, 48, 120, 128, 127 )
// CHECK-NEXT: ( 1, 196, 126, 0, 85, 85, 85, 85, 85, 85, 85, 85, 56, 126, 128, 127 )
// CHECK-NEXT: ( 1, 204, 126, 1, 85, 85, 85, 85, 85, 85, 85, 85, 48, 120, 128, 127 )
// CHECK-NEXT: ( 1, 196, 126, 0, 85, 85, 85, 85, 85, 85, 85, 85, 56, 126, 128, 127 )
