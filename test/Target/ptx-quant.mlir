// RUN: kvgen %s --emit=ptx | FileCheck %s

// The PTX of one quantized append per kind x granularity x mode (and a
// gather per kind): the division, the saturation and the rounding. A static
// scale of a 16-bit source divides as the reciprocal (rcp.rn.f32) and two
// fmas an element, IEEE division (div.rn.f32) in the branch for values
// outside [2^-60, 2^60]; a dynamic scale divides with div.rn.f32. fp8 rounds
// two elements per cvt.rn.satfinite, which saturates by itself (no min.NaN
// before it); int8 saturates with the NaN-propagating min.NaN / max.NaN,
// rounds to nearest even by adding and removing 1.5 * 2^23 and converts
// with cvt.rzi. A dynamic scale is amax / qmax: one division per group,
// stored as a 32-bit float.
// A dynamic group is spread over lanes, one 16-byte chunk each here: K and
// V are read once (one ld.global.nc.v4 each, none after the reduction, the
// values stay in registers), and the amax is a butterfly of shfl.sync.bfly
// over the group's lanes: 8 lanes (3 steps per tensor) for a head of 64,
// a whole warp (5 steps, member mask -1) for a token of 4 x 64.

// CHECK-LABEL: .visible .entry fp8_e4m3_per_tensor_static(
// CHECK: rcp.rn.f32
// CHECK: fma.rn.f32
// CHECK: div.rn.f32
// CHECK-NOT: min.NaN.f32
// CHECK: cvt.rn.satfinite.e4m3x2.f32
// CHECK-LABEL: .visible .entry fp8_e4m3_per_tensor_static_scalar(
// CHECK: div.rn.f32
kv.append @fp8_e4m3_per_tensor_static : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 4, head_dim = 64, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor, mode = static>> from bf16

// CHECK-LABEL: .visible .entry fp8_e4m3_per_token_static(
// CHECK: rcp.rn.f32
// CHECK: fma.rn.f32
// CHECK: div.rn.f32
// CHECK-NOT: min.NaN.f32
// CHECK: cvt.rn.satfinite.e4m3x2.f32
// CHECK-LABEL: .visible .entry fp8_e4m3_per_token_static_scalar(
// CHECK: div.rn.f32
kv.append @fp8_e4m3_per_token_static : !kv.cache<layout = paged_hnd, block_size = 16,
    num_kv_heads = 4, head_dim = 64, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_token, mode = static>> from bf16

// CHECK-LABEL: .visible .entry fp8_e4m3_per_head_static(
// CHECK: rcp.rn.f32
// CHECK: fma.rn.f32
// CHECK: div.rn.f32
// CHECK-NOT: min.NaN.f32
// CHECK: cvt.rn.satfinite.e4m3x2.f32
// CHECK-LABEL: .visible .entry fp8_e4m3_per_head_static_scalar(
// CHECK: div.rn.f32
kv.append @fp8_e4m3_per_head_static : !kv.cache<layout = vllm_vectorized, block_size = 16,
    num_kv_heads = 4, head_dim = 64, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_head, mode = static>> from bf16

// CHECK-LABEL: .visible .entry fp8_e4m3_per_token_head_static(
// CHECK: rcp.rn.f32
// CHECK: fma.rn.f32
// CHECK: div.rn.f32
// CHECK-NOT: min.NaN.f32
// CHECK: cvt.rn.satfinite.e4m3x2.f32
// CHECK-LABEL: .visible .entry fp8_e4m3_per_token_head_static_scalar(
// CHECK: div.rn.f32
kv.append @fp8_e4m3_per_token_head_static : !kv.cache<layout = dual_stacked, block_size = 16,
    num_kv_heads = 4, head_dim = 64, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_token_head, mode = static>> from bf16

// CHECK-LABEL: .visible .entry fp8_e4m3_per_block_static(
// CHECK: rcp.rn.f32
// CHECK: fma.rn.f32
// CHECK: div.rn.f32
// CHECK-NOT: min.NaN.f32
// CHECK: cvt.rn.satfinite.e4m3x2.f32
// CHECK-LABEL: .visible .entry fp8_e4m3_per_block_static_scalar(
// CHECK: div.rn.f32
kv.append @fp8_e4m3_per_block_static : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 4, head_dim = 64, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_block, mode = static>> from bf16

// CHECK-LABEL: .visible .entry fp8_e4m3_per_token_dynamic(
// CHECK-COUNT-2: ld.global.nc.v4.b32
// CHECK-COUNT-10: shfl.sync.bfly.b32 {{.*}}, 31, -1;
// CHECK-NOT: ld.global
// CHECK: div.rn.f32
// CHECK: st.global.b32
// CHECK-NOT: min.NaN.f32
// CHECK: cvt.rn.satfinite.e4m3x2.f32
// CHECK-NOT: ld.global
// CHECK-LABEL: .visible .entry fp8_e4m3_per_token_dynamic_scalar(
// CHECK: shfl.sync.bfly.b32
// CHECK: div.rn.f32
kv.append @fp8_e4m3_per_token_dynamic : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 4, head_dim = 64, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_token, mode = dynamic>> from bf16

// CHECK-LABEL: .visible .entry fp8_e4m3_per_token_head_dynamic(
// CHECK-COUNT-2: ld.global.nc.v4.b32
// CHECK-COUNT-6: shfl.sync.bfly.b32
// CHECK-NOT: ld.global
// CHECK: div.rn.f32
// CHECK: st.global.b32
// CHECK-NOT: min.NaN.f32
// CHECK: cvt.rn.satfinite.e4m3x2.f32
// CHECK-NOT: ld.global
// CHECK-LABEL: .visible .entry fp8_e4m3_per_token_head_dynamic_scalar(
// CHECK: shfl.sync.bfly.b32
// CHECK: div.rn.f32
kv.append @fp8_e4m3_per_token_head_dynamic : !kv.cache<layout = paged_hnd, block_size = 16,
    num_kv_heads = 4, head_dim = 64, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_token_head, mode = dynamic>> from bf16

// CHECK-LABEL: .visible .entry fp8_e5m2_per_tensor_static(
// CHECK: rcp.rn.f32
// CHECK: fma.rn.f32
// CHECK: div.rn.f32
// CHECK-NOT: min.NaN.f32
// CHECK: cvt.rn.satfinite.e5m2x2.f32
// CHECK-LABEL: .visible .entry fp8_e5m2_per_tensor_static_scalar(
// CHECK: div.rn.f32
kv.append @fp8_e5m2_per_tensor_static : !kv.cache<layout = vllm_vectorized, block_size = 16,
    num_kv_heads = 4, head_dim = 64, dtype = f8E5M2,
    quant = #kv.quant<kind = fp8_e5m2, granularity = per_tensor, mode = static>> from bf16

// CHECK-LABEL: .visible .entry fp8_e5m2_per_token_static(
// CHECK: rcp.rn.f32
// CHECK: fma.rn.f32
// CHECK: div.rn.f32
// CHECK-NOT: min.NaN.f32
// CHECK: cvt.rn.satfinite.e5m2x2.f32
// CHECK-LABEL: .visible .entry fp8_e5m2_per_token_static_scalar(
// CHECK: div.rn.f32
kv.append @fp8_e5m2_per_token_static : !kv.cache<layout = dual_stacked, block_size = 16,
    num_kv_heads = 4, head_dim = 64, dtype = f8E5M2,
    quant = #kv.quant<kind = fp8_e5m2, granularity = per_token, mode = static>> from bf16

// CHECK-LABEL: .visible .entry fp8_e5m2_per_head_static(
// CHECK: rcp.rn.f32
// CHECK: fma.rn.f32
// CHECK: div.rn.f32
// CHECK-NOT: min.NaN.f32
// CHECK: cvt.rn.satfinite.e5m2x2.f32
// CHECK-LABEL: .visible .entry fp8_e5m2_per_head_static_scalar(
// CHECK: div.rn.f32
kv.append @fp8_e5m2_per_head_static : !kv.cache<layout = contiguous, max_seq_len = 96,
    num_kv_heads = 4, head_dim = 64, dtype = f8E5M2,
    quant = #kv.quant<kind = fp8_e5m2, granularity = per_head, mode = static>> from bf16

// CHECK-LABEL: .visible .entry fp8_e5m2_per_token_head_static(
// CHECK: rcp.rn.f32
// CHECK: fma.rn.f32
// CHECK: div.rn.f32
// CHECK-NOT: min.NaN.f32
// CHECK: cvt.rn.satfinite.e5m2x2.f32
// CHECK-LABEL: .visible .entry fp8_e5m2_per_token_head_static_scalar(
// CHECK: div.rn.f32
kv.append @fp8_e5m2_per_token_head_static : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 4, head_dim = 64, dtype = f8E5M2,
    quant = #kv.quant<kind = fp8_e5m2, granularity = per_token_head, mode = static>> from bf16

// CHECK-LABEL: .visible .entry fp8_e5m2_per_block_static(
// CHECK: rcp.rn.f32
// CHECK: fma.rn.f32
// CHECK: div.rn.f32
// CHECK-NOT: min.NaN.f32
// CHECK: cvt.rn.satfinite.e5m2x2.f32
// CHECK-LABEL: .visible .entry fp8_e5m2_per_block_static_scalar(
// CHECK: div.rn.f32
kv.append @fp8_e5m2_per_block_static : !kv.cache<layout = paged_hnd, block_size = 16,
    num_kv_heads = 4, head_dim = 64, dtype = f8E5M2,
    quant = #kv.quant<kind = fp8_e5m2, granularity = per_block, mode = static>> from bf16

// CHECK-LABEL: .visible .entry fp8_e5m2_per_token_dynamic(
// CHECK-COUNT-2: ld.global.nc.v4.b32
// CHECK-COUNT-10: shfl.sync.bfly.b32 {{.*}}, 31, -1;
// CHECK-NOT: ld.global
// CHECK: div.rn.f32
// CHECK: st.global.b32
// CHECK-NOT: min.NaN.f32
// CHECK: cvt.rn.satfinite.e5m2x2.f32
// CHECK-NOT: ld.global
// CHECK-LABEL: .visible .entry fp8_e5m2_per_token_dynamic_scalar(
// CHECK: shfl.sync.bfly.b32
// CHECK: div.rn.f32
kv.append @fp8_e5m2_per_token_dynamic : !kv.cache<layout = vllm_vectorized, block_size = 16,
    num_kv_heads = 4, head_dim = 64, dtype = f8E5M2,
    quant = #kv.quant<kind = fp8_e5m2, granularity = per_token, mode = dynamic>> from bf16

// CHECK-LABEL: .visible .entry fp8_e5m2_per_token_head_dynamic(
// CHECK-COUNT-2: ld.global.nc.v4.b32
// CHECK-COUNT-6: shfl.sync.bfly.b32
// CHECK-NOT: ld.global
// CHECK: div.rn.f32
// CHECK: st.global.b32
// CHECK-NOT: min.NaN.f32
// CHECK: cvt.rn.satfinite.e5m2x2.f32
// CHECK-NOT: ld.global
// CHECK-LABEL: .visible .entry fp8_e5m2_per_token_head_dynamic_scalar(
// CHECK: shfl.sync.bfly.b32
// CHECK: div.rn.f32
kv.append @fp8_e5m2_per_token_head_dynamic : !kv.cache<layout = dual_stacked, block_size = 16,
    num_kv_heads = 4, head_dim = 64, dtype = f8E5M2,
    quant = #kv.quant<kind = fp8_e5m2, granularity = per_token_head, mode = dynamic>> from bf16

// CHECK-LABEL: .visible .entry int8_per_tensor_static(
// CHECK: div.rn.f32
// CHECK: max.NaN.f32
// CHECK: min.NaN.f32
// CHECK: add.rn.f32
// CHECK: cvt.rzi.s16.f32
// CHECK-LABEL: .visible .entry int8_per_tensor_static_scalar(
// CHECK: div.rn.f32
kv.append @int8_per_tensor_static : !kv.cache<layout = contiguous, max_seq_len = 96,
    num_kv_heads = 4, head_dim = 64, dtype = i8,
    quant = #kv.quant<kind = int8, granularity = per_tensor, mode = static>> from bf16

// CHECK-LABEL: .visible .entry int8_per_token_static(
// CHECK: div.rn.f32
// CHECK: max.NaN.f32
// CHECK: min.NaN.f32
// CHECK: add.rn.f32
// CHECK: cvt.rzi.s16.f32
// CHECK-LABEL: .visible .entry int8_per_token_static_scalar(
// CHECK: div.rn.f32
kv.append @int8_per_token_static : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 4, head_dim = 64, dtype = i8,
    quant = #kv.quant<kind = int8, granularity = per_token, mode = static>> from bf16

// CHECK-LABEL: .visible .entry int8_per_head_static(
// CHECK: div.rn.f32
// CHECK: max.NaN.f32
// CHECK: min.NaN.f32
// CHECK: add.rn.f32
// CHECK: cvt.rzi.s16.f32
// CHECK-LABEL: .visible .entry int8_per_head_static_scalar(
// CHECK: div.rn.f32
kv.append @int8_per_head_static : !kv.cache<layout = paged_hnd, block_size = 16,
    num_kv_heads = 4, head_dim = 64, dtype = i8,
    quant = #kv.quant<kind = int8, granularity = per_head, mode = static>> from bf16

// CHECK-LABEL: .visible .entry int8_per_token_head_static(
// CHECK: div.rn.f32
// CHECK: max.NaN.f32
// CHECK: min.NaN.f32
// CHECK: add.rn.f32
// CHECK: cvt.rzi.s16.f32
// CHECK-LABEL: .visible .entry int8_per_token_head_static_scalar(
// CHECK: div.rn.f32
kv.append @int8_per_token_head_static : !kv.cache<layout = vllm_vectorized, block_size = 16,
    num_kv_heads = 4, head_dim = 64, dtype = i8,
    quant = #kv.quant<kind = int8, granularity = per_token_head, mode = static>> from bf16

// CHECK-LABEL: .visible .entry int8_per_block_static(
// CHECK: div.rn.f32
// CHECK: max.NaN.f32
// CHECK: min.NaN.f32
// CHECK: add.rn.f32
// CHECK: cvt.rzi.s16.f32
// CHECK-LABEL: .visible .entry int8_per_block_static_scalar(
// CHECK: div.rn.f32
kv.append @int8_per_block_static : !kv.cache<layout = dual_stacked, block_size = 16,
    num_kv_heads = 4, head_dim = 64, dtype = i8,
    quant = #kv.quant<kind = int8, granularity = per_block, mode = static>> from bf16

// CHECK-LABEL: .visible .entry int8_per_token_dynamic(
// CHECK-COUNT-2: ld.global.nc.v4.b32
// CHECK-COUNT-10: shfl.sync.bfly.b32 {{.*}}, 31, -1;
// CHECK-NOT: ld.global
// CHECK: div.rn.f32
// CHECK: st.global.b32
// CHECK: max.NaN.f32
// CHECK: min.NaN.f32
// CHECK: add.rn.f32
// CHECK: cvt.rzi.s16.f32
// CHECK-NOT: ld.global
// CHECK-LABEL: .visible .entry int8_per_token_dynamic_scalar(
// CHECK: shfl.sync.bfly.b32
// CHECK: div.rn.f32
kv.append @int8_per_token_dynamic : !kv.cache<layout = contiguous, max_seq_len = 96,
    num_kv_heads = 4, head_dim = 64, dtype = i8,
    quant = #kv.quant<kind = int8, granularity = per_token, mode = dynamic>> from bf16

// CHECK-LABEL: .visible .entry int8_per_token_head_dynamic(
// CHECK-COUNT-2: ld.global.nc.v4.b32
// CHECK-COUNT-6: shfl.sync.bfly.b32
// CHECK-NOT: ld.global
// CHECK: div.rn.f32
// CHECK: st.global.b32
// CHECK: max.NaN.f32
// CHECK: min.NaN.f32
// CHECK: add.rn.f32
// CHECK: cvt.rzi.s16.f32
// CHECK-NOT: ld.global
// CHECK-LABEL: .visible .entry int8_per_token_head_dynamic_scalar(
// CHECK: shfl.sync.bfly.b32
// CHECK: div.rn.f32
kv.append @int8_per_token_head_dynamic : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 4, head_dim = 64, dtype = i8,
    quant = #kv.quant<kind = int8, granularity = per_token_head, mode = dynamic>> from bf16

// reciprocal = true: one IEEE reciprocal (1 / s, rcp.rn) per chunk and
// tensor, multiplications for the values, no division.
// CHECK-LABEL: .visible .entry fp8_reciprocal(
// CHECK-NOT: div.rn.f32
// CHECK: rcp.rn.f32
// CHECK-NOT: div.rn.f32
// CHECK: mul.rn.f32
// CHECK-NOT: div.rn.f32
// CHECK: cvt.rn.satfinite.e4m3x2.f32
// CHECK-LABEL: .visible .entry fp8_reciprocal_scalar(
kv.append @fp8_reciprocal : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 4, head_dim = 64, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor, mode = static,
                      reciprocal = true>> from f32

// Dequantization: float(q) * s, no division, no fp8 rounding.
// CHECK-LABEL: .visible .entry gather_fp8_e4m3(
// CHECK-NOT: div.rn.f32
// CHECK-NOT: cvt.rn.satfinite
// CHECK: mul.rn.f32
// CHECK-NOT: div.rn.f32
// CHECK-NOT: cvt.rn.satfinite
// CHECK-LABEL: .visible .entry gather_fp8_e4m3_scalar(
kv.gather @gather_fp8_e4m3 : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 4, head_dim = 64, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_token_head, mode = dynamic>> to bf16

// Dequantization: float(q) * s, no division, no fp8 rounding.
// CHECK-LABEL: .visible .entry gather_fp8_e5m2(
// CHECK-NOT: div.rn.f32
// CHECK-NOT: cvt.rn.satfinite
// CHECK: mul.rn.f32
// CHECK-NOT: div.rn.f32
// CHECK-NOT: cvt.rn.satfinite
// CHECK-LABEL: .visible .entry gather_fp8_e5m2_scalar(
kv.gather @gather_fp8_e5m2 : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 4, head_dim = 64, dtype = f8E5M2,
    quant = #kv.quant<kind = fp8_e5m2, granularity = per_token_head, mode = dynamic>> to bf16

// Dequantization: float(q) * s, no division, no fp8 rounding.
// CHECK-LABEL: .visible .entry gather_int8(
// CHECK-NOT: div.rn.f32
// CHECK-NOT: cvt.rn.satfinite
// CHECK: mul.rn.f32
// CHECK-NOT: div.rn.f32
// CHECK-NOT: cvt.rn.satfinite
// CHECK-LABEL: .visible .entry gather_int8_scalar(
kv.gather @gather_int8 : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 4, head_dim = 64, dtype = i8,
    quant = #kv.quant<kind = int8, granularity = per_token_head, mode = dynamic>> to bf16
// The fused append computes the slot and then quantizes the same way.
// CHECK-LABEL: .visible .entry fused_e4m3_dynamic(
// CHECK-COUNT-2: ld.global.nc.v4.b32
// CHECK-COUNT-6: shfl.sync.bfly.b32
// CHECK-NOT: ld.global
// CHECK: div.rn.f32
// CHECK: st.global.b32
// CHECK: cvt.rn.satfinite.e4m3x2.f32
// CHECK-NOT: ld.global
// CHECK-LABEL: .visible .entry fused_e4m3_dynamic_scalar(
// CHECK: shfl.sync.bfly.b32
kv.fused_append @fused_e4m3_dynamic : !kv.cache<layout = dual_stacked,
    block_size = 528, num_kv_heads = 4, head_dim = 64, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_token_head, mode = dynamic>> from f16

// A gather out of the vllm_vectorized layout (x = 16 fp8 elements).
// CHECK-LABEL: .visible .entry gather_vllm_e5m2(
// CHECK: mul.rn.f32
// CHECK-LABEL: .visible .entry gather_vllm_e5m2_scalar(
kv.gather @gather_vllm_e5m2 : !kv.cache<layout = vllm_vectorized,
    block_size = 16, num_kv_heads = 4, head_dim = 64, dtype = f8E5M2,
    quant = #kv.quant<kind = fp8_e5m2, granularity = per_head, mode = static>> to f32

// Past 4 chunks a lane, a lane's chunks are a loop that reads them again for
// the stores rather than holding them (they would spill): a token of 32
// heads x 128 bf16 is one warp of 16 chunks a lane, still a warp of
// shuffles; a head of 72 bf16 (9 chunks, odd) has one lane and none.
// CHECK-LABEL: .visible .entry int8_per_token_dynamic_32_heads(
// CHECK: ld.global.nc.v4.b32
// CHECK-COUNT-10: shfl.sync.bfly.b32 {{.*}}, 31, -1;
// CHECK: div.rn.f32
// CHECK: ld.global.nc.v4.b32
// CHECK: cvt.rzi.s16.f32
// CHECK-LABEL: .visible .entry int8_per_token_dynamic_32_heads_scalar(
kv.append @int8_per_token_dynamic_32_heads : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 32, head_dim = 128, dtype = i8,
    quant = #kv.quant<kind = int8, granularity = per_token, mode = dynamic>> from bf16

// CHECK-LABEL: .visible .entry fp8_per_token_head_dynamic_odd(
// CHECK-NOT: shfl.sync
// CHECK: div.rn.f32
// CHECK: cvt.rn.satfinite.e4m3x2.f32
// CHECK-NOT: shfl.sync
// CHECK-LABEL: .visible .entry fp8_per_token_head_dynamic_odd_scalar(
kv.append @fp8_per_token_head_dynamic_odd : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 2, head_dim = 72, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_token_head, mode = dynamic>> from bf16
