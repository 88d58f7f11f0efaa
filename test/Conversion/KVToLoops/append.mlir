// RUN: kvgen-opt %s -kv-to-loops -split-input-file | FileCheck %s

// The append as a loop nest: the slot is loaded and checked before any K/V
// access, the vector variant moves 16 bytes per tensor, and each layout gets
// its own cache offset.

// CHECK-LABEL: func.func @nhd(
// CHECK-SAME: %[[KEY:[^:]*]]: memref<?xbf16> {kv.name = "key"}
// CHECK-SAME: %[[SLOTS:[^:]*]]: memref<?xi64> {kv.name = "slot_mapping"}
// CHECK-SAME: %[[KCACHE:[^:]*]]: memref<?xbf16> {kv.name = "key_cache"}
// The scalars are i32 (bundle version 4), every one of them; the slot
// mapping, a buffer, keeps its i64 elements.
// CHECK-NOT: i64 {kv.name
// CHECK-SAME: %{{[^:]*}}: i32 {kv.name = "num_tokens"}
// CHECK-NOT: i64 {kv.name
// CHECK-SAME: %[[NBLOCKS:[^:]*]]: i32 {kv.name = "num_blocks"}
// CHECK-NOT: i64 {kv.name
// CHECK-SAME: %[[KC_BLOCK:[^:]*]]: i32 {kv.name = "key_cache_stride_block"}
// CHECK-NOT: i64 {kv.name
// CHECK-SAME: %[[KC_POS:[^:]*]]: i32 {kv.name = "key_cache_stride_pos"}
// CHECK-NOT: i64 {kv.name
// CHECK-SAME: attributes {kv.launch = #kv.launch<threads_x = 128, tokens_per_block = 1, chunks_per_token = 128>}
// CHECK: scf.parallel (%[[T:.*]], %[[C:.*]]) = (%c0, %c0) to (%{{.*}}, %c128)
// The slot-independent source offsets (K's and V's) come first, marked for
// kv-pin-before-slot. The caches' head and dim terms are computed there too
// but not pinned: pinning them costs registers (and so occupancy).
// CHECK-NOT: vector.load
// CHECK: %[[KOFF:.*]] = arith.addi %{{.*}}, %{{.*}} {kv.before_slot} : i64
// CHECK: {kv.before_slot}
// CHECK-NOT: {kv.before_slot}
// CHECK-NOT: vector.load
// The slot's index is a zero extension of its own, marked to stay wide.
// CHECK: %[[TWIDE:.*]] = arith.extui %{{.*}} {kv.keep_wide} : i32 to i64
// CHECK-NEXT: %[[TIDX:.*]] = arith.index_cast %[[TWIDE]] : i64 to index
// CHECK-NEXT: %[[SLOT:.*]] = memref.load %[[SLOTS]][%[[TIDX]]] {alignment = 8 : i64}
// The check is one unsigned compare of the slot against the cache's slot
// count (num_blocks * block size): a negative slot is above it as unsigned.
// CHECK: %[[NBLOCKS64:.*]] = arith.extui %[[NBLOCKS]] : i32 to i64
// CHECK-NEXT: %[[CAPACITY:.*]] = arith.muli %[[NBLOCKS64]], %c16_i64 : i64
// CHECK-NEXT: %[[VALID:.*]] = arith.cmpi ult, %[[SLOT]], %[[CAPACITY]] : i64
// CHECK-NEXT: scf.if %[[VALID]]
// Block size 16: past the check, divide and modulo are a shift and a mask.
// CHECK-NOT: vector.load
// CHECK: %[[BLOCK:.*]] = arith.shrui %[[SLOT]], %c4_i64
// CHECK-NOT: vector.load
// CHECK: arith.andi %[[SLOT]], %c15_i64
// The block index is below num_blocks < 2^31: narrowed, and marked so that
// kv-pin-before-slot keeps it narrow.
// CHECK-NEXT: %[[BLOCK32:.*]] = arith.trunci %[[BLOCK]] {kv.keep_narrow} : i64 to i32
// CHECK-NEXT: %[[BLOCK64:.*]] = arith.extui %[[BLOCK32]] : i32 to i64
// CHECK: %[[KIDX:.*]] = arith.index_cast %[[KOFF]] : i64 to index
// CHECK: vector.load %[[KEY]][%[[KIDX]]] {alignment = 16 : i64} : memref<?xbf16>, vector<8xbf16>
// CHECK: vector.load
// The key cache offset: the position's term within the block in i32, the
// block's term the wide product of two zero-extended i32 values (one
// mul.wide.u32 on NVPTX).
// CHECK: arith.muli %{{.*}}, %[[KC_POS]] : i32
// CHECK-NEXT: %[[INBLOCK:.*]] = arith.addi %{{.*}}, %{{.*}} : i32
// CHECK-NEXT: %[[INBLOCK64:.*]] = arith.extui %[[INBLOCK]] : i32 to i64
// CHECK-NEXT: %[[BLOCKLO:.*]] = arith.trunci %[[BLOCK64]] : i64 to i32
// CHECK-NEXT: %[[WSTRIDE:.*]] = arith.extui %[[KC_BLOCK]] : i32 to i64
// CHECK-NEXT: %[[WBLOCK:.*]] = arith.extui %[[BLOCKLO]] : i32 to i64
// CHECK-NEXT: %[[BTERM:.*]] = arith.muli %[[WBLOCK]], %[[WSTRIDE]] : i64
// CHECK-NEXT: %[[KCOFF:.*]] = arith.addi %[[BTERM]], %[[INBLOCK64]] : i64
// CHECK-NEXT: %[[KCIDX:.*]] = arith.index_cast %[[KCOFF]] : i64 to index
// CHECK-NEXT: vector.store %{{.*}}, %[[KCACHE]][%[[KCIDX]]] {alignment = 16 : i64} : memref<?xbf16>, vector<8xbf16>
// CHECK: vector.store
// CHECK-LABEL: func.func @nhd_scalar(
// CHECK-NOT: vector.
// CHECK-COUNT-16: memref.load %{{.*}} : memref<?xbf16>
// CHECK-COUNT-16: memref.store
kv.append @nhd : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16

// -----

// A max_seq_len that is not a power of two divides by a constant, past the
// check: the slot's compare against num_blocks * 1000 needs no division.
// CHECK-LABEL: func.func @contiguous(
// CHECK: %[[SLOT:.*]] = memref.load
// CHECK-NOT: arith.divui
// CHECK: arith.cmpi ult, %[[SLOT]],
// CHECK-NEXT: scf.if
// CHECK-DAG: arith.divui %[[SLOT]], %c1000_i64
// CHECK-DAG: arith.remui %[[SLOT]], %c1000_i64
// CHECK: vector.load {{.*}} : memref<?xf16>, vector<8xf16>
kv.append @contiguous : !kv.cache<layout = contiguous, max_seq_len = 1000,
    num_kv_heads = 4, head_dim = 64, dtype = f16> from f16

// -----

// f32 in, bf16 cache: 16-byte loads of 4 floats, truncated, 8-byte stores.
// CHECK-LABEL: func.func @hnd_cast(
// CHECK-SAME: kv.launch = #kv.launch<threads_x = 16, tokens_per_block = 8, chunks_per_token = 16>
// Eight tokens per block: the token index differs between threads, so the
// slot's index is not marked to stay wide.
// CHECK-NOT: kv.keep_wide
// CHECK: memref.load %arg2
// CHECK: %[[K:.*]] = vector.load {{.*}} {alignment = 16 : i64} : memref<?xf32>, vector<4xf32>
// CHECK: arith.truncf %[[K]] : vector<4xf32> to vector<4xbf16>
// CHECK: vector.store {{.*}} {alignment = 8 : i64} : memref<?xbf16>, vector<4xbf16>
kv.append @hnd_cast : !kv.cache<layout = paged_hnd, block_size = 32,
    num_kv_heads = 1, head_dim = 64, dtype = bf16> from f32

// -----

// The legacy vectorized key cache splits d into (d / x, d % x), x = 8 for
// f16; its value cache [nb, H, D, bs] takes element stores s_dim apart.
// CHECK-LABEL: func.func @vllm(
// CHECK-SAME: %[[KC_DIM:[^:]*]]: i32 {kv.name = "key_cache_stride_dim"}
// CHECK-SAME: %[[VC_DIM:[^:]*]]: i32 {kv.name = "value_cache_stride_dim"}
// The head and dim terms are i32 (within one block).
// CHECK: arith.muli %{{.*}}, %c8_i32 : i32
// CHECK: arith.andi %[[D0:.*]], %c7_i32 : i32
// CHECK: %[[GROUP:.*]] = arith.shrui %[[D0]], %c3_i32 : i32
// CHECK-NEXT: arith.muli %[[GROUP]], %[[KC_DIM]] : i32
// CHECK: arith.muli %{{.*}}, %[[VC_DIM]] : i32
// CHECK: vector.store {{.*}} : memref<?xf16>, vector<8xf16>
// CHECK: arith.muli %c1_i32, %[[VC_DIM]] : i32
// CHECK-COUNT-8: memref.store %{{.*}} : memref<?xf16>
kv.append @vllm : !kv.cache<layout = vllm_vectorized, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = f16> from f16

// -----

// Dual-stacked caches share the plain offset; kvrt passes the one tensor as
// the key and the value cache.
// CHECK-LABEL: func.func @dual(
// 16 bytes of the wider dtype: 4 elements, 8-byte loads, 16-byte stores.
// CHECK: %[[K:.*]] = vector.load {{.*}} {alignment = 8 : i64} : memref<?xbf16>, vector<4xbf16>
// CHECK: arith.extf %[[K]] : vector<4xbf16> to vector<4xf32>
// CHECK: vector.store {{.*}} : memref<?xf32>, vector<4xf32>
kv.append @dual : !kv.cache<layout = dual_stacked, block_size = 64,
    num_kv_heads = 2, head_dim = 256, dtype = f32> from bf16

// -----

// head_dim 100 f16: 16 bytes would straddle heads, so 4 elements (8 bytes).
// CHECK-LABEL: func.func @narrow(
// CHECK: vector.load {{.*}} {alignment = 8 : i64} : memref<?xf16>, vector<4xf16>
kv.append @narrow : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 2, head_dim = 100, dtype = f16> from f16
