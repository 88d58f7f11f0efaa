// RUN: kvgen-opt %s | kvgen-opt | FileCheck %s

// V's head size of its own (v_head_dim) survives a print and a re-parse; a
// cache without it prints without it.

// CHECK-LABEL: kv.append @nhd
// CHECK-SAME: !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 192, v_head_dim = 128, dtype = bf16> from bf16
kv.append @nhd : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 192, v_head_dim = 128, dtype = bf16> from bf16

// CHECK-LABEL: kv.append @hnd_fp8
// CHECK-SAME: head_dim = 16, v_head_dim = 8, dtype = f8E4M3FN, quant = <kind = fp8_e4m3, granularity = per_head, mode = static>>
kv.append @hnd_fp8 : !kv.cache<layout = paged_hnd, block_size = 16,
    num_kv_heads = 1, head_dim = 16, v_head_dim = 8, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_head, mode = static>> from bf16

// CHECK-LABEL: kv.gather @contiguous
// CHECK-SAME: max_seq_len = 64, num_kv_heads = 2, head_dim = 64, v_head_dim = 128, dtype = f16> to f16
kv.gather @contiguous : !kv.cache<layout = contiguous, max_seq_len = 64,
    num_kv_heads = 2, head_dim = 64, v_head_dim = 128, dtype = f16> to f16

// CHECK-LABEL: kv.append @same
// CHECK-SAME: head_dim = 128, dtype = bf16> from bf16
kv.append @same : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16
