// The bench's descriptions: the setup of docs/PERFORMANCE.md (bf16 in, bf16
// cache, 8 KV heads of 128, block 16) in each layout, and paged NHD with
// block 512 (the power-of-two neighbour of bench-shapes.mlir's 528). kvbench
// sizes the caches at run time to >= 1 GiB each: 32768 blocks of 16 for the
// paged layouts. The contiguous cache gets max_seq_len = 2048, so that its
// batch covers one request per decode token at 512 tokens
// (512 x 8 x 2048 x 128 x 2 B = 2 GiB per cache) and a 1024-token prefill
// request still fits after a context. Each kv.append yields NAME (vector)
// and NAME_scalar.
module {
  kv.append @bench_paged_nhd : !kv.cache<layout = paged_nhd, block_size = 16,
      num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16
  kv.append @bench_paged_hnd : !kv.cache<layout = paged_hnd, block_size = 16,
      num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16
  kv.append @bench_contiguous : !kv.cache<layout = contiguous,
      max_seq_len = 2048, num_kv_heads = 8, head_dim = 128, dtype = bf16>
      from bf16
  kv.append @bench_vllm_vectorized : !kv.cache<layout = vllm_vectorized,
      block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16>
      from bf16
  kv.append @bench_dual_stacked : !kv.cache<layout = dual_stacked,
      block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16>
      from bf16
  kv.append @bench_paged_nhd_bs512 : !kv.cache<layout = paged_nhd,
      block_size = 512, num_kv_heads = 8, head_dim = 128, dtype = bf16>
      from bf16
}
