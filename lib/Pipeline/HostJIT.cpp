//===- HostJIT.cpp - kv kernels JIT-compiled for this CPU -----------------===//
//
// The host target in-process: the loops and host pipelines, then MLIR's
// ExecutionEngine (LLVM's ORC JIT at -O2). This is the only file of kvgen
// that includes the ExecutionEngine.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Pipeline/HostJIT.h"
#include "kvgen/Pipeline/Bundle.h"
#include "kvgen/Pipeline/HostBuiltins.h"
#include "kvgen/Pipeline/Pipeline.h"

#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/Pass/PassManager.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/TargetSelect.h"

using namespace mlir;
using namespace kvgen;

HostKernels::HostKernels() = default;
HostKernels::~HostKernels() = default;
HostKernels::HostKernels(HostKernels &&) = default;

HostKernels::Entry HostKernels::lookup(StringRef name) const {
  auto fn = engine->lookupPacked(name);
  if (!fn) {
    llvm::consumeError(fn.takeError());
    return nullptr;
  }
  return *fn;
}

FailureOr<HostKernels> kvgen::compileForHost(ModuleOp module,
                                             const PlanOptions &planOptions) {
  static bool initialized = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    return true;
  }();
  (void)initialized;

  HostKernels result;
  result.plans = collectPlans(module, planOptions);
  result.bundle =
      writeBundle(result.plans, GPUTargetOptions(), /*ptx=*/"", std::nullopt);
  PassManager pm(module.getContext());
  buildLoopsPipeline(pm, planOptions);
  buildHostPipeline(pm);
  if (failed(pm.run(module)))
    return failure();
  defineHostBuiltins(module);

  ExecutionEngineOptions options;
  auto transformer = makeOptimizingTransformer(/*optLevel=*/2,
                                               /*sizeLevel=*/0,
                                               /*targetMachine=*/nullptr);
  options.transformer = transformer;
  options.jitCodeGenOptLevel = llvm::CodeGenOptLevel::Default;
  auto engine = ExecutionEngine::create(module, options);
  if (!engine) {
    std::string message = llvm::toString(engine.takeError());
    return module.emitError("host JIT failed: ") << message;
  }
  result.engine = std::move(*engine);
  return result;
}
