// RUN: kvgen %s --emit=ptx | FileCheck %s

// An MLA latent append (DeepSeek-V3: kv_lora_rank 512, rope_dim 64) is one
// kernel of four buffers (kv_c, k_pe, slot_mapping, the cache: one pointer
// each) and 9 scalars (.u32); the vector variant moves 16 bytes per load and store
// whichever part the chunk comes from. A K-only
// append takes no V: K, slot_mapping and the K cache only.

// CHECK-LABEL: .visible .entry mla(
// CHECK-COUNT-4: .param .u64 .ptr .align 1 mla_param_{{[0-9]+}},
// CHECK-COUNT-8: .param .u32 mla_param_{{[0-9]+}},
// CHECK-NEXT: .param .u32 mla_param_12
// CHECK-NOT: mla_param_13
// CHECK: ld.global.nc.v4.b32
// CHECK: st.global.v4.b32
// CHECK-LABEL: .visible .entry mla_scalar(
kv.mla_append @mla : !kv.cache<layout = paged_nhd, block_size = 64,
    num_kv_heads = 1, head_dim = 576, dtype = bf16,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16

// K, slot_mapping, key_cache: 3 pointers, then num_tokens, num_blocks,
// 3 key strides and 4 cache strides, all .u32.
// CHECK-LABEL: .visible .entry konly(
// CHECK-COUNT-3: .param .u64 .ptr .align 1 konly_param_{{[0-9]+}},
// CHECK-COUNT-8: .param .u32 konly_param_{{[0-9]+}},
// CHECK-NEXT: .param .u32 konly_param_11
// CHECK-NOT: konly_param_12
// CHECK: ld.global.nc.v4.b32
// CHECK: st.global.v4.b32
// CHECK-NOT: st.global
// CHECK-LABEL: .visible .entry konly_scalar(
kv.append @konly : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = bf16, k_only = true> from bf16
