//===- KVAttrs.td - kv dialect attributes ------------------*- tablegen -*-===//

#ifndef KVGEN_DIALECT_KV_IR_KVATTRS_TD
#define KVGEN_DIALECT_KV_IR_KVATTRS_TD

include "kvgen/Dialect/KV/IR/KVDialect.td"
include "mlir/IR/AttrTypeBase.td"

// The cache layouts and the quantization vocabulary are the kernel ABI's
// (include/kvgen/ABI/Layouts.def, Quant.def): a !kv.cache's `layout` is an
// ::kvgen::abi::Layout (KVTypes.td), and a #kv.quant's kind, granularity and
// mode are ::kvgen::abi enums, parsed and printed by their ABI names. The
// dialect has no list of its own, so the names in a description, in a
// bundle and in kvrt's messages cannot drift apart.
class KV_ABIEnumParameter<string enum, string what>
    : AttrOrTypeParameter<"::kvgen::abi::" # enum,
                          what # " (include/kvgen/ABI/Quant.def)"> {
  let parser = "::kvgen::kv::parse" # enum # "($_parser)";
  let printer = "$_printer << ::kvgen::kv::stringify" # enum # "($_self)";
}

def KV_QuantKind
    : KV_ABIEnumParameter<"QuantKind", "cache element quantization">;
def KV_ScaleGranularity
    : KV_ABIEnumParameter<"ScaleGranularity",
                          "what one quantization scale covers">;
// Static: given by the caller, as a tensor of the granularity's shape.
// Dynamic: computed by the kernel from the values it writes (amax / qmax),
// and written out next to the cache.
def KV_ScaleMode
    : KV_ABIEnumParameter<"ScaleMode", "where the scale comes from">;

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
  let parameters = (ins KV_QuantKind:$kind,
                        KV_ScaleGranularity:$granularity,
                        KV_ScaleMode:$mode,
                        DefaultValuedParameter<"bool", "false">:$reciprocal);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The cache element type this quantization kind stores.
    ::mlir::Type getStorageType(::mlir::MLIRContext *context) const;
  }];
}

// A latent entry with its scales inline (DeepSeek V3.2's fp8_ds_mla):
// kv_lora_rank quantized values, one f32 scale per group of them, then the
// RoPE part unquantized.
def KV_InlineScalesAttr : KV_Attr<"InlineScales", "inline_scales"> {
  let summary = "A latent entry that stores its group scales inline";
  let description = [{
    The entry of a latent cache whose latent part is quantized in groups of
    `group_size` elements, each group's scale computed by the kernel
    (`amax / qmax` of the group, at least `min_scale`, rounded up to a power
    of two where `power_of_two`) and stored as f32 in the entry itself. The
    entry is, in bytes: the `kv_lora_rank` quantized values (the cache's
    quant kind), the `kv_lora_rank / group_size` f32 scales, then the
    `rope_dim` RoPE values unquantized in `rope_dtype` (which is also the
    append's source dtype). The cache's `quant` is dynamic and per_token: a
    token's scales live with the token.

    ```mlir
    #kv.inline_scales<group_size = 128, rope_dtype = bf16,
                      min_scale = 1.0e-04 : f32, power_of_two = true>
    ```
  }];
  let parameters = (ins "int64_t":$group_size, "::mlir::Type":$rope_dtype,
                        OptionalParameter<"::mlir::FloatAttr">:$min_scale,
                        DefaultValuedParameter<"bool", "false">:$power_of_two);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Bytes of an entry of `kvLoraRank` values of `valueBytes` bytes and
    /// `ropeDim` RoPE values.
    int64_t getEntryBytes(int64_t kvLoraRank, int64_t ropeDim,
                          int64_t valueBytes) const;
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
  let parameters = (ins "int64_t":$kv_lora_rank, "int64_t":$rope_dim,
                        // Where the entry's scales live (none: the cache's
                        // quant applies to the whole entry).
                        OptionalParameter<"::kvgen::kv::InlineScalesAttr">:$scales);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

class KV_Nvfp4EnumParameter<string enum, string what>
    : AttrOrTypeParameter<"::kvgen::kv::" # enum, what> {
  let parser = "::kvgen::kv::parse" # enum # "($_parser)";
  let printer = "$_printer << ::kvgen::kv::stringify" # enum # "($_self)";
}

// An NVFP4 cache's page (vLLM's kv_cache_dtype = "nvfp4"); the element and
// scale rules are docs/CONTRACT.md's "NVFP4", the byte offsets Nvfp4.h's.
def KV_Nvfp4Attr : KV_Attr<"Nvfp4", "nvfp4"> {
  let summary = "Where an NVFP4 cache keeps its values and block scales";
  let description = [{
    A cache with `quant = #kv.quant<kind = nvfp4, granularity = per_tensor,
    mode = static>` stores each head's row as `head_dim / 2` bytes of e2m1
    values (two a byte, the first in the low nibble) and `head_dim / 16` e4m3
    block scales, one per 16 values, which the kernel computes under the
    static per-tensor scale. One block of a side (K or V) holds all its
    values first, then all its scales: `[data | scales]`, each ordered by the
    layout's head and position axes; with vLLM's
    K and V views of one buffer a page is `[K data | K scales | V data | V
    scales]`. Each side's scales are `linear` (row `t` of a head holds its
    own scales) or `swizzled` (the 4x4 tiles of the sm_100 trtllm-gen
    reader, which needs `block_size % 4 == 0` and `(head_dim / 16) % 4 ==
    0`). `search` is how a group picks its scale: `divisor_six` (amax / 6)
    or `four_over_six` (amax / 6 or amax / 4, whichever reconstructs the
    group with the smaller squared error).

    ```mlir
    #kv.nvfp4<k_scales = linear, v_scales = swizzled, search = divisor_six>
    ```
  }];
  let parameters = (ins
      KV_Nvfp4EnumParameter<"Nvfp4ScaleLayout", "K's scale layout">:$k_scales,
      KV_Nvfp4EnumParameter<"Nvfp4ScaleLayout", "V's scale layout">:$v_scales,
      KV_Nvfp4EnumParameter<"Nvfp4ScaleSearch", "the group's scale rule">:$search);
  let assemblyFormat = "`<` struct(params) `>`";
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

// The fused prologue's attribute, in its own file.
include "kvgen/Dialect/KV/IR/KVPrologue.td"

#endif // KVGEN_DIALECT_KV_IR_KVATTRS_TD
