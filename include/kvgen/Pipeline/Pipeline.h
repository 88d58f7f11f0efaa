//===- Pipeline.h - kvgen's stages, from a description to PTX or host code ===//
//
// The compiler as an ordered list of stages, each a function you can stop
// after (kvgen --emit=...):
//
//   kv        the description, parsed and verified
//   loops     kv-to-loops: target-independent loop nests (both targets)
//   gpu       kv-loops-to-gpu: gpu.module of gpu.func kernels
//   nvvm      the gpu.module lowered to the LLVM/NVVM dialects
//   llvm      LLVM IR of the kernels (for --target=host: the host module)
//   ptx       PTX text, from the NVVM target's serializer
//   cubin     ptxas's output for the chip
//   bundle    the runtime's JSON: manifest + PTX (+ cubin)
//
// This header declares the pass pipelines of the lowering stages
// (Pipeline.cpp; PipelineRegistration.cpp names them for kvgen-opt) and the
// dialect registry (Dialects.cpp). The other stages have their own headers:
// PTX.h (ptx, cubin), Bundle.h (bundle, C header), HostJIT.h and
// HostSharedLib.h (the host target); reading a description is
// Description.h.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_PIPELINE_PIPELINE_H
#define KVGEN_PIPELINE_PIPELINE_H

#include "kvgen/Plan/KernelPlan.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

#include <optional>
#include <string>
#include <vector>

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace kvgen {

/// Everything kvgen parses, lowers and translates: the kv dialect, the
/// upstream dialects of the loop nest and of the GPU/NVVM pipeline, their
/// ConvertToLLVM interfaces and the LLVM IR translations.
void registerKVGenDialects(mlir::DialectRegistry &registry);

struct GPUTargetOptions {
  std::string chip = "sm_90";
  /// The PTX ISA as NVPTX features; empty: ptxFeaturesFor(chip).
  std::string features = "+ptx80";
  unsigned optLevel = 3;
  /// Kernels wait for the previous grid (kv-programmatic-launch) and the
  /// manifest says so, for kvrt's programmatic dependent launch.
  bool programmaticLaunch = false;
  /// Mark the kernels' buffer pointers noalias (kv-mark-kernel-noalias):
  /// without it LLVM keeps plain ld.global for the inputs instead of the
  /// non-coherent ld.global.nc.
  bool noAlias = true;
  /// Pin the source addresses (the token's row, then the element) and the
  /// slot's wide index (kv-pin-addresses, kv-pin-before-slot's `wide`):
  /// false leaves each source address a pinned offset that its load adds to
  /// the buffer's pointer, and the slot's address a mul.wide.u32 of the
  /// token index.
  bool pinAddresses = true;
};

/// The last stage a named pipeline (or kvgen) runs, for the options that
/// apply to it.
enum class LoweringStage { Loops, GPUMapping, NVVM, Host };

/// The code-generation options of the pipelines, spelled as the named
/// pipelines take them (kv-lower-to-nvvm{chip=sm_90 chunks-per-thread=2})
/// and as kvgen's --pipeline-options does: the kernel plan's (kv-to-loops'
/// options), kv-loops-to-gpu's, and the NVVM stage's. Each default is the
/// pass's own.
struct PipelineOptions : public mlir::PassPipelineOptions<PipelineOptions> {
  Option<std::string> chip{
      *this, "chip",
      llvm::cl::desc("The GPU the kernels are for; its row of the chip table "
                     "gives the plan's thresholds"),
      llvm::cl::init(PlanOptions().chip)};
  Option<std::string> features{
      *this, "features",
      llvm::cl::desc("PTX features, e.g. +ptx80 (default: the chip's)"),
      llvm::cl::init("")};
  Option<int64_t> chunksPerThread{
      *this, "chunks-per-thread",
      llvm::cl::desc("kv-to-loops' chunks-per-thread"),
      llvm::cl::init(PlanOptions().chunksPerThread)};
  Option<int64_t> tokensPerBlock{
      *this, "tokens-per-block",
      llvm::cl::desc("kv-to-loops' tokens-per-block"),
      llvm::cl::init(PlanOptions().tokensPerBlock)};
  Option<bool> wholeWarps{*this, "whole-warps",
                          llvm::cl::desc("kv-to-loops' whole-warps"),
                          llvm::cl::init(PlanOptions().wholeWarps)};
  Option<int64_t> minBlocksPerSM{
      *this, "min-blocks-per-sm",
      llvm::cl::desc("kv-to-loops' min-blocks-per-sm"),
      llvm::cl::init(PlanOptions().minBlocksPerSM)};
  Option<int64_t> wideMinTokens{*this, "wide-min-tokens",
                                llvm::cl::desc("kv-to-loops' wide-min-tokens"),
                                llvm::cl::init(PlanOptions().wideMinTokens)};
  Option<int64_t> wideMaxTokens{*this, "wide-max-tokens",
                                llvm::cl::desc("kv-to-loops' wide-max-tokens"),
                                llvm::cl::init(PlanOptions().wideMaxTokens)};
  Option<bool> fastDivision{*this, "fast-division",
                            llvm::cl::desc("kv-to-loops' fast-division"),
                            llvm::cl::init(PlanOptions().fastDivision)};
  Option<bool> elideTokenCheck{
      *this, "elide-token-check",
      llvm::cl::desc("kv-loops-to-gpu's elide-token-check"),
      llvm::cl::init(KVLoopsToGPUOptions().elideTokenCheck)};
  Option<bool> noAlias{
      *this, "noalias",
      llvm::cl::desc("Mark the kernels' buffer pointers noalias "
                     "(kv-mark-kernel-noalias; false: plain ld.global)"),
      llvm::cl::init(GPUTargetOptions().noAlias)};
  Option<bool> pinAddresses{
      *this, "pin-addresses",
      llvm::cl::desc("Pin the source addresses (the token's row, then the "
                     "element) and the slot's wide index (kv-pin-addresses)"),
      llvm::cl::init(GPUTargetOptions().pinAddresses)};

  /// The options given that a pipeline ending with `last` does not use
  /// (the host has no chip and no GPU stages), or nothing: "name=value"
  /// of the first, for a message.
  std::optional<std::string> findUnused(LoweringStage last) const;
  /// Why the values cannot be used (checkPlanOptions, a chip with no PTX
  /// ISA, features), or nothing.
  std::optional<std::string> check() const;

  PlanOptions getPlanOptions() const;
  KVLoopsToGPUOptions getGPUMappingOptions() const;
  /// The NVVM stage's options: chip, features (the chip's when not given),
  /// noalias and pin-addresses.
  GPUTargetOptions getGPUTargetOptions() const;
};

/// Collects the kernel plans of every kv op in `module` (before lowering),
/// with the options kv-to-loops is given: the bundle's manifest and the
/// kernels must come from the same plan. `options` must pass
/// checkPlanOptions.
std::vector<KernelPlan> collectPlans(mlir::ModuleOp module,
                                     const PlanOptions &options = {});

/// Adds kv -> loops.
void buildLoopsPipeline(mlir::OpPassManager &pm,
                        const PlanOptions &options = {});
/// Adds loops -> gpu.module (stop here for --emit=gpu).
void buildGPUMappingPipeline(mlir::OpPassManager &pm,
                             const KVLoopsToGPUOptions &options = {});
/// Adds gpu.module -> LLVM/NVVM dialects, with the target attached.
void buildNVVMPipeline(mlir::OpPassManager &pm, const GPUTargetOptions &opts);
/// Adds loops -> LLVM dialect for the CPU.
void buildHostPipeline(mlir::OpPassManager &pm);

/// Registers the pipelines above as kv-lower-to-loops, kv-lower-to-gpu,
/// kv-lower-to-nvvm and kv-lower-to-host, each taking the PipelineOptions
/// of the stages it runs (PipelineRegistration.cpp).
void registerKVGenPipelines();

} // namespace kvgen

#endif // KVGEN_PIPELINE_PIPELINE_H
