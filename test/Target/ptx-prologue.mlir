// RUN: kvgen %s --emit=ptx | FileCheck %s
// RUN: kvgen %s --target=host --emit=llvm | FileCheck %s --check-prefix=HOST

// The fused prologue's kernels for the GPU and the host: NeoX and GPT-J,
// full and partial rotation, norm with and without Q, bf16 and an fp8 cache,
// and the edges of a head's split (test/Target/ptxas-prologue.test assembles
// them for sm_90). RMSNorm is IEEE sqrt and division on both targets
// (rcp.rn.f32 is 1 / x correctly rounded), never an approximate rsqrt, and
// its sum of squares is gathered in lane order (shfl.sync.idx), not a
// butterfly.

// CHECK-LABEL: .entry qwen3(
// CHECK-NOT: rsqrt
// CHECK-NOT: shfl.sync.bfly
// CHECK: shfl.sync.idx
// CHECK: sqrt.rn.f32
// CHECK: rcp.rn.f32
// HOST-LABEL: llvm.func @qwen3(
// HOST: llvm.call_intrinsic "llvm.sqrt.f32"
// HOST: llvm.fdiv
kv.append @qwen3 : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16
    prologue #kv.prologue<q_heads = 32, norm = rms, rope = neox,
                          rotary_dim = 128>

// CHECK-LABEL: .entry gptj_partial_fp8(
// CHECK-NOT: sqrt
// CHECK: cvt.rn.satfinite.e4m3x2.f32
kv.append @gptj_partial_fp8 : !kv.cache<layout = paged_hnd, block_size = 16,
    num_kv_heads = 2, head_dim = 64, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor,
                      mode = static>> from bf16
    prologue #kv.prologue<q_heads = 4, rope = gptj, rotary_dim = 32>

kv.append @neox_partial_norm : !kv.cache<layout = contiguous,
    max_seq_len = 4096, num_kv_heads = 4, head_dim = 128, dtype = f16> from f16
    prologue #kv.prologue<norm = rms, rope = neox, rotary_dim = 64>

kv.append @norm_only_fp8 : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_head,
                      mode = static>> from bf16
    prologue #kv.prologue<q_heads = 64, norm = rms>

// A NeoX half of 3 elements: chunks of one element, 32 lanes.
kv.append @neox_odd_half : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 2, head_dim = 64, dtype = bf16> from bf16
    prologue #kv.prologue<q_heads = 2, norm = rms, rope = neox, rotary_dim = 6>

// 4 K heads and 32 Q heads of 16 lanes: 576 threads a token, past the 256 of
// a block's x extent, so each thread loops over the chunk loop.
kv.append @many_heads : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 4, head_dim = 128, dtype = bf16> from bf16
    prologue #kv.prologue<q_heads = 32, norm = rms, rope = neox,
                          rotary_dim = 128>
