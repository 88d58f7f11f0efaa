//===- Passes.td - kvgen's LLVM-level transforms ------------*- tablegen -*-===//
//
// The transforms of kvgen's lowered kernels, after the conversions
// (kvgen/Conversion/Passes.td): on the structured GPU form
// (kv-programmatic-launch), on the loop nest's casts and address marks
// (kv-expand-fp8-casts, kv-pin-before-slot) and on the LLVM dialect
// (kv-bare-pointer-params, kv-mark-kernel-noalias, kv-pin-addresses).
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_TRANSFORMS_PASSES_TD
#define KVGEN_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

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
    The exception is `query` and `q_out`, which may be one buffer (the
    prologue rotates Q in place, the one overlap kvrt accepts): neither is
    marked, as a store through `q_out` writes what `query` reads. The pass
    tells them apart by the kernel's `kv.param_names` (kv-loops-to-gpu
    writes it; convert-gpu-to-nvvm drops `kv.name` from the arguments), one
    name per argument of the bare-pointer kernel; a kernel without it (a
    hand-written one) has every pointer marked.
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
    The same for e2m1 (f4E2M1FN, NVFP4's element): `truncf` f32 -> e2m1
    becomes `cvt.rn.satfinite.e2m1x2.f32` (`nvvm.convert.f32x2.to.f4x2`)
    with `nvvm=true` on sm_100 and later with the `a` or `f` features (by
    the attached NVVM target; none attached: integer ops), else integer ops
    with the same bits (round to nearest even, +-6 past 5, a zero's sign
    kept, NaN -> +0); `extf` e2m1 -> f32 is integer ops.
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

#endif // KVGEN_TRANSFORMS_PASSES_TD
