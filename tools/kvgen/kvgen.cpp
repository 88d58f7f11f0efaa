//===- kvgen.cpp - the kvgen compiler driver ------------------------------===//
//
// A cache description in (an .mlir file of kv ops, command-line flags, or the
// embedded default), any stage out: kv IR, loop nests, GPU IR, NVVM IR, LLVM
// IR, PTX, a cubin, or a bundle for kvrt (JSON, or a C header embedding it).
//
//   kvgen                                   the default kernels, as a bundle
//   kvgen desc.mlir --emit=ptx -o k.ptx
//   kvgen --layout=paged_hnd --block-size=32 --dtype=f16 --emit=loops
//
// Nothing is written unless the whole compilation succeeds.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Conversion/Passes.h"
#include "kvgen/Pipeline/HostSharedLib.h"
#include "kvgen/Pipeline/Pipeline.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace mlir;
using namespace kvgen;
namespace cl = llvm::cl;

static cl::OptionCategory kvgenCategory("kvgen options");
static cl::OptionCategory
    descCategory("Description flags (instead of an input file)");

static cl::opt<std::string> inputFilename(cl::Positional,
                                          cl::desc("<description.mlir>"),
                                          cl::init(""), cl::cat(kvgenCategory));
static cl::opt<std::string> outputFilename("o", cl::desc("Output file"),
                                           cl::value_desc("filename"),
                                           cl::init("-"),
                                           cl::cat(kvgenCategory));

enum class Stage {
  KV,
  Loops,
  GPU,
  NVVM,
  LLVM,
  PTX,
  Cubin,
  Bundle,
  Header,
  SharedLib
};
static cl::opt<Stage> emit(
    "emit", cl::desc("The stage to emit"), cl::init(Stage::Bundle),
    cl::values(clEnumValN(Stage::KV, "kv", "the verified kv IR"),
               clEnumValN(Stage::Loops, "loops", "the loop nests"),
               clEnumValN(Stage::GPU, "gpu", "the gpu.module of kernels"),
               clEnumValN(Stage::NVVM, "nvvm", "the kernels in NVVM/LLVM IR"),
               clEnumValN(Stage::LLVM, "llvm", "LLVM IR"),
               clEnumValN(Stage::PTX, "ptx", "PTX"),
               clEnumValN(Stage::Cubin, "cubin", "a cubin (runs ptxas)"),
               clEnumValN(Stage::Bundle, "bundle", "a kvrt bundle (JSON)"),
               clEnumValN(Stage::Header, "header",
                          "a C header embedding the bundle"),
               clEnumValN(Stage::SharedLib, "shared-lib",
                          "host kernels and their bundle as a shared object "
                          "(--target=host)")),
    cl::cat(kvgenCategory));

enum class Target { GPU, Host };
static cl::opt<Target> target(
    "target", cl::desc("Where the kernels run"), cl::init(Target::GPU),
    cl::values(clEnumValN(Target::GPU, "gpu", "NVIDIA GPU (PTX)"),
               clEnumValN(Target::Host, "host",
                          "this CPU (loops and LLVM IR; kvrt's host path)")),
    cl::cat(kvgenCategory));

static cl::opt<std::string> chip("kvgen-chip", cl::desc("GPU chip"),
                                 cl::init("sm_90"), cl::cat(kvgenCategory));
static cl::alias chipAlias("chip", cl::aliasopt(chip), cl::desc("Alias"));
static cl::opt<std::string> features("kvgen-features", cl::desc("PTX features"),
                                     cl::init("+ptx80"),
                                     cl::cat(kvgenCategory));
static cl::opt<bool> withCubin("with-cubin",
                               cl::desc("Put a cubin (ptxas) in the bundle"),
                               cl::init(false), cl::cat(kvgenCategory));
static cl::opt<bool>
    ptxasVerbose("ptxas-verbose",
                 cl::desc("Run ptxas -v on the PTX and print its report"),
                 cl::init(false), cl::cat(kvgenCategory));
static cl::opt<bool> verifyDiagnostics(
    "verify-diagnostics",
    cl::desc("Check diagnostics against expected-* lines in the input"),
    cl::init(false), cl::cat(kvgenCategory));

// Description flags.
static cl::opt<std::string> layoutFlag("layout", cl::desc("Cache layout"),
                                       cl::cat(descCategory));
static cl::opt<int64_t> blockSizeFlag("block-size", cl::desc("Block size"),
                                      cl::init(16), cl::cat(descCategory));
static cl::opt<int64_t>
    maxSeqLenFlag("max-seq-len", cl::desc("max_seq_len (contiguous layout)"),
                  cl::init(0), cl::cat(descCategory));
static cl::opt<int64_t> numKvHeadsFlag("num-kv-heads", cl::desc("KV heads"),
                                       cl::init(8), cl::cat(descCategory));
static cl::opt<int64_t> headDimFlag("head-dim", cl::desc("Head dim"),
                                    cl::init(128), cl::cat(descCategory));
static cl::opt<std::string> dtypeFlag("dtype",
                                      cl::desc("Dtype of K and V (and of the "
                                               "cache, unless --cache-dtype)"),
                                      cl::init("bf16"), cl::cat(descCategory));
static cl::opt<std::string> cacheDtypeFlag("cache-dtype",
                                           cl::desc("Dtype of the cache"),
                                           cl::init(""), cl::cat(descCategory));
static cl::opt<std::string>
    quantFlag("quant",
              cl::desc("Quantization: kind,granularity,mode (e.g. "
                       "fp8_e4m3,per_tensor,static)"),
              cl::init(""), cl::cat(descCategory));
static cl::opt<std::string>
    kernelsFlag("kernels",
                cl::desc("Kernels to generate: append,slot_mapping,"
                         "fused_append"),
                cl::init("append,slot_mapping,fused_append"),
                cl::cat(descCategory));
static cl::opt<std::string> nameFlag("name",
                                     cl::desc("Kernel name prefix (and the "
                                              "header's array name)"),
                                     cl::init("kv"), cl::cat(descCategory));

/// True when any description flag was given on the command line.
static bool descriptionFlagsGiven() {
  for (cl::Option *o : std::initializer_list<cl::Option *>{
           &layoutFlag, &blockSizeFlag, &maxSeqLenFlag, &numKvHeadsFlag,
           &headDimFlag, &dtypeFlag, &cacheDtypeFlag, &quantFlag, &kernelsFlag})
    if (o->getNumOccurrences())
      return true;
  return false;
}

/// Builds a kv module's text from the flags. Flag values that the dialect's
/// parser would reject with a less helpful message are checked here first.
static FailureOr<std::string> descriptionFromFlags() {
  auto oneOf = [](StringRef flag, StringRef value,
                  ArrayRef<StringRef> allowed) -> LogicalResult {
    if (llvm::is_contained(allowed, value))
      return success();
    llvm::errs() << "kvgen: --" << flag << "=" << value << ": expected one of "
                 << llvm::join(allowed, ", ") << "\n";
    return failure();
  };
  std::string layout =
      layoutFlag.empty() ? std::string("paged_nhd") : layoutFlag.getValue();
  if (failed(oneOf("layout", layout,
                   {"contiguous", "paged_nhd", "paged_hnd", "vllm_vectorized",
                    "dual_stacked"})) ||
      failed(oneOf("dtype", dtypeFlag, {"f32", "f16", "bf16"})))
    return failure();
  std::string cacheDtype =
      cacheDtypeFlag.empty() ? dtypeFlag.getValue() : cacheDtypeFlag.getValue();
  if (failed(oneOf("cache-dtype", cacheDtype,
                   {"f32", "f16", "bf16", "f8E4M3FN", "f8E5M2", "i8"})))
    return failure();

  std::string cache;
  llvm::raw_string_ostream os(cache);
  os << "!kv.cache<layout = " << layout << ", ";
  if (layout == "contiguous")
    os << "max_seq_len = " << maxSeqLenFlag << ", ";
  else
    os << "block_size = " << blockSizeFlag << ", ";
  os << "num_kv_heads = " << numKvHeadsFlag << ", head_dim = " << headDimFlag
     << ", dtype = " << cacheDtype;
  if (!quantFlag.empty()) {
    SmallVector<StringRef> parts;
    StringRef(quantFlag).split(parts, ',');
    if (parts.size() != 3) {
      llvm::errs() << "kvgen: --quant=" << quantFlag
                   << ": expected kind,granularity,mode\n";
      return failure();
    }
    os << ", quant = #kv.quant<kind = " << parts[0]
       << ", granularity = " << parts[1] << ", mode = " << parts[2] << ">";
  }
  os << ">";

  std::string text = "module {\n";
  SmallVector<StringRef> kernels;
  StringRef(kernelsFlag).split(kernels, ',', -1, /*KeepEmpty=*/false);
  for (StringRef k : kernels) {
    if (failed(oneOf("kernels", k, {"append", "slot_mapping", "fused_append"})))
      return failure();
    text += "  kv." + k.str() + " @" + nameFlag + "_" + k.str() + " : " +
            cache + (k == "slot_mapping" ? "" : " from " + dtypeFlag) + "\n";
  }
  return text + "}\n";
}

static LogicalResult writeOutput(StringRef data) {
  std::string error;
  auto output = openOutputFile(outputFilename, &error);
  if (!output) {
    llvm::errs() << "kvgen: " << error << "\n";
    return failure();
  }
  output->os() << data;
  output->keep();
  return success();
}

static std::string printModule(ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module.print(os);
  return text;
}

static LogicalResult compile(MLIRContext &context, llvm::SourceMgr &sourceMgr,
                             TimingScope &timing) {
  TimingScope parseTiming = timing.nest("Parse and verify");
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, &context);
  parseTiming.stop();
  if (!module)
    return failure();
  if (emit == Stage::KV)
    return writeOutput(printModule(*module));

  std::vector<KernelPlan> plans = collectPlans(*module);
  GPUTargetOptions gpuOptions;
  gpuOptions.chip = chip;
  gpuOptions.features = features;

  PassManager pm(&context);
  if (failed(applyPassManagerCLOptions(pm)))
    return failure();
  TimingScope pipelineTiming = timing.nest("Pipeline");
  pm.enableTiming(pipelineTiming);

  if (emit == Stage::SharedLib) {
    if (target != Target::Host) {
      llvm::errs() << "kvgen: --emit=shared-lib needs --target=host\n";
      return failure();
    }
    FailureOr<std::string> lib = buildHostSharedLib(*module, pm);
    return failed(lib) ? failure() : writeOutput(*lib);
  }
  buildLoopsPipeline(pm);
  if (target == Target::Host) {
    if (emit == Stage::Bundle) {
      // A host bundle: the manifest only; the kernels are JIT-compiled by
      // the application (kvgen::compileForHost).
      if (failed(pm.run(*module)))
        return failure();
      return writeOutput(writeBundle(plans, gpuOptions, "", std::nullopt));
    }
    if (emit != Stage::Loops)
      buildHostPipeline(pm);
    if (emit != Stage::Loops && emit != Stage::LLVM) {
      llvm::errs() << "kvgen: --target=host emits kv, loops, llvm or bundle\n";
      return failure();
    }
    if (failed(pm.run(*module)))
      return failure();
    return writeOutput(printModule(*module));
  }

  if (emit != Stage::Loops)
    buildGPUMappingPipeline(pm);
  if (emit != Stage::Loops && emit != Stage::GPU)
    buildNVVMPipeline(pm, gpuOptions);
  if (failed(pm.run(*module)))
    return failure();
  pipelineTiming.stop();
  if (emit == Stage::Loops || emit == Stage::GPU || emit == Stage::NVVM)
    return writeOutput(printModule(*module));

  TimingScope ptxTiming = timing.nest("Serialize to PTX");
  std::string llvmIR;
  FailureOr<std::string> ptx = serializeToPTX(*module, &llvmIR);
  ptxTiming.stop();
  if (failed(ptx))
    return failure();
  if (emit == Stage::LLVM)
    return writeOutput(llvmIR);
  if (emit == Stage::PTX && !ptxasVerbose)
    return writeOutput(*ptx);

  std::optional<std::string> cubin;
  if (emit == Stage::Cubin || withCubin || ptxasVerbose) {
    TimingScope ptxasTiming = timing.nest("ptxas");
    std::string log, report;
    FailureOr<std::string> assembled = runPtxas(*ptx, chip, log, &report);
    if (failed(assembled)) {
      llvm::errs() << "kvgen: " << log << "\n";
      return failure();
    }
    if (ptxasVerbose)
      llvm::errs() << report;
    cubin = *assembled;
  }
  if (emit == Stage::PTX)
    return writeOutput(*ptx);
  if (emit == Stage::Cubin)
    return writeOutput(*cubin);
  std::string bundle =
      writeBundle(plans, gpuOptions, *ptx,
                  withCubin ? std::optional<StringRef>(*cubin) : std::nullopt);
  switch (emit) {
  case Stage::Bundle:
    return writeOutput(bundle);
  case Stage::Header:
    return writeOutput(writeBundleHeader(bundle, nameFlag));
  default:
    llvm_unreachable("stage handled above");
  }
}

int main(int argc, char **argv) {
  llvm::InitLLVM y(argc, argv);
  registerAsmPrinterCLOptions();
  registerMLIRContextCLOptions();
  registerPassManagerCLOptions();
  registerDefaultTimingManagerCLOptions();
  cl::AddExtraVersionPrinter(printKVGenVersion);
  cl::HideUnrelatedOptions(
      {&kvgenCategory, &descCategory, &cl::getGeneralCategory()});
  cl::ParseCommandLineOptions(argc, argv,
                              "kvgen: KV-cache append kernels from a cache "
                              "description\n");

  DialectRegistry registry;
  registerKVGenDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();

  llvm::SourceMgr sourceMgr;
  if (!inputFilename.empty()) {
    if (descriptionFlagsGiven()) {
      llvm::errs() << "kvgen: give a description file or description flags, "
                      "not both\n";
      return 1;
    }
    std::string error;
    auto file = openInputFile(inputFilename, &error);
    if (!file) {
      llvm::errs() << "kvgen: " << error << "\n";
      return 1;
    }
    sourceMgr.AddNewSourceBuffer(std::move(file), llvm::SMLoc());
  } else if (descriptionFlagsGiven()) {
    FailureOr<std::string> text = descriptionFromFlags();
    if (failed(text))
      return 1;
    sourceMgr.AddNewSourceBuffer(
        llvm::MemoryBuffer::getMemBufferCopy(*text, "<command line>"),
        llvm::SMLoc());
  } else {
    sourceMgr.AddNewSourceBuffer(
        llvm::MemoryBuffer::getMemBuffer(getDefaultDescription(),
                                         "<default description>"),
        llvm::SMLoc());
  }

  DefaultTimingManager tm;
  applyDefaultTimingManagerCLOptions(tm);
  TimingScope timing = tm.getRootScope();

  if (verifyDiagnostics) {
    SourceMgrDiagnosticVerifierHandler handler(sourceMgr, &context);
    (void)compile(context, sourceMgr, timing);
    return failed(handler.verify()) ? 1 : 0;
  }
  SourceMgrDiagnosticHandler handler(sourceMgr, &context);
  return succeeded(compile(context, sourceMgr, timing)) ? 0 : 1;
}
