// RUN: kvgen-opt %s -split-input-file -verify-diagnostics

// One case per rule of the kv dialect's verifiers (KVDialect.cpp,
// KVCacheType.cpp).

// expected-error @+1 {{num_kv_heads must be positive, got 0}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 0, head_dim = 128, dtype = bf16> from bf16

// -----

// expected-error @+1 {{head_dim must be positive, got -64}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = -64, dtype = bf16> from bf16

// -----

// expected-error @+1 {{block_size must be positive, got -24}}
kv.append @a : !kv.cache<layout = paged_hnd, block_size = -24, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16

// -----

// expected-error @+1 {{block_size must be positive, got 0}}
kv.append @a : !kv.cache<layout = paged_nhd, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16

// -----

// expected-error @+1 {{the contiguous layout needs max_seq_len > 0}}
kv.append @a : !kv.cache<layout = contiguous, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16

// -----

// expected-error @+1 {{the contiguous layout has no blocks: give max_seq_len, not block_size}}
kv.append @a : !kv.cache<layout = contiguous, block_size = 16, max_seq_len = 128, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16

// -----

// expected-error @+1 {{max_seq_len is for the contiguous layout; the paged_nhd layout takes block_size}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, max_seq_len = 128, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16

// -----

// expected-error @+1 {{an unquantized cache holds f32, f16 or bf16, got 'f8E4M3FN' (fp8 and int8 caches need a quant)}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = f8E4M3FN> from bf16

// -----

// expected-error @+1 {{an unquantized cache holds f32, f16 or bf16, got 'f64'}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = f64> from f32

// -----

// expected-error @+1 {{fp8_e5m2 quantization stores 'f8E5M2', but the cache dtype is 'f8E4M3FN'}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = f8E4M3FN, quant = #kv.quant<kind = fp8_e5m2, granularity = per_tensor, mode = static>> from bf16

// -----

// expected-error @+1 {{per_block scales need a paged layout}}
kv.append @a : !kv.cache<layout = contiguous, max_seq_len = 64, num_kv_heads = 8, head_dim = 128, dtype = i8, quant = #kv.quant<kind = int8, granularity = per_block, mode = static>> from bf16

// -----

// expected-error @+2 {{a dynamic per_tensor scale needs a reduction over all tokens of the launch}}
// expected-error @+1 {{failed to parse KV_CacheType parameter 'quant'}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = i8, quant = #kv.quant<kind = int8, granularity = per_tensor, mode = dynamic>> from bf16

// -----

// expected-error @+2 {{a dynamic per_block scale would rescale tokens already in the block}}
// expected-error @+1 {{failed to parse KV_CacheType parameter 'quant'}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = i8, quant = #kv.quant<kind = int8, granularity = per_block, mode = dynamic>> from bf16

// -----

// expected-error @+1 {{the vllm_vectorized layout packs x = 8 elements (16 bytes of 'bf16') per vector; x must divide head_dim 100}}
kv.append @a : !kv.cache<layout = vllm_vectorized, block_size = 16, num_kv_heads = 8, head_dim = 100, dtype = bf16> from bf16

// -----

// expected-error @+1 {{'kv.append' op cannot cast 'f16' to 'bf16': the only casts are fp32 <-> 16-bit}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from f16

// -----

// expected-error @+1 {{'kv.fused_append' op source dtype must be f32, f16 or bf16, got 'i32'}}
kv.fused_append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from i32

// -----

// expected-error @+1 {{'kv.slot_mapping' op needs a paged layout: a contiguous cache has no block table}}
kv.slot_mapping @a : !kv.cache<layout = contiguous, max_seq_len = 64, num_kv_heads = 8, head_dim = 128, dtype = bf16>

// -----

// expected-error @+1 {{'kv.fused_append' op needs a paged layout}}
kv.fused_append @a : !kv.cache<layout = contiguous, max_seq_len = 64, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16

// -----

// expected-error @+1 {{'kv.append' op kernel name '9lives' must be a C identifier}}
kv.append @"9lives" : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16
