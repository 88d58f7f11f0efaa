// RUN: kvgen %s --emit=bundle -o - | FileCheck %s

// The bundle (format version 4) records a quantized cache's quant object and
// the parameter list of each kind for its quantization: static scales for a
// static description, scale caches for a dynamic one, gathers with their
// output dtype. The names are spelled out here, independently of the ABI's
// table.

// CHECK: "format": "kvgen-bundle"
// CHECK: "kernels": [

// CHECK: "quant": {
// CHECK-NEXT: "granularity": "per_block",
// CHECK-NEXT: "kind": "fp8_e5m2",
// CHECK-NEXT: "mode": "static",
// CHECK-NEXT: "reciprocal": true
// CHECK: "kind": "append",
// CHECK: "name": "static_append",
// CHECK: "params": [
// CHECK-NEXT: "key",
// CHECK-NEXT: "value",
// CHECK-NEXT: "slot_mapping",
// CHECK-NEXT: "key_cache",
// CHECK-NEXT: "value_cache",
// CHECK-NEXT: "key_scale",
// CHECK-NEXT: "value_scale",
// CHECK-NEXT: "num_tokens",
// CHECK: "source_dtype": "f16",
kv.append @static_append : !kv.cache<layout = paged_hnd, block_size = 48,
    num_kv_heads = 2, head_dim = 64, dtype = f8E5M2,
    quant = #kv.quant<kind = fp8_e5m2, granularity = per_block, mode = static,
                      reciprocal = true>> from f16

// CHECK: "dtype": "i8",
// CHECK: "mode": "dynamic",
// CHECK: "kind": "fused_append",
// chunks_per_token counts 16-byte chunks for dynamic scales too (2 heads x
// 64 bf16 = 16); each head's 8 chunks take 8 lanes: 16 threads a token.
// CHECK: "launch": {
// CHECK-NEXT: "chunks_per_token": 16,
// CHECK-NEXT: "threads_x": 16,
// CHECK: "name": "dynamic_fused",
// CHECK: "params": [
// CHECK-NEXT: "key",
// CHECK-NEXT: "value",
// CHECK-NEXT: "block_table",
// CHECK-NEXT: "query_start_loc",
// CHECK-NEXT: "context_lens",
// CHECK-NEXT: "key_cache",
// CHECK-NEXT: "value_cache",
// CHECK-NEXT: "key_scale_cache",
// CHECK-NEXT: "value_scale_cache",
// CHECK-NEXT: "num_tokens",
kv.fused_append @dynamic_fused : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 2, head_dim = 64, dtype = i8,
    quant = #kv.quant<kind = int8, granularity = per_token_head, mode = dynamic>> from bf16

// CHECK: "kind": "gather",
// CHECK: "name": "gather_f32",
// CHECK: "output_dtype": "f32",
// CHECK: "params": [
// CHECK-NEXT: "key_cache",
// CHECK-NEXT: "value_cache",
// CHECK-NEXT: "slot_mapping",
// CHECK-NEXT: "key_out",
// CHECK-NEXT: "value_out",
// CHECK-NEXT: "key_scale",
// CHECK-NEXT: "value_scale",
// CHECK-NEXT: "num_tokens",
// CHECK-NEXT: "num_blocks",
// CHECK-NEXT: "key_out_stride_token",
kv.gather @gather_f32 : !kv.cache<layout = contiguous, max_seq_len = 100,
    num_kv_heads = 2, head_dim = 64, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_token, mode = static>> to f32

// CHECK: "version": 4
