// RUN: kvgen %s --emit=ptx | FileCheck %s --check-prefix=SM90
// RUN: kvgen %s --emit=ptx --chip=sm_100a | FileCheck %s --check-prefix=SM100A

// An NVFP4 append on the GPU (vLLM's flash page, bf16 source, 8 heads of
// 128): one thread a group of 16 values of K and of V, two 16-byte loads of
// each; the group's scale byte and its eight bytes of values. sm_90 has no
// cvt to e2m1 and rounds with integer compares; sm_100a rounds with
// cvt.rn.satfinite.e2m1x2.f32, eight a group. The scale's e4m3 rounding is
// cvt.rn.satfinite.e4m3x2.f32 on both.

// SM90: .target sm_90
// SM90-LABEL: .visible .entry nvfp4(
// SM90-NOT: e2m1
// SM90: ld.global.nc.v4.b32
// SM90: cvt.rn.satfinite.e4m3x2.f32
// SM90: st.global.b8
// SM90-LABEL: .visible .entry nvfp4_scalar(
// SM90-NOT: e2m1

// SM100A: .target sm_100a
// SM100A-LABEL: .visible .entry nvfp4(
// SM100A-COUNT-16: cvt.rn.satfinite.e2m1x2.f32
// SM100A-NOT: cvt.rn.satfinite.e2m1x2.f32
// SM100A-LABEL: .visible .entry nvfp4_scalar(
// SM100A-COUNT-16: cvt.rn.satfinite.e2m1x2.f32
// SM100A-NOT: cvt.rn.satfinite.e2m1x2.f32

kv.append @nvfp4 : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = i8,
    quant = #kv.quant<kind = nvfp4, granularity = per_tensor, mode = static>,
    nvfp4 = #kv.nvfp4<k_scales = linear, v_scales = swizzled,
                      search = divisor_six>> from bf16
