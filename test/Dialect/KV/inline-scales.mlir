// RUN: kvgen-opt %s | kvgen-opt | FileCheck %s

// A latent entry with inline scales prints and parses back; min_scale and
// power_of_two may be left out (no floor; not rounded), and rope_dim may be
// 0 with inline scales.

// CHECK: kv.mla_append @ds : !kv.cache<layout = paged_nhd, block_size = 64, num_kv_heads = 1, head_dim = 576, dtype = f8E4M3FN, quant = <kind = fp8_e4m3, granularity = per_token, mode = dynamic>, latent = <kv_lora_rank = 512, rope_dim = 64, scales = <group_size = 128, rope_dtype = bf16, min_scale = 9.99999974E-5 : f32, power_of_two = true>>> from bf16
kv.mla_append @ds : !kv.cache<layout = paged_nhd, block_size = 64,
    num_kv_heads = 1, head_dim = 576, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_token, mode = dynamic>,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64,
      scales = #kv.inline_scales<group_size = 128, rope_dtype = bf16,
                                 min_scale = 1.0e-4 : f32,
                                 power_of_two = true>>> from bf16

// CHECK: kv.mla_fused_append @nope : {{.*}}latent = <kv_lora_rank = 256, rope_dim = 0, scales = <group_size = 32, rope_dtype = f16>>> from f16
kv.mla_fused_append @nope : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 256, dtype = i8,
    quant = #kv.quant<kind = int8, granularity = per_token, mode = dynamic>,
    latent = #kv.latent<kv_lora_rank = 256, rope_dim = 0,
      scales = #kv.inline_scales<group_size = 32, rope_dtype = f16>>> from f16

// A slot_mapping kernel may describe such a cache (its slots only).
// CHECK: kv.slot_mapping @slots
kv.slot_mapping @slots : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 256, dtype = i8,
    quant = #kv.quant<kind = int8, granularity = per_token, mode = dynamic>,
    latent = #kv.latent<kv_lora_rank = 256, rope_dim = 0,
      scales = #kv.inline_scales<group_size = 32, rope_dtype = f16>>>
