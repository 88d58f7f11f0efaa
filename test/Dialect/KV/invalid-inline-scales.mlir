// RUN: kvgen-opt %s -split-input-file -verify-diagnostics

// The rules of a latent entry with inline scales (#kv.inline_scales,
// LatentEntry.cpp).

kv.mla_append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 576, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_token, mode = dynamic>,
    // expected-error @+1 {{inline scales of group_size 96 must divide kv_lora_rank 512: each group of the latent has one scale}}
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64,
      // expected-error @+1 {{failed to parse KV_CacheType parameter 'latent'}}
      scales = #kv.inline_scales<group_size = 96, rope_dtype = bf16>>> from bf16

// -----

kv.mla_append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 576, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_token, mode = dynamic>,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64,
      // expected-error @+3 {{group_size must be positive, got 0}}
      // expected-error @+2 {{failed to parse KV_LatentAttr parameter 'scales'}}
      // expected-error @+1 {{failed to parse KV_CacheType parameter 'latent'}}
      scales = #kv.inline_scales<group_size = 0, rope_dtype = bf16>>> from bf16

// -----

kv.mla_append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 576, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_token, mode = dynamic>,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64,
      // expected-error @+3 {{rope_dtype must be f32, f16 or bf16 (the RoPE part is stored unquantized), got 'i8'}}
      // expected-error @+2 {{failed to parse KV_LatentAttr parameter 'scales'}}
      // expected-error @+1 {{failed to parse KV_CacheType parameter 'latent'}}
      scales = #kv.inline_scales<group_size = 128, rope_dtype = i8>>> from bf16

// -----

kv.mla_append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 576, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_token, mode = dynamic>,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64,
      // expected-error @+1 {{min_scale must be a positive finite f32, got 0.000000e+00 : f32}}
      scales = #kv.inline_scales<group_size = 128, rope_dtype = bf16,
                                 // expected-error @+2 {{failed to parse KV_LatentAttr parameter 'scales'}}
                                 // expected-error @+1 {{failed to parse KV_CacheType parameter 'latent'}}
                                 min_scale = 0.0 : f32>>> from bf16

// -----

kv.mla_append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 511, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_token, mode = dynamic>,
    // expected-error @+1 {{kv_lora_rank and rope_dim must be positive (rope_dim may be 0 with inline scales), got 512 and -1}}
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = -1,
      // expected-error @+1 {{failed to parse KV_CacheType parameter 'latent'}}
      scales = #kv.inline_scales<group_size = 128, rope_dtype = bf16>>> from bf16

// -----

// expected-error @+1 {{a latent entry with inline scales stores quantized values: give quant = #kv.quant<kind = ..., granularity = per_token, mode = dynamic>}}
kv.mla_append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 576, dtype = bf16,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64,
      scales = #kv.inline_scales<group_size = 128, rope_dtype = bf16>>> from bf16

// -----

// expected-error @+1 {{a latent entry's inline scales are computed by the kernel and stored in the token's entry: give granularity = per_token, mode = dynamic, got per_tensor, static}}
kv.mla_append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 576, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor, mode = static>,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64,
      scales = #kv.inline_scales<group_size = 128, rope_dtype = bf16>>> from bf16

// -----

// expected-error @+1 {{a latent cache's head_dim is kv_lora_rank + rope_dim = 576, got 656}}
kv.mla_append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 656, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_token, mode = dynamic>,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64,
      scales = #kv.inline_scales<group_size = 128, rope_dtype = bf16>>> from bf16

// -----

// expected-error @+1 {{'kv.mla_append' op writes the RoPE part unquantized as rope_dtype 'bf16': the source dtype must be 'bf16', got 'f16'}}
kv.mla_append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 576, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_token, mode = dynamic>,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64,
      scales = #kv.inline_scales<group_size = 128, rope_dtype = bf16>>> from f16

// -----

// expected-error @+1 {{'kv.gather' op cannot read a latent entry with inline scales: no gather reads its scales yet}}
kv.gather @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 576, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_token, mode = dynamic>,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64,
      scales = #kv.inline_scales<group_size = 128, rope_dtype = bf16>>> to bf16
