kv.append @mqa : !kv.cache<layout = paged_nhd, block_size = 1, num_kv_heads = 1, head_dim = 8, dtype = f16> from f16
kv.slot_mapping @slots : !kv.cache<layout = paged_hnd, block_size = 1048576, num_kv_heads = 1, head_dim = 2, dtype = f32>
