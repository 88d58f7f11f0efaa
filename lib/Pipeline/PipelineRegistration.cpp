//===- PipelineRegistration.cpp - kvgen's pipelines as named passes -------===//
//
// The pipelines kvgen runs, registered under names so that kvgen-opt (or any
// mlir-opt-like tool that calls registerKVGenPipelines) can run one on
// hand-written input: `kvgen-opt --kv-lower-to-gpu desc.mlir`. kvgen itself
// builds the same pipelines through the build*Pipeline functions, so a lit
// test of a named pipeline checks what kvgen runs.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Pipeline/Description.h"
#include "kvgen/Pipeline/Pipeline.h"

#include "mlir/Pass/PassRegistry.h"

using namespace mlir;
using namespace kvgen;

/// Registers `name` as the pipelines up to `last`, taking the
/// PipelineOptions those stages use: an option of a later stage, a chip
/// the NVPTX back end or the chip table does not know, or a value the plan
/// cannot use is refused (as kvgen refuses them) instead of ignored.
static void registerPipeline(StringRef name, StringRef description,
                             LoweringStage last) {
  std::string pipeline = name.str();
  registerPassPipeline(
      name, description,
      [pipeline,
       last](OpPassManager &pm, StringRef text,
             function_ref<LogicalResult(const Twine &)> errorHandler) {
        PipelineOptions options;
        if (failed(options.parseFromString(text)))
          return failure();
        if (std::optional<std::string> unused = options.findUnused(last))
          return errorHandler(pipeline + ": " + *unused +
                              " is an option of a stage this pipeline does "
                              "not run");
        std::string known;
        if (last != LoweringStage::Host && !isKnownChip(options.chip, &known))
          return errorHandler(pipeline + ": chip=" + options.chip +
                              " is not a chip kvgen generates for; expected "
                              "one of " +
                              known);
        if (std::optional<std::string> why = options.check())
          return errorHandler(pipeline + ": " + *why);
        buildLoopsPipeline(pm, options.getPlanOptions());
        switch (last) {
        case LoweringStage::Loops:
          break;
        case LoweringStage::Host:
          buildHostPipeline(pm);
          break;
        case LoweringStage::NVVM:
        case LoweringStage::GPUMapping:
          buildGPUMappingPipeline(pm, options.getGPUMappingOptions());
          if (last == LoweringStage::NVVM)
            buildNVVMPipeline(pm, options.getGPUTargetOptions());
          break;
        }
        return success();
      },
      [](function_ref<void(const detail::PassOptions &)> optionHandler) {
        optionHandler(PipelineOptions());
      });
}

void kvgen::registerKVGenPipelines() {
  registerPipeline(
      "kv-lower-to-loops",
      "kv ops to the target-independent loop nest of their kernels",
      LoweringStage::Loops);
  registerPipeline("kv-lower-to-gpu",
                   "kv ops to gpu.module kernels (the GPU mapping)",
                   LoweringStage::GPUMapping);
  registerPipeline(
      "kv-lower-to-nvvm",
      "kv ops to GPU kernels in the NVVM and LLVM dialects, ready for PTX",
      LoweringStage::NVVM);
  registerPipeline(
      "kv-lower-to-host",
      "kv ops to host functions in the LLVM dialect (the CPU target)",
      LoweringStage::Host);
}
