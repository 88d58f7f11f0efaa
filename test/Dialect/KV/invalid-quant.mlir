// RUN: kvgen-opt %s -split-input-file -verify-diagnostics

// The quantized descriptions and gathers the verifier refuses, one per rule.

// expected-error @+2 {{int4 caches are not supported in this release (docs/CONTRACT.md): use fp8_e4m3, fp8_e5m2, int8 or nvfp4}}
// expected-error @+1 {{failed to parse KV_CacheType parameter 'quant'}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = i8, quant = #kv.quant<kind = int4, granularity = per_tensor, mode = static>> from bf16

// -----

// expected-error @+2 {{a dynamic per_head scale needs a reduction over all tokens of the launch}}
// expected-error @+1 {{failed to parse KV_CacheType parameter 'quant'}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = i8, quant = #kv.quant<kind = int8, granularity = per_head, mode = dynamic>> from bf16

// -----

// expected-error @+1 {{'kv.gather' op output dtype must be f32, f16 or bf16, got 'i8'}}
kv.gather @g : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = i8, quant = #kv.quant<kind = int8, granularity = per_tensor, mode = static>> to i8

// -----

// expected-error @+1 {{'kv.gather' op cannot cast 'bf16' to 'f16'}}
kv.gather @g : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> to f16

// -----

// expected-error @+1 {{'kv.gather' op kernel name '9g' must be a C identifier}}
kv.gather @"9g" : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> to bf16
