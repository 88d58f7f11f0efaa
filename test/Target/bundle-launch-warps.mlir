// RUN: kvgen %s --emit=bundle -o - | FileCheck %s
// RUN: kvgen %s --emit=bundle --pipeline-options='whole-warps=false' -o - | FileCheck %s --check-prefix=RULE

// Launch geometry in whole warps: a block whose tokens would leave a warp
// part-filled takes more tokens, up to 512 threads. Without it (the
// 128-thread rule alone) the counts in RULE.

// DeepSeek-V3's latent entry, 576 bf16: 72 chunks, two a thread (a latent
// entry has no V: two chunks keep two loads in flight), so 36 threads a
// token; 8 tokens make 288 threads, nine warps (the rule alone: 3 tokens).
// CHECK-LABEL: "description": "kv.mla_append @mla :
// CHECK: "threads_x": 36,
// CHECK-NEXT: "tokens_per_block": 8
// RULE-LABEL: "description": "kv.mla_append @mla :
// RULE: "threads_x": 36,
// RULE-NEXT: "tokens_per_block": 3
kv.mla_append @mla : !kv.cache<layout = paged_nhd, block_size = 64,
    num_kv_heads = 1, head_dim = 576, dtype = bf16,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16

// Quantized, one chunk a thread: 72 threads; 4 tokens make nine warps.
// CHECK-LABEL: "description": "kv.mla_append @mla_fp8 :
// CHECK: "threads_x": 72,
// CHECK-NEXT: "tokens_per_block": 4
// RULE-LABEL: "description": "kv.mla_append @mla_fp8 :
// RULE: "threads_x": 72,
// RULE-NEXT: "tokens_per_block": 1
kv.mla_append @mla_fp8 : !kv.cache<layout = paged_nhd, block_size = 64,
    num_kv_heads = 1, head_dim = 576, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor,
                      mode = static>,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16

// One head of 80 f16: 10 threads a token; 12 tokens (the 128-thread rule)
// become 16, 160 threads.
// CHECK-LABEL: "description": "kv.append @head80 :
// CHECK: "threads_x": 10,
// CHECK-NEXT: "tokens_per_block": 16
// RULE-LABEL: "description": "kv.append @head80 :
// RULE: "threads_x": 10,
// RULE-NEXT: "tokens_per_block": 12
kv.append @head80 : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 80, dtype = f16> from f16

// Already whole warps: 8 x 128 bf16 is 128 threads, one token.
// CHECK-LABEL: "description": "kv.append @nhd :
// CHECK: "threads_x": 128,
// CHECK-NEXT: "tokens_per_block": 1
kv.append @nhd : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16

// Odd head_dim 65 in f32 moves one element a chunk: 65 threads; whole
// warps would take 32 tokens (2080 threads), past 512: the rule's 1 stays.
// CHECK-LABEL: "description": "kv.append @odd :
// CHECK: "threads_x": 65,
// CHECK-NEXT: "tokens_per_block": 1
kv.append @odd : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 65, dtype = f32> from f32
