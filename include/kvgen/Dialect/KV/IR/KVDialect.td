//===- KVDialect.td - the kv dialect: KV-cache descriptions -*- tablegen -*-===//
//
// The kv dialect describes a KV cache (layout, block size, heads, head dim,
// dtypes, quantization) and the append kernels kvgen generates for it.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_DIALECT_KV_IR_KVDIALECT_TD
#define KVGEN_DIALECT_KV_IR_KVDIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def KV_Dialect : Dialect {
  let name = "kv";
  let cppNamespace = "::kvgen::kv";
  let summary = "Descriptions of KV caches and of the kernels that append to them";
  let description = [{
    A module of kv ops is a kvgen input: each op names one kernel to generate
    (`kv.append`, `kv.slot_mapping`, `kv.fused_append`, `kv.gather`,
    `kv.mla_append`, `kv.mla_fused_append`, `kv.paged_kv_append`) and carries the
    `!kv.cache` type that says what the cache looks like. Everything that is
    layout- or quantization-specific is decided here and in `kv-to-loops`;
    below that level the host and GPU targets share one loop nest.

    Each kernel function `kv-to-loops` makes carries two dialect attributes
    through the lowering: `kv.launch` (a `#kv.launch`, its launch geometry)
    and, on each argument, `kv.name`, the parameter's ABI name
    (`include/kvgen/ABI/Params.def`). The dialect verifies both wherever
    they appear.

    The attributes one pass leaves for a later one are the dialect's too,
    each verified wherever it appears (and no other `kv.` name is accepted
    on an operation):
    - `kv.min_blocks_per_sm` (a positive i64, on a kernel function): the
      plan's occupancy bound, from kv-to-loops to kv-loops-to-gpu, which
      makes it the kernel's `nvvm.minctasm`;
    - `kv.before_slot` (unit, on an op of one i64 result): an address term
      kv-to-loops computed before the slot load, for kv-pin-before-slot to
      keep there;
    - `kv.keep_wide` (unit, on an op of one i64 result): the slot's token
      index, which kv-pin-before-slot keeps a 64-bit value;
    - `kv.keep_narrow` (unit, on an op of one i32 result): an index
      kv-to-loops narrowed, which kv-pin-before-slot keeps 32-bit;
    - `kv.source_offset_pin` (unit, on an `llvm.inline_asm` copy of one i64
      to an i64): a pinned source offset, from kv-pin-before-slot to
      kv-pin-addresses;
    - `kv.param_names` (an array of the kernel ABI's parameter names, on a
      kernel function): its parameters' names in argument order, from
      kv-loops-to-gpu to kv-mark-kernel-noalias (convert-gpu-to-nvvm drops
      `kv.name` from the arguments).
  }];
  let discardableAttrs = (ins
    "::mlir::IntegerAttr":$min_blocks_per_sm,
    "::mlir::UnitAttr":$before_slot,
    "::mlir::UnitAttr":$keep_wide,
    "::mlir::UnitAttr":$keep_narrow,
    "::mlir::UnitAttr":$source_offset_pin,
    "::mlir::ArrayAttr":$param_names
  );
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  // `kv.launch` on a function must be a #kv.launch; `kv.name` belongs on a
  // parameter, not on an operation; the discardable attributes above have
  // their types and places.
  let hasOperationAttrVerify = 1;
  // `kv.name` on a kernel parameter must name a parameter of the kernel ABI
  // (include/kvgen/ABI/Params.def), so that hand-written loop nests use the
  // names kvrt packs.
  let hasRegionArgAttrVerify = 1;
  // ... and not on a function result, where no pass would look for it.
  let hasRegionResultAttrVerify = 1;
  let extraClassDeclaration = [{
    /// Verifies the attributes one pass leaves for another (the
    /// discardable attributes), and refuses a kv. name that is none of the
    /// dialect's.
    ::mlir::LogicalResult verifyContractAttribute(::mlir::Operation *op,
                                                  ::mlir::NamedAttribute attr);

    /// The parameter attribute that names a kernel parameter by its ABI name
    /// (`{kv.name = "key"}`), written by kv-to-loops and kept down to the
    /// bundle (on the GPU path, as the kernel's `kv.param_names`).
    static constexpr ::llvm::StringLiteral getParamNameAttrName() {
      return ::llvm::StringLiteral("kv.name");
    }
  }];
}

class KV_Op<string mnemonic, list<Trait> traits = []>
    : Op<KV_Dialect, mnemonic, traits>;

#endif // KVGEN_DIALECT_KV_IR_KVDIALECT_TD
