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
#include "llvm/Support/Signals.h"
#include "llvm/Support/raw_ostream.h"

#include <cerrno>
#include <cstring>
#include <optional>

#include <sys/wait.h>

using namespace kvgen;

std::string kvgen::describeSignal(int signal) {
  std::string text = "killed by signal " + std::to_string(signal);
  if (const char *name = ::strsignal(signal))
    text += std::string(" (") + name + ")";
  return text;
}

std::string kvgen::describeFailure(const ToolRun &run) {
  if (run.signal)
    return describeSignal(run.signal);
  if (run.exitCode >= 0)
    return "exited with status " + std::to_string(run.exitCode);
  return "could not be started" +
         (run.execError.empty() ? "" : ": " + run.execError);
}

/// Runs `program` and waits for it; returns its exit status, or -1 with
/// `run.signal` or `run.execError` set.
static int runAndWait(llvm::StringRef program,
                      llvm::ArrayRef<llvm::StringRef> argv,
                      llvm::ArrayRef<std::optional<llvm::StringRef>> redirects,
                      ToolRun &run) {
  bool execFailed = false;
  llvm::sys::ProcessInfo child =
      llvm::sys::ExecuteNoWait(program, argv, std::nullopt, redirects,
                               /*MemoryLimit=*/0, &run.execError, &execFailed);
  if (execFailed || child.Pid <= 0)
    return -1;
  // waitpid rather than llvm::sys::Wait: the latter reports a signal by its
  // name only, and the message should give the number too.
  int status = 0;
  pid_t pid;
  do
    pid = ::waitpid(child.Pid, &status, 0);
  while (pid < 0 && errno == EINTR);
  if (pid < 0) {
    run.execError = std::string("waitpid: ") + std::strerror(errno);
    return -1;
  }
  if (WIFSIGNALED(status)) {
    run.signal = WTERMSIG(status);
    return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

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
  if (std::error_code ec =
          llvm::sys::fs::createTemporaryFile(prefix, inputExt, fd, in)) {
    run.writeError = ec.message();
    return run;
  }
  // Removed by LLVM's handlers if kvgen is interrupted or killed by a
  // catchable signal while the tool runs.
  llvm::sys::RemoveFileOnSignal(in);
  auto removeFile = [](llvm::StringRef path) {
    llvm::sys::fs::remove(path);
    llvm::sys::DontRemoveFileOnSignal(path);
  };
  {
    // A short write (a full disk, EFBIG under `ulimit -f` with SIGXFSZ
    // ignored) must not reach the tool as a truncated input.
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    os << input;
    os.close();
    if (std::error_code ec = os.error()) {
      os.clear_error();
      run.writeError = "cannot write '" + in.str().str() + "': " + ec.message();
      removeFile(in);
      return run;
    }
  }
  run.inputPath = in.str().str();
  llvm::sys::fs::createTemporaryFile(prefix, outputExt, out);
  llvm::sys::RemoveFileOnSignal(out);
  llvm::sys::fs::createTemporaryFile(prefix, "log", log);
  llvm::sys::RemoveFileOnSignal(log);

  llvm::SmallVector<std::string> args = buildArgs(in, out);
  llvm::SmallVector<llvm::StringRef> argv(args.begin(), args.end());
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, log.str(),
                                                log.str()};
  int rc = runAndWait(program, argv, redirects, run);
  run.exitCode = rc;
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
  if (keepInput)
    llvm::sys::DontRemoveFileOnSignal(in);
  else
    removeFile(in);
  removeFile(out);
  removeFile(log);
  return run;
}
