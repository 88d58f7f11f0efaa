kv.append @a : !kv.cache<layout = paged_nhd, block_size = 0, num_kv_heads = 2, head_dim = 64, dtype = bf16> from bf16
