//===- KVOps.td - kv dialect kernel descriptions -----------*- tablegen -*-===//

#ifndef KVGEN_DIALECT_KV_IR_KVOPS_TD
#define KVGEN_DIALECT_KV_IR_KVOPS_TD

include "kvgen/Dialect/KV/IR/KVTypes.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/BuiltinAttributes.td"

// Each op is one kernel to generate. They live at module level and are
// symbols, so a module can describe every kernel of a serving stack. Every
// op names its cache; the ops that move rows name the rows' element type
// too (KV_RowsIntoCacheOp, and kv.gather's `to`). `kind` is the op's kernel
// kind (its Id in include/kvgen/ABI/KernelKinds.def): the verifier, the plan
// and the loop nest ask its traits, so an op needs no C++ of its own; `rows`
// names the accessor of the rows' element type (SourceType, OutputType), if
// the op has one.
class KV_KernelOp<string mnemonic, string kind, string rows = "">
    : KV_Op<mnemonic, [Symbol]> {
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The kernel kind this op generates.
    static constexpr ::kvgen::abi::KernelKind kKind =
        ::kvgen::abi::KernelKind::}] # kind # [{;
    ::kvgen::kv::CacheType getCacheType() {
      return ::llvm::cast<::kvgen::kv::CacheType>(getCache());
    }
    /// The element type of the rows the kernel moves (null: none).
    ::mlir::Type getRowsType() {
      return }] # !if(!empty(rows), "::mlir::Type()", "get" # rows # "()") # [{;
    }
  }];
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() {
      if (::mlir::failed(::kvgen::kv::verifyKernelOp(*this, kKind,
                                                     getCacheType(),
                                                     getRowsType())))
        return ::mlir::failure();
      return ::kvgen::kv::verifyKernelPrologue(*this, kKind, getCacheType(),
                                               getRowsType());
    }
  }];
}

// A kernel that writes rows of `source_type` into the cache:
// `kv.OP @name : !kv.cache<...> from TYPE`.
class KV_RowsIntoCacheOp<string mnemonic, string kind>
    : KV_KernelOp<mnemonic, kind, "SourceType"> {
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<KV_CacheType>:$cache,
                       TypeAttr:$source_type);
  let assemblyFormat = "$sym_name `:` $cache `from` $source_type attr-dict";
}

def KV_AppendOp : KV_RowsIntoCacheOp<"append", "Append"> {
  let summary = "Write new K and V rows into the cache through a slot mapping";
  let description = [{
    Generates one kernel that writes both K and V
    `[num_tokens, num_kv_heads, head_dim]` (any strides) into the cache at
    `slot_mapping[t]`; `slot < 0` writes nothing. `source_type` is the element
    type of K and V; it may differ from the cache's dtype only by an fp32 <->
    16-bit cast.

    An optional `prologue` (#kv.prologue<...>) normalizes and rotates K (and
    Q, written to `q_out`) on the way (docs/dev/PROLOGUE.md).

    ```mlir
    kv.append @kv_append : !kv.cache<layout = paged_nhd, block_size = 16,
        num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16
    kv.append @qwen3 : !kv.cache<layout = paged_nhd, block_size = 16,
        num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16
        prologue #kv.prologue<q_heads = 32, norm = rms, rope = neox,
                              rotary_dim = 128>
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<KV_CacheType>:$cache,
                       TypeAttr:$source_type,
                       OptionalAttr<KV_PrologueAttr>:$prologue);
  let assemblyFormat = "$sym_name `:` $cache `from` $source_type "
                       "(`prologue` qualified($prologue)^)? attr-dict";
}

def KV_MlaAppendOp : KV_RowsIntoCacheOp<"mla_append", "MlaAppend"> {
  let summary = "Write kv_c and k_pe rows into an MLA latent cache";
  let description = [{
    Generates one kernel (vLLM's `concat_and_cache_mla`) that writes, for
    each token `t` with `slot_mapping[t] >= 0`, `kv_c [num_tokens,
    kv_lora_rank]` followed by `k_pe [num_tokens, rope_dim]` (each with its
    own strides) as the entry of that slot of the latent cache
    `[num_blocks, block_size, kv_lora_rank + rope_dim]`. The cache must be
    `latent`; `source_type` is the element type of both parts.

    ```mlir
    kv.mla_append @mla : !kv.cache<layout = paged_nhd, block_size = 64,
        num_kv_heads = 1, head_dim = 576, dtype = bf16,
        latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16
    ```
  }];
}

def KV_MlaFusedAppendOp
    : KV_RowsIntoCacheOp<"mla_fused_append", "MlaFusedAppend"> {
  let summary = "Write kv_c and k_pe rows from the block table and positions";
  let description = [{
    `kv.mla_append` with `kv.fused_append`'s slots: each token's slot is
    computed in registers from the block table `[num_reqs,
    max_blocks_per_req]`, `query_start_loc [num_reqs + 1]` and
    `context_lens [num_reqs]` (the `kv.slot_mapping` rule) and never written
    out; one launch. The cache must be `latent` (always paged).

    ```mlir
    kv.mla_fused_append @mla_fused : !kv.cache<layout = paged_nhd,
        block_size = 64, num_kv_heads = 1, head_dim = 576, dtype = bf16,
        latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>> from bf16
    ```
  }];
}

def KV_SlotMappingOp : KV_KernelOp<"slot_mapping", "SlotMapping"> {
  let summary = "Compute slot_mapping from a block table and positions";
  let description = [{
    Generates a kernel that writes `slot_mapping [num_tokens]` from the block
    table `[num_reqs, max_blocks_per_req]`, `query_start_loc [num_reqs + 1]`
    and `context_lens [num_reqs]`: token `i` of request `r` goes at position
    `context_lens[r] + i`. Padding tokens get `-1`. Paged layouts only.

    ```mlir
    kv.slot_mapping @kv_slots : !kv.cache<layout = paged_nhd, block_size = 16,
        num_kv_heads = 8, head_dim = 128, dtype = bf16>
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<KV_CacheType>:$cache);
  let assemblyFormat = "$sym_name `:` $cache attr-dict";
}

def KV_FusedAppendOp : KV_RowsIntoCacheOp<"fused_append", "FusedAppend"> {
  let summary = "Append straight from the block table and positions";
  let description = [{
    `kv.slot_mapping` and `kv.append` in one kernel, one launch: each token's
    slot is computed in registers and never written out. Paged layouts only.

    An optional `prologue` (#kv.prologue<...>) normalizes and rotates K (and
    Q) as kv.append's does, at the slot rule's position
    (docs/dev/PROLOGUE.md).

    ```mlir
    kv.fused_append @kv_fused : !kv.cache<layout = paged_hnd, block_size = 32,
        num_kv_heads = 1, head_dim = 64, dtype = f16> from f32
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<KV_CacheType>:$cache,
                       TypeAttr:$source_type,
                       OptionalAttr<KV_PrologueAttr>:$prologue);
  let assemblyFormat = "$sym_name `:` $cache `from` $source_type "
                       "(`prologue` qualified($prologue)^)? attr-dict";
}

def KV_PagedKvAppendOp
    : KV_RowsIntoCacheOp<"paged_kv_append", "PagedKvAppend"> {
  let summary = "Append from FlashInfer's ragged page table, one launch";
  let description = [{
    FlashInfer's `append_paged_kv_cache` in one kernel: token `i` goes to
    position `positions[i]` of request `b = batch_indices[i]`, whose pages
    are `kv_indices[kv_indptr[b] .. kv_indptr[b + 1])`. The kernel reads the
    page table itself and checks every bound before it reads any of the
    token's K or V: a batch index outside `[0, batch_size)`, a negative
    position, a position past the request's last page, a `kv_indptr` range
    outside `kv_indices`, a negative page id or one past the cache write
    nothing. Paged layouts only.

    An optional `prologue` (#kv.prologue<...>) normalizes and rotates K (and
    Q) as kv.append's does, at `rope_positions[i]` (FlashInfer's `pos_ids`,
    apart from `positions`) (docs/dev/PROLOGUE.md).

    ```mlir
    kv.paged_kv_append @kv_paged : !kv.cache<layout = paged_hnd,
        block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16>
        from bf16
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<KV_CacheType>:$cache,
                       TypeAttr:$source_type,
                       OptionalAttr<KV_PrologueAttr>:$prologue);
  let assemblyFormat = "$sym_name `:` $cache `from` $source_type "
                       "(`prologue` qualified($prologue)^)? attr-dict";
}

def KV_GatherOp : KV_KernelOp<"gather", "Gather", "OutputType"> {
  let summary = "Read the rows of given slots back out of the cache";
  let description = [{
    Generates one kernel that reads K and V of `slot_mapping [n]` out of the
    cache into `key_out` and `value_out` `[n, num_kv_heads, head_dim]` (any
    strides) of `output_type`, dequantizing a quantized cache with the same
    scales an append used (`x = float(q) * scale`, then rounded to the output
    dtype). `slot < 0` (or a block past the cache) leaves the output row
    untouched. It is how users and tests inspect a cache.

    ```mlir
    kv.gather @kv_gather : !kv.cache<layout = paged_nhd, block_size = 16,
        num_kv_heads = 8, head_dim = 128, dtype = f8E4M3FN,
        quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor,
                          mode = static>> to f32
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<KV_CacheType>:$cache,
                       TypeAttr:$output_type);
  let assemblyFormat = "$sym_name `:` $cache `to` $output_type attr-dict";
}

def KV_FusedGatherOp : KV_KernelOp<"fused_gather", "FusedGather", "OutputType"> {
  let summary = "Read each request's rows out of the cache by block table";
  let description = [{
    `kv.gather` with `kv.fused_append`'s slots: output row `t`, a token of
    request `r` (`query_start_loc[r] <= t < query_start_loc[r + 1]`), is the
    cache row at position `p = context_lens[r] + t - query_start_loc[r]`,
    block `block_table[r, p / block_size]`, row `p % block_size`, dequantized
    as `kv.gather` does. vLLM's MLA gathers (`cp_gather_cache`,
    `gather_and_maybe_dequant_cache`) are this kernel over a K-only cache
    whose one head is the latent entry. A padding token (past
    `query_start_loc[num_reqs]`) or a negative block id leaves its row
    untouched. Paged layouts only.

    ```mlir
    kv.fused_gather @mla_gather : !kv.cache<layout = paged_nhd,
        block_size = 64, num_kv_heads = 1, head_dim = 576, dtype = bf16,
        k_only = true> to bf16
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<KV_CacheType>:$cache,
                       TypeAttr:$output_type);
  let assemblyFormat = "$sym_name `:` $cache `to` $output_type attr-dict";
}

#endif // KVGEN_DIALECT_KV_IR_KVOPS_TD
