module {
  kv.append @fp8 : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = f8E4M3FN, quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor, mode = static>> from bf16
  kv.append @e5m2 : !kv.cache<layout = paged_hnd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = f8E5M2, quant = #kv.quant<kind = fp8_e5m2, granularity = per_head, mode = static>> from f16
  kv.fused_append @int8 : !kv.cache<layout = paged_nhd, block_size = 64, num_kv_heads = 2, head_dim = 64, dtype = i8, quant = #kv.quant<kind = int8, granularity = per_token_head, mode = dynamic>> from f32
  kv.append @block : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = i8, quant = #kv.quant<kind = int8, granularity = per_block, mode = static>> from bf16
}
