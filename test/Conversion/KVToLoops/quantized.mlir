// RUN: kvgen-opt %s -kv-to-loops -canonicalize -cse | FileCheck %s

// Quantized appends: the source is extended to f32 before anything else,
// divided by the scale (IEEE division, or times its reciprocal), then
// rounded to the storage type: fp8's rounding saturates by itself, int8 is
// clamped first with NaN-propagating min/max.

// A 16-bit float source and a static scale: the division is the reciprocal
// and two fmas with q0's sign ORed in (the bits of IEEE division) when the
// scale is in [2^-60, 2^60] in magnitude and no element of the bf16 source
// is past 2^60 (one unsigned max over the 16-bit magnitudes; an infinity or
// a NaN is past it too), IEEE division otherwise; K's bytes are stored
// before V's division.
// CHECK-LABEL: func.func @fp8_tensor(
// CHECK-SAME: memref<?xf8E4M3FN> {kv.name = "key_cache"}, %{{.*}}: memref<?xf8E4M3FN> {kv.name = "value_cache"}, %[[KS:.*]]: memref<?xf32> {kv.name = "key_scale"}, %{{.*}}: memref<?xf32> {kv.name = "value_scale"}
// CHECK-DAG: %[[SIGNBIT:.*]] = arith.constant dense<-2147483648> : vector<8xi32>
// CHECK-DAG: %[[MAGBITS:.*]] = arith.constant dense<32767> : vector<8xi16>
// CHECK: scf.if
// CHECK: %[[S:.*]] = memref.load %[[KS]][%c0]
// CHECK: %[[K:.*]] = vector.load {{.*}} vector<8xbf16>
// CHECK: %[[KF:.*]] = arith.extf %[[K]] : vector<8xbf16> to vector<8xf32>
// CHECK: %[[SB:.*]] = arith.bitcast %[[S]] : f32 to i32
// CHECK: %[[SM:.*]] = arith.andi %[[SB]], %c2147483647_i32 : i32
// CHECK: %[[SOFF:.*]] = arith.subi %[[SM]], %c562036736_i32 : i32
// CHECK: %[[SOK:.*]] = arith.cmpi ule, %[[SOFF]], %c1006632960_i32 : i32
// CHECK: %[[KB:.*]] = arith.bitcast %[[K]] : vector<8xbf16> to vector<8xi16>
// CHECK: %[[KM:.*]] = arith.andi %[[KB]], %[[MAGBITS]] : vector<8xi16>
// CHECK: %[[MAX:.*]] = vector.reduction <maxui>, %[[KM]] : vector<8xi16> into i16
// CHECK: %[[KOK:.*]] = arith.cmpi ule, %[[MAX]], %c23936_i16 : i16
// CHECK: %[[OK:.*]] = arith.andi %[[KOK]], %[[SOK]] : i1
// CHECK: %[[Q:.*]] = scf.if %[[OK]] -> (vector<8xf32>) {
// CHECK: %[[Y:.*]] = arith.divf %{{.*}}, %[[S]] : f32
// CHECK: %[[YB:.*]] = vector.broadcast %[[Y]]
// CHECK: %[[Q0:.*]] = arith.mulf %[[KF]], %[[YB]] : vector<8xf32>
// CHECK: %[[NQ0:.*]] = arith.negf %[[Q0]]
// CHECK: %[[R:.*]] = llvm.intr.fma(%[[NQ0]], %{{.*}}, %[[KF]])
// CHECK: %[[Q1:.*]] = llvm.intr.fma(%[[R]], %[[YB]], %[[Q0]])
// CHECK: %[[Q0B:.*]] = arith.bitcast %[[Q0]] : vector<8xf32> to vector<8xi32>
// CHECK: %[[SIGN:.*]] = arith.andi %[[Q0B]], %[[SIGNBIT]] : vector<8xi32>
// CHECK: %[[Q1B:.*]] = arith.bitcast %[[Q1]] : vector<8xf32> to vector<8xi32>
// CHECK: %[[FIXED:.*]] = arith.ori %[[Q1B]], %[[SIGN]] : vector<8xi32>
// CHECK: %[[FAST:.*]] = arith.bitcast %[[FIXED]] : vector<8xi32> to vector<8xf32>
// CHECK: scf.yield %[[FAST]]
// CHECK: } else {
// CHECK: %[[SLOW:.*]] = arith.divf %[[KF]], %{{.*}} : vector<8xf32>
// CHECK: scf.yield %[[SLOW]]
// CHECK-NOT: arith.maximumf
// CHECK: arith.truncf %[[Q]] : vector<8xf32> to vector<8xf8E4M3FN>
// CHECK: vector.store
// CHECK: scf.if
// CHECK: vector.store
kv.append @fp8_tensor : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor, mode = static>> from bf16

// An f32 source keeps IEEE division per element (the fast identity is
// proven for 16-bit sources only), and no clamp before fp8's rounding.
// CHECK-LABEL: func.func @fp8_from_f32(
// CHECK: %[[K:.*]] = vector.load {{.*}} vector<4xf32>
// CHECK-NOT: llvm.intr.fma
// CHECK: %[[Q:.*]] = arith.divf %[[K]], %{{.*}} : vector<4xf32>
// CHECK-NEXT: arith.truncf %[[Q]] : vector<4xf32> to vector<4xf8E4M3FN>
kv.append @fp8_from_f32 : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor, mode = static>> from f32

// Per block: the scale of the slot's block and the chunk's head (known
// before the slot, like the rest of the chunk's slot-independent math).
// CHECK-LABEL: func.func @e5m2_block(
// The head is i32 math (within a token), used zero-extended; the block is
// narrowed past the slot check (kv.keep_narrow), used zero-extended too.
// CHECK: %[[HEAD:.*]] = arith.shrui %{{.*}}, %c4_i32 : i32
// CHECK-NEXT: %[[HEAD64:.*]] = arith.extui %[[HEAD]] : i32 to i64
// CHECK: scf.if
// CHECK-NEXT: %[[BLK:.*]] = arith.shrui %{{.*}}, %c5_i64
// CHECK: %[[BLK32:.*]] = arith.trunci %[[BLK]] {kv.keep_narrow} : i64 to i32
// CHECK-NEXT: %[[BLK64:.*]] = arith.extui %[[BLK32]] : i32 to i64
// CHECK: %[[ROW:.*]] = arith.muli %[[BLK64]], %c4_i64
// CHECK: %[[IDX:.*]] = arith.addi %[[ROW]], %[[HEAD64]]
// CHECK: %[[IX:.*]] = arith.index_cast %[[IDX]]
// CHECK: memref.load %{{.*}}[%[[IX]]] : memref<?xf32>
// CHECK: arith.truncf {{.*}} to vector<{{[0-9]+}}xf8E5M2>
kv.append @e5m2_block : !kv.cache<layout = paged_hnd, block_size = 32,
    num_kv_heads = 4, head_dim = 64, dtype = f8E5M2,
    quant = #kv.quant<kind = fp8_e5m2, granularity = per_block, mode = static>> from f32

// int8: NaN -> 0, round to nearest even, [-127, 127]; reciprocal multiplies.
// CHECK-LABEL: func.func @int8_head_recip(
// CHECK-DAG: %[[LO:.*]] = arith.constant dense<-1.270000e+02> : vector<8xf32>
// CHECK-DAG: %[[MAGIC:.*]] = arith.constant dense<0x4B400000> : vector<8xf32>
// CHECK: %[[R:.*]] = arith.divf %cst{{.*}}, %{{.*}} : f32
// CHECK: arith.mulf %{{.*}}, %{{.*}} : vector<8xf32>
// CHECK: arith.maximumf %{{.*}}, %[[LO]]
// CHECK: arith.minimumf
// CHECK: arith.cmpf uno
// CHECK: arith.select
// CHECK: arith.addf %{{.*}}, %[[MAGIC]]
// CHECK: arith.subf
// CHECK: arith.fptosi {{.*}} : vector<8xf32> to vector<8xi8>
kv.append @int8_head_recip : !kv.cache<layout = contiguous, max_seq_len = 100,
    num_kv_heads = 8, head_dim = 128, dtype = i8,
    quant = #kv.quant<kind = int8, granularity = per_head, mode = static,
                      reciprocal = true>> from f16

// An f16 source: every finite f16 is inside [2^-24, 65504] or zero, so the
// source's bound is the largest finite f16 (0x7BFF): only an infinity or a
// NaN takes IEEE division.
// CHECK-LABEL: func.func @int8_from_f16(
// CHECK: %[[KB:.*]] = arith.bitcast %{{.*}} : vector<8xf16> to vector<8xi16>
// CHECK: %[[KM:.*]] = arith.andi %[[KB]], %{{.*}} : vector<8xi16>
// CHECK: %[[MAX:.*]] = vector.reduction <maxui>, %[[KM]] : vector<8xi16> into i16
// CHECK: arith.cmpi ule, %[[MAX]], %c31743_i16 : i16
// CHECK: llvm.intr.fma
// CHECK: arith.fptosi {{.*}} : vector<8xf32> to vector<8xi8>
kv.append @int8_from_f16 : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = i8,
    quant = #kv.quant<kind = int8, granularity = per_tensor, mode = static>> from f16

// Dynamic per token head: one iteration per (token, head), spread over 16
// lanes (one 8-element chunk each, 128 threads per token; chunks_per_token
// counts the 128 chunks, as for any append). A first lane loop
// finds amax over the finite values and reduces it across the lanes with
// scf.reduce; the scale amax / 127 (1 if amax is 0) goes to the scale cache
// at slot * H + head; a second lane loop quantizes and stores.
// CHECK-LABEL: func.func @int8_dyn(
// CHECK-SAME: %[[KSC:[a-z0-9]+]]: memref<?xf32> {kv.name = "key_scale_cache"}
// CHECK-SAME: kv.launch = #kv.launch<threads_x = 128, tokens_per_block = 1, chunks_per_token = 128>
// CHECK-DAG: %[[INF:.*]] = arith.constant dense<0x7F800000> : vector<8xf32>
// CHECK-DAG: %[[LANES:.*]] = arith.constant 16 : index
// CHECK: scf.parallel ({{.*}}) = ({{.*}}) to ({{.*}}, %c8)
// CHECK: scf.if
// CHECK: %[[AMAX:.*]]:2 = scf.parallel ({{.*}}) = (%c0) to (%[[LANES]]) step (%c1) init
// CHECK: arith.cmpf olt, %{{.*}}, %[[INF]]
// CHECK: vector.reduction <maximumf>
// CHECK: scf.reduce(
// CHECK: arith.maximumf
// CHECK: scf.reduce.return
// CHECK: arith.maximumf
// CHECK: scf.reduce.return
// CHECK: %[[KSCALE:.*]] = arith.divf %[[AMAX]]#0, %cst
// CHECK: %[[POS:.*]] = arith.cmpf ogt, %[[AMAX]]#0
// CHECK: %[[SEL:.*]] = arith.select %[[POS]], %[[KSCALE]]
// CHECK: memref.store %[[SEL]], %[[KSC]]
// CHECK: scf.parallel ({{.*}}) = (%c0) to (%[[LANES]]) step (%c1) {
// CHECK: arith.divf
// CHECK: arith.fptosi
kv.append @int8_dyn : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = i8,
    quant = #kv.quant<kind = int8, granularity = per_token_head, mode = dynamic>> from bf16

// Dynamic per token: one iteration per token; its 16 chunks of 8 bf16
// elements (2 heads x 64) take 16 lanes of one chunk each.
// CHECK-LABEL: func.func @fp8_dyn_token(
// CHECK-SAME: kv.launch = #kv.launch<threads_x = 16, tokens_per_block = 8, chunks_per_token = 16>
kv.fused_append @fp8_dyn_token : !kv.cache<layout = vllm_vectorized,
    block_size = 16, num_kv_heads = 2, head_dim = 64, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_token, mode = dynamic>> from bf16
