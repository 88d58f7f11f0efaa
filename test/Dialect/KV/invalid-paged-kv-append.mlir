// RUN: kvgen-opt %s -split-input-file -verify-diagnostics

// The rules of kv.paged_kv_append (KVDialect.cpp, PagedKvAppendOp::verify):
// one case each.

// expected-error @+1 {{'kv.paged_kv_append' op needs a paged layout: a contiguous cache has no block table}}
kv.paged_kv_append @a : !kv.cache<layout = contiguous, max_seq_len = 64, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16

// -----

// expected-error @+1 {{'kv.paged_kv_append' op cannot write a latent cache: its entry is kv_c followed by k_pe}}
kv.paged_kv_append @a : !kv.cache<layout = paged_nhd, block_size = 64,
    num_kv_heads = 1, head_dim = 576, dtype = bf16,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16

// -----

// expected-error @+1 {{'kv.paged_kv_append' op source dtype must be f32, f16 or bf16, got 'i32'}}
kv.paged_kv_append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from i32

// -----

// expected-error @+1 {{'kv.paged_kv_append' op cannot cast 'f16' to 'bf16': the only casts are fp32 <-> 16-bit}}
kv.paged_kv_append @a : !kv.cache<layout = paged_hnd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from f16

// -----

// expected-error @+1 {{'kv.paged_kv_append' op kernel name '9lives' must be a C identifier}}
kv.paged_kv_append @"9lives" : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16
