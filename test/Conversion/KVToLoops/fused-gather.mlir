// RUN: kvgen-opt %s -kv-to-loops -split-input-file | FileCheck %s

// kv.fused_gather: kv.gather's rows with kv.fused_append's slot. The block
// table, its positions and the outputs are its buffers; no slot_mapping.
// CHECK-LABEL: func.func @mla_gather(
// CHECK-SAME: %[[BT:[^:]*]]: memref<?xi32> {kv.name = "block_table"}
// CHECK-SAME: %[[QSL:[^:]*]]: memref<?xi32> {kv.name = "query_start_loc"}
// CHECK-SAME: %[[CTX:[^:]*]]: memref<?xi32> {kv.name = "context_lens"}
// CHECK-SAME: %[[KC:[^:]*]]: memref<?xbf16> {kv.name = "key_cache"}
// CHECK-SAME: %[[KO:[^:]*]]: memref<?xbf16> {kv.name = "key_out"}
// CHECK-NOT: slot_mapping
// The request: a binary search over query_start_loc, then the position
// context_lens[r] + (t - query_start_loc[r]).
// CHECK: scf.while
// CHECK: memref.load %[[CTX]]
// CHECK: memref.load %[[BT]]
// The row moves out of the cache into key_out.
// CHECK: %[[KC]]
// CHECK: %[[KO]]
kv.fused_gather @mla_gather : !kv.cache<layout = paged_nhd, block_size = 64,
    num_kv_heads = 1, head_dim = 576, dtype = bf16, k_only = true> to bf16

// -----

// A static fp8 cache is dequantized with key_scale, as kv.gather does.
// CHECK-LABEL: func.func @mla_dequant(
// CHECK-SAME: {kv.name = "block_table"}
// CHECK-SAME: memref<?xf8E4M3FN> {kv.name = "key_cache"}
// CHECK-SAME: memref<?xf32> {kv.name = "key_out"}
// CHECK-SAME: memref<?xf32> {kv.name = "key_scale"}
// CHECK: arith.extf
// CHECK: arith.mulf
kv.fused_gather @mla_dequant : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 576, dtype = f8E4M3FN, k_only = true,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor,
                      mode = static>> to f32
