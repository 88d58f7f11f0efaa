//===- PTX.cpp - PTX from the NVVM target, cubin from ptxas ---------------===//
//
// The NVVM target attribute's serializer (the LLVM NVPTX back end) writes the
// PTX; ptxas, found in the CUDA toolkit or on PATH, assembles it for one chip.
// ptxas runs as a child process on temporary files (runTool), so its failures
// come back as a log with the command that reproduces them, never as a crash.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Pipeline/PTX.h"

#include "RunTool.h"

#include "mlir/Dialect/GPU/IR/CompilationInterfaces.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"

#include "llvm/IR/Module.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

using namespace mlir;
using namespace kvgen;

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

  std::string archFlag = ("-arch=" + chip).str();
  ToolRun run = runTool(
      ptxas, ptx, "kvgen", "ptx", "cubin",
      [&](StringRef in, StringRef out) -> SmallVector<std::string> {
        return {ptxas, archFlag, "-v", "-o", out.str(), in.str()};
      },
      /*keepInputOnFailure=*/true);
  switch (run.status) {
  case ToolRun::NoTemporaryFile:
    log = "cannot write the PTX to a temporary file for ptxas" +
          (run.writeError.empty() ? "" : ": " + run.writeError);
    return failure();
  case ToolRun::Failed:
    log = "ptxas " +
          (run.signal ? "was " + describeSignal(run.signal)
                      : "failed (" + describeFailure(run) + ")") +
          ":\n" + run.log + "\nreproduce with: " + ptxas + " " + archFlag +
          " -v " + run.inputPath;
    return failure();
  case ToolRun::NoOutput:
  case ToolRun::Succeeded:
    break;
  }
  if (verboseLog)
    *verboseLog = run.log;
  if (run.status == ToolRun::NoOutput) {
    log = "cannot read ptxas's output";
    return failure();
  }
  return run.output;
}
