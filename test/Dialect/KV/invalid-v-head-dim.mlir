// RUN: kvgen-opt %s -split-input-file -verify-diagnostics

// The rules of v_head_dim, V's head size of its own (KVCacheType.cpp).

// expected-error @+1 {{v_head_dim must be positive, got -8}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, v_head_dim = -8, dtype = bf16> from bf16

// -----

// expected-error @+1 {{v_head_dim 128 is head_dim: leave it out (V's head size defaults to head_dim)}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, v_head_dim = 128, dtype = bf16> from bf16

// -----

// expected-error @+1 {{the vllm_vectorized layout has one head size for K and V (its V side is not whole rows of head_dim): v_head_dim needs layout = contiguous or paged_nhd or paged_hnd}}
kv.append @a : !kv.cache<layout = vllm_vectorized, block_size = 16,
    num_kv_heads = 8, head_dim = 192, v_head_dim = 128, dtype = bf16> from bf16

// -----

// expected-error @+1 {{the dual_stacked layout has one head size for K and V (its sides are stacked in one tensor)}}
kv.append @a : !kv.cache<layout = dual_stacked, block_size = 16,
    num_kv_heads = 8, head_dim = 192, v_head_dim = 128, dtype = bf16> from bf16

// -----

// expected-error @+1 {{a K-only cache has no V: v_head_dim has no meaning}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 192, v_head_dim = 128, dtype = bf16,
    k_only = true> from bf16

// -----

// expected-error @+1 {{a latent cache has no V: v_head_dim has no meaning}}
kv.mla_append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 576, v_head_dim = 512, dtype = bf16,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16

// -----

// expected-error @+1 {{v_head_dim 131072 is past the limit: a kernel supports at most 65536}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 128, v_head_dim = 131072, dtype = bf16> from bf16

// -----

// expected-error @+1 {{num_kv_heads * v_head_dim 2097152 is past the limit}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 64, head_dim = 128, v_head_dim = 32768, dtype = bf16> from bf16

// -----

// expected-error @+1 {{a cache with v_head_dim takes static scales only}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 192, v_head_dim = 128, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_token_head, mode = dynamic>> from bf16

// -----

// expected-error @+1 {{v_head_dim must be positive, got 0}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, v_head_dim = 0, dtype = bf16> from bf16
