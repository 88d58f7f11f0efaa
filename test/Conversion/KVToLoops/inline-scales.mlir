// RUN: kvgen-opt %s -kv-to-loops -canonicalize -cse -split-input-file | FileCheck %s

// DeepSeek V3.2's fp8_ds_mla entry: 512 fp8 values, 4 f32 scales (one per
// 128), 64 bf16 RoPE values; 656 bytes. One iteration a group (4 a token),
// 16 lanes of one 8-element chunk each: the amax is an scf.reduce over the
// lanes, the scale (amax / 448, at least 1e-4, rounded up to a power of two
// by its exponent bits) is stored as 4 bytes at 512 + 4 * group, the values
// are multiplied by its exact reciprocal, and lanes 0-7 of the first group
// copy the RoPE chunks to 528 + 16 * chunk.

// CHECK-LABEL: func.func @ds(
// CHECK-SAME: {kv.name = "kv_c"}
// CHECK-SAME: {kv.name = "k_pe"}
// CHECK-SAME: %arg3: memref<?xf8E4M3FN> {kv.name = "key_cache"}
// CHECK-NOT: scale
// CHECK-SAME: {kv.name = "key_cache_stride_dim"})
// CHECK-SAME: threads_x = 64, tokens_per_block = 2, chunks_per_token = 64
// CHECK-DAG: %[[C528:.*]] = arith.constant 528 : i64
// CHECK-DAG: %[[C512:.*]] = arith.constant 512 : i64
// CHECK-DAG: %[[QMAX:.*]] = arith.constant 4.480000e+02 : f32
// CHECK-DAG: %[[MIN:.*]] = arith.constant 9.99999974E-5 : f32
// CHECK: scf.parallel ({{.*}}) = ({{.*}}) to ({{.*}}, %c4) step
// CHECK: scf.if
// CHECK: %[[AMAX:.*]] = scf.parallel ({{.*}}) = (%c0) to (%c16) step (%c1) init (%{{.*}}) -> f32 {
// CHECK: vector.load %arg0[{{.*}}] {alignment = 16 : i64} : memref<?xbf16>, vector<8xbf16>
// CHECK: vector.reduction <maximumf>
// CHECK: scf.reduce
// CHECK: arith.maximumf
// CHECK: %[[S0:.*]] = arith.divf %[[AMAX]], %[[QMAX]] : f32
// CHECK: %[[S1:.*]] = arith.maximumf %[[S0]], %[[MIN]] : f32
// CHECK: arith.bitcast %[[S1]] : f32 to i32
// CHECK: %[[S:.*]] = arith.bitcast %{{.*}} : i32 to f32
// CHECK: arith.addi %{{.*}}, %[[C512]] : i64
// CHECK: %[[BYTES:.*]] = vector.bitcast %{{.*}} : vector<1xf32> to vector<4xf8E4M3FN>
// CHECK: vector.store %[[BYTES]], %arg3[%{{.*}}] {alignment = 4 : i64}
// CHECK: %[[R:.*]] = arith.divf %{{.*}}, %[[S]] : f32
// CHECK: scf.parallel ({{.*}}) = (%c0) to (%c16) step (%c1) {
// CHECK: arith.mulf
// CHECK: arith.truncf %{{.*}} : vector<8xf32> to vector<8xf8E4M3FN>
// CHECK: vector.store %{{.*}}, %arg3[%{{.*}}] {alignment = 8 : i64} : memref<?xf8E4M3FN>, vector<8xf8E4M3FN>
// CHECK: scf.if
// CHECK: vector.load %arg1
// CHECK: arith.addi %{{.*}}, %[[C528]] : i64
// CHECK: vector.bitcast %{{.*}} : vector<8xbf16> to vector<16xf8E4M3FN>
// CHECK: vector.store %{{.*}}, %arg3[%{{.*}}] {alignment = 8 : i64} : memref<?xf8E4M3FN>, vector<16xf8E4M3FN>
// CHECK-LABEL: func.func @ds_scalar(
// CHECK-NOT: func.func @ds_wide
kv.mla_append @ds : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 576, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_token, mode = dynamic>,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64,
      scales = #kv.inline_scales<group_size = 128, rope_dtype = bf16,
                                 min_scale = 1.0e-4 : f32,
                                 power_of_two = true>>> from bf16

// -----

// Its "nope" rows: no RoPE part, 528 bytes; nothing reads k_pe. Without
// min_scale and power_of_two, a group's scale is any dynamic scale's (amax
// / qmax, 1 for zeros) and the values are divided by it.

// CHECK-LABEL: func.func @nope(
// CHECK: arith.cmpf ogt
// CHECK: arith.select
// CHECK: vector.store %{{.*}}, %arg3[%{{.*}}] {alignment = 4 : i64}
// CHECK: scf.parallel
// CHECK: arith.divf %{{.*}}, %{{.*}} : vector<8xf32>
// CHECK: vector.store %{{.*}}, %arg3
// CHECK-NOT: %arg1
// CHECK: return
kv.mla_append @nope : !kv.cache<layout = paged_nhd, block_size = 64,
    num_kv_heads = 1, head_dim = 512, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_token, mode = dynamic>,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 0,
      scales = #kv.inline_scales<group_size = 128, rope_dtype = bf16>>> from bf16

// -----

// Groups of 32 f32 values into int8 (4 elements a chunk, 8 lanes), f32
// RoPE of 32 values (8 chunks over 8 groups of 8 lanes: lanes 0-7 of the
// first group) at 256 + 4 * 8 = 288.

// CHECK-LABEL: func.func @small(
// CHECK-SAME: chunks_per_token = 64
// CHECK: scf.parallel ({{.*}}) = ({{.*}}) to ({{.*}}, %c8) step
// CHECK: scf.parallel ({{.*}}) = (%c0) to (%c8) step (%c1) init
// CHECK: vector<4xf32> to vector<4xi8>
// CHECK: arith.constant 288 : i64
// CHECK: vector.bitcast %{{.*}} : vector<4xf32> to vector<16xi8>
kv.mla_append @small : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 288, dtype = i8,
    quant = #kv.quant<kind = int8, granularity = per_token, mode = dynamic>,
    latent = #kv.latent<kv_lora_rank = 256, rope_dim = 32,
      scales = #kv.inline_scales<group_size = 32, rope_dtype = f32>>> from f32
