// RUN: kvgen-opt %s -kv-to-loops -split-input-file -verify-diagnostics

// kv-to-loops on descriptions it cannot lower: a diagnostic, not a crash.

// The cache's own verifier refuses it before the pass runs.
// expected-error @+1 {{block_size must be positive, got 0}}
kv.append @zero : !kv.cache<layout = paged_nhd, block_size = 0,
    num_kv_heads = 2, head_dim = 64, dtype = bf16> from bf16

// -----

// A kernel's function takes the op's name: one already taken is refused.
// expected-note @+1 {{see existing symbol definition here}}
func.func @taken() {
  return
}
// expected-error @+1 {{redefinition of symbol named 'taken'}}
kv.append @taken : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 2, head_dim = 64, dtype = bf16> from bf16
