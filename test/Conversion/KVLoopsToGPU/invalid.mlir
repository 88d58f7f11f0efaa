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
  // expected-error @+1 {{the chunk loop's bound must be the constant chunks_per_token = 4}}
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
  // expected-error @+1 {{expected a 2-d scf.parallel over (token, chunk), got 1 induction variables}}
  scf.parallel (%i) = (%c0) to (%t) step (%c1) {
    scf.reduce
  }
  return
}
