// RUN: kvgen %s --emit=ptx | FileCheck %s

// DeepSeek V3.2's fp8_ds_mla entry on the GPU: 16 lanes a group of 128
// values, whose amax is a shuffle butterfly (1, 2, 4, 8) inside the
// half-warp; the group's scale is one 4-byte store, the 8 fp8 values of a
// lane one 8-byte store, a RoPE chunk 16 bytes (two 8-byte stores: the
// entry's promise is an 8-byte alignment).

// CHECK-LABEL: .visible .entry ds(
// CHECK: ld.global.nc.v4.b32
// CHECK: shfl.sync.bfly.b32 {{.*}}, 1, 31,
// CHECK: shfl.sync.bfly.b32 {{.*}}, 2, 31,
// CHECK: shfl.sync.bfly.b32 {{.*}}, 4, 31,
// CHECK: shfl.sync.bfly.b32 {{.*}}, 8, 31,
// CHECK-NOT: shfl
// CHECK: div.rn.f32 {{.*}}, 0f43E00000;
// CHECK: st.global.b32
// CHECK: cvt.rn.satfinite.e4m3x2.f32
// CHECK: st.global.v4.b16
// CHECK: ld.global.nc.v4.b32
// CHECK: st.global.v2.b32
// CHECK: st.global.v2.b32
// CHECK-LABEL: .visible .entry ds_scalar(
kv.mla_append @ds : !kv.cache<layout = paged_nhd, block_size = 64,
    num_kv_heads = 1, head_dim = 576, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_token, mode = dynamic>,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64,
      scales = #kv.inline_scales<group_size = 128, rope_dtype = bf16,
                                 min_scale = 1.0e-4 : f32,
                                 power_of_two = true>>> from bf16

// The "nope" rows (528 bytes) and a block-table append of the same entry.
// CHECK-LABEL: .visible .entry nope(
// CHECK: shfl.sync.bfly.b32
// CHECK-LABEL: .visible .entry fused(
// CHECK: shfl.sync.bfly.b32
kv.mla_append @nope : !kv.cache<layout = paged_nhd, block_size = 64,
    num_kv_heads = 1, head_dim = 512, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_token, mode = dynamic>,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 0,
      scales = #kv.inline_scales<group_size = 128, rope_dtype = bf16,
                                 min_scale = 1.0e-4 : f32,
                                 power_of_two = true>>> from bf16

kv.mla_fused_append @fused : !kv.cache<layout = paged_nhd, block_size = 64,
    num_kv_heads = 1, head_dim = 576, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_token, mode = dynamic>,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64,
      scales = #kv.inline_scales<group_size = 128, rope_dtype = bf16,
                                 min_scale = 1.0e-4 : f32,
                                 power_of_two = true>>> from bf16
