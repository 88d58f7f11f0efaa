// RUN: kvgen-opt %s | kvgen-opt | FileCheck %s

// An NVFP4 cache (#kv.nvfp4, Nvfp4.h) prints and parses back, in both flash
// layouts and with both scale layouts and both scale rules.

// CHECK: kv.append @flash : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = i8, quant = <kind = nvfp4, granularity = per_tensor, mode = static>, nvfp4 = <k_scales = linear, v_scales = swizzled, search = divisor_six>> from bf16
kv.append @flash : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = i8,
    quant = #kv.quant<kind = nvfp4, granularity = per_tensor, mode = static>,
    nvfp4 = #kv.nvfp4<k_scales = linear, v_scales = swizzled,
                      search = divisor_six>> from bf16

// Linear scales need no multiple of 4 (head_dim 80: 5 scales a row).
// CHECK: kv.append @hnd : !kv.cache<layout = paged_hnd, block_size = 6, num_kv_heads = 2, head_dim = 80, dtype = i8, quant = <kind = nvfp4, granularity = per_tensor, mode = static>, nvfp4 = <k_scales = linear, v_scales = linear, search = four_over_six>> from f16
kv.append @hnd : !kv.cache<layout = paged_hnd, block_size = 6,
    num_kv_heads = 2, head_dim = 80, dtype = i8,
    quant = #kv.quant<kind = nvfp4, granularity = per_tensor, mode = static>,
    nvfp4 = #kv.nvfp4<k_scales = linear, v_scales = linear,
                      search = four_over_six>> from f16

// CHECK: kv.slot_mapping @slots
kv.slot_mapping @slots : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = i8,
    quant = #kv.quant<kind = nvfp4, granularity = per_tensor, mode = static>,
    nvfp4 = #kv.nvfp4<k_scales = swizzled, v_scales = swizzled,
                      search = divisor_six>>
