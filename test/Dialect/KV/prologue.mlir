// RUN: kvgen-opt %s | kvgen-opt | FileCheck %s

// The fused prologue (#kv.prologue<...>) on kv.append survives a print and a
// re-parse unchanged; absent parameters stay absent.

// CHECK-LABEL: kv.append @qwen3
// CHECK-SAME: from bf16 prologue #kv.prologue<q_heads = 32, norm = rms, rope = neox, rotary_dim = 128>
kv.append @qwen3 : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16
    prologue #kv.prologue<q_heads = 32, norm = rms, rope = neox,
                          rotary_dim = 128>

// CHECK-LABEL: kv.append @norm_only
// CHECK-SAME: from bf16 prologue #kv.prologue<norm = rms>
kv.append @norm_only : !kv.cache<layout = paged_hnd, block_size = 16,
    num_kv_heads = 2, head_dim = 64, dtype = bf16> from bf16
    prologue #kv.prologue<norm = rms>

// CHECK-LABEL: kv.append @gptj_partial
// CHECK-SAME: from f16 prologue #kv.prologue<q_heads = 4, rope = gptj, rotary_dim = 32>
kv.append @gptj_partial : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 2, head_dim = 64, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor,
                      mode = static>> from f16
    prologue #kv.prologue<rope = gptj, rotary_dim = 32, q_heads = 4>

// CHECK-LABEL: kv.append @plain
// CHECK-NOT: prologue
kv.append @plain : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16

// CHECK-LABEL: kv.fused_append @fused
// CHECK-SAME: from bf16 prologue #kv.prologue<q_heads = 16, norm = rms, rope = neox, rotary_dim = 64>
kv.fused_append @fused : !kv.cache<layout = paged_hnd, block_size = 16,
    num_kv_heads = 4, head_dim = 128, dtype = bf16> from bf16
    prologue #kv.prologue<q_heads = 16, norm = rms, rope = neox,
                          rotary_dim = 64>

// CHECK-LABEL: kv.paged_kv_append @paged
// CHECK-SAME: from bf16 prologue #kv.prologue<q_heads = 8, rope = neox, rotary_dim = 64>
kv.paged_kv_append @paged : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 2, head_dim = 128, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor,
                      mode = static>> from bf16
    prologue #kv.prologue<q_heads = 8, rope = neox, rotary_dim = 64>

// Q written as fp8 e4m3 with its scale, the cos/sin cache in f32
// (FlashInfer's fused op).
// CHECK-LABEL: kv.paged_kv_append @flashinfer
// CHECK-SAME: prologue #kv.prologue<q_heads = 8, rope = gptj, rotary_dim = 64, q_quant = fp8_e4m3, cos_sin = f32>
kv.paged_kv_append @flashinfer : !kv.cache<layout = paged_hnd, block_size = 16,
    num_kv_heads = 2, head_dim = 128, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor,
                      mode = static>> from bf16
    prologue #kv.prologue<cos_sin = f32, q_quant = fp8_e4m3, q_heads = 8,
                          rope = gptj, rotary_dim = 64>
