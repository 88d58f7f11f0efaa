// RUN: kvgen-opt %s | kvgen-opt | FileCheck %s

// The MLA appends take a RoPE prologue (docs/dev/PROLOGUE.md, "MLA"): a
// bf16 latent, an fp8 latent with a static scale, the fused form.

// CHECK-LABEL: kv.mla_append @ds_bf16
// CHECK-SAME: prologue = #kv.prologue<q_heads = 16, rope = neox, rotary_dim = 64>
kv.mla_append @ds_bf16 : !kv.cache<layout = paged_nhd, block_size = 64,
    num_kv_heads = 1, head_dim = 576, dtype = bf16,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16
    {prologue = #kv.prologue<q_heads = 16, rope = neox, rotary_dim = 64>}

// CHECK-LABEL: kv.mla_append @ds_fp8
// CHECK-SAME: prologue = #kv.prologue<q_heads = 128, rope = gptj, rotary_dim = 64>
kv.mla_append @ds_fp8 : !kv.cache<layout = paged_nhd, block_size = 64,
    num_kv_heads = 1, head_dim = 576, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor, mode = static>,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16
    {prologue = #kv.prologue<q_heads = 128, rope = gptj, rotary_dim = 64>}

// CHECK-LABEL: kv.mla_fused_append @ds_fused
// CHECK-SAME: prologue = #kv.prologue<rope = neox, rotary_dim = 64>
kv.mla_fused_append @ds_fused : !kv.cache<layout = paged_nhd,
    block_size = 64, num_kv_heads = 1, head_dim = 576, dtype = f16,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from f16
    {prologue = #kv.prologue<rope = neox, rotary_dim = 64>}
