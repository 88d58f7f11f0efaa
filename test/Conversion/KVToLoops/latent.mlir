// RUN: kvgen-opt %s -kv-to-loops -split-input-file | FileCheck %s

// An MLA latent append reads each chunk of the entry from kv_c below
// kv_lora_rank and from k_pe above it (at d - kv_lora_rank), and stores it
// into the one-headed cache; the vector width (8 bf16) divides both parts.

// CHECK-LABEL: func.func @mla(
// CHECK-SAME: {kv.name = "kv_c"}
// CHECK-SAME: {kv.name = "k_pe"}
// CHECK-SAME: {kv.name = "slot_mapping"}
// CHECK-SAME: {kv.name = "key_cache"}
// CHECK-NOT: value
// CHECK-SAME: {kv.name = "key_cache_stride_dim"})
// CHECK-SAME: chunks_per_token = 72
// The chunk's offsets in both parts come before the slot is loaded.
// CHECK: %[[KVC:[0-9]+]] = arith.addi {{.*}} {kv.before_slot} : i64
// CHECK: %[[D:[0-9a-z_]+]] = arith.constant 512 : i64
// CHECK: arith.subi %{{.*}}, %[[D]] : i64
// CHECK: %[[KPE:[0-9]+]] = arith.addi {{.*}} {kv.before_slot} : i64
// Eight tokens per block: the slot's index is not marked to stay wide.
// CHECK-NOT: kv.keep_wide
// CHECK: memref.load %arg2
// CHECK: scf.if
// CHECK: %[[RANK:.*]] = arith.constant 512 : i64
// CHECK: %[[IN:.*]] = arith.cmpi slt, %{{.*}}, %[[RANK]] : i64
// CHECK: scf.if %[[IN]] -> (vector<8xbf16>)
// CHECK: %[[AT_KVC:.*]] = arith.index_cast %[[KVC]]
// CHECK: vector.load %arg0[%[[AT_KVC]]]
// CHECK: } else {
// CHECK: %[[AT_KPE:.*]] = arith.index_cast %[[KPE]]
// CHECK: vector.load %arg1[%[[AT_KPE]]]
// CHECK: vector.store %{{.*}}, %arg3
kv.mla_append @mla : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 576, dtype = bf16,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16

// -----

// (128, 32) from f32 into bf16: 4 elements per chunk (16 bytes of f32), a
// cast after the load.
// CHECK-LABEL: func.func @mla_small(
// CHECK-SAME: chunks_per_token = 40
// CHECK: arith.constant 128 : i64
// CHECK: scf.if %{{.*}} -> (vector<4xf32>)
// CHECK: arith.truncf %{{.*}} : vector<4xf32> to vector<4xbf16>
kv.mla_append @mla_small : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 1, head_dim = 160, dtype = bf16,
    latent = #kv.latent<kv_lora_rank = 128, rope_dim = 32>> from f32

// -----

// A K-only append loads and stores K alone.
// CHECK-LABEL: func.func @konly(
// CHECK-SAME: {kv.name = "key"}
// CHECK-SAME: {kv.name = "slot_mapping"}
// CHECK-SAME: {kv.name = "key_cache"}
// CHECK-NOT: value
// CHECK-SAME: attributes
// CHECK-COUNT-1: vector.load
// CHECK-NOT: vector.load
// CHECK-COUNT-1: vector.store
// CHECK-NOT: vector.store
// CHECK-LABEL: func.func @konly_scalar(
// CHECK-NOT: vector.
// Its wide variant: four chunks of K a thread (an unquantized cache's token
// of 128 chunks), all loaded before any is stored.
// CHECK-LABEL: func.func @konly_wide(
// CHECK-SAME: #kv.launch<threads_x = 32, tokens_per_block = 4,
// CHECK-COUNT-4: vector.load
// CHECK-NOT: vector.load
// CHECK-COUNT-4: vector.store
// CHECK-NOT: vector.
kv.append @konly : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = bf16, k_only = true> from bf16

// -----

// The fused MLA append computes the slot from the block table (no
// slot_mapping parameter) and reads the entry from kv_c and k_pe as
// mla_append does.
// CHECK-LABEL: func.func @mla_fused(
// CHECK-SAME: {kv.name = "kv_c"}
// CHECK-SAME: {kv.name = "k_pe"}
// CHECK-SAME: {kv.name = "block_table"}
// CHECK-NOT: slot_mapping
// CHECK-SAME: {kv.name = "key_cache"}
// CHECK-SAME: chunks_per_token = 72
// CHECK: memref.load %arg3
// CHECK: memref.load %arg2
// CHECK: scf.if %{{.*}} -> (vector<8xbf16>)
// CHECK: vector.load %arg0
// CHECK: } else {
// CHECK: vector.load %arg1
// CHECK: vector.store %{{.*}}, %arg5
kv.mla_fused_append @mla_fused : !kv.cache<layout = paged_nhd,
    block_size = 64, num_kv_heads = 1, head_dim = 576, dtype = bf16,
    latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16
