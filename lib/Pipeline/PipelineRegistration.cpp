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

namespace {

struct NVVMPipelineOptions : public PassPipelineOptions<NVVMPipelineOptions> {
  Option<std::string> chip{*this, "chip",
                           llvm::cl::desc("The GPU the kernels are for"),
                           llvm::cl::init("sm_90")};
  Option<std::string> features{*this, "features",
                               llvm::cl::desc("PTX features, e.g. +ptx80 "
                                              "(default: the chip's)"),
                               llvm::cl::init("")};
};

} // namespace

void kvgen::registerKVGenPipelines() {
  PassPipelineRegistration<>(
      "kv-lower-to-loops",
      "kv ops to the target-independent loop nest of their kernels",
      [](OpPassManager &pm) { buildLoopsPipeline(pm); });
  PassPipelineRegistration<>("kv-lower-to-gpu",
                             "kv ops to gpu.module kernels (the GPU mapping)",
                             [](OpPassManager &pm) {
                               buildLoopsPipeline(pm);
                               buildGPUMappingPipeline(pm);
                             });
  // Registered by hand, not through PassPipelineRegistration, to refuse a
  // chip the NVPTX back end does not know (as kvgen --chip does) instead of
  // attaching a target nothing can load.
  registerPassPipeline(
      "kv-lower-to-nvvm",
      "kv ops to GPU kernels in the NVVM and LLVM dialects, ready for PTX",
      [](OpPassManager &pm, StringRef text,
         function_ref<LogicalResult(const Twine &)> errorHandler) {
        NVVMPipelineOptions options;
        if (failed(options.parseFromString(text)))
          return failure();
        std::string known;
        if (!isKnownChip(options.chip, &known))
          return errorHandler("kv-lower-to-nvvm: chip=" + options.chip +
                              " is not a chip kvgen generates for; expected "
                              "one of " +
                              known);
        if (!options.features.empty())
          if (std::optional<std::string> why =
                  checkPTXFeatures(options.chip, options.features))
            return errorHandler(
                "kv-lower-to-nvvm: features=" + options.features + ": " + *why);
        GPUTargetOptions target;
        target.chip = options.chip;
        target.features = options.features;
        buildLoopsPipeline(pm);
        buildGPUMappingPipeline(pm);
        buildNVVMPipeline(pm, target);
        return success();
      },
      [](function_ref<void(const detail::PassOptions &)> optionHandler) {
        optionHandler(NVVMPipelineOptions());
      });
  PassPipelineRegistration<>(
      "kv-lower-to-host",
      "kv ops to host functions in the LLVM dialect (the CPU target)",
      [](OpPassManager &pm) {
        buildLoopsPipeline(pm);
        buildHostPipeline(pm);
      });
}
