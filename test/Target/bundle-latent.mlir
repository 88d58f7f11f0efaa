// RUN: kvgen %s --emit=bundle -o - | FileCheck %s

// A K-only cache records "k_only" and its kernels list no V parameter; an
// MLA latent cache records its two parts, and its mla_append kernel takes
// kv_c and k_pe with their strides (and, quantized statically, key_scale).

// CHECK: "k_only": true
// CHECK: "kind": "append"
// CHECK: "name": "konly"
// CHECK: "params": [
// CHECK-NEXT: "key",
// CHECK-NEXT: "slot_mapping",
// CHECK-NEXT: "key_cache",
// CHECK-NEXT: "num_tokens",
// CHECK-NEXT: "num_blocks",
// CHECK-NEXT: "key_stride_token",
// CHECK-NEXT: "key_stride_head",
// CHECK-NEXT: "key_stride_dim",
// CHECK-NEXT: "key_cache_stride_block",
// CHECK-NEXT: "key_cache_stride_head",
// CHECK-NEXT: "key_cache_stride_pos",
// CHECK-NEXT: "key_cache_stride_dim"
// CHECK-NEXT: ]
kv.append @konly : !kv.cache<layout = paged_hnd, block_size = 16,
    num_kv_heads = 2, head_dim = 64, dtype = f16, k_only = true> from f32

// CHECK: "latent": {
// CHECK-NEXT: "kv_lora_rank": 448,
// CHECK-NEXT: "rope_dim": 64
// CHECK: "kind": "mla_append"
// CHECK: "name": "mla"
// CHECK: "params": [
// CHECK-NEXT: "kv_c",
// CHECK-NEXT: "k_pe",
// CHECK-NEXT: "slot_mapping",
// CHECK-NEXT: "key_cache",
// CHECK-NEXT: "key_scale",
// CHECK-NEXT: "num_tokens",
// CHECK-NEXT: "num_blocks",
// CHECK-NEXT: "kv_c_stride_token",
// CHECK-NEXT: "kv_c_stride_dim",
// CHECK-NEXT: "k_pe_stride_token",
// CHECK-NEXT: "k_pe_stride_dim",
// CHECK-NEXT: "key_cache_stride_block",
// CHECK-NEXT: "key_cache_stride_pos",
// CHECK-NEXT: "key_cache_stride_dim"
// CHECK-NEXT: ]
// CHECK: "vector_elems": 8
kv.mla_append @mla : !kv.cache<layout = paged_nhd, block_size = 528,
    num_kv_heads = 1, head_dim = 512, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor, mode = static>,
    latent = #kv.latent<kv_lora_rank = 448, rope_dim = 64>> from bf16

// A gather of a K-only cache reads K alone: no value_cache, no value_out.
// CHECK: "kind": "gather"
// CHECK: "name": "konly_gather"
// CHECK: "params": [
// CHECK-NEXT: "key_cache",
// CHECK-NEXT: "slot_mapping",
// CHECK-NEXT: "key_out",
// CHECK-NEXT: "num_tokens",
// CHECK-NEXT: "num_blocks",
// CHECK-NEXT: "key_out_stride_token",
// CHECK-NEXT: "key_out_stride_head",
// CHECK-NEXT: "key_out_stride_dim",
// CHECK-NEXT: "key_cache_stride_block",
kv.gather @konly_gather : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 2, head_dim = 64, dtype = bf16, k_only = true> to f32

// The fused MLA append: fused_append's block table and positions in place of
// slot_mapping, then mla_append's scalars.
// CHECK: "kind": "mla_fused_append"
// CHECK: "name": "mla_fused"
// CHECK: "params": [
// CHECK-NEXT: "kv_c",
// CHECK-NEXT: "k_pe",
// CHECK-NEXT: "block_table",
// CHECK-NEXT: "query_start_loc",
// CHECK-NEXT: "context_lens",
// CHECK-NEXT: "key_cache",
// CHECK-NEXT: "num_tokens",
// CHECK-NEXT: "num_blocks",
// CHECK-NEXT: "num_reqs",
// CHECK-NEXT: "block_table_stride",
// CHECK-NEXT: "max_blocks_per_req",
// CHECK-NEXT: "kv_c_stride_token",
// CHECK-NEXT: "kv_c_stride_dim",
// CHECK-NEXT: "k_pe_stride_token",
// CHECK-NEXT: "k_pe_stride_dim",
// CHECK-NEXT: "key_cache_stride_block",
// CHECK-NEXT: "key_cache_stride_pos",
// CHECK-NEXT: "key_cache_stride_dim"
// CHECK-NEXT: ]
kv.mla_fused_append @mla_fused : !kv.cache<layout = paged_nhd,
    block_size = 64, num_kv_heads = 1, head_dim = 576, dtype = bf16,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16
