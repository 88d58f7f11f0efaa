// REQUIRES: ptxas
// ptxas assembles the MLA appends' RoPE prologue kernels (DeepSeek-V3's
// 512 + 64 latent: bf16 NeoX with 16 Q heads, fp8 GPT-J with 128, the fused
// form in f16; vector and scalar variants) for sm_90, with no stack frame
// and no spills.

// RUN: kvgen %s --emit=cubin --kvgen-chip=sm_90 --ptxas-verbose -o %t.cubin 2>&1 | FileCheck %s

// CHECK-NOT: {{[1-9][0-9]*}} bytes stack frame
// CHECK-NOT: {{[1-9][0-9]*}} bytes spill
// CHECK-COUNT-6: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// CHECK-NOT: {{[1-9][0-9]*}} bytes stack frame
// CHECK-NOT: {{[1-9][0-9]*}} bytes spill

kv.mla_append @ds_bf16 : !kv.cache<layout = paged_nhd, block_size = 64,
    num_kv_heads = 1, head_dim = 576, dtype = bf16,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16
    {prologue = #kv.prologue<q_heads = 16, rope = neox, rotary_dim = 64>}
kv.mla_append @ds_fp8 : !kv.cache<layout = paged_nhd, block_size = 64,
    num_kv_heads = 1, head_dim = 576, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor, mode = static>,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16
    {prologue = #kv.prologue<q_heads = 128, rope = gptj, rotary_dim = 64>}
kv.mla_fused_append @ds_fused : !kv.cache<layout = paged_nhd,
    block_size = 64, num_kv_heads = 1, head_dim = 576, dtype = f16,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from f16
    {prologue = #kv.prologue<q_heads = 16, rope = neox, rotary_dim = 64>}
