//===- HostJIT.h - kv kernels compiled for this CPU, in-process -*- C++ -*-===//
//
// The host target run in the calling process: the loop nest lowered for the
// CPU and JIT-compiled by MLIR's ExecutionEngine, one packed entry point per
// kernel, beside the bundle manifest kvrt validates against. The host suite
// and the main job run kernels this way; HostSharedLib.h makes the same code
// a shared object for processes without LLVM.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_PIPELINE_HOSTJIT_H
#define KVGEN_PIPELINE_HOSTJIT_H

#include "kvgen/Plan/KernelPlan.h"

#include "mlir/IR/BuiltinOps.h"

#include <memory>
#include <string>
#include <vector>

namespace mlir {
class ExecutionEngine;
} // namespace mlir

namespace kvgen {

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
  friend mlir::FailureOr<HostKernels> compileForHost(mlir::ModuleOp,
                                                     const PlanOptions &);
  HostKernels();
  std::unique_ptr<mlir::ExecutionEngine> engine;
  std::vector<KernelPlan> plans;
  std::string bundle;
};

/// JIT-compiles every kernel of a kv module (which is consumed) for the host,
/// planned with `options` (which must pass checkPlanOptions).
mlir::FailureOr<HostKernels> compileForHost(mlir::ModuleOp module,
                                            const PlanOptions &options = {});

} // namespace kvgen

#endif // KVGEN_PIPELINE_HOSTJIT_H
