module {
  kv.append @a : !kv.cache<layout = contiguous, block_size = 24, num_kv_heads = 0, head_dim = 65537, dtype = i8> from f16
  module @nested { kv.slot_mapping @b : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> }
}
