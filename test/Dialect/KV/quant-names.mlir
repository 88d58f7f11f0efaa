// RUN: kvgen-opt %s -split-input-file -verify-diagnostics

// #kv.quant's kind, granularity and mode are the kernel ABI's
// (include/kvgen/ABI/Quant.def): a name it does not have is refused with
// the ABI's list. int4 is read, and refused by the verifier with its reason
// (invalid-quant.mlir), spelled as a keyword or as a string.

// expected-error @+3 {{unknown quantization kind 'fp4': expected one of fp8_e4m3, fp8_e5m2, int8, nvfp4}}
// expected-error @+2 {{failed to parse KV_QuantAttr parameter 'kind'}}
// expected-error @+1 {{failed to parse KV_CacheType parameter 'quant'}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = i8, quant = #kv.quant<kind = fp4, granularity = per_tensor, mode = static>> from bf16

// -----

// expected-error @+3 {{unknown scale granularity 'per_channel': expected one of per_tensor, per_token, per_head, per_token_head, per_block}}
// expected-error @+2 {{failed to parse KV_QuantAttr parameter 'granularity'}}
// expected-error @+1 {{failed to parse KV_CacheType parameter 'quant'}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = i8, quant = #kv.quant<kind = int8, granularity = per_channel, mode = static>> from bf16

// -----

// expected-error @+3 {{unknown scale mode 'later': expected one of static, dynamic}}
// expected-error @+2 {{failed to parse KV_QuantAttr parameter 'mode'}}
// expected-error @+1 {{failed to parse KV_CacheType parameter 'quant'}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = i8, quant = #kv.quant<kind = int8, granularity = per_tensor, mode = "later">> from bf16

// -----

// expected-error @+2 {{int4 caches are not supported in this release (docs/CONTRACT.md): use fp8_e4m3, fp8_e5m2, int8 or nvfp4}}
// expected-error @+1 {{failed to parse KV_CacheType parameter 'quant'}}
kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = i8, quant = #kv.quant<kind = "int4", granularity = per_tensor, mode = static>> from bf16

// -----

// A string is read as the keyword it spells; the printed form is the keyword.
// RUN: kvgen-opt %s -split-input-file -verify-diagnostics 2>&1 | FileCheck %s
// CHECK: kv.append @q : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = f8E5M2, quant = <kind = fp8_e5m2, granularity = per_token_head, mode = dynamic>> from bf16
kv.append @q : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = f8E5M2, quant = #kv.quant<kind = "fp8_e5m2", granularity = "per_token_head", mode = dynamic>> from bf16
