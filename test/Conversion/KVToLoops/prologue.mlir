// RUN: kvgen-opt %s -kv-to-loops -canonicalize -cse | FileCheck %s
// RUN: kvgen-opt %s -kv-to-loops -kv-loops-to-gpu -canonicalize -cse | FileCheck %s --check-prefix=GPU

// The fused prologue's loop nest: one chunk-loop iteration per head (2 K
// heads, then 4 Q heads). NeoX with rotary_dim 16 of 32: chunk 0 pairs with
// chunk 1 (rotary_dim / 2 = 8 elements away), one unit of one lane; chunks 2
// and 3 (past rotary_dim) are a unit each: 3 units over 2 lanes, the second
// round guarded. The token's position is read and bounded by max_position
// before anything of the token; K waits for the slot check too, Q does not.
// RMSNorm's sum of squares is a lane reduction (an scf.reduce of addf) over
// each unit's chunks, then IEEE division and sqrt. A pair's lane reads both
// chunks, rotates them against each other and stores both: no lane reads a
// chunk another stores, so q_out may be query itself.

// CHECK-LABEL: func.func @p(
// CHECK-SAME: kv.name = "query"
// CHECK-SAME: kv.name = "q_out"
// CHECK-SAME: kv.name = "rope_positions"
// CHECK-SAME: kv.name = "cos_sin_cache"
// CHECK-SAME: kv.name = "k_norm_weight"
// CHECK-SAME: kv.name = "q_norm_weight"
// CHECK-SAME: kv.name = "epsilon"
// CHECK-SAME: kv.name = "max_position"
// CHECK-SAME: kv.name = "q_out_stride_dim"
// CHECK-SAME: kv.launch = #kv.launch<threads_x = 12, tokens_per_block = 16, chunks_per_token = 24>
// CHECK: scf.parallel ({{.*}}) = (%c0, %c0) to (%{{.*}}, %c6)
// CHECK: %[[SLOT:.*]] = memref.load %arg2
// CHECK: %[[POS:.*]] = memref.load %arg7
// CHECK: %[[INCACHE:.*]] = arith.cmpi ult, %[[POS]]
// CHECK: %[[ISK:.*]] = arith.cmpi ult, %{{.*}}, %c2_i64
// CHECK: scf.if %[[ISK]] {
// CHECK: %[[VALID:.*]] = arith.cmpi ult, %[[SLOT]]
// CHECK: scf.if %[[VALID]] {
// CHECK: scf.if %[[INCACHE]] {
// CHECK: %[[SUM:.*]] = scf.parallel ({{.*}}) = (%c0) to (%c2) step (%c1) init
// CHECK: %[[UNIT:.*]] = arith.cmpi ult, %{{.*}}, %c3_i64
// CHECK: scf.if %[[UNIT]] -> (f32) {
// CHECK: %[[PAIR:.*]] = arith.cmpi ult, %{{.*}}, %c1_i64
// CHECK: scf.if %[[PAIR]] -> (f32) {
// CHECK: vector.load %arg0
// CHECK: vector.load %arg0
// CHECK: } else {
// CHECK: vector.load %arg0
// CHECK: scf.reduce
// CHECK: arith.addf
// CHECK: arith.divf %[[SUM]]
// CHECK: memref.load %arg11
// CHECK: llvm.call_intrinsic "llvm.sqrt.f32"
// CHECK: scf.parallel ({{.*}}) = (%c0) to (%c2) step (%c1) {
// CHECK: scf.if %{{.*}} {
// CHECK: scf.if %{{.*}} {
// CHECK: vector.load %arg0
// CHECK: vector.load %arg9
// CHECK: vector.load %arg0
// CHECK: vector.load %arg9
// CHECK: memref.load %arg8
// CHECK: arith.subf
// CHECK: vector.load %arg1
// CHECK: vector.load %arg1
// CHECK: vector.store {{.*}}, %arg3
// CHECK: vector.store {{.*}}, %arg4
// CHECK: vector.store {{.*}}, %arg3
// CHECK: vector.store {{.*}}, %arg4
// CHECK: } else {
// CHECK-NOT: memref.load %arg8
// CHECK: vector.load %arg0
// CHECK: vector.load %arg1
// CHECK: vector.store {{.*}}, %arg3
// CHECK: vector.store {{.*}}, %arg4
// CHECK: } else {
// CHECK: scf.if %[[INCACHE]] {
// CHECK: scf.parallel ({{.*}}) = (%c0) to (%c2) step (%c1) init
// CHECK: vector.load %arg5
// CHECK: memref.load %arg11
// CHECK: scf.parallel ({{.*}}) = (%c0) to (%c2) step (%c1) {
// CHECK: vector.load %arg5
// CHECK: vector.load %arg10
// CHECK: vector.load %arg5
// CHECK: vector.load %arg10
// CHECK: memref.load %arg8
// CHECK: vector.store {{.*}}, %arg6
// CHECK: vector.store {{.*}}, %arg6
// CHECK: } else {
// CHECK-NOT: memref.load %arg8
// CHECK: vector.load %arg5
// CHECK: vector.store {{.*}}, %arg6

// On the GPU each head's sum is gathered from the group's 2 lanes (member
// mask 0b11 shifted to the group's first lane) in lane order (shfl idx from
// lanes first + 0, 1), not a butterfly.
// GPU-LABEL: gpu.func @p(
// GPU-NOT: bfly
// GPU: arith.shli %c3_i32
// GPU-COUNT-2: nvvm.shfl.sync idx
// GPU-NOT: nvvm.shfl.sync
// GPU: arith.divf
// GPU-NOT: bfly
kv.append @p : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 2, head_dim = 32, dtype = bf16> from bf16
    prologue #kv.prologue<q_heads = 4, norm = rms, rope = neox,
                          rotary_dim = 16>

// fused_append: RoPE at the slot rule's position, which the slot's binary
// search over query_start_loc yields beside the slot; no rope_positions.
// CHECK-LABEL: func.func @pf(
// CHECK-NOT: rope_positions
// CHECK: scf.while
// CHECK: %[[SP:.*]]:2 = scf.if
// CHECK: arith.cmpi ult, %[[SP]]#1
// CHECK: arith.cmpi ult, %[[SP]]#0
kv.fused_append @pf : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 2, head_dim = 32, dtype = bf16> from bf16
    prologue #kv.prologue<q_heads = 4, rope = gptj, rotary_dim = 32>

// paged_kv_append: the slot from FlashInfer's page table (batch_indices,
// positions, kv_indptr, kv_indices), RoPE at rope_positions[t] (FlashInfer's
// pos_ids, apart from `positions`), bounded by max_position before anything
// of the token is read.
// CHECK-LABEL: func.func @pp(
// CHECK-SAME: kv.name = "batch_indices"
// CHECK-SAME: kv.name = "positions"
// CHECK-SAME: kv.name = "kv_indices"
// CHECK-SAME: kv.name = "kv_indptr"
// CHECK-SAME: kv.name = "query"
// CHECK-SAME: kv.name = "q_out"
// CHECK-SAME: kv.name = "rope_positions"
// CHECK-SAME: kv.name = "cos_sin_cache"
// CHECK-SAME: kv.name = "batch_size"
// CHECK-SAME: kv.name = "num_indices"
// CHECK-SAME: kv.name = "max_position"
// CHECK: memref.load %arg2
// CHECK: memref.load %arg3
// CHECK: memref.load %arg5
// CHECK: memref.load %arg4
// CHECK: %[[POS:.*]] = memref.load %arg10
// CHECK: arith.cmpi ult, %[[POS]]
kv.paged_kv_append @pp : !kv.cache<layout = paged_hnd, block_size = 16,
    num_kv_heads = 2, head_dim = 32, dtype = bf16> from bf16
    prologue #kv.prologue<q_heads = 4, rope = neox, rotary_dim = 32>

// q_quant = fp8_e4m3: q_out is fp8 e4m3 and q_scale follows epsilon's place
// among the buffers; cos_sin = f32: the cos/sin cache is f32 under a bf16
// source. Q is divided by q_scale[0] and truncated to fp8.
// CHECK-LABEL: func.func @pq(
// CHECK-SAME: memref<?xf8E4M3FN> {kv.name = "q_out"
// CHECK-SAME: memref<?xf32> {kv.name = "cos_sin_cache"
// CHECK-SAME: memref<?xf32> {kv.name = "q_scale"
// CHECK: %[[QS:.*]] = memref.load %arg14[%c0]
// CHECK: arith.divf %{{.*}}, %[[QS]] : f32
// CHECK: arith.truncf %{{.*}} : f32 to f8E4M3FN
kv.paged_kv_append @pq : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 2, head_dim = 32, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor,
                      mode = static>> from bf16
    prologue #kv.prologue<q_heads = 4, rope = neox, rotary_dim = 32,
                          q_quant = fp8_e4m3, cos_sin = f32>
