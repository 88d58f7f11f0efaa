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

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/LLVMIR/Transforms/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/CommandLine.h"

// A tuning override, for measuring the alternative side by side
// (docs/dev/TUNING.md): without noalias, LLVM keeps plain ld.global for the
// inputs instead of the non-coherent ld.global.nc.
static llvm::cl::opt<bool>
    clNoAlias("kvgen-noalias", llvm::cl::Hidden, llvm::cl::init(true),
              llvm::cl::desc("Mark the kernels' buffer pointers noalias "
                             "(kv-mark-kernel-noalias)"));

// For measuring the kernels before the uniform-datapath address forms
// (docs/dev/TUNING.md): false leaves each source address
// a pinned offset that its load adds to the buffer's pointer, and the slot's
// address a mul.wide.u32 of the token index.
static llvm::cl::opt<bool> clPinAddresses(
    "kvgen-pin-addresses", llvm::cl::Hidden, llvm::cl::init(true),
    llvm::cl::desc("Pin the source addresses (the token's row, then the "
                   "element) and the slot's wide index (kv-pin-addresses)"));

using namespace mlir;
using namespace kvgen;

std::vector<KernelPlan> kvgen::collectPlans(ModuleOp module) {
  std::vector<KernelPlan> plans;
  // Only kv ops become kernels; anything else is refused by
  // verifyDescription, and skipped here for callers that did not ask.
  for (Operation &op : module.getBody()->getOperations())
    if (isa_and_nonnull<kv::KVDialect>(op.getDialect()))
      for (KernelPlan &plan : planKernels(&op))
        plans.push_back(std::move(plan));
  return plans;
}

//===----------------------------------------------------------------------===//
// Pass pipelines
//===----------------------------------------------------------------------===//

void kvgen::buildLoopsPipeline(OpPassManager &pm) {
  pm.addPass(createKVToLoops());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

void kvgen::buildGPUMappingPipeline(OpPassManager &pm) {
  pm.addPass(createKVLoopsToGPU());
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
  pin.wide = clPinAddresses;
  gpu.addPass(createKVPinBeforeSlot(pin));
  ConvertGpuOpsToNVVMOpsOptions toNVVM;
  toNVVM.indexBitwidth = 64;
  gpu.addPass(createConvertGpuOpsToNVVMOps(toNVVM));
  gpu.addPass(createKVBarePointerParams());
  if (clNoAlias)
    gpu.addPass(createKVMarkKernelNoAlias());
  gpu.addPass(LLVM::createNVVMOptimizeForTargetPass());
  gpu.addPass(createCanonicalizerPass());
  gpu.addPass(createCSEPass());
  gpu.addPass(createReconcileUnrealizedCastsPass());
  // On the canonical form, where a load's GEP takes the pinned offset
  // itself (the descriptor's offset 0 and stride 1 folded away).
  KVPinAddressesOptions addresses;
  addresses.split = clPinAddresses;
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
