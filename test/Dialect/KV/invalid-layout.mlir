// RUN: kvgen-opt %s -split-input-file -verify-diagnostics

// The layouts are the kernel ABI's (include/kvgen/ABI/Layouts.def): an
// unknown name is refused with the known ones.

// expected-error @+2 {{unknown layout 'paged_xyz': expected one of contiguous, paged_nhd, paged_hnd, vllm_vectorized, dual_stacked}}
// expected-error @+1 {{failed to parse}}
kv.append @a : !kv.cache<layout = paged_xyz, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16

// -----

// The names are case-sensitive, as in a bundle.
// expected-error @+2 {{unknown layout 'PagedNHD'}}
// expected-error @+1 {{failed to parse}}
kv.append @a : !kv.cache<layout = PagedNHD, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16
