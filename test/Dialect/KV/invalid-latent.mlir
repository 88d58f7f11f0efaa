// RUN: kvgen-opt %s -split-input-file -verify-diagnostics

// The rules of K-only and latent (MLA) caches (KVCacheType.cpp).

// expected-error @+1 {{a latent cache's head_dim is kv_lora_rank + rope_dim = 576, got 512}}
kv.mla_append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 512, dtype = bf16,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16

// -----

// expected-error @+1 {{a latent cache has one head, got num_kv_heads = 2}}
kv.mla_append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 2, head_dim = 576, dtype = bf16,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16

// -----

// expected-error @+1 {{give layout = paged_nhd}}
kv.mla_append @a : !kv.cache<layout = paged_hnd, block_size = 16,
    num_kv_heads = 1, head_dim = 576, dtype = bf16,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16

// -----

// expected-error @+4 {{kv_lora_rank and rope_dim must be positive, got 512 and 0}}
// expected-error @+3 {{failed to parse KV_CacheType parameter 'latent'}}
kv.mla_append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 512, dtype = bf16,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 0>> from bf16

// -----

// expected-error @+1 {{'kv.append' op cannot write a latent cache: its entry is kv_c followed by k_pe (use kv.mla_append or kv.mla_fused_append)}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 576, dtype = bf16,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16

// -----

// expected-error @+1 {{'kv.fused_append' op cannot write a latent cache: its entry is kv_c followed by k_pe (use kv.mla_append or kv.mla_fused_append)}}
kv.fused_append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 576, dtype = bf16,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16

// -----

// expected-error @+1 {{'kv.mla_fused_append' op needs a latent cache}}
kv.mla_fused_append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 576, dtype = bf16, k_only = true> from bf16

// -----

// expected-error @+1 {{'kv.mla_append' op needs a latent cache}}
kv.mla_append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 576, dtype = bf16, k_only = true> from bf16

// -----

// expected-error @+1 {{a K-only cache has no V half: the dual_stacked layout needs both}}
kv.append @a : !kv.cache<layout = dual_stacked, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = bf16, k_only = true> from bf16

// -----

// expected-error @+1 {{a K-only cache takes static scales only}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = i8, k_only = true,
    quant = #kv.quant<kind = int8, granularity = per_token, mode = dynamic>> from bf16

// -----

// expected-error @+1 {{a latent cache's entry has one head: its scales are per_tensor or per_token}}
kv.mla_append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 576, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_head, mode = static>,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16
