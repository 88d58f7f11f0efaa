// RUN: kvgen-opt %s -kv-to-loops -verify-diagnostics
// RUN: not kvgen %s --emit=ptx -o %t.ptx 2>&1 | FileCheck %s
// RUN: not test -e %t.ptx

// Quantization is described and verified, not lowered: kvgen says so and
// writes nothing.
// CHECK: error: 'kv.append' op quantized caches are not lowered yet

// expected-error @+1 {{quantized caches are not lowered yet}}
kv.append @fp8 : !kv.cache<layout = paged_nhd, block_size = 16,
    num_kv_heads = 8, head_dim = 128, dtype = f8E4M3FN,
    quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor, mode = static>> from bf16
