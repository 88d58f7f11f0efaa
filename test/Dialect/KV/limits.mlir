// RUN: kvgen-opt %s -split-input-file -verify-diagnostics

// The limits of docs/CONTRACT.md: the largest value of each is accepted, one
// past it is refused with a message naming the limit. Values that once
// overflowed the planner (heads * head_dim wrapping to 0) are among them.

// The largest of everything at once that keeps elements per token in range.
kv.append @largest_block : !kv.cache<layout = paged_nhd, block_size = 1048576, num_kv_heads = 16, head_dim = 65536, dtype = bf16> from bf16
kv.append @largest_seq : !kv.cache<layout = contiguous, max_seq_len = 1048576, num_kv_heads = 4096, head_dim = 256, dtype = bf16> from bf16

// -----

// expected-error @+1 {{block_size 2097152 is past the limit: a kernel supports at most 1048576}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 2097152, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16

// -----

// expected-error @+1 {{block_size 4611686018427387904 is past the limit: a kernel supports at most 1048576}}
kv.append @a : !kv.cache<layout = paged_hnd, block_size = 4611686018427387904, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16

// -----

// expected-error @+1 {{max_seq_len 1048577 is past the limit: a kernel supports at most 1048576}}
kv.append @a : !kv.cache<layout = contiguous, max_seq_len = 1048577, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16

// -----

// expected-error @+1 {{head_dim 65537 is past the limit: a kernel supports at most 65536}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 1, head_dim = 65537, dtype = bf16> from bf16

// -----

// expected-error @+1 {{head_dim 4611686018427387904 is past the limit: a kernel supports at most 65536}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 4611686018427387904, dtype = bf16> from bf16

// -----

// expected-error @+1 {{num_kv_heads 4097 is past the limit: a kernel supports at most 4096}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 4097, head_dim = 128, dtype = bf16> from bf16

// -----

// heads * head_dim = 2^80 would wrap; each is checked first.
// expected-error @+1 {{head_dim 1099511627776 is past the limit: a kernel supports at most 65536}}
kv.slot_mapping @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 1099511627776, head_dim = 1099511627776, dtype = bf16>

// -----

// expected-error @+1 {{num_kv_heads * head_dim 1052672 is past the limit: a kernel supports at most 1048576}}
kv.fused_append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 4096, head_dim = 257, dtype = bf16> from bf16
