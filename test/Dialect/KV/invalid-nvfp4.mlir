// RUN: kvgen-opt %s -split-input-file -verify-diagnostics

// The rules of an NVFP4 cache (#kv.nvfp4, Nvfp4.cpp): the quant and the
// attribute together, a static per_tensor global scale, a paged flash
// layout, head_dim a multiple of 16, 4x4 tiles for swizzled scales, one
// head_dim, i8 storage, kv.append only, and the attribute's names.

// expected-error @+1 {{an nvfp4 cache needs nvfp4 = #kv.nvfp4<k_scales = ..., v_scales = ..., search = ...>: where its values and block scales go}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 64, dtype = i8,
    quant = #kv.quant<kind = nvfp4, granularity = per_tensor, mode = static>> from bf16

// -----

// expected-error @+1 {{nvfp4 = #kv.nvfp4<...> places an NVFP4 cache's values: give quant = #kv.quant<kind = nvfp4, granularity = per_tensor, mode = static>}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 64, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor, mode = static>,
    nvfp4 = #kv.nvfp4<k_scales = linear, v_scales = swizzled, search = divisor_six>> from bf16

// -----

// expected-error @+1 {{an nvfp4 cache's global scale is static and per_tensor (its block scales are computed by the kernel): give granularity = per_tensor, mode = static, no reciprocal}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 64, dtype = i8,
    quant = #kv.quant<kind = nvfp4, granularity = per_head, mode = static>,
    nvfp4 = #kv.nvfp4<k_scales = linear, v_scales = swizzled, search = divisor_six>> from bf16

// -----

// expected-error @+1 {{an nvfp4 cache is paged_nhd or paged_hnd (a block's values, then its scales, each side apart), got contiguous}}
kv.append @a : !kv.cache<layout = contiguous, max_seq_len = 16,
    num_kv_heads = 8, head_dim = 64, dtype = i8, quant = #kv.quant<kind = nvfp4, granularity = per_tensor, mode = static>,
    nvfp4 = #kv.nvfp4<k_scales = linear, v_scales = swizzled, search = divisor_six>> from bf16

// -----

// expected-error @+1 {{an nvfp4 cache's head_dim must be a multiple of 16 (one e4m3 scale per 16 values), got 72}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 72, dtype = i8, quant = #kv.quant<kind = nvfp4, granularity = per_tensor, mode = static>,
    nvfp4 = #kv.nvfp4<k_scales = linear, v_scales = linear, search = divisor_six>> from bf16

// -----

// expected-error @+1 {{swizzled NVFP4 scales are 4x4 tiles of (position, scale): block_size and head_dim / 16 must be multiples of 4, got block_size 16 and head_dim / 16 = 5}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 80, dtype = i8, quant = #kv.quant<kind = nvfp4, granularity = per_tensor, mode = static>,
    nvfp4 = #kv.nvfp4<k_scales = linear, v_scales = swizzled, search = divisor_six>> from bf16

// -----

// expected-error @+1 {{swizzled NVFP4 scales are 4x4 tiles of (position, scale): block_size and head_dim / 16 must be multiples of 4, got block_size 6 and head_dim / 16 = 4}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 6,
    num_kv_heads = 8, head_dim = 64, dtype = i8, quant = #kv.quant<kind = nvfp4, granularity = per_tensor, mode = static>,
    nvfp4 = #kv.nvfp4<k_scales = swizzled, v_scales = linear, search = divisor_six>> from bf16

// -----

// expected-error @+1 {{an nvfp4 cache has K and V of one head_dim (no v_head_dim, k_only or latent)}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 64, v_head_dim = 32, dtype = i8, quant = #kv.quant<kind = nvfp4, granularity = per_tensor, mode = static>,
    nvfp4 = #kv.nvfp4<k_scales = linear, v_scales = swizzled, search = divisor_six>> from bf16

// -----

// expected-error @+1 {{nvfp4 quantization stores 'i8', but the cache dtype is 'f8E4M3FN'}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 64, dtype = f8E4M3FN, quant = #kv.quant<kind = nvfp4, granularity = per_tensor, mode = static>,
    nvfp4 = #kv.nvfp4<k_scales = linear, v_scales = swizzled, search = divisor_six>> from bf16

// -----

// expected-error @+1 {{'kv.gather' op an nvfp4 cache is written by kv.append only (its gathers and its block-table and page-table appends are not generated yet)}}
kv.gather @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 64, dtype = i8, quant = #kv.quant<kind = nvfp4, granularity = per_tensor, mode = static>,
    nvfp4 = #kv.nvfp4<k_scales = linear, v_scales = swizzled, search = divisor_six>> to bf16

// -----

// expected-error @+1 {{'kv.fused_append' op an nvfp4 cache is written by kv.append only (its gathers and its block-table and page-table appends are not generated yet)}}
kv.fused_append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 64, dtype = i8, quant = #kv.quant<kind = nvfp4, granularity = per_tensor, mode = static>,
    nvfp4 = #kv.nvfp4<k_scales = linear, v_scales = swizzled, search = divisor_six>> from bf16

// -----

kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 64, dtype = i8, quant = #kv.quant<kind = nvfp4, granularity = per_tensor, mode = static>,
// expected-error @+3 {{unknown NVFP4 scale layout 'tiled': expected one of linear, swizzled}}
// expected-error @+2 {{failed to parse KV_Nvfp4Attr parameter 'k_scales' which is to be a `::kvgen::kv::Nvfp4ScaleLayout`}}
// expected-error @+1 {{failed to parse KV_CacheType parameter 'nvfp4' which is to be a `::kvgen::kv::Nvfp4Attr`}}
    nvfp4 = #kv.nvfp4<k_scales = tiled, v_scales = linear, search = divisor_six>> from bf16

// -----

kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 64, dtype = i8, quant = #kv.quant<kind = nvfp4, granularity = per_tensor, mode = static>,
// expected-error @+3 {{unknown NVFP4 scale search 'best': expected one of divisor_six, four_over_six}}
// expected-error @+2 {{failed to parse KV_Nvfp4Attr parameter 'search' which is to be a `::kvgen::kv::Nvfp4ScaleSearch`}}
// expected-error @+1 {{failed to parse KV_CacheType parameter 'nvfp4' which is to be a `::kvgen::kv::Nvfp4Attr`}}
    nvfp4 = #kv.nvfp4<k_scales = linear, v_scales = linear, search = best>> from bf16
