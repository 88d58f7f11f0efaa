//===- RunTool.h - run an external tool on temporary files ------*- C++ -*-===//
//
// ptxas and the host linker are child processes that read one input file and
// write one output file: their failures come back as a status and a log,
// never as a crash, and the caller words the message.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_LIB_PIPELINE_RUNTOOL_H
#define KVGEN_LIB_PIPELINE_RUNTOOL_H

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <string>

namespace kvgen {

struct ToolRun {
  enum Status {
    /// The input's temporary file could not be created or written (a full
    /// disk, `ulimit -f`); nothing ran. `writeError` says why.
    NoTemporaryFile,
    /// The tool could not be started, exited non-zero or was killed by a
    /// signal (`signal`).
    Failed,
    /// The tool succeeded but its output file could not be read.
    NoOutput,
    Succeeded,
  };
  Status status = NoTemporaryFile;
  /// Why the tool could not be started, if it could not (ExecuteAndWait's
  /// message); empty otherwise.
  std::string execError;
  /// Why the input's temporary file could not be written (NoTemporaryFile).
  std::string writeError;
  /// The signal that killed the tool, 0 if none did.
  int signal = 0;
  /// The tool's exit status, -1 if it did not exit (not started, killed).
  int exitCode = -1;
  /// Its standard output and error together.
  std::string log;
  /// The output file's bytes (Succeeded only).
  std::string output;
  /// The input file's path. On failure with `keepInputOnFailure` the file is
  /// left there, for the command that reproduces the failure.
  std::string inputPath;
};

/// "killed by signal N (name)": how a message says `signal` ended a tool.
std::string describeSignal(int signal);

/// How a failed run ended, for a message: "killed by signal N (name)",
/// "exited with status N" or why it could not be started.
std::string describeFailure(const ToolRun &run);

/// Writes `input` to a temporary file, runs `program` with the arguments
/// `buildArgs(inputPath, outputPath)` (argv[0] included) with its standard
/// output and error sent to a log, and reads the output file back. Every
/// temporary file is removed before it returns, but the input when the tool
/// failed and `keepInputOnFailure` is set, also when kvgen itself is ended
/// by a signal meanwhile (LLVM's signal handlers remove them). Files are
/// named `<prefix>-XXXXXX.<ext>`.
ToolRun runTool(llvm::StringRef program, llvm::StringRef input,
                llvm::StringRef prefix, llvm::StringRef inputExt,
                llvm::StringRef outputExt,
                llvm::function_ref<llvm::SmallVector<std::string>(
                    llvm::StringRef inputPath, llvm::StringRef outputPath)>
                    buildArgs,
                bool keepInputOnFailure = false);

} // namespace kvgen

#endif // KVGEN_LIB_PIPELINE_RUNTOOL_H
