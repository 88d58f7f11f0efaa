//===- DescriptionFuzzer.cpp - libFuzzer harness for kvgen's front end ----===//
//
// Feeds arbitrary bytes through what kvgen does with a description before
// the NVPTX back end: the text checks, the parser and the kv verifiers, the
// kernel planner and the bundle manifest, then kv-to-loops, the GPU mapping
// and the lowering to the NVVM/LLVM dialects. Any input may be refused with
// a diagnostic; none may crash, leak or trip a sanitizer. ptxas and the LLVM
// back end are left out: they are not kvgen's code and cost milliseconds per
// input.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Pipeline/Bundle.h"
#include "kvgen/Pipeline/Description.h"
#include "kvgen/Pipeline/Pipeline.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <cstddef>
#include <cstdint>

using namespace mlir;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const DialectRegistry *registry = [] {
    auto *r = new DialectRegistry();
    kvgen::registerKVGenDialects(*r);
    return r;
  }();
  // A context per input: nothing interned by one input (types, attributes)
  // outlives it, so memory stays flat over millions of runs. Dialects load
  // lazily, as the parser meets them.
  MLIRContext context(*registry, MLIRContext::Threading::DISABLED);
  ScopedDiagnosticHandler quiet(&context,
                                [](Diagnostic &) { return success(); });

  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(
          llvm::StringRef(reinterpret_cast<const char *>(data), size),
          "<fuzz>"),
      llvm::SMLoc());
  OwningOpRef<ModuleOp> module = kvgen::parseDescription(sourceMgr, &context);
  if (!module)
    return 0;

  std::vector<kvgen::KernelPlan> plans = kvgen::collectPlans(*module);
  (void)kvgen::writeBundle(plans, kvgen::GPUTargetOptions(), "", std::nullopt);

  PassManager pm(&context);
  kvgen::buildLoopsPipeline(pm);
  kvgen::buildGPUMappingPipeline(pm);
  kvgen::buildNVVMPipeline(pm, kvgen::GPUTargetOptions());
  (void)pm.run(*module);
  return 0;
}
