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

#include "kvgen/Conversion/KernelPlan.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"

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
};

/// Collects the kernel plans of every kv op in `module` (before lowering).
std::vector<KernelPlan> collectPlans(mlir::ModuleOp module);

/// Adds kv -> loops.
void buildLoopsPipeline(mlir::OpPassManager &pm);
/// Adds loops -> gpu.module (stop here for --emit=gpu).
void buildGPUMappingPipeline(mlir::OpPassManager &pm);
/// Adds gpu.module -> LLVM/NVVM dialects, with the target attached.
void buildNVVMPipeline(mlir::OpPassManager &pm, const GPUTargetOptions &opts);
/// Adds loops -> LLVM dialect for the CPU.
void buildHostPipeline(mlir::OpPassManager &pm);

/// Registers the pipelines above as kv-lower-to-loops, kv-lower-to-gpu,
/// kv-lower-to-nvvm{chip=... features=...} and kv-lower-to-host
/// (PipelineRegistration.cpp).
void registerKVGenPipelines();

} // namespace kvgen

#endif // KVGEN_PIPELINE_PIPELINE_H
