// RUN: kvgen-opt %s -kv-to-loops | FileCheck %s --check-prefix=PLAN
// RUN: kvgen-opt %s '-kv-to-loops=chunks-per-thread=2 tokens-per-block=4 min-blocks-per-sm=8 wide-min-tokens=0' | FileCheck %s --check-prefix=SET
// RUN: kvgen-opt %s '-kv-to-loops=chip=sm_120' | FileCheck %s --check-prefix=PLAN
// RUN: not kvgen-opt %s '-kv-to-loops=chip=sm_42' 2>&1 | FileCheck %s --check-prefix=CHIP
// RUN: not kvgen-opt %s '-kv-to-loops=wide-max-tokens=-2' 2>&1 | FileCheck %s --check-prefix=NEG
// RUN: not kvgen-opt %s '-kv-to-loops=chunks-per-thread=-1' 2>&1 | FileCheck %s --check-prefix=NEGC

// kv-to-loops' options: the plan's own choices by default (for every chip
// whose row of the chip table holds sm_90's thresholds, as sm_120's does),
// or one choice each overridden. Eight heads of 128 bf16: 128 chunks a
// token; the plan gives a token 128 threads, a wide kernel of four chunks a
// thread from 2048 tokens, and no occupancy bound.

// PLAN: func.func @a(
// PLAN-SAME: kv.launch = #kv.launch<threads_x = 128, tokens_per_block = 1, chunks_per_token = 128>
// PLAN-NOT: kv.min_blocks_per_sm
// PLAN: func.func @a_scalar(
// PLAN: func.func @a_wide(
// PLAN-SAME: kv.launch = #kv.launch<threads_x = 32, tokens_per_block = 4, chunks_per_token = 128>

// Two chunks a thread (64 threads), four tokens a block, held to eight
// blocks an SM, and no wide kernel.
// SET: func.func @a(
// SET-SAME: kv.launch = #kv.launch<threads_x = 64, tokens_per_block = 4, chunks_per_token = 128>, kv.min_blocks_per_sm = 8 : i64
// SET: func.func @a_scalar(
// SET-NOT: func.func @a_wide

// CHIP: error: kv-to-loops: chip=sm_42: no row in the chip table (ChipTable.cpp)
// NEG: error: kv-to-loops: wide-max-tokens=-2: expected -1 (the plan's choice), 0 or more
// NEGC: error: kv-to-loops: chunks-per-thread=-1: expected 0 (the plan's choice) or more

kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8,
    head_dim = 128, dtype = bf16> from bf16
