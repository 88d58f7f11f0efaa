//===- Options.cpp - kvbench's command line -------------------------------===//

#include "Options.h"
#include "Support.h"

#include "kvgen/ABI/ABI.h"

#include <cstdio>
#include <cstdlib>

namespace kvbench {
namespace {

void printUsage() {
  std::printf(
      "usage: kvbench [--bundle FILE [--kernel NAME] [--variant V]] "
      "[--layout L] [--targets FILE] [--quick] [--seed N] [OUT_DIR]\n"
      "  --bundle FILE   a kvgen bundle (kvgen --emit=bundle)\n"
      "  --kernel NAME   the kernel to time (NAME, NAME_scalar or NAME_wide);\n"
      "                  may be left out when the bundle has one append;\n"
      "                  exit %d if the bundle has no such kernel\n"
      "  --variant V     auto (default: kvrt's choice, the wide kernel from\n"
      "                  its min_tokens to its max_tokens), vector, wide or\n"
      "                  scalar\n"
      "  --layout L      without --bundle: time only the reference and the\n"
      "                  ceilings for the bf16 8x128 block-16 description\n"
      "                  of layout L (--list-layouts names them)\n"
      "  --list-layouts  print the layouts, one a line, and exit\n"
      "  --targets FILE  targets and peer numbers to judge the run against\n"
      "                  (bench/targets.json; default: that file beside the\n"
      "                  binary's build tree, if there is one)\n"
      "  --quick         fewer repetitions: a smoke test, not a measurement\n"
      "  OUT_DIR         where the JSON, CSV and table go (default: the\n"
      "                  directory in the environment variable OUT if it is\n"
      "                  set and not empty, else ./kvbench-out)\n",
      kExitNoSuchKernel);
}

} // namespace

Options parseOptions(int argc, char **argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        fatal("option " + arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--bundle")
      options.bundlePath = value();
    else if (arg == "--kernel")
      options.kernel = value();
    else if (arg == "--variant")
      options.variant = value();
    else if (arg == "--layout")
      options.layout = value();
    else if (arg == "--out")
      options.outDir = value();
    else if (arg == "--targets")
      options.targetsPath = value();
    else if (arg == "--seed")
      options.seed = std::strtoull(value().c_str(), nullptr, 0);
    else if (arg == "--quick")
      options.quick = true;
    else if (arg == "--list-layouts") {
      for (const char *name : kvgen::abi::kLayoutNames)
        std::printf("%s\n", name);
      std::exit(0);
    } else if (arg == "-h" || arg == "--help") {
      printUsage();
      std::exit(0);
    } else if (!arg.empty() && arg[0] == '-') {
      printUsage();
      fatal("unknown option " + arg);
    } else if (options.outDir.empty()) {
      options.outDir = arg;
    } else {
      fatal("more than one output directory: " + arg);
    }
  }
  if (options.outDir.empty()) {
    const char *out = std::getenv("OUT");
    options.outDir = out && *out ? out : "kvbench-out";
  }
  if (options.variant != "vector" && options.variant != "scalar" &&
      options.variant != "wide" && options.variant != "auto")
    fatal("--variant must be auto, vector, wide or scalar, not " +
          options.variant);
  if (!options.kernel.empty() && options.bundlePath.empty())
    fatal("--kernel needs --bundle");
  return options;
}

} // namespace kvbench
