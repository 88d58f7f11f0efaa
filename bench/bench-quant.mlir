// The quantized rows: paged NHD, 8 KV heads of 128, block 16, bf16 in, as
// bench.mlir's bench_paged_nhd but with an fp8 e4m3 cache and one static
// per-tensor scale, and an int8 cache with dynamic per-(token, head) scales
// written beside it. Minimum bytes per token: 4096 read + 8 slot + 2048
// written (+ 2 x 8 x 4 bytes of scales for the dynamic one).
// Built into bench-quant.bundle.json when KVBENCH_QUANT_ROWS is ON (it needs
// a kvgen that lowers quantized caches).
module {
  kv.append @bench_paged_nhd_fp8 : !kv.cache<layout = paged_nhd,
      block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = f8E4M3FN,
      quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor,
                        mode = static>> from bf16
  kv.append @bench_paged_nhd_int8_dyn : !kv.cache<layout = paged_nhd,
      block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = i8,
      quant = #kv.quant<kind = int8, granularity = per_token_head,
                        mode = dynamic>> from bf16
}
