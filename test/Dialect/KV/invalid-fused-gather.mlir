// RUN: kvgen-opt %s -split-input-file -verify-diagnostics

// The rules of kv.fused_gather (KVDialect.cpp, verifyKernelOp from its
// traits: rows out of the cache, the slot from the block table): one case
// each.

// expected-error @+1 {{'kv.fused_gather' op needs a paged layout: a contiguous cache has no block table}}
kv.fused_gather @a : !kv.cache<layout = contiguous, max_seq_len = 64, num_kv_heads = 1, head_dim = 576, dtype = bf16, k_only = true> to bf16

// -----

// expected-error @+1 {{'kv.fused_gather' op output dtype must be f32, f16 or bf16, got 'i32'}}
kv.fused_gather @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 1, head_dim = 576, dtype = bf16, k_only = true> to i32

// -----

// expected-error @+1 {{'kv.fused_gather' op cannot cast 'bf16' to 'f16': the only casts are fp32 <-> 16-bit}}
kv.fused_gather @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 1, head_dim = 576, dtype = bf16, k_only = true> to f16

// -----

// expected-error @+1 {{'kv.fused_gather' op kernel name '9lives' must be a C identifier}}
kv.fused_gather @"9lives" : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 1, head_dim = 576, dtype = bf16, k_only = true> to bf16
