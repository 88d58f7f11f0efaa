//===- KVTypes.td - the !kv.cache type ---------------------*- tablegen -*-===//

#ifndef KVGEN_DIALECT_KV_IR_KVTYPES_TD
#define KVGEN_DIALECT_KV_IR_KVTYPES_TD

include "kvgen/Dialect/KV/IR/KVAttrs.td"

class KV_Type<string name, string typeMnemonic, list<Trait> traits = []>
    : TypeDef<KV_Dialect, name, traits> {
  let mnemonic = typeMnemonic;
}

def KV_CacheType : KV_Type<"Cache", "cache"> {
  let summary = "A KV cache: layout, geometry, element type, quantization";
  let description = [{
    Everything an append kernel needs to know about the cache at compile time.
    Sizes that vary at run time (number of blocks, batch, tokens) are kernel
    arguments. Paged layouts take `block_size` (any size: the kernel
    divides by the compile-time constant, a shift for powers of two); `contiguous` takes `max_seq_len` instead (a "block"
    is one request's row). A quantized cache names its `quant`; its `dtype`
    is then the storage type of that quantization.

    `k_only = true` describes a cache with no V (an indexer's keys): its
    kernels take no V argument. A `latent` cache (MLA) is K-only too, with
    one head whose row is the concatenation of the latent's two parts:
    `head_dim = kv_lora_rank + rope_dim`.

    ```mlir
    !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8,
              head_dim = 128, dtype = bf16>
    !kv.cache<layout = contiguous, max_seq_len = 4096, num_kv_heads = 8,
              head_dim = 128, dtype = f16>
    !kv.cache<layout = paged_nhd, block_size = 64, num_kv_heads = 1,
              head_dim = 576, dtype = bf16,
              latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>>
    ```
  }];
  let parameters = (ins
      EnumParameter<KV_LayoutKind>:$layout,
      DefaultValuedParameter<"int64_t", "0">:$block_size,
      DefaultValuedParameter<"int64_t", "0">:$max_seq_len,
      "int64_t":$num_kv_heads,
      "int64_t":$head_dim,
      "::mlir::Type":$dtype,
      OptionalParameter<"::kvgen::kv::QuantAttr">:$quant,
      DefaultValuedParameter<"bool", "false">:$k_only,
      OptionalParameter<"::kvgen::kv::LatentAttr">:$latent);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Tokens per block: block_size, or max_seq_len for contiguous caches.
    int64_t getTokensPerBlock() const;
    /// Elements per 16-byte group of the vllm_vectorized key cache.
    int64_t getX() const;
    bool isPaged() const;
    /// Whether the cache has a V side: not `k_only`, not latent.
    bool hasValue() const;
  }];
}

#endif // KVGEN_DIALECT_KV_IR_KVTYPES_TD
