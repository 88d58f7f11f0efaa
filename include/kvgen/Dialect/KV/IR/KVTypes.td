//===- KVTypes.td - the !kv.cache type ---------------------*- tablegen -*-===//

#ifndef KVGEN_DIALECT_KV_IR_KVTYPES_TD
#define KVGEN_DIALECT_KV_IR_KVTYPES_TD

include "kvgen/Dialect/KV/IR/KVAttrs.td"

// A cache layout of the kernel ABI, by its name in Layouts.def: the dialect
// has no list of its own, so a new layout needs no case here.
def KV_LayoutParameter : AttrOrTypeParameter<"::kvgen::abi::Layout",
    "a cache layout (include/kvgen/ABI/Layouts.def)"> {
  let parser = "::kvgen::kv::parseLayout($_parser)";
  let printer = "$_printer << ::kvgen::abi::layoutName($_self)";
}

// V's head size where it differs from head_dim: absent, not a sentinel, so
// that `v_head_dim = 0` is refused like any other non-positive size.
def KV_HeadDimParameter : OptionalParameter<"::std::optional<int64_t>",
    "V's head size, where it differs from head_dim"> {
  let printer = "$_printer << *$_self";
}

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
    divides by the compile-time constant, a shift for powers of two); a
    layout that is not paged takes `max_seq_len` instead (a "block" is one
    request's row). The layouts and their shapes are the kernel ABI's
    (include/kvgen/ABI/Layouts.def, docs/KERNEL-ABI.md). A quantized cache names its `quant`; its `dtype`
    is then the storage type of that quantization.

    `k_only = true` describes a cache with no V (an indexer's keys): its
    kernels take no V argument. A `latent` cache (MLA) is K-only too, with
    one head whose row is the concatenation of the latent's two parts:
    `head_dim = kv_lora_rank + rope_dim`.

    `v_head_dim` gives V a head size of its own (K 192 / V 128): left out,
    V's rows are `head_dim` long like K's. Given, it differs from
    `head_dim`, and the layout keeps K's and V's sides apart with whole
    rows: a stacked layout has one head_dim for both sides, a layout that
    splits head_dim into x groups or keeps V's head_dim elements apart has
    no V row of its own, nor has a K-only or latent cache. Its scales are
    static.

    `nvfp4` places an NVFP4 cache's values and block scales (its `quant`
    is of kind nvfp4, its dtype i8: bytes; Nvfp4.h, docs/CONTRACT.md).

    ```mlir
    !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8,
              head_dim = 128, dtype = bf16>
    !kv.cache<layout = contiguous, max_seq_len = 4096, num_kv_heads = 8,
              head_dim = 128, dtype = f16>
    !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8,
              head_dim = 192, v_head_dim = 128, dtype = bf16>
    !kv.cache<layout = paged_nhd, block_size = 64, num_kv_heads = 1,
              head_dim = 576, dtype = bf16,
              latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>>
    ```
  }];
  let parameters = (ins
      KV_LayoutParameter:$layout,
      DefaultValuedParameter<"int64_t", "0">:$block_size,
      DefaultValuedParameter<"int64_t", "0">:$max_seq_len,
      "int64_t":$num_kv_heads,
      "int64_t":$head_dim,
      KV_HeadDimParameter:$v_head_dim,
      "::mlir::Type":$dtype,
      OptionalParameter<"::kvgen::kv::QuantAttr">:$quant,
      DefaultValuedParameter<"bool", "false">:$k_only,
      OptionalParameter<"::kvgen::kv::LatentAttr">:$latent,
      // An NVFP4 cache's page (#kv.nvfp4, Nvfp4.h).
      OptionalParameter<"::kvgen::kv::Nvfp4Attr">:$nvfp4);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The layout's axes and traits (paged, stacked, x, ...).
    const ::kvgen::abi::LayoutInfo &getLayoutInfo() const;
    /// Tokens per block: block_size, or max_seq_len for a layout that is not
    /// paged.
    int64_t getTokensPerBlock() const;
    /// Elements per 16-byte group of a layout with an X axis.
    int64_t getX() const;
    bool isPaged() const;
    /// Whether the cache has a V side: not `k_only`, not latent.
    bool hasValue() const;
    /// V's head size: `v_head_dim` where given, else head_dim.
    int64_t getValueHeadDim() const;
    /// Whether V's head size differs from K's.
    bool isAsymmetric() const { return getVHeadDim().has_value(); }
    /// The head size of a side: head_dim for K, getValueHeadDim() for V.
    int64_t getSideHeadDim(bool isKey) const {
      return isKey ? getHeadDim() : getValueHeadDim();
    }
  }];
}

#endif // KVGEN_DIALECT_KV_IR_KVTYPES_TD
