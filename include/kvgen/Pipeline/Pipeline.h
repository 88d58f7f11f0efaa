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
//===----------------------------------------------------------------------===//

#ifndef KVGEN_PIPELINE_PIPELINE_H
#define KVGEN_PIPELINE_PIPELINE_H

#include "kvgen/Conversion/KernelPlan.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace mlir {
class DialectRegistry;
class ExecutionEngine;
} // namespace mlir

namespace kvgen {

/// Everything kvgen parses, lowers and translates: the kv dialect, the
/// upstream dialects of the loop nest and of the GPU/NVVM pipeline, their
/// ConvertToLLVM interfaces and the LLVM IR translations.
void registerKVGenDialects(mlir::DialectRegistry &registry);

/// The Llama-3-8B-like default: paged NHD, block 16, 8 KV heads, head_dim
/// 128, bf16; an append, a slot-mapping builder and a fused append.
llvm::StringRef getDefaultDescription();

struct GPUTargetOptions {
  std::string chip = "sm_90";
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

/// Serializes the gpu.module of an NVVM-lowered module to PTX; if `llvmIR` is
/// given, it receives the optimized LLVM IR.
mlir::FailureOr<std::string> serializeToPTX(mlir::ModuleOp module,
                                            std::string *llvmIR = nullptr);

/// Runs ptxas on `ptx` for `chip`; returns the cubin, or failure with ptxas's
/// log (and the command that reproduces it) in `log`. `verboseLog`, if given,
/// receives ptxas -v's resource report.
mlir::FailureOr<std::string> runPtxas(llvm::StringRef ptx, llvm::StringRef chip,
                                      std::string &log,
                                      std::string *verboseLog = nullptr);

/// The bundle JSON (docs/KERNEL-ABI.md). `ptx` may be empty (host bundles).
std::string writeBundle(llvm::ArrayRef<KernelPlan> plans,
                        const GPUTargetOptions &opts, llvm::StringRef ptx,
                        std::optional<llvm::StringRef> cubin);

/// The bundle as a C header: `kvgen_bundle_<name>[]` and its size.
std::string writeBundleHeader(llvm::StringRef bundle, llvm::StringRef name);

/// A description compiled for the CPU: one packed entry point per kernel
/// (`void fn(void **params)`, the ABI of docs/KERNEL-ABI.md) and the bundle
/// manifest that kvrt validates against.
class HostKernels {
public:
  ~HostKernels();
  HostKernels(HostKernels &&);
  using Entry = void (*)(void **);
  const std::vector<KernelPlan> &getPlans() const { return plans; }
  const std::string &getBundle() const { return bundle; }
  Entry lookup(llvm::StringRef name) const;

private:
  friend mlir::FailureOr<HostKernels> compileForHost(mlir::ModuleOp);
  HostKernels();
  std::unique_ptr<mlir::ExecutionEngine> engine;
  std::vector<KernelPlan> plans;
  std::string bundle;
};

/// JIT-compiles every kernel of a kv module (which is consumed) for the host.
mlir::FailureOr<HostKernels> compileForHost(mlir::ModuleOp module);

/// Parses and verifies kv IR text with the limits and checks of
/// Description.h; diagnostics go to the context's handler.
mlir::OwningOpRef<mlir::ModuleOp> parseDescription(llvm::StringRef text,
                                                   mlir::MLIRContext *context);

} // namespace kvgen

#endif // KVGEN_PIPELINE_PIPELINE_H
