//===- RunTool.cpp - run an external tool on temporary files --------------===//
//
// One sequence for every tool kvgen runs: the input to a temporary file, the
// tool with its output and log in two more, the two read back, the files
// removed.
//
//===----------------------------------------------------------------------===//

#include "RunTool.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>

using namespace kvgen;

ToolRun kvgen::runTool(llvm::StringRef program, llvm::StringRef input,
                       llvm::StringRef prefix, llvm::StringRef inputExt,
                       llvm::StringRef outputExt,
                       llvm::function_ref<llvm::SmallVector<std::string>(
                           llvm::StringRef, llvm::StringRef)>
                           buildArgs,
                       bool keepInputOnFailure) {
  ToolRun run;
  llvm::SmallString<128> in, out, log;
  int fd;
  if (llvm::sys::fs::createTemporaryFile(prefix, inputExt, fd, in))
    return run;
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    os << input;
  }
  run.inputPath = in.str().str();
  llvm::sys::fs::createTemporaryFile(prefix, outputExt, out);
  llvm::sys::fs::createTemporaryFile(prefix, "log", log);

  llvm::SmallVector<std::string> args = buildArgs(in, out);
  llvm::SmallVector<llvm::StringRef> argv(args.begin(), args.end());
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, log.str(),
                                                log.str()};
  int rc = llvm::sys::ExecuteAndWait(program, argv, std::nullopt, redirects,
                                     /*SecondsToWait=*/0, /*MemoryLimit=*/0,
                                     &run.execError);
  if (auto buf = llvm::MemoryBuffer::getFile(log))
    run.log = (*buf)->getBuffer().str();
  if (rc != 0) {
    run.status = ToolRun::Failed;
  } else if (auto buf = llvm::MemoryBuffer::getFile(out, /*IsText=*/false)) {
    run.output = (*buf)->getBuffer().str();
    run.status = ToolRun::Succeeded;
  } else {
    run.status = ToolRun::NoOutput;
  }
  bool keepInput = run.status == ToolRun::Failed && keepInputOnFailure;
  if (!keepInput)
    llvm::sys::fs::remove(in);
  llvm::sys::fs::remove(out);
  llvm::sys::fs::remove(log);
  return run;
}
