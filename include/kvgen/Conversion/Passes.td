//===- Passes.td - kvgen's conversions ---------------------*- tablegen -*-===//
//
// The two conversions: kv ops to loop nests, loop nests to GPU kernels. The
// LLVM-level transforms that follow are in kvgen/Transforms/Passes.td.
//

#ifndef KVGEN_CONVERSION_PASSES_TD
#define KVGEN_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def KVToLoops : Pass<"kv-to-loops", "::mlir::ModuleOp"> {
  let summary = "Lower kv kernel descriptions to target-independent loop nests";
  let description = [{
    Replaces every kv op of a kernel (`kv.append`, `kv.fused_append`,
    `kv.paged_kv_append`, `kv.mla_append`, `kv.mla_fused_append`,
    `kv.slot_mapping`, `kv.gather`) with `func.func`s, one per variant of the
    kernel plan: for appends and gathers a `vector` variant `@name` (up to 16
    bytes a chunk) and a `scalar` variant `@name_scalar`, and for most
    appends a `wide` variant `@name_wide` (several chunks a thread, or the
    IEEE division of a split quantizing division); one function for a slot
    mapping. Each body is one 2-d `scf.parallel` over (token, chunk); a
    dynamic scale's group is spread over lanes by an `scf.parallel` nested
    in it. Each function
    carries its launch geometry as `kv.launch = #kv.launch<...>`, the plan's
    occupancy bound as `kv.min_blocks_per_sm` where it has one, and marks on
    the address math for kv-pin-before-slot (`kv.before_slot`,
    `kv.keep_narrow`, `kv.keep_wide`); the kv dialect verifies each. All
    layout-, dtype- and quantization-specific math happens here; the host
    and the GPU targets both start from this loop nest. The parameter list
    is the kernel ABI (kvgen/ABI/Params.def, docs/KERNEL-ABI.md), each
    parameter named by `kv.name`.

    The kernels and their launch are the kernel plan's (KernelPlan.cpp). Its
    token thresholds and occupancy bounds come from the chip's row of the
    chip table (ChipTable.cpp); the other options override one choice of the
    plan each, for measuring an alternative beside it. kvgen's bundle
    records the same plan, so the options given here must be given to it too
    (`kvgen --pipeline-options`).
  }];
  let options = [
    Option<"chip", "chip", "std::string", /*default=*/"\"sm_90\"",
           "The GPU whose row of the chip table gives the plan's thresholds "
           "(the host target plans as for sm_90)">,
    Option<"chunksPerThread", "chunks-per-thread", "int64_t", /*default=*/"0",
           "Chunks one thread of a static or unquantized append moves, loads "
           "before stores (0: the plan's choice; applies where it divides a "
           "token's chunks)">,
    Option<"tokensPerBlock", "tokens-per-block", "int64_t", /*default=*/"0",
           "Tokens one block of an append moves (0: the plan's choice; "
           "applies where the block stays within 1024 threads)">,
    Option<"wholeWarps", "whole-warps", "bool", /*default=*/"true",
           "Give a block whose tokens leave a warp part-filled more tokens, "
           "up to whole warps (false: the 128-thread rule alone)">,
    Option<"minBlocksPerSM", "min-blocks-per-sm", "int64_t",
           /*default=*/"-1",
           "Blocks per SM ptxas must leave room for (-1: the plan's choice; "
           "0: no bound)">,
    Option<"wideMinTokens", "wide-min-tokens", "int64_t", /*default=*/"-1",
           "The fewest tokens for which kvrt picks an append's wide variant "
           "(-1: the plan's choice; 0: no wide variant)">,
    Option<"wideMaxTokens", "wide-max-tokens", "int64_t", /*default=*/"-1",
           "The fewest tokens from which kvrt goes back from an append's "
           "wide variant to its vector variant (-1: the plan's choice; 0: "
           "none; a bound not above the wide variant's min_tokens is none)">,
    Option<"fastDivision", "fast-division", "bool", /*default=*/"true",
           "Quantize a 16-bit float source with the reciprocal-and-"
           "correction division (the same bits as IEEE division; false: "
           "IEEE division per element)">
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::func::FuncDialect",
    "::mlir::memref::MemRefDialect", "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect",
    // The quantizing division's fused multiply-adds (llvm.intr.fma).
    "::mlir::LLVM::LLVMDialect"
  ];
}

def KVLoopsToGPU : Pass<"kv-loops-to-gpu", "::mlir::ModuleOp"> {
  let summary = "Map kv loop nests onto GPU blocks and threads";
  let description = [{
    Moves every function made by `kv-to-loops` into `gpu.module @kv_kernels`
    as a `gpu.func` kernel with the same parameters. Token `t` of the
    `scf.parallel` becomes `block_id.x * tokens_per_block + thread_id.y`, the
    chunk loop strides by `block_dim.x` from `thread_id.x`; the launch
    geometry comes from the function's `kv.launch` attribute (a
    `#kv.launch`), which the bundle's manifest records too, and a
    `kv.min_blocks_per_sm` becomes the kernel's `nvvm.minctasm` (ptxas's
    `.minnctapersm`). A function with
    `kv.name` parameters and no or a bad launch geometry, or a loop that is
    not the (token, chunk) nest, is an error.

    An `scf.parallel` nested in the nest's body (a dynamic scale's lanes:
    one dimension from 0 by 1 to a constant power of two of at most 32 that
    divides `threads_x`) spreads an iteration over that many adjacent
    threads: the lane is `thread_id.x mod lanes`, the chunk
    `thread_id.x / lanes`, and each reduction of the lane loop becomes a
    butterfly of `shfl.sync.bfly` over the iteration's lanes.

    With one token a block the grid has exactly `num_tokens` blocks (the
    launch ABI), so the `token < num_tokens` test is left out unless
    `elide-token-check=false`.
  }];
  let options = [
    Option<"elideTokenCheck", "elide-token-check", "bool", /*default=*/"true",
           "Omit the token < num_tokens test of kernels with one token a "
           "block (the launch ABI's grid guarantees it)">
  ];
  let dependentDialects = [
    "::mlir::gpu::GPUDialect", "::mlir::scf::SCFDialect",
    "::mlir::arith::ArithDialect", "::mlir::NVVM::NVVMDialect",
    // Its attributes (kv.min_blocks_per_sm).
    "::kvgen::kv::KVDialect"
  ];
}

#endif // KVGEN_CONVERSION_PASSES_TD
