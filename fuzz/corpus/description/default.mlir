module {
  kv.append @kv_append : !kv.cache<layout = paged_nhd, block_size = 16,
      num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16
  kv.slot_mapping @kv_slot_mapping : !kv.cache<layout = paged_nhd,
      block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16>
  kv.fused_append @kv_fused_append : !kv.cache<layout = paged_nhd,
      block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16
}
