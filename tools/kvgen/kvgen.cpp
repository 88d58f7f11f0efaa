//===- kvgen.cpp - the kvgen compiler driver ------------------------------===//
//
// A cache description in (an .mlir file of kv ops, command-line flags, or the
// embedded default), any stage out: kv IR, loop nests, GPU IR, NVVM IR, LLVM
// IR, PTX, a cubin, or a bundle for kvrt (JSON, or a C header embedding it).
//
//   kvgen                                   the default kernels, as a bundle
//   kvgen desc.mlir --emit=ptx -o k.ptx
//   kvgen --layout=NAME --block-size=32 --dtype=f16 --emit=loops
//
// Nothing is written unless the whole compilation succeeds.
//
//===----------------------------------------------------------------------===//

#include "Options.h"
#include "SupportMatrix.h"

#include "kvgen/Conversion/Passes.h"
#include "kvgen/Pipeline/Bundle.h"
#include "kvgen/Pipeline/Description.h"
#include "kvgen/Pipeline/HostSharedLib.h"
#include "kvgen/Pipeline/PTX.h"
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
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <csignal>

using namespace mlir;
using namespace kvgen;
using namespace kvgen::driver;

/// Writes the output in one go. A write error (a full disk, /dev/full) is
/// reported with the path, and a regular file that could not be completed is
/// removed, so that nothing partial is left behind.
static LogicalResult writeOutput(StringRef data) {
  auto reportError = [](std::error_code ec) {
    llvm::errs() << "kvgen: cannot write "
                 << (outputFilename == "-" ? std::string("standard output")
                                           : "'" + outputFilename + "'")
                 << ": " << ec.message() << "\n";
    return failure();
  };
  if (outputFilename == "-") {
    llvm::outs() << data;
    llvm::outs().flush();
    if (std::error_code ec = llvm::outs().error()) {
      llvm::outs().clear_error();
      return reportError(ec);
    }
    return success();
  }
  // Devices and pipes are written in place and never removed.
  llvm::sys::fs::file_status status;
  bool regular = llvm::sys::fs::status(outputFilename, status) ||
                 llvm::sys::fs::is_regular_file(status);
  std::error_code ec;
  llvm::raw_fd_ostream os(outputFilename, ec);
  if (ec)
    return reportError(ec);
  os << data;
  os.close();
  if ((ec = os.error())) {
    os.clear_error();
    if (regular)
      llvm::sys::fs::remove(outputFilename);
    return reportError(ec);
  }
  return success();
}

static std::string printModule(ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module.print(os);
  return text;
}

static LogicalResult compile(MLIRContext &context, llvm::SourceMgr &sourceMgr,
                             const CodegenOptions &codegen,
                             TimingScope &timing) {
  TimingScope parseTiming = timing.nest("Parse and verify");
  OwningOpRef<ModuleOp> module = parseDescription(sourceMgr, &context);
  parseTiming.stop();
  if (!module)
    return failure();
  if (emit == Stage::KV)
    return writeOutput(printModule(*module));

  std::vector<KernelPlan> plans = collectPlans(*module, codegen.plan);
  const GPUTargetOptions &gpuOptions = codegen.target;

  PassManager pm(&context);
  if (failed(applyPassManagerCLOptions(pm)))
    return failure();
  TimingScope pipelineTiming = timing.nest("Pipeline");
  pm.enableTiming(pipelineTiming);

  if (emit == Stage::SharedLib) {
    // A linker's failure is the tool's, not the description's: unlocated,
    // like ptxas's.
    std::string toolError;
    FailureOr<std::string> lib =
        buildHostSharedLib(*module, pm, &toolError, codegen.plan);
    if (failed(lib) && !toolError.empty())
      llvm::errs() << "kvgen: " << toolError << "\n";
    return failed(lib) ? failure() : writeOutput(*lib);
  }
  buildLoopsPipeline(pm, codegen.plan);
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
    if (failed(pm.run(*module)))
      return failure();
    return writeOutput(printModule(*module));
  }

  if (emit != Stage::Loops)
    buildGPUMappingPipeline(pm, codegen.gpuMapping);
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
  // Past `ulimit -f`, a write fails with EFBIG and is reported with the file
  // it was for (and the temporary files are removed), instead of SIGXFSZ
  // ending kvgen with the files left behind. The tools kvgen runs inherit
  // this and report the same error themselves.
  ::signal(SIGXFSZ, SIG_IGN);
  registerAsmPrinterCLOptions();
  registerMLIRContextCLOptions();
  registerPassManagerCLOptions();
  registerDefaultTimingManagerCLOptions();
  llvm::cl::AddExtraVersionPrinter(printKVGenVersion);
  organizeHelp();
  llvm::cl::ParseCommandLineOptions(
      argc, argv,
      "kvgen: KV-cache append kernels from a cache "
      "description\n");
  if (supportMatrixRequested())
    return printSupportMatrix();
  if (failed(checkFlags()))
    return 1;
  FailureOr<CodegenOptions> codegen = getCodegenOptions();
  if (failed(codegen))
    return 1;

  DialectRegistry registry;
  registerKVGenDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  // A description's diagnostics point at its text; the generic form of the
  // op that MLIR would print after them repeats it less readably.
  context.printOpOnDiagnostic(false);

  llvm::SourceMgr sourceMgr;
  if (!inputFilename.empty()) {
    std::string error;
    auto file = openInputFile(inputFilename, &error);
    if (!file) {
      llvm::errs() << "kvgen: " << error << "\n";
      return 1;
    }
    sourceMgr.AddNewSourceBuffer(std::move(file), llvm::SMLoc());
  } else if (describedByFlags()) {
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
    (void)compile(context, sourceMgr, *codegen, timing);
    return failed(handler.verify()) ? 1 : 0;
  }
  SourceMgrDiagnosticHandler handler(sourceMgr, &context);
  return succeeded(compile(context, sourceMgr, *codegen, timing)) ? 0 : 1;
}
