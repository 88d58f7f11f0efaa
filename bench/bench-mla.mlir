// The MLA rows: DeepSeek-V3's latent cache (kv_lora_rank 512 + rope_dim 64 =
// 576 elements per token, one head, no V) in blocks of 64, the block size
// vLLM's MLA backends use, written by kv.mla_append from bf16 (vLLM's
// concat_and_cache_mla). Minimum bytes per bf16 token: 1152 read + 8 slot +
// 1152 written; the fp8 e4m3 cache with one static per-tensor scale writes
// 576. DeepSeek V3.2's fp8_ds_mla entry (inline scales: 512 fp8 values, 4
// f32 scales the kernel computes, 64 bf16 RoPE values) writes 656. kvbench
// sizes the cache at run time to >= 1 GiB. Built into bench-mla.bundle.json
// when KVBENCH_MLA_ROWS is ON.
module {
  kv.mla_append @bench_mla : !kv.cache<layout = paged_nhd, block_size = 64,
      num_kv_heads = 1, head_dim = 576, dtype = bf16,
      latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16
  kv.mla_append @bench_mla_fp8 : !kv.cache<layout = paged_nhd,
      block_size = 64, num_kv_heads = 1, head_dim = 576, dtype = f8E4M3FN,
      quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor,
                        mode = static>,
      latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16
  kv.mla_append @bench_mla_ds : !kv.cache<layout = paged_nhd,
      block_size = 64, num_kv_heads = 1, head_dim = 576, dtype = f8E4M3FN,
      quant = #kv.quant<kind = fp8_e4m3, granularity = per_token,
                        mode = dynamic>,
      latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64,
        scales = #kv.inline_scales<group_size = 128, rope_dtype = bf16,
                                   min_scale = 1.0e-4 : f32,
                                   power_of_two = true>>> from bf16
}
