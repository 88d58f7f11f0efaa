//===- Pipeline.cpp - kvgen's pass pipelines ------------------------------===//
//
// The passes of each stage, in order: kv -> loops, loops -> gpu.module,
// gpu.module -> NVVM/LLVM (the device half of upstream's
// gpu-lower-to-nvvm-pipeline) and loops -> LLVM for the CPU. kvgen builds its
// stages from these functions, and PipelineRegistration.cpp registers the same
// functions under names for kvgen-opt. PTX.cpp, Bundle.cpp and HostJIT.cpp
// take the result from there.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Pipeline/Pipeline.h"
#include "kvgen/Conversion/Passes.h"
#include "kvgen/Pipeline/Description.h"
#include "kvgen/Transforms/Passes.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/LLVMIR/Transforms/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;
using namespace kvgen;

//===----------------------------------------------------------------------===//
// Options
//===----------------------------------------------------------------------===//

std::optional<std::string>
PipelineOptions::findUnused(LoweringStage last) const {
  bool host = last == LoweringStage::Host;
  bool gpuMapping =
      last == LoweringStage::GPUMapping || last == LoweringStage::NVVM;
  bool nvvm = last == LoweringStage::NVVM;
  std::optional<std::string> unused;
  auto check = [&](bool used, const auto &option) {
    if (!used && !unused && option.hasValue())
      unused = option.getArgStr().str();
  };
  check(!host, chip);
  check(gpuMapping, elideTokenCheck);
  check(nvvm, features);
  check(nvvm, noAlias);
  check(nvvm, pinAddresses);
  return unused;
}

std::optional<std::string> PipelineOptions::check() const {
  if (std::optional<std::string> why = checkPlanOptions(getPlanOptions()))
    return why;
  if (features.hasValue())
    if (std::optional<std::string> why = checkPTXFeatures(chip, features))
      return "features=" + features + ": " + *why;
  return std::nullopt;
}

PlanOptions PipelineOptions::getPlanOptions() const {
  return planOptionsFrom(*this);
}

KVLoopsToGPUOptions PipelineOptions::getGPUMappingOptions() const {
  KVLoopsToGPUOptions options;
  options.elideTokenCheck = elideTokenCheck;
  return options;
}

GPUTargetOptions PipelineOptions::getGPUTargetOptions() const {
  GPUTargetOptions options;
  options.chip = chip;
  options.features =
      features.empty() ? ptxFeaturesFor(chip) : features.getValue();
  options.noAlias = noAlias;
  options.pinAddresses = pinAddresses;
  return options;
}

std::vector<KernelPlan> kvgen::collectPlans(ModuleOp module,
                                            const PlanOptions &options) {
  std::vector<KernelPlan> plans;
  // Only kv ops become kernels; anything else is refused by
  // verifyDescription, and skipped here for callers that did not ask.
  for (Operation &op : module.getBody()->getOperations())
    if (isa_and_nonnull<kv::KVDialect>(op.getDialect()))
      for (KernelPlan &plan : planKernels(&op, options))
        plans.push_back(std::move(plan));
  return plans;
}

//===----------------------------------------------------------------------===//
// Pass pipelines
//===----------------------------------------------------------------------===//

void kvgen::buildLoopsPipeline(OpPassManager &pm, const PlanOptions &options) {
  pm.addPass(createKVToLoops(options));
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

void kvgen::buildGPUMappingPipeline(OpPassManager &pm,
                                    const KVLoopsToGPUOptions &options) {
  pm.addPass(createKVLoopsToGPU(options));
}

void kvgen::buildNVVMPipeline(OpPassManager &pm, const GPUTargetOptions &opts) {
  // The device half of upstream's gpu-lower-to-nvvm-pipeline; the host half
  // is absent because kvgen's host is kvrt, not MLIR.
  if (opts.programmaticLaunch) {
    // On the structured form, where reads have a place in a block.
    KVProgrammaticLaunchOptions pdl;
    pdl.chip = opts.chip;
    pm.nest<gpu::GPUModuleOp>().addPass(createKVProgrammaticLaunch(pdl));
  }
  pm.addPass(createSCFToControlFlowPass());
  pm.addPass(memref::createExpandStridedMetadataPass());
  GpuNVVMAttachTargetOptions target;
  target.chip = opts.chip;
  target.features =
      opts.features.empty() ? ptxFeaturesFor(opts.chip) : opts.features;
  target.optLevel = opts.optLevel;
  pm.addPass(createGpuNVVMAttachTarget(target));
  pm.addPass(createLowerAffinePass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  OpPassManager &gpu = pm.nest<gpu::GPUModuleOp>();
  gpu.addPass(createStripDebugInfoPass());
  KVExpandFP8CastsOptions fp8;
  fp8.nvvm = true;
  gpu.addPass(createKVExpandFP8Casts(fp8));
  KVPinBeforeSlotOptions pin;
  pin.nvvm = true;
  pin.wide = opts.pinAddresses;
  gpu.addPass(createKVPinBeforeSlot(pin));
  ConvertGpuOpsToNVVMOpsOptions toNVVM;
  toNVVM.indexBitwidth = 64;
  gpu.addPass(createConvertGpuOpsToNVVMOps(toNVVM));
  gpu.addPass(createKVBarePointerParams());
  if (opts.noAlias)
    gpu.addPass(createKVMarkKernelNoAlias());
  gpu.addPass(LLVM::createNVVMOptimizeForTargetPass());
  gpu.addPass(createCanonicalizerPass());
  gpu.addPass(createCSEPass());
  gpu.addPass(createReconcileUnrealizedCastsPass());
  // On the canonical form, where a load's GEP takes the pinned offset
  // itself (the descriptor's offset 0 and stride 1 folded away).
  KVPinAddressesOptions addresses;
  addresses.split = opts.pinAddresses;
  gpu.addPass(createKVPinAddresses(addresses));
}

void kvgen::buildHostPipeline(OpPassManager &pm) {
  pm.addPass(createSCFToControlFlowPass());
  // The host has no slot latency to hide: drop the marks.
  pm.addPass(createKVPinBeforeSlot());
  // No CPU has fp8 arithmetic: the same bytes as the GPU's cvt, in integer
  // ops.
  pm.addPass(createKVExpandFP8Casts());
  // x86 has no bf16 arithmetic: expand bf16 casts into integer ops (round to
  // nearest even), the same rounding as the GPU's cvt.rn.bf16.f32.
  arith::ArithExpandOpsPassOptions expand;
  expand.includeBf16 = true;
  pm.addPass(arith::createArithExpandOpsPass(expand));
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createConvertVectorToLLVMPass());
  pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createConvertFuncToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  // The same parameter list as the GPU kernels: one pointer per buffer.
  pm.addPass(createKVBarePointerParams());
}
