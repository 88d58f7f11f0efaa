// RUN: kvgen-opt %s -kv-loops-to-gpu -split-input-file -verify-diagnostics

// kv-loops-to-gpu on hand-written loop nests: a bad or missing launch
// geometry, or a loop it cannot map, is a diagnostic, not a crash.

// expected-error @+1 {{'kv.launch' must be a #kv.launch<threads_x = ..., tokens_per_block = ..., chunks_per_token = ...>, got {threads_x = 1 : i64}}}
func.func @dict(%n: i64 {kv.name = "num_tokens"}) attributes {kv.launch = {threads_x = 1 : i64}} {
  return
}

// -----

// expected-error @+1 {{a block of threads_x * tokens_per_block = 2048 threads is over the limit of 1024}}
func.func @big(%n: i64 {kv.name = "num_tokens"}) attributes {kv.launch = #kv.launch<threads_x = 256, tokens_per_block = 8, chunks_per_token = 256>} {
  return
}

// -----

// expected-error @+1 {{threads_x, tokens_per_block and chunks_per_token must be positive, got 0, 1, 1}}
func.func @zero(%n: i64 {kv.name = "num_tokens"}) attributes {kv.launch = #kv.launch<threads_x = 0, tokens_per_block = 1, chunks_per_token = 1>} {
  return
}

// -----

// expected-error @+1 {{a kv loop nest needs 'kv.launch = #kv.launch<threads_x = ..., tokens_per_block = ..., chunks_per_token = ...>'}}
func.func @missing(%n: i64 {kv.name = "num_tokens"}) {
  return
}

// -----

// expected-error @+1 {{expected one scf.parallel in a kv loop nest}}
func.func @noloop(%n: i64 {kv.name = "num_tokens"}) attributes {kv.launch = #kv.launch<threads_x = 4, tokens_per_block = 1, chunks_per_token = 4>} {
  return
}

// -----

func.func @bound(%n: i64 {kv.name = "num_tokens"}) attributes {kv.launch = #kv.launch<threads_x = 4, tokens_per_block = 1, chunks_per_token = 4>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %t = arith.index_cast %n : i64 to index
  // expected-error @+1 {{the chunk loop's 8 iterations x 1 lanes must divide chunks_per_token = 4}}
  scf.parallel (%i, %j) = (%c0, %c0) to (%t, %c8) step (%c1, %c1) {
    scf.reduce
  }
  return
}

// -----

func.func @oned(%n: i64 {kv.name = "num_tokens"}) attributes {kv.launch = #kv.launch<threads_x = 4, tokens_per_block = 1, chunks_per_token = 4>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %t = arith.index_cast %n : i64 to index
  // expected-error @+1 {{threads_x 4 is more than the chunk loop's 1 iterations x 1 lanes: threads would have no chunk}}
  scf.parallel (%i) = (%c0) to (%t) step (%c1) {
    scf.reduce
  }
  return
}

// -----

// A lane loop (an scf.parallel inside the nest) must have a power-of-two
// bound: the butterfly reduction over its lanes needs one.
func.func @lanes(%n: i64 {kv.name = "num_tokens"}) attributes {kv.launch = #kv.launch<threads_x = 12, tokens_per_block = 1, chunks_per_token = 12>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %t = arith.index_cast %n : i64 to index
  scf.parallel (%i, %j) = (%c0, %c0) to (%t, %c4) step (%c1, %c1) {
    // expected-error @+1 {{a lane loop runs from 0 by 1 to a power of two of at most 32 that divides threads_x = 12, the same in one kernel}}
    scf.parallel (%l) = (%c0) to (%c3) step (%c1) {
      scf.reduce
    }
    scf.reduce
  }
  return
}

// -----

// The lanes of an iteration must fit threads_x evenly.
func.func @lanes_threads(%n: i64 {kv.name = "num_tokens"}) attributes {kv.launch = #kv.launch<threads_x = 8, tokens_per_block = 1, chunks_per_token = 16>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %t = arith.index_cast %n : i64 to index
  scf.parallel (%i, %j) = (%c0, %c0) to (%t, %c1) step (%c1, %c1) {
    // expected-error @+1 {{a lane loop runs from 0 by 1 to a power of two of at most 32 that divides threads_x = 8, the same in one kernel}}
    scf.parallel (%l) = (%c0) to (%c16) step (%c1) {
      scf.reduce
    }
    scf.reduce
  }
  return
}
