// RUN: kvgen-opt %s -split-input-file -verify-diagnostics

// The fused prologues the verifier refuses, one per rule.

// expected-error @+1 {{rotary_dim must be even (RoPE rotates pairs of elements), got 63}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16 prologue #kv.prologue<rope = neox, rotary_dim = 63>

// -----

// expected-error @+1 {{'kv.append' op rotary_dim 256 is more than head_dim 128: RoPE rotates the first rotary_dim elements of a head}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16 prologue #kv.prologue<rope = neox, rotary_dim = 256>

// -----

// expected-error @+1 {{'kv.append' op q_heads 30 is not a multiple of num_kv_heads 8: each KV head serves the same number of Q heads}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16 prologue #kv.prologue<q_heads = 30, norm = rms>

// -----

// expected-error @+1 {{'kv.mla_append' op cannot normalize a latent cache's entry: MLA takes rope (on k_pe) and no norm}}
kv.mla_append @a : !kv.cache<layout = paged_nhd, block_size = 64, num_kv_heads = 1, head_dim = 576, dtype = bf16, latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16 {prologue = #kv.prologue<norm = rms>}

// -----

// expected-error @+1 {{'kv.gather' op cannot take a prologue: it reads rows out of the cache, and a prologue transforms rows on their way in}}
kv.gather @g : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> to bf16 {prologue = #kv.prologue<norm = rms>}

// -----

// expected-error @+1 {{'kv.fused_gather' op cannot take a prologue}}
kv.fused_gather @g : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> to bf16 {prologue = #kv.prologue<rope = gptj, rotary_dim = 64>}

// -----

// expected-error @+1 {{'kv.paged_kv_append' op q_heads 30 is not a multiple of num_kv_heads 8: each KV head serves the same number of Q heads}}
kv.paged_kv_append @f : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16 prologue #kv.prologue<q_heads = 30, rope = neox, rotary_dim = 64>

// -----

// expected-error @+1 {{'kv.fused_append' op rotary_dim 256 is more than head_dim 128: RoPE rotates the first rotary_dim elements of a head}}
kv.fused_append @f : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16 prologue #kv.prologue<rope = neox, rotary_dim = 256>

// -----

// expected-error @+1 {{'kv.mla_fused_append' op 'prologue' must be a #kv.prologue<...>, got 1 : i64}}
kv.mla_fused_append @f : !kv.cache<layout = paged_nhd, block_size = 64, num_kv_heads = 1, head_dim = 576, dtype = bf16, latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16 {prologue = 1}

// -----

// expected-error @+1 {{'kv.paged_kv_append' op attribute 'prologue' failed to satisfy constraint}}
kv.paged_kv_append @f : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16 {prologue = 1}

// -----

// expected-error @+1 {{unknown norm 'layer': expected rms}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16 prologue #kv.prologue<norm = layer>

// -----

// expected-error @+1 {{unknown rope 'llama': expected neox or gptj}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16 prologue #kv.prologue<rope = llama, rotary_dim = 64>

// -----

// expected-error @+1 {{a prologue needs norm or rope: with neither it would leave K as it is}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16 prologue #kv.prologue<q_heads = 32>

// -----

// expected-error @+1 {{rotary_dim = 64 without rope: name the rotation (rope = neox or rope = gptj)}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16 prologue #kv.prologue<norm = rms, rotary_dim = 64>

// -----

// expected-error @+1 {{rope = neox needs a positive rotary_dim, got 0}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16 prologue #kv.prologue<rope = neox>

// -----

// expected-error @+1 {{q_heads must be positive (or absent for no Q), got -4}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16 prologue #kv.prologue<q_heads = -4, norm = rms>

// -----

// expected-error @+1 {{'kv.append' op a prologue on a cache with dynamic scales is not supported yet: static scales or none}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = i8, quant = #kv.quant<kind = int8, granularity = per_token_head, mode = dynamic>> from bf16 prologue #kv.prologue<norm = rms>

// -----

// expected-error @+1 {{'kv.append' op a prologue on a cache with v_head_dim is not supported yet}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 192, v_head_dim = 128, dtype = bf16> from bf16 prologue #kv.prologue<norm = rms>

// -----

// expected-error @+1 {{'kv.append' op a prologue on a K-only cache is not supported yet}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16, k_only = true> from bf16 prologue #kv.prologue<norm = rms>

// -----

// expected-error @+1 {{unknown q_quant 'int8': expected fp8_e4m3}}
kv.paged_kv_append @f : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16 prologue #kv.prologue<q_heads = 8, rope = neox, rotary_dim = 64, q_quant = int8>

// -----

// expected-error @+1 {{q_quant = fp8_e4m3 needs q_heads: it quantizes the Q the prologue writes}}
kv.paged_kv_append @f : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16 prologue #kv.prologue<rope = neox, rotary_dim = 64, q_quant = fp8_e4m3>

// -----

// expected-error @+1 {{unknown cos_sin 'bf16': expected f32 (or absent: the source dtype)}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16 prologue #kv.prologue<rope = neox, rotary_dim = 64, cos_sin = bf16>

// -----

// expected-error @+1 {{cos_sin = f32 without rope: only RoPE reads the cos/sin cache}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16 prologue #kv.prologue<norm = rms, cos_sin = f32>

// -----

// expected-error @+1 {{a prologue on an NVFP4 cache is not supported yet}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = i8, quant = #kv.quant<kind = nvfp4, granularity = per_tensor, mode = static>, nvfp4 = #kv.nvfp4<k_scales = linear, v_scales = linear, search = divisor_six>> from bf16 prologue #kv.prologue<q_heads = 32, norm = rms, rope = neox, rotary_dim = 128>
