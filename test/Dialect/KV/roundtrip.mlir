// RUN: kvgen-opt %s | kvgen-opt | FileCheck %s

// Every layout, dtype pair and the quantization attribute survive a print and
// a re-parse unchanged.

// CHECK-LABEL: kv.append @contiguous_f16
// CHECK-SAME: !kv.cache<layout = contiguous, max_seq_len = 4096, num_kv_heads = 8, head_dim = 128, dtype = f16> from f16
kv.append @contiguous_f16 : !kv.cache<layout = contiguous, max_seq_len = 4096,
    num_kv_heads = 8, head_dim = 128, dtype = f16> from f16

// CHECK-LABEL: kv.append @nhd_bf16
// CHECK-SAME: !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16
kv.append @nhd_bf16 : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16

// CHECK-LABEL: kv.append @hnd_f32_to_bf16
// CHECK-SAME: layout = paged_hnd, block_size = 32, num_kv_heads = 1, head_dim = 64, dtype = bf16> from f32
kv.append @hnd_f32_to_bf16 : !kv.cache<layout = paged_hnd, block_size = 32,
    num_kv_heads = 1, head_dim = 64, dtype = bf16> from f32

// CHECK-LABEL: kv.append @vllm_f16
// CHECK-SAME: layout = vllm_vectorized, block_size = 16, num_kv_heads = 4, head_dim = 256, dtype = f16> from f16
kv.append @vllm_f16 : !kv.cache<layout = vllm_vectorized, block_size = 16,
    num_kv_heads = 4, head_dim = 256, dtype = f16> from f16

// CHECK-LABEL: kv.append @dual_f32
// CHECK-SAME: layout = dual_stacked, block_size = 64, num_kv_heads = 2, head_dim = 128, dtype = f32> from bf16
kv.append @dual_f32 : !kv.cache<layout = dual_stacked, block_size = 64,
    num_kv_heads = 2, head_dim = 128, dtype = f32> from bf16

// CHECK-LABEL: kv.slot_mapping @slots
// CHECK-SAME: !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16>{{$}}
kv.slot_mapping @slots : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = bf16>

// CHECK-LABEL: kv.fused_append @fused
// CHECK-SAME: layout = paged_hnd, block_size = 16, num_kv_heads = 8, head_dim = 64, dtype = f16> from f16
kv.fused_append @fused : !kv.cache<layout = paged_hnd, block_size = 16,
    num_kv_heads = 8, head_dim = 64, dtype = f16> from f16

// CHECK-LABEL: kv.paged_kv_append @paged
// CHECK-SAME: layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from f32
kv.paged_kv_append @paged : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = bf16> from f32

// CHECK-LABEL: kv.paged_kv_append @paged_int8
// CHECK-SAME: layout = paged_hnd, block_size = 32, num_kv_heads = 2, head_dim = 64, dtype = i8, quant = <kind = int8, granularity = per_token_head, mode = dynamic>> from f16
kv.paged_kv_append @paged_int8 : !kv.cache<layout = paged_hnd, block_size = 32,
    num_kv_heads = 2, head_dim = 64, dtype = i8,
    quant = #kv.quant<kind = int8, granularity = per_token_head,
                      mode = dynamic>> from f16

// CHECK-LABEL: kv.append @fp8
// CHECK-SAME: dtype = f8E4M3FN, quant = <kind = fp8_e4m3, granularity = per_tensor, mode = static>> from bf16
kv.append @fp8 : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor, mode = static>> from bf16

// CHECK-LABEL: kv.append @int8_dynamic
// CHECK-SAME: dtype = i8, quant = <kind = int8, granularity = per_token_head, mode = dynamic>> from f16
kv.append @int8_dynamic : !kv.cache<layout = paged_hnd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = i8,
    quant = #kv.quant<kind = int8, granularity = per_token_head, mode = dynamic>> from f16

// CHECK-LABEL: kv.append @reciprocal
// CHECK-SAME: quant = <kind = int8, granularity = per_token_head, mode = dynamic, reciprocal = true>> from bf16
kv.append @reciprocal : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = i8,
    quant = #kv.quant<kind = int8, granularity = per_token_head, mode = dynamic,
                      reciprocal = true>> from bf16

// A block size that is not a power of two (hybrid attention/Mamba models).
// CHECK-LABEL: kv.gather @gather_528
// CHECK-SAME: layout = paged_nhd, block_size = 528, num_kv_heads = 8, head_dim = 128, dtype = f8E4M3FN, quant = <kind = fp8_e4m3, granularity = per_tensor, mode = static>> to f32
kv.gather @gather_528 : !kv.cache<layout = paged_nhd, block_size = 528,
    num_kv_heads = 8, head_dim = 128, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor,
                      mode = static>> to f32
