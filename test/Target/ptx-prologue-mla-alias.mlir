// RUN: kvgen %s --emit=llvm | FileCheck %s

// An MLA prologue's k_pe_out may be k_pe itself and q_out may be query (q_pe)
// (vLLM's concat_and_cache_mla_rope_fused rotates both in place): a kernel
// that takes k_pe_out marks neither k_pe nor k_pe_out noalias, nor query and
// q_out; kv_c, slot_mapping, the cache, the positions and the cos/sin cache
// keep it, and so does k_pe of a plain MLA append (kv-mark-kernel-noalias).

// Buffers: kv_c (0), k_pe (1), slot_mapping (2), key_cache (3), query (4),
// q_out (5), k_pe_out (6), rope_positions (7), cos_sin_cache (8).
// CHECK-LABEL: define ptx_kernel void @rope(
// CHECK-SAME: ptr noalias {{[a-z]+}} captures(none) %0, ptr {{[a-z]+}} captures(none) %1,
// CHECK-SAME: ptr noalias {{[a-z]+}} captures(none) %2, ptr noalias {{[a-z]+}} captures(none) %3,
// CHECK-SAME: ptr {{[a-z]+}} captures(none) %4, ptr {{[a-z]+}} captures(none) %5,
// CHECK-SAME: ptr {{[a-z]+}} captures(none) %6, ptr noalias {{[a-z]+}} captures(none) %7,
// CHECK-SAME: ptr noalias {{[a-z]+}} captures(none) %8, i32
// CHECK-LABEL: define ptx_kernel void @rope_scalar(
// CHECK-SAME: ptr noalias {{[a-z]+}} captures(none) %0, ptr {{[a-z]+}} captures(none) %1,
// CHECK-SAME: ptr {{[a-z]+}} captures(none) %6, ptr noalias
kv.mla_append @rope : !kv.cache<layout = paged_nhd, block_size = 64,
    num_kv_heads = 1, head_dim = 576, dtype = bf16,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16
    {prologue = #kv.prologue<q_heads = 16, rope = neox, rotary_dim = 64>}

// CHECK-LABEL: define ptx_kernel void @plain(
// CHECK-SAME: ptr noalias {{[a-z]+}} captures(none) %0, ptr noalias {{[a-z]+}} captures(none) %1,
kv.mla_append @plain : !kv.cache<layout = paged_nhd, block_size = 64,
    num_kv_heads = 1, head_dim = 576, dtype = bf16,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16
