//===- KVAttrs.td - kv dialect enums and attributes --------*- tablegen -*-===//

#ifndef KVGEN_DIALECT_KV_IR_KVATTRS_TD
#define KVGEN_DIALECT_KV_IR_KVATTRS_TD

include "kvgen/Dialect/KV/IR/KVDialect.td"
include "mlir/IR/EnumAttr.td"

// The cache layouts are the kernel ABI's (include/kvgen/ABI/Layouts.def): a
// !kv.cache's `layout` is an ::kvgen::abi::Layout (KVTypes.td).

def KV_QuantKind : I32EnumAttr<"QuantKind", "cache element quantization", [
  I32EnumAttrCase<"FP8E4M3", 0, "fp8_e4m3">,
  I32EnumAttrCase<"FP8E5M2", 1, "fp8_e5m2">,
  I32EnumAttrCase<"Int8", 2, "int8">,
  // Parsed so that the verifier can say why it is refused (see QuantAttr).
  I32EnumAttrCase<"Int4", 3, "int4">
]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::kvgen::kv";
}

def KV_ScaleGranularity : I32EnumAttr<"ScaleGranularity",
    "what one quantization scale covers", [
  I32EnumAttrCase<"PerTensor", 0, "per_tensor">,
  I32EnumAttrCase<"PerToken", 1, "per_token">,
  I32EnumAttrCase<"PerHead", 2, "per_head">,
  I32EnumAttrCase<"PerTokenHead", 3, "per_token_head">,
  I32EnumAttrCase<"PerBlock", 4, "per_block">
]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::kvgen::kv";
}

def KV_ScaleMode : I32EnumAttr<"ScaleMode", "where the scale comes from", [
  // Given by the caller, as a tensor of the granularity's shape.
  I32EnumAttrCase<"Static", 0, "static">,
  // Computed by the kernel from the values it writes (amax / qmax), and
  // written out next to the cache.
  I32EnumAttrCase<"Dynamic", 1, "dynamic">
]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::kvgen::kv";
}

class KV_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<KV_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def KV_QuantAttr : KV_Attr<"Quant", "quant"> {
  let summary = "How a cache stores quantized elements";
  let description = [{
    The convention (docs/CONTRACT.md, "Quantization"): `q = saturate(x /
    scale)` computed in fp32 with IEEE division, then rounded to the cache
    dtype; dequantization is `x = q * scale`. K and V have separate scales of
    the same granularity. `reciprocal = true` computes `x * (1 / scale)`
    instead: faster, and the bytes may differ from the division's by one
    step of the format.

    ```mlir
    #kv.quant<kind = fp8_e4m3, granularity = per_tensor, mode = static>
    #kv.quant<kind = int8, granularity = per_token_head, mode = dynamic,
              reciprocal = true>
    ```
  }];
  let parameters = (ins EnumParameter<KV_QuantKind>:$kind,
                        EnumParameter<KV_ScaleGranularity>:$granularity,
                        EnumParameter<KV_ScaleMode>:$mode,
                        DefaultValuedParameter<"bool", "false">:$reciprocal);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The cache element type this quantization kind stores.
    ::mlir::Type getStorageType(::mlir::MLIRContext *context) const;
  }];
}

def KV_LatentAttr : KV_Attr<"Latent", "latent"> {
  let summary = "The two parts of an MLA latent cache's entry";
  let description = [{
    DeepSeek-style multi-head latent attention stores, per slot, one latent
    vector and one RoPE key and no V: the entry is `kv_c`'s
    `kv_lora_rank` elements followed by `k_pe`'s `rope_dim` elements
    (`kv.mla_append`). Both parts arrive in the op's source dtype and are
    stored in the cache's dtype.

    ```mlir
    #kv.latent<kv_lora_rank = 512, rope_dim = 64>
    ```
  }];
  let parameters = (ins "int64_t":$kv_lora_rank, "int64_t":$rope_dim);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def KV_LaunchAttr : KV_Attr<"Launch", "launch"> {
  let summary = "The launch geometry of a kv kernel";
  let description = [{
    Carried by each function kv-to-loops makes (as `kv.launch`) to
    kv-loops-to-gpu and recorded in the bundle: a block is `threads_x` x
    `tokens_per_block` threads, thread `(tx, ty)` handles token `block *
    tokens_per_block + ty` and the chunks `tx, tx + threads_x, ...` below
    `chunks_per_token` (docs/KERNEL-ABI.md, "Launch geometry").

    ```mlir
    #kv.launch<threads_x = 128, tokens_per_block = 1, chunks_per_token = 128>
    ```
  }];
  let parameters = (ins "int64_t":$threads_x, "int64_t":$tokens_per_block,
                        "int64_t":$chunks_per_token);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif // KVGEN_DIALECT_KV_IR_KVATTRS_TD
