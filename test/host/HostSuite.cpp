//===- HostSuite.cpp - every description, run on the CPU ------------------===//
//
// The host target in action: each description of the conformance matrix is
// compiled by kvgen's host pipeline (the same loop nest the GPU kernels are
// mapped from), JIT-compiled, registered in a kvrt bundle as host kernels,
// and run through kvrt's own validation and argument packing on kDLCPU
// tensors. The conformance cases then compare every byte of the caches with
// the plain C++ reference the GPU suite uses too.
//
//   kvgen-host-suite            the whole matrix
//   kvgen-host-suite --default  the embedded default description only (the
//                               README's main job)
//   kvgen-host-suite --filter=S only descriptions whose name contains S
//   kvgen-host-suite --reduced  the reduced matrix (a sample of every class,
//                               as the GPU suite runs under compute-sanitizer):
//                               for the sanitizer build, whose JIT is slow
//
// KVGEN_OPTIONS passes kvgen's --pipeline-options to the compiler, e.g. the
// kernel plan's overrides
// (KVGEN_OPTIONS="--pipeline-options='chunks-per-thread=2'"), so that an
// alternative plan is checked on every description before it is measured. Such
// a plan may have no wide kernels: with KVGEN_OPTIONS set, each bundle says
// whether its description has one.
//
// The whole matrix runs, nothing sampled: 671 descriptions, 16090 cases,
// about 2.75 minutes of one core (the JIT is 45 s of it).
//
//===----------------------------------------------------------------------===//

#include "conformance/Backend.h"
#include "conformance/Conformance.h"
#include "conformance/Description.h"
#include "conformance/HostMemory.h"

#include "kvgen/Pipeline/Description.h"
#include "kvgen/Pipeline/HostJIT.h"
#include "kvgen/Pipeline/Pipeline.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/CommandLine.h"

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <sstream>

using namespace kvgen;
using namespace kvgen::conformance;

namespace {

/// kvgen's --pipeline-options, read from KVGEN_OPTIONS only: the host
/// pipeline takes the kernel plan's options.
llvm::cl::opt<std::string> pipelineOptions(
    "pipeline-options",
    llvm::cl::desc("kvgen's --pipeline-options (the kernel plan's)"),
    llvm::cl::init(""));

/// Host memory (the conformance library's) and JIT-compiled kernels.
class HostBackend : public HostMemoryBackend {
public:
  explicit HostBackend(const PlanOptions &planOptions)
      : context(makeRegistry()), planOptions(planOptions) {
    context.loadAllAvailableDialects();
    // Keep the JIT's diagnostics as the reason bundleFor() failed.
    context.getDiagEngine().registerHandler([this](mlir::Diagnostic &d) {
      error = d.str();
      return mlir::success();
    });
  }
  ~HostBackend() override { release(); }

  std::string lastError() const override { return error; }

  kvrt_bundle *bundleFor(const Description &desc) override {
    if (fixed)
      return bundle;
    return compile("module {\n" + desc.toMlir() + "\n}\n") ? bundle : nullptr;
  }

  /// Compiles `text` once and serves its kernels to every description.
  bool compileFixed(llvm::StringRef text) {
    fixed = compile(text);
    return fixed;
  }
  const std::vector<KernelPlan> &plans() const { return kernels->getPlans(); }
  double compileMilliseconds() const { return compileMs; }

private:
  static mlir::DialectRegistry makeRegistry() {
    mlir::DialectRegistry registry;
    registerKVGenDialects(registry);
    return registry;
  }

  void release() {
    if (bundle)
      kvrt_bundle_destroy(bundle);
    bundle = nullptr;
    kernels.reset();
  }

  bool compile(llvm::StringRef text) {
    release();
    auto start = std::chrono::steady_clock::now();
    mlir::OwningOpRef<mlir::ModuleOp> module = parseDescription(text, &context);
    if (!module)
      return false;
    mlir::FailureOr<HostKernels> compiled =
        compileForHost(*module, planOptions);
    if (mlir::failed(compiled))
      return false;
    kernels = std::make_unique<HostKernels>(std::move(*compiled));
    compileMs += std::chrono::duration<double, std::milli>(
                     std::chrono::steady_clock::now() - start)
                     .count();
    const std::string &json = kernels->getBundle();
    if (kvrt_bundle_load_memory(json.data(), json.size(), &bundle) !=
        KVRT_SUCCESS) {
      error = std::string("kvrt refused the host bundle: ") + kvrt_last_error();
      bundle = nullptr;
      return false;
    }
    for (const KernelPlan &plan : kernels->getPlans()) {
      HostKernels::Entry entry = kernels->lookup(plan.name);
      if (!entry || kvrt_bundle_set_host_kernel(bundle, plan.name.c_str(),
                                                entry) != KVRT_SUCCESS) {
        error =
            "no host entry point for " + plan.name + ": " + kvrt_last_error();
        return false;
      }
    }
    return true;
  }

  mlir::MLIRContext context;
  PlanOptions planOptions;
  std::unique_ptr<HostKernels> kernels;
  kvrt_bundle *bundle = nullptr;
  bool fixed = false;
  std::string error;
  double compileMs = 0;
};

/// The conformance descriptions of the kernels a compiled module holds (the
/// vector variant's name stands for every variant).
std::vector<Description> describePlans(const std::vector<KernelPlan> &plans) {
  std::vector<Description> out;
  for (const KernelPlan &plan : plans) {
    if (plan.variant == KernelVariant::Wide ||
        (plan.variant == KernelVariant::Scalar &&
         plan.kind != KernelKind::SlotMapping))
      continue;
    Description d;
    d.name = plan.name;
    switch (plan.kind) {
    case KernelKind::Append:
      d.kind = Kind::Append;
      break;
    case KernelKind::SlotMapping:
      d.kind = Kind::SlotMapping;
      break;
    case KernelKind::FusedAppend:
      d.kind = Kind::FusedAppend;
      break;
    case KernelKind::Gather:
      d.kind = Kind::Gather;
      break;
    case KernelKind::MlaAppend:
      d.kind = Kind::MlaAppend;
      break;
    case KernelKind::MlaFusedAppend:
      d.kind = Kind::MlaFusedAppend;
      break;
    case KernelKind::PagedKvAppend:
      d.kind = Kind::PagedKvAppend;
      break;
    case KernelKind::FusedGather:
      d.kind = Kind::FusedGather;
      break;
    }
    d.kOnly = !plan.cache.hasValue();
    if (kv::LatentAttr latent = plan.cache.getLatent()) {
      d.kvLoraRank = latent.getKvLoraRank();
      d.ropeDim = latent.getRopeDim();
      // Inline scales: their own cases (InlineScalesCases.cpp).
      if (kv::InlineScalesAttr scales = latent.getScales()) {
        d.inlineGroup = scales.getGroupSize();
        if (mlir::FloatAttr floor = scales.getMinScale())
          d.inlineMinScale = static_cast<float>(floor.getValueAsDouble());
        d.inlinePowerOfTwo = scales.getPowerOfTwo();
      }
    }
    // An NVFP4 cache: its own cases (Nvfp4Cases.cpp).
    if (kv::Nvfp4Attr nvfp4 = plan.cache.getNvfp4()) {
      d.nvfp4 = true;
      d.nvfp4KSwizzled = nvfp4.getKScales() == kv::Nvfp4ScaleLayout::Swizzled;
      d.nvfp4VSwizzled = nvfp4.getVScales() == kv::Nvfp4ScaleLayout::Swizzled;
      d.nvfp4FourOverSix =
          nvfp4.getSearch() == kv::Nvfp4ScaleSearch::FourOverSix;
    }
    auto layoutName = kv::stringifyLayoutKind(plan.cache.getLayout());
    for (Layout l : {Layout::Contiguous, Layout::PagedNHD, Layout::PagedHND,
                     Layout::VllmVectorized, Layout::DualStacked})
      if (layoutName == conformance::layoutName(l))
        d.layout = l;
    d.blockSize = plan.cache.getTokensPerBlock();
    d.numKvHeads = plan.cache.getNumKvHeads();
    d.headDim = plan.cache.getHeadDim();
    if (plan.cache.isAsymmetric())
      d.vHeadDim = plan.cache.getValueHeadDim();
    auto dtypeOf = [](mlir::Type t) {
      if (t.isF32())
        return DType::F32;
      if (t.isF16())
        return DType::F16;
      if (t.isBF16())
        return DType::BF16;
      if (llvm::isa<mlir::Float8E4M3FNType>(t))
        return DType::F8E4M3;
      if (llvm::isa<mlir::Float8E5M2Type>(t))
        return DType::F8E5M2;
      return DType::I8;
    };
    d.cacheDtype = dtypeOf(plan.cache.getDtype());
    d.sourceDtype = plan.sourceType ? dtypeOf(plan.sourceType) : d.cacheDtype;
    if (d.readsRows())
      d.outputDtype = d.sourceDtype;
    kv::QuantAttr quant = plan.cache.getQuant();
    // The reference has no nvfp4 kind: an NVFP4 cache is d.nvfp4 above.
    if (quant && !plan.cache.getNvfp4()) {
      // The dialect's enums and the reference's are in the same order.
      d.quant = QuantSpec{static_cast<QuantKind>(quant.getKind()),
                          static_cast<Granularity>(quant.getGranularity()),
                          static_cast<ScaleMode>(quant.getMode()),
                          quant.getReciprocal()};
    }
    out.push_back(d);
  }
  return out;
}

} // namespace

int main(int argc, char **argv) {
  // Only the environment: the suite's own arguments follow.
  llvm::cl::ParseCommandLineOptions(1, argv, "", nullptr, nullptr,
                                    "KVGEN_OPTIONS");
  bool useDefault = false, reduced = false;
  RunOptions options;
  PipelineOptions pipeline;
  if (mlir::failed(pipeline.parseFromString(pipelineOptions, llvm::errs())))
    return 2;
  if (std::optional<std::string> unused =
          pipeline.findUnused(LoweringStage::Host)) {
    std::cerr << "error: KVGEN_OPTIONS: --pipeline-options: " << *unused
              << " is not an option of the host pipeline\n";
    return 2;
  }
  if (std::optional<std::string> why = pipeline.check()) {
    std::cerr << "error: KVGEN_OPTIONS: --pipeline-options: " << *why << "\n";
    return 2;
  }
  options.planOverridden = !pipelineOptions.empty();
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--default")
      useDefault = true;
    else if (arg == "--reduced")
      reduced = true;
    else if (arg == "--verbose")
      options.verbose = true;
    else if (arg.rfind("--filter=", 0) == 0)
      filter = arg.substr(9);
    else if (arg.rfind("--cases=", 0) == 0)
      options.caseFilter = arg.substr(8);
    else {
      std::cerr << "usage: kvgen-host-suite [--default] [--reduced] "
                   "[--filter=NAME] [--cases=NAME] [--verbose]\n";
      return 2;
    }
  }

  // A kernel that writes out of bounds can take the process down: keep
  // every line printed before that.
  std::cout << std::unitbuf;
  HostBackend backend(pipeline.getPlanOptions());
  std::vector<Description> matrix;
  if (useDefault) {
    std::cout << "host target: the default description\n"
              << getDefaultDescription().str();
    if (!backend.compileFixed(getDefaultDescription())) {
      std::cerr << "error: the default description did not compile: "
                << backend.lastError() << "\n";
      return 1;
    }
    matrix = describePlans(backend.plans());
  } else {
    for (const Description &d : reduced ? reducedMatrix() : conformanceMatrix())
      if (filter.empty() || d.name.find(filter) != std::string::npos)
        matrix.push_back(d);
  }

  RunStats stats = runMatrix(backend, matrix, options, std::cout);
  std::cout << "host suite: " << stats.summary() << " (JIT "
            << static_cast<int64_t>(backend.compileMilliseconds())
            << " ms in all)\n";
  for (const CaseFailure &f : stats.failures)
    std::cout << "FAILED: " << f.description << " / " << f.caseName << ": "
              << f.message << "\n";
  std::cout << (stats.cases - stats.failedCases) << " passed, "
            << stats.failedCases << " failed\n";
  return stats.ok() && stats.cases > 0 ? 0 : 1;
}
