// RUN: kvgen %s --emit=bundle -o - | FileCheck %s

// A latent cache with inline scales records them and the entry's bytes
// (512 fp8 + 4 f32 scales + 64 bf16 = 656; the nope rows 528), which kvrt
// checks the cache's innermost extent against; the kernels take no scale
// (the kernel computes the scales and writes them into the entry).

// CHECK: "latent": {
// CHECK-NEXT: "inline_scales": {
// CHECK-NEXT: "entry_bytes": 656,
// CHECK-NEXT: "group_size": 128,
// CHECK-NEXT: "rope_dtype": "bf16"
// CHECK-NEXT: },
// CHECK-NEXT: "kv_lora_rank": 512,
// CHECK-NEXT: "rope_dim": 64
// CHECK: "quant": {
// CHECK-NEXT: "granularity": "per_token",
// CHECK-NEXT: "kind": "fp8_e4m3",
// CHECK-NEXT: "mode": "dynamic"
// CHECK: "kind": "mla_append"
// CHECK: "launch": {
// CHECK-NEXT: "chunks_per_token": 64,
// CHECK-NEXT: "threads_x": 64,
// CHECK: "name": "ds"
// CHECK: "params": [
// CHECK-NEXT: "kv_c",
// CHECK-NEXT: "k_pe",
// CHECK-NEXT: "slot_mapping",
// CHECK-NEXT: "key_cache",
// CHECK-NOT: scale
// CHECK: ]
kv.mla_append @ds : !kv.cache<layout = paged_nhd, block_size = 64,
    num_kv_heads = 1, head_dim = 576, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_token, mode = dynamic>,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64,
      scales = #kv.inline_scales<group_size = 128, rope_dtype = bf16,
                                 min_scale = 1.0e-4 : f32,
                                 power_of_two = true>>> from bf16
