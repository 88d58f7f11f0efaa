// RUN: kvgen %s --emit=llvm | FileCheck %s
// RUN: kvgen %s --emit=ptx | FileCheck %s --check-prefix=PTX

// q_out may be query itself (the prologue rotates Q in place, as vLLM does
// in its QKV buffer; kvrt accepts exactly that alias): a kernel that takes
// them marks neither noalias, which would be undefined behaviour in LLVM
// where a store through q_out writes what query reads, and reads query
// through the coherent cache (ld.global, not ld.global.nc). Every other
// buffer keeps noalias: K and V, the caches, the positions, cos/sin and the
// weights of the Q kernel, and all of a kernel without Q or without a
// prologue (kv-mark-kernel-noalias).

// Buffers: key, value, slot_mapping, key_cache, value_cache, query (5),
// q_out (6), rope_positions, cos_sin_cache, k_norm_weight, q_norm_weight,
// epsilon.
// CHECK-LABEL: define ptx_kernel void @qwen3(
// CHECK-SAME: ptr noalias {{[a-z]+}} captures(none) %0,
// CHECK-SAME: ptr noalias {{[a-z]+}} captures(none) %4,
// CHECK-SAME: ptr {{[a-z]+}} captures(none) %5, ptr {{[a-z]+}} captures(none) %6,
// CHECK-SAME: ptr noalias {{[a-z]+}} captures(none) %7,
// CHECK-SAME: ptr noalias {{[a-z]+}} captures(none) %11, i32
// CHECK-LABEL: define ptx_kernel void @qwen3_scalar(
// CHECK-SAME: ptr noalias {{[a-z]+}} captures(none) %4,
// CHECK-SAME: ptr {{[a-z]+}} captures(none) %5, ptr {{[a-z]+}} captures(none) %6,
// CHECK-SAME: ptr noalias {{[a-z]+}} captures(none) %7,

// PTX-LABEL: .entry qwen3(
// Q's 16-byte loads: the row of query (param 5), then the element in it.
// PTX: ld.param.b64 [[Q:%rd[0-9]+]], [qwen3_param_5];
// PTX: cvta.to.global.u64 [[QG:%rd[0-9]+]], [[Q]];
// PTX: add.s64 [[QROW:%rd[0-9]+]], [[QG]], %rd{{[0-9]+}};
// PTX: add.s64 [[QA:%rd[0-9]+]], [[QROW]], %rd{{[0-9]+}};
// PTX-NEXT: ld.global.v4.b32 {{.*}}, {{\[}}[[QA]]{{\]}};
// PTX: add.s64 [[QB:%rd[0-9]+]], [[QROW]], %rd{{[0-9]+}};
// PTX-NEXT: ld.global.v4.b32 {{.*}}, {{\[}}[[QB]]{{\]}};
// K still through the non-coherent cache.
// PTX: ld.global.nc.v4.b32
// PTX-LABEL: .entry qwen3_scalar(
kv.append @qwen3 : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16
    prologue #kv.prologue<q_heads = 32, norm = rms, rope = neox,
                          rotary_dim = 128>

// A prologue without Q: key, value, slot_mapping, key_cache, value_cache,
// k_norm_weight, epsilon, all noalias.
// CHECK-LABEL: define ptx_kernel void @k_norm(
// CHECK-SAME: ptr noalias {{[a-z]+}} captures(none) %0,
// CHECK-SAME: ptr noalias {{[a-z]+}} captures(none) %1,
// CHECK-SAME: ptr noalias {{[a-z]+}} captures(none) %2,
// CHECK-SAME: ptr noalias {{[a-z]+}} captures(none) %3,
// CHECK-SAME: ptr noalias {{[a-z]+}} captures(none) %4,
// CHECK-SAME: ptr noalias {{[a-z]+}} captures(none) %5,
// CHECK-SAME: ptr noalias {{[a-z]+}} captures(none) %6, i32
kv.append @k_norm : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16
    prologue #kv.prologue<norm = rms>

// No prologue: the five buffers noalias, as before.
// CHECK-LABEL: define ptx_kernel void @plain(
// CHECK-SAME: ptr noalias {{.*}}%0, ptr noalias {{.*}}%1,
// CHECK-SAME: ptr noalias {{.*}}%2, ptr noalias {{.*}}%3,
// CHECK-SAME: ptr noalias {{.*}}%4, i32
kv.append @plain : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16
