// RUN: kvgen %s --emit=ptx | FileCheck %s

// Any block size: the slot is split by the compile-time constant. A power
// of two gets a shift and a mask; any other size (528 tokens, as hybrid
// attention/Mamba models use; a contiguous max_seq_len of 100) a
// multiply-high, never a div or rem instruction (64- or 32-bit). The
// append, the slot-mapping builder and the fused append alike. The mask
// may be 32-bit: the position within a block is used as an i32.

// CHECK-LABEL: .visible .entry append_16(
// CHECK-NOT: {{div|rem}}.{{[su]}}{{32|64}}
// CHECK: shr.{{[su]}}64 {{.*}}, 4;
// CHECK: and.b{{32|64}} {{.*}}, 15;
// CHECK-NOT: {{div|rem}}.{{[su]}}{{32|64}}
// CHECK-LABEL: .visible .entry append_16_scalar(
kv.append @append_16 : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16

// CHECK-LABEL: .visible .entry append_528(
// CHECK-NOT: {{div|rem}}.{{[su]}}{{32|64}}
// CHECK: mul.hi.u64
// CHECK-NOT: {{div|rem}}.{{[su]}}{{32|64}}
// CHECK-LABEL: .visible .entry append_528_scalar(
// CHECK-NOT: {{div|rem}}.{{[su]}}{{32|64}}
// CHECK: mul.hi.u64
// CHECK-NOT: {{div|rem}}.{{[su]}}{{32|64}}
kv.append @append_528 : !kv.cache<layout = paged_nhd, block_size = 528,
    num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16

// CHECK-LABEL: .visible .entry slots_528(
// CHECK-NOT: {{div|rem}}.{{[su]}}{{32|64}}
// CHECK: mul.hi
// CHECK-NOT: {{div|rem}}.{{[su]}}{{32|64}}
kv.slot_mapping @slots_528 : !kv.cache<layout = paged_hnd, block_size = 528,
    num_kv_heads = 8, head_dim = 128, dtype = bf16>

// CHECK-LABEL: .visible .entry fused_528(
// CHECK-NOT: {{div|rem}}.{{[su]}}{{32|64}}
// CHECK: mul.hi
// CHECK-NOT: {{div|rem}}.{{[su]}}{{32|64}}
// CHECK-LABEL: .visible .entry fused_528_scalar(
kv.fused_append @fused_528 : !kv.cache<layout = dual_stacked, block_size = 528,
    num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16

// CHECK-LABEL: .visible .entry contiguous_100(
// CHECK-NOT: {{div|rem}}.{{[su]}}{{32|64}}
// CHECK: mul.hi.u64
// CHECK-NOT: {{div|rem}}.{{[su]}}{{32|64}}
// CHECK-LABEL: .visible .entry contiguous_100_scalar(
// CHECK-NOT: {{div|rem}}.{{[su]}}{{32|64}}
kv.append @contiguous_100 : !kv.cache<layout = contiguous, max_seq_len = 100,
    num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16
