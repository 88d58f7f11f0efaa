//===- PTX.cpp - PTX from the NVVM target, cubin from ptxas ---------------===//
//
// The NVVM target attribute's serializer (the LLVM NVPTX back end) writes the
// PTX; ptxas, found in the CUDA toolkit or on PATH, assembles it for one chip.
// ptxas runs as a child process on temporary files, so its failures come back
// as a log with the command that reproduces them, never as a crash.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Pipeline/PTX.h"

#include "mlir/Dialect/GPU/IR/CompilationInterfaces.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
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
