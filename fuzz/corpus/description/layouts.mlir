module {
  kv.append @hnd : !kv.cache<layout = paged_hnd, block_size = 32, num_kv_heads = 4, head_dim = 64, dtype = f16> from f32
  kv.append @vllm : !kv.cache<layout = vllm_vectorized, block_size = 16, num_kv_heads = 2, head_dim = 80, dtype = f16> from f16
  kv.append @stacked : !kv.cache<layout = dual_stacked, block_size = 8, num_kv_heads = 1, head_dim = 256, dtype = f32> from bf16
  kv.append @contig : !kv.cache<layout = contiguous, max_seq_len = 4096, num_kv_heads = 8, head_dim = 96, dtype = bf16> from f32
}
