// The fused prologue's benchmark (bench/prologue_gpu.py): Qwen3's shapes, 32
// query heads and 8 KV heads of 128, bf16 in, paged NHD with block 16, as
// bench.mlir's bench_paged_nhd. Each prologue kernel sits beside the plain
// append of the same cache, the decode baseline it must stay within 0.15 us
// of. Bytes per token the fused bf16 kernel must move: Q, K, V read (8192 +
// 2048 + 2048), Q written (8192), K and V written (2048 + 2048), plus the
// position, the slot and the cos/sin row (8 + 8 + 256); the weights are read
// once per token by the accounting of docs/dev/PROLOGUE.md (2 x 256).
// scripts/stage-gpu.sh builds bench-prologue.bundle.json from this file.
// Each kv.append yields NAME (vector) and NAME_scalar.
module {
  // QK-norm and NeoX RoPE over the whole head, bf16 cache (target a, b).
  kv.append @prologue_bf16 : !kv.cache<layout = paged_nhd, block_size = 16,
      num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16
      prologue #kv.prologue<q_heads = 32, norm = rms, rope = neox,
                            rotary_dim = 128>
  kv.append @plain_bf16 : !kv.cache<layout = paged_nhd, block_size = 16,
      num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16

  // RoPE only into an fp8 e4m3 cache with one static scale: what
  // FlashInfer's rope_quantize_fp8_append_paged_kv_cache does, except that
  // Q stays bf16 (target c).
  kv.append @prologue_fp8_rope : !kv.cache<layout = paged_nhd,
      block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = f8E4M3FN,
      quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor,
                        mode = static>> from bf16
      prologue #kv.prologue<q_heads = 32, rope = neox, rotary_dim = 128>
  // QK-norm and RoPE into the fp8 cache: vLLM's unfused sequence with
  // kv_cache_dtype "fp8".
  kv.append @prologue_fp8_norm : !kv.cache<layout = paged_nhd,
      block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = f8E4M3FN,
      quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor,
                        mode = static>> from bf16
      prologue #kv.prologue<q_heads = 32, norm = rms, rope = neox,
                            rotary_dim = 128>
  kv.append @plain_fp8 : !kv.cache<layout = paged_nhd, block_size = 16,
      num_kv_heads = 8, head_dim = 128, dtype = f8E4M3FN,
      quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor,
                        mode = static>> from bf16
}
