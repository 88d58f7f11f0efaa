//===- Options.h - kvbench's command line -----------------------*- C++ -*-===//

#ifndef KVGEN_BENCH_OPTIONS_H
#define KVGEN_BENCH_OPTIONS_H

#include "kvgen/ABI/ABI.h"

#include <cstdint>
#include <string>

namespace kvbench {

struct Options {
  std::string bundlePath;
  std::string kernel;
  std::string variant = "auto";
  /// Without --bundle: the layout of the reference-only description (the
  /// ABI's name of the default description's layout).
  std::string layout = kvgen::abi::layoutName(kvgen::abi::kDefaultLayout);
  std::string outDir;
  /// The targets and peer numbers to judge against (bench/targets.json);
  /// empty: none are judged.
  std::string targetsPath;
  bool quick = false;
  uint64_t seed = 20261202;
};

/// Exit status of kvbench when --kernel names no kernel of the bundle:
/// scripts/bench.sh reports the row as skipped, not failed.
constexpr int kExitNoSuchKernel = 4;

/// Parses argv; a bad option is fatal with a message naming it.
Options parseOptions(int argc, char **argv);

} // namespace kvbench

#endif // KVGEN_BENCH_OPTIONS_H
