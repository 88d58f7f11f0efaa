// RUN: kvgen-opt %s -kv-to-loops -canonicalize -cse | FileCheck %s

// An MLA append's prologue (RoPE on k_pe and q_pe, PrologueMLA.cpp): one
// chunk-loop iteration per unit, on one lane. Latent 32 + 16 bf16, chunks
// of 8: 4 chunks of kv_c, then NeoX's one k_pe unit (the pair of chunks 0
// and 1, rope_dim / 2 = 8 elements apart), then one unit per q_pe head (2):
// 7 iterations a token. Everything waits for the slot check, then for the
// position check (padding writes nothing, not even q_out, as vLLM's
// concat_and_cache_mla_rope_fused). The k_pe unit reads both chunks before
// it stores, stores the rotated, rounded chunks to k_pe_out and the same
// values into the entry past kv_lora_rank; a Q unit stores to q_out only.

// CHECK-LABEL: func.func @neox(
// CHECK-SAME: kv.name = "query"
// CHECK-SAME: kv.name = "q_out"
// CHECK-SAME: kv.name = "k_pe_out"
// CHECK-SAME: kv.name = "rope_positions"
// CHECK-SAME: kv.name = "cos_sin_cache"
// CHECK-SAME: kv.name = "max_position"
// CHECK-SAME: kv.name = "k_pe_out_stride_dim"
// CHECK-SAME: kv.launch = #kv.launch<threads_x = 7, tokens_per_block = 32, chunks_per_token = 7>
// CHECK: scf.parallel (%{{.*}}, %[[C:.*]]) = (%c0, %c0) to (%{{.*}}, %c7)
// CHECK: %[[SLOT:.*]] = memref.load %arg2
// CHECK: %[[U:.*]] = arith.index_cast %[[C]] : index to i64
// CHECK: %[[VALID:.*]] = arith.cmpi ult, %[[SLOT]]
// CHECK: scf.if %[[VALID]] {
// CHECK: %[[POS:.*]] = memref.load %arg7
// CHECK: %[[INCACHE:.*]] = arith.cmpi ult, %[[POS]]
// CHECK: scf.if %[[INCACHE]] {
// CHECK: %[[ISLATENT:.*]] = arith.cmpi ult, %[[U]], %c4_i64
// CHECK: scf.if %[[ISLATENT]] {
// CHECK: %[[LAT:.*]] = vector.load %arg0
// CHECK: vector.store %[[LAT]], %arg3
// CHECK: } else {
// CHECK: %[[RU:.*]] = arith.subi %[[U]], %c4_i64
// CHECK: %[[ISK:.*]] = arith.cmpi ult, %[[RU]], %c1_i64
// CHECK: scf.if %[[ISK]] {
// CHECK: vector.load %arg1
// CHECK: vector.load %arg1
// CHECK-NOT: vector.store
// CHECK: memref.load %arg8
// CHECK: %[[K1:.*]] = vector.from_elements
// CHECK: vector.store %[[K1]], %arg6
// CHECK: %[[K2:.*]] = vector.from_elements
// CHECK: vector.store %[[K2]], %arg6
// CHECK: vector.store %[[K1]], %arg3
// CHECK: vector.store %[[K2]], %arg3
// CHECK: } else {
// CHECK: vector.load %arg4
// CHECK: vector.load %arg4
// CHECK-NOT: vector.store
// CHECK: vector.store %{{.*}}, %arg5
// CHECK: vector.store %{{.*}}, %arg5
// CHECK-NOT: vector.store
// CHECK: return
kv.mla_append @neox : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 48, dtype = bf16,
    latent = #kv.latent<kv_lora_rank = 32, rope_dim = 16>> from bf16
    {prologue = #kv.prologue<q_heads = 2, rope = neox, rotary_dim = 16>}

// GPT-J into an fp8 entry, the fused form: the position is the slot
// rule's (no rope_positions); kv_c and the rounded k_pe are quantized with
// the static scale (IEEE division); GPT-J's unit is one chunk, so k_pe is 2
// units and each q_pe head 2: 4 + 2 + 2 x 2 = 10 iterations.

// CHECK-LABEL: func.func @gptj_fp8(
// CHECK-NOT: rope_positions
// CHECK-SAME: kv.name = "k_pe_out"
// CHECK-SAME: kv.launch = #kv.launch<threads_x = 10, tokens_per_block = 16, chunks_per_token = 10>
// CHECK: scf.if
// CHECK: %[[ISLATENT:.*]] = arith.cmpi ult, %{{.*}}, %c4_i64
// CHECK: scf.if %[[ISLATENT]] {
// CHECK: vector.load %arg0
// CHECK: %[[S:.*]] = memref.load %arg6
// CHECK: arith.divf %{{.*}}, %[[S]] : f32
// CHECK: vector.store %{{.*}}, %arg5{{.*}} vector<8xf8E4M3FN>
// CHECK: } else {
// CHECK: arith.cmpi ult, %{{.*}}, %c2_i64
// CHECK: vector.load %arg1
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK: vector.store %{{.*}}, %arg9
// CHECK: arith.extf %{{.*}} : bf16 to f32
// CHECK: arith.divf
// CHECK: vector.store %{{.*}}, %arg5{{.*}} vector<8xf8E4M3FN>
// CHECK: } else {
// CHECK: vector.load %arg7
// CHECK: vector.store %{{.*}}, %arg8
kv.mla_fused_append @gptj_fp8 : !kv.cache<layout = paged_nhd,
    block_size = 16, num_kv_heads = 1, head_dim = 48, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor, mode = static>,
    latent = #kv.latent<kv_lora_rank = 32, rope_dim = 16>> from bf16
    {prologue = #kv.prologue<q_heads = 2, rope = gptj, rotary_dim = 16>}
