//===- Pipeline.cpp - kvgen's stages: passes, PTX, ptxas, bundle, host JIT ===//
//
// This is the one translation unit that includes the GPU, NVVM, LLVM and
// ExecutionEngine headers (the slow compile); everything else in kvgen stays
// light.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Pipeline/Pipeline.h"
#include "kvgen/Conversion/Passes.h"
#include "kvgen/Pipeline/Description.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/GPU/IR/CompilationInterfaces.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/LLVMIR/Transforms/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Transforms/Passes.h"

#include "llvm/IR/Module.h"
#include "llvm/Support/Base64.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace kvgen;

void kvgen::registerKVGenDialects(DialectRegistry &registry) {
  registry.insert<kv::KVDialect>();
  registerAllDialects(registry);
  registerAllExtensions(registry);
  registerAllToLLVMIRTranslations(registry);
  NVVM::registerNVVMTargetInterfaceExternalModels(registry);
}

StringRef kvgen::getDefaultDescription() {
  return R"mlir(// kvgen's default: a Llama-3-8B-like cache.
module {
  kv.append @kv_append : !kv.cache<layout = paged_nhd, block_size = 16,
      num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16
  kv.slot_mapping @kv_slot_mapping : !kv.cache<layout = paged_nhd,
      block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16>
  kv.fused_append @kv_fused_append : !kv.cache<layout = paged_nhd,
      block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16
}
)mlir";
}

OwningOpRef<ModuleOp> kvgen::parseDescription(StringRef text,
                                              MLIRContext *context) {
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBuffer(text, "<description>",
                                       /*RequiresNullTerminator=*/false),
      llvm::SMLoc());
  return parseDescription(sourceMgr, context);
}

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
  target.features = opts.features;
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
  gpu.addPass(createKVPinBeforeSlot(pin));
  ConvertGpuOpsToNVVMOpsOptions toNVVM;
  toNVVM.indexBitwidth = 64;
  gpu.addPass(createConvertGpuOpsToNVVMOps(toNVVM));
  gpu.addPass(createKVBarePointerParams());
  gpu.addPass(createKVMarkKernelNoAlias());
  gpu.addPass(LLVM::createNVVMOptimizeForTargetPass());
  gpu.addPass(createCanonicalizerPass());
  gpu.addPass(createCSEPass());
  gpu.addPass(createReconcileUnrealizedCastsPass());
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

//===----------------------------------------------------------------------===//
// PTX and cubin
//===----------------------------------------------------------------------===//

FailureOr<std::string> kvgen::serializeToPTX(ModuleOp module,
                                             std::string *llvmIR) {
  std::string ptx;
  for (auto gpuModule : module.getOps<gpu::GPUModuleOp>()) {
    ArrayAttr targets = gpuModule.getTargetsAttr();
    if (!targets || targets.empty())
      return gpuModule.emitError("gpu.module has no target attached");
    auto target = cast<gpu::TargetAttrInterface>(targets[0]);
    auto keepIR = [&](llvm::Module &m) {
      if (!llvmIR)
        return;
      llvm::raw_string_ostream os(*llvmIR);
      m.print(os, nullptr);
    };
    gpu::TargetOptions options(
        /*toolkitPath=*/{}, /*librariesToLink=*/{}, /*cmdOptions=*/{},
        /*elfSection=*/{}, gpu::CompilationTarget::Assembly,
        /*getSymbolTableCallback=*/{}, /*initialLlvmIRCallback=*/{},
        /*linkedLlvmIRCallback=*/{}, /*optimizedLlvmIRCallback=*/keepIR);
    std::optional<SmallVector<char, 0>> object =
        target.serializeToObject(gpuModule, options);
    if (!object)
      return gpuModule.emitError("failed to serialize the kernels to PTX");
    ptx.append(object->begin(), object->end());
  }
  // The serializer NUL-terminates PTX for the driver; keep text clean.
  while (!ptx.empty() && ptx.back() == '\0')
    ptx.pop_back();
  return ptx;
}

FailureOr<std::string> kvgen::runPtxas(StringRef ptx, StringRef chip,
                                       std::string &log,
                                       std::string *verboseLog) {
  SmallVector<std::string> candidates;
  for (const char *env : {"CUDA_HOME", "CUDA_ROOT", "CUDA_PATH"})
    if (const char *dir = std::getenv(env))
      candidates.push_back((Twine(dir) + "/bin/ptxas").str());
  candidates.push_back("/usr/local/cuda/bin/ptxas");
  std::string ptxas;
  for (const std::string &c : candidates)
    if (llvm::sys::fs::can_execute(c)) {
      ptxas = c;
      break;
    }
  if (ptxas.empty()) {
    if (auto found = llvm::sys::findProgramByName("ptxas"))
      ptxas = *found;
  }
  if (ptxas.empty()) {
    log = "ptxas not found (looked in $CUDA_HOME, /usr/local/cuda and PATH)";
    return failure();
  }

  SmallString<128> in, out, err;
  int fd;
  if (llvm::sys::fs::createTemporaryFile("kvgen", "ptx", fd, in)) {
    log = "cannot create a temporary file for ptxas";
    return failure();
  }
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    os << ptx;
  }
  llvm::sys::fs::createTemporaryFile("kvgen", "cubin", out);
  llvm::sys::fs::createTemporaryFile("kvgen", "log", err);
  std::string archFlag = ("-arch=" + chip).str();
  SmallVector<StringRef> argv = {ptxas, archFlag, "-v", "-o", out, in};
  std::optional<StringRef> redirects[] = {std::nullopt, err, err};
  std::string execError;
  int rc = llvm::sys::ExecuteAndWait(ptxas, argv, std::nullopt, redirects, 0, 0,
                                     &execError);
  std::string ptxasLog;
  if (auto buf = llvm::MemoryBuffer::getFile(err))
    ptxasLog = (*buf)->getBuffer().str();
  FailureOr<std::string> result = failure();
  if (rc != 0) {
    log = "ptxas failed (" + execError + "):\n" + ptxasLog +
          "\nreproduce with: " + ptxas + " " + archFlag + " -v " +
          in.str().str();
    llvm::sys::fs::remove(out);
    llvm::sys::fs::remove(err);
    return failure();
  }
  if (verboseLog)
    *verboseLog = ptxasLog;
  if (auto buf = llvm::MemoryBuffer::getFile(out, /*IsText=*/false))
    result = (*buf)->getBuffer().str();
  else
    log = "cannot read ptxas's output";
  for (StringRef f : {StringRef(in), StringRef(out), StringRef(err)})
    llvm::sys::fs::remove(f);
  return result;
}

//===----------------------------------------------------------------------===//
// Bundle
//===----------------------------------------------------------------------===//

static llvm::json::Object quantToJSON(kv::QuantAttr quant) {
  return llvm::json::Object{
      {"kind", kv::stringifyQuantKind(quant.getKind()).str()},
      {"granularity",
       kv::stringifyScaleGranularity(quant.getGranularity()).str()},
      {"mode", kv::stringifyScaleMode(quant.getMode()).str()},
      {"reciprocal", quant.getReciprocal()}};
}

static llvm::json::Object cacheToJSON(kv::CacheType cache) {
  llvm::json::Object o;
  o["layout"] = kv::stringifyLayoutKind(cache.getLayout()).str();
  if (cache.isPaged())
    o["block_size"] = cache.getBlockSize();
  else
    o["max_seq_len"] = cache.getMaxSeqLen();
  o["num_kv_heads"] = cache.getNumKvHeads();
  o["head_dim"] = cache.getHeadDim();
  o["dtype"] = kv::getDTypeName(cache.getDtype());
  if (cache.getLayout() == kv::LayoutKind::VllmVectorized)
    o["x"] = cache.getX();
  if (kv::QuantAttr quant = cache.getQuant())
    o["quant"] = quantToJSON(quant);
  // Written only where they hold, so that a K/V cache's entry is unchanged.
  if (cache.getKOnly())
    o["k_only"] = true;
  if (kv::LatentAttr latent = cache.getLatent())
    o["latent"] = llvm::json::Object{{"kv_lora_rank", latent.getKvLoraRank()},
                                     {"rope_dim", latent.getRopeDim()}};
  return o;
}

static std::string describe(const KernelPlan &plan) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "kv." << abi::kindName(plan.kind) << " @" << plan.name << " : "
     << plan.cache;
  if (plan.kind == KernelKind::Gather)
    os << " to " << plan.sourceType;
  else if (plan.sourceType)
    os << " from " << plan.sourceType;
  return text;
}

std::string kvgen::writeBundle(ArrayRef<KernelPlan> plans,
                               const GPUTargetOptions &opts, StringRef ptx,
                               std::optional<StringRef> cubin) {
  llvm::json::Array kernels;
  for (const KernelPlan &plan : plans) {
    llvm::json::Object k;
    k["name"] = plan.name;
    k["kind"] = abi::kindName(plan.kind);
    k["variant"] = abi::variantName(plan.variant);
    k["description"] = describe(plan);
    k["cache"] = cacheToJSON(plan.cache);
    if (plan.kind == KernelKind::Gather)
      k["output_dtype"] = kv::getDTypeName(plan.sourceType);
    else if (plan.sourceType)
      k["source_dtype"] = kv::getDTypeName(plan.sourceType);
    k["alignment"] = plan.alignment;
    k["vector_elems"] = plan.vectorElems;
    k["vector_bytes"] = plan.vectorBytes;
    k["launch"] = llvm::json::Object{{"threads_x", plan.threadsX},
                                     {"tokens_per_block", plan.tokensPerBlock},
                                     {"chunks_per_token", plan.chunksPerToken}};
    // The names come from the ABI's table, the same walk kvrt packs from.
    llvm::json::Array params;
    for (abi::Param param : plan.getParams())
      params.push_back(abi::paramName(param));
    k["params"] = std::move(params);
    // Optional: a kvrt that predates it launches the kernel plainly, and
    // then its griddepcontrol.wait returns at once.
    if (opts.programmaticLaunch)
      k["programmatic_launch"] = true;
    kernels.push_back(std::move(k));
  }
  llvm::json::Object root;
  root["format"] = "kvgen-bundle";
  root["version"] = abi::kBundleVersion;
  root["target"] =
      llvm::json::Object{{"chip", opts.chip}, {"features", opts.features}};
  if (!ptx.empty())
    root["ptx"] = ptx.str();
  if (cubin)
    root["cubin_base64"] = llvm::encodeBase64(*cubin);
  root["kernels"] = std::move(kernels);
  std::string out;
  llvm::raw_string_ostream os(out);
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(root))) << "\n";
  return out;
}

std::string kvgen::writeBundleHeader(StringRef bundle, StringRef name) {
  std::string out;
  llvm::raw_string_ostream os(out);
  os << "// Generated by kvgen: the kvrt bundle '" << name
     << "'. Load it with kvrt_bundle_load_memory.\n#pragma once\n"
     << "#include <stddef.h>\n\n"
     << "static const unsigned char kvgen_bundle_" << name << "[] = {";
  for (size_t i = 0; i < bundle.size(); ++i) {
    if (i % 16 == 0)
      os << "\n ";
    os << " " << unsigned(static_cast<unsigned char>(bundle[i])) << ",";
  }
  os << "\n};\nstatic const size_t kvgen_bundle_" << name
     << "_size = sizeof(kvgen_bundle_" << name << ");\n";
  return out;
}

//===----------------------------------------------------------------------===//
// Host target
//===----------------------------------------------------------------------===//

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

FailureOr<HostKernels> kvgen::compileForHost(ModuleOp module) {
  static bool initialized = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    return true;
  }();
  (void)initialized;

  HostKernels result;
  result.plans = collectPlans(module);
  result.bundle =
      writeBundle(result.plans, GPUTargetOptions(), /*ptx=*/"", std::nullopt);
  PassManager pm(module.getContext());
  buildLoopsPipeline(pm);
  buildHostPipeline(pm);
  if (failed(pm.run(module)))
    return failure();

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
