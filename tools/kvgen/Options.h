//===- Options.h - kvgen's command line -------------------------*- C++ -*-===//
//
// The flags, and the checks that no flag is ignored in silence: a flag that
// has no effect in the combination given is refused with a message saying
// what it is for.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_TOOLS_KVGEN_OPTIONS_H
#define KVGEN_TOOLS_KVGEN_OPTIONS_H

#include "kvgen/Pipeline/Pipeline.h"

#include "mlir/Support/LLVM.h"

#include "llvm/Support/CommandLine.h"

#include <string>

namespace kvgen::driver {

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
enum class Target { GPU, Host };

extern llvm::cl::OptionCategory kvgenCategory;
extern llvm::cl::OptionCategory descCategory;
extern llvm::cl::OptionCategory debugCategory;

extern llvm::cl::opt<std::string> inputFilename;
extern llvm::cl::opt<std::string> outputFilename;
extern llvm::cl::opt<Stage> emit;
extern llvm::cl::opt<Target> target;
extern llvm::cl::opt<std::string> chip;
extern llvm::cl::opt<std::string> features;
extern llvm::cl::opt<bool> withCubin;
extern llvm::cl::opt<bool> programmaticLaunch;
extern llvm::cl::opt<bool> ptxasVerbose;
extern llvm::cl::opt<bool> verifyDiagnostics;
extern llvm::cl::opt<std::string> nameFlag;
extern llvm::cl::opt<std::string> pipelineOptions;

/// The code-generation options of every stage kvgen runs: --pipeline-options
/// with --chip and --kvgen-features.
struct CodegenOptions {
  PlanOptions plan;
  KVLoopsToGPUOptions gpuMapping;
  GPUTargetOptions target;
};

/// --pipeline-options, checked: an option of a stage that the --target and
/// --emit given do not run, chip= or features= (kvgen's own flags choose
/// them), or a value the plan cannot use is refused ("kvgen: ...").
mlir::FailureOr<CodegenOptions> getCodegenOptions();

/// Refuses combinations of flags in which one would be ignored, and values
/// that are checked before any description is read (the chip, the header
/// name). Prints "kvgen: ..." and fails.
mlir::LogicalResult checkFlags();

/// Whether the description comes from the description flags (rather than a
/// file or the embedded default).
bool describedByFlags();

/// A kv module's text built from the description flags; the vocabularies
/// (layouts, dtypes, kernel kinds, quantization) are those of kvgen/ABI.
mlir::FailureOr<std::string> descriptionFromFlags();

/// Shows the few MLIR options a kvgen user needs (timing, IR printing) under
/// "Debugging options", and hides every other option that kvgen's libraries
/// register (LLVM's back ends register hundreds).
void organizeHelp();

} // namespace kvgen::driver

#endif // KVGEN_TOOLS_KVGEN_OPTIONS_H
