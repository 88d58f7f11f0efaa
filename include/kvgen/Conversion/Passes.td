//===- Passes.td - kvgen lowering passes -------------------*- tablegen -*-===//

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

def KVBarePointerParams : Pass<"kv-bare-pointer-params"> {
  let summary = "Pass each buffer of a kv kernel as one pointer";
  let description = [{
    Runs on the LLVM dialect, after the memref lowering (convert-gpu-to-nvvm
    or convert-func-to-llvm): in every `llvm.func` carrying `kv.launch`,
    each expanded 1-D memref descriptor (allocated pointer, aligned pointer,
    offset, size, stride) becomes one pointer to the buffer's first element;
    the offset and stride become the constants 0 and 1 that the kernel ABI
    fixes, the size (never read) poison. The scalars keep their order. Both
    targets run it, so one `void *params[]` still serves the GPU kernel and
    the host's packed wrapper (docs/KERNEL-ABI.md, "Parameters"). A pointer
    parameter that does not start a descriptor is an error.
  }];
}

def KVPinBeforeSlot : Pass<"kv-pin-before-slot"> {
  let summary = "Keep the slot-independent address math before the slot load";
  let description = [{
    kv-to-loops computes the addresses of a chunk that do not depend on its
    slot (source offsets, the head and dim terms of the cache offsets)
    before the slot is loaded, marking each result `kv.before_slot`, so that
    the math runs while the load is in flight and only the block and
    position terms follow the slot check. LLVM would sink that math into the
    branch that uses it; with `nvvm=true` each marked value goes through an
    opaque `mov.b64` (a side-effecting inline asm, free once ptxas has
    allocated registers) that LLVM must leave where it is. Either way the
    marks are removed.

    The same opaque copy (`mov.b32`) keeps an i32 marked `kv.keep_narrow`:
    a block index narrowed after the slot check, or the token index of a
    block of several tokens, which LLVM would fold back into 64-bit math,
    costing each product of it a full 64-bit multiply instead of one
    mul.wide.u32. With `nvvm=true` and `wide=true`, the slot's token index
    marked `kv.keep_wide` goes through the same `mov.b64`, so that its
    zero extension is not turned into a `mul.wide.u32`.

    The marks are the kv dialect's attributes, verified wherever they
    appear; the pin of a source offset is marked `kv.source_offset_pin` for
    kv-pin-addresses.
  }];
  let options = [
    Option<"nvvm", "nvvm", "bool", /*default=*/"false",
           "Pin the marked values with PTX inline asm (else only unmark)">,
    Option<"wide", "wide", "bool", /*default=*/"true",
           "With nvvm, pin kv.keep_wide too (else only unmark it)">
  ];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect",
                           "::kvgen::kv::KVDialect"];
}

def KVPinAddresses : Pass<"kv-pin-addresses"> {
  let summary = "Pin a source address as its token's row, then its element";
  let description = [{
    Runs on the LLVM dialect, after kv-bare-pointer-params (the GPU target
    only). kv-pin-before-slot pins each source offset `t * stride_token +
    within` (an `llvm.inline_asm` marked `kv.source_offset_pin`) before the
    slot load. Where every use of such an offset is a GEP of a kernel
    parameter by it, each GEP is replaced by two, at the pin: the token's
    row `base + t * stride_token`, then the element `row + within`, each
    through the same opaque `mov.b64`. With one token a block the row is the
    same for all of a block's threads, and ptxas keeps it, the block index
    and the slot's address in the uniform datapath (with `kv.keep_wide` on
    the slot's index, kv-pin-before-slot). The two terms are told apart by
    what they are, not by their order in the sum: the term within the token
    is the zero extension of an i32 (or a constant, once folded); a sum
    whose terms cannot be told apart keeps its pinned offset. A kernel
    whose `kv.launch` puts
    several tokens in a block, and every kernel with `split=false`, keeps
    its pinned offsets: the marks are only removed. Either way no mark is
    left.
  }];
  let options = [
    Option<"split", "split", "bool", /*default=*/"true",
           "Pin the row and the element addresses (else only unmark)">
  ];
  let dependentDialects = ["::kvgen::kv::KVDialect"];
}

def KVMarkKernelNoAlias : Pass<"kv-mark-kernel-noalias", "::mlir::gpu::GPUModuleOp"> {
  let summary = "Mark the buffer pointers of kv kernels noalias";
  let description = [{
    Runs on the LLVM dialect, after kv-bare-pointer-params: every pointer
    parameter of a kv kernel (one per buffer) gets `llvm.noalias`. kvrt refuses a launch in which a
    written buffer overlaps any other buffer, so the promise holds, and it
    lets LLVM keep K and V loads ahead of the cache stores and read the
    inputs through the non-coherent cache (`ld.global.nc`). The memref
    lowering cannot carry the attribute from the memref to the pointer.
  }];
}

def KVExpandFP8Casts : Pass<"kv-expand-fp8-casts"> {
  let summary = "Expand f32 <-> fp8 casts into what the target runs";
  let description = [{
    `arith.truncf` f32 -> f8E4M3FN / f8E5M2 becomes
    `cvt.rn.satfinite.{e4m3,e5m2}x2.f32` (`nvvm.convert.f32x2.to.f8x2`) with
    `nvvm=true` on a chip that has it (sm_89 and later, by the NVVM target
    attached to the `gpu.module`; a module with no target yet is taken to
    have it), or else integer ops with the same bytes (round to nearest
    even, subnormals, saturation, NaN -> 0x7F): on the host and on sm_75 to
    sm_87. `arith.extf` fp8 -> f32 becomes integer ops on both targets.
  }];
  let options = [
    Option<"nvvm", "nvvm", "bool", /*default=*/"false",
           "Round with the GPU's cvt instruction where the chip has it "
           "(sm_89 and later) instead of integer ops">
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::vector::VectorDialect",
    "::mlir::NVVM::NVVMDialect"
  ];
}

def KVProgrammaticLaunch : Pass<"kv-programmatic-launch", "::mlir::gpu::GPUModuleOp"> {
  let summary = "Let a kv kernel's launch overlap the previous kernel's tail";
  let description = [{
    Programmatic dependent launch (sm_90 and newer). In every `gpu.func`
    kernel of the module, before the SCF lowering: `nvvm.griddepcontrol
    wait` goes before the first operation of the entry block that reads
    memory (or holds one that does, or whose effects are unknown), so that
    no input, the slot mapping included, is read before the previous grid in
    the stream has finished and its writes are visible; the address math
    that reads nothing runs before it. `nvvm.griddepcontrol
    launch_dependents` goes after the last read: after the last top-level
    operation that reads, descending into `scf.if` branches (not into
    loops), so that the next kernel may start launching while this one
    stores. An empty `llvm.inline_asm` with a memory clobber follows the
    wait: LLVM's griddepcontrol intrinsics do not touch memory, so without
    it a load could be hoisted above the wait. kvrt launches such a kernel with programmatic stream
    serialization only when asked (the manifest's `programmatic_launch`);
    launched plainly, the wait returns at once. The host target does not
    run this pass. A chip below sm_90, or a kernel that already has a
    griddepcontrol, is an error.
  }];
  let options = [
    Option<"chip", "chip", "std::string", /*default=*/"\"sm_90\"",
           "The target chip (sm_90 or newer)">
  ];
  let dependentDialects = ["::mlir::NVVM::NVVMDialect",
                           "::mlir::LLVM::LLVMDialect"];
}

#endif // KVGEN_CONVERSION_PASSES_TD
