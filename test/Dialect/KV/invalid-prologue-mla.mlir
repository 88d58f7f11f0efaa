// RUN: kvgen-opt %s -split-input-file -verify-diagnostics

// The MLA appends' prologues the verifier refuses, one per rule
// (docs/dev/PROLOGUE.md, "MLA"; docs/BAD-INPUT.md).

// expected-error @+1 {{'kv.mla_append' op rotary_dim 32 is not the latent's rope_dim 64: an MLA prologue rotates the whole of k_pe and q_pe}}
kv.mla_append @a : !kv.cache<layout = paged_nhd, block_size = 64, num_kv_heads = 1, head_dim = 576, dtype = bf16, latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16 {prologue = #kv.prologue<q_heads = 16, rope = neox, rotary_dim = 32>}

// -----

// expected-error @+1 {{'kv.mla_fused_append' op rotary_dim 128 is not the latent's rope_dim 64}}
kv.mla_fused_append @a : !kv.cache<layout = paged_nhd, block_size = 64, num_kv_heads = 1, head_dim = 576, dtype = bf16, latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16 {prologue = #kv.prologue<rope = gptj, rotary_dim = 128>}

// -----

// expected-error @+1 {{'kv.mla_fused_append' op cannot normalize a latent cache's entry: MLA takes rope (on k_pe) and no norm}}
kv.mla_fused_append @a : !kv.cache<layout = paged_nhd, block_size = 64, num_kv_heads = 1, head_dim = 576, dtype = bf16, latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16 {prologue = #kv.prologue<norm = rms, rope = neox, rotary_dim = 64>}

// -----

// expected-error @+1 {{'kv.mla_append' op q_heads 5000 is past the limit: a kernel supports at most 4096 Q heads}}
kv.mla_append @a : !kv.cache<layout = paged_nhd, block_size = 64, num_kv_heads = 1, head_dim = 576, dtype = bf16, latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16 {prologue = #kv.prologue<q_heads = 5000, rope = neox, rotary_dim = 64>}

// -----

// vLLM's fp8_ds_mla entry (inline scales, its RoPE part in bf16).
// expected-error @+1 {{'kv.mla_append' op a prologue on a latent entry with inline scales (#kv.inline_scales, vLLM's fp8_ds_mla) is not supported yet: a bf16, fp16 or statically scaled latent cache takes one}}
kv.mla_append @ds : !kv.cache<layout = paged_nhd, block_size = 64, num_kv_heads = 1, head_dim = 576, dtype = f8E4M3FN, quant = #kv.quant<kind = fp8_e4m3, granularity = per_token, mode = dynamic>, latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64, scales = #kv.inline_scales<group_size = 128, rope_dtype = bf16>>> from bf16 {prologue = #kv.prologue<q_heads = 16, rope = neox, rotary_dim = 64>}

// -----

// expected-error @+1 {{'kv.mla_append' op q_quant and cos_sin = f32 on an MLA append are not supported yet}}
kv.mla_append @a : !kv.cache<layout = paged_nhd, block_size = 64, num_kv_heads = 1, head_dim = 576, dtype = bf16, latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16 {prologue = #kv.prologue<q_heads = 16, rope = neox, rotary_dim = 64, q_quant = fp8_e4m3>}

// -----

// expected-error @+1 {{'kv.mla_fused_append' op q_quant and cos_sin = f32 on an MLA append are not supported yet}}
kv.mla_fused_append @a : !kv.cache<layout = paged_nhd, block_size = 64, num_kv_heads = 1, head_dim = 576, dtype = bf16, latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16 {prologue = #kv.prologue<q_heads = 16, rope = neox, rotary_dim = 64, cos_sin = f32>}

// -----

// A latent cache's gather still takes no prologue.
// expected-error @+1 {{'kv.gather' op cannot take a prologue}}
kv.gather @g : !kv.cache<layout = paged_nhd, block_size = 64, num_kv_heads = 1, head_dim = 576, dtype = bf16, latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> to bf16 {prologue = #kv.prologue<rope = neox, rotary_dim = 64>}
