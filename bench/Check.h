//===- Check.h - is what was timed a correct append? ------------*- C++ -*-===//

#ifndef KVGEN_BENCH_CHECK_H
#define KVGEN_BENCH_CHECK_H

#include "Launchables.h"

namespace kvbench {

struct CheckResult {
  bool ok = false;
  /// False if the launch was refused: then there is nothing to time either.
  bool launched = true;
  std::string detail;
};

/// Runs the check case once (eagerly, or replayed from a captured graph) on
/// freshly randomized caches and compares with a host loop: every element
/// of the written positions and their neighbours (positions +-1 in the
/// same, previous and next block, all heads and dims) must hold exactly what
/// the host expects, and a device count over every element of both caches
/// must find exactly as many changed elements as the host wrote (so nothing
/// was written anywhere else). Only for descriptions checkUnsupported()
/// accepts.
CheckResult checkAppend(Launchable &what, bool viaGraph, DeviceState &state,
                        const CacheGeometry &g, const SizeCase &checkCase);

} // namespace kvbench

#endif // KVGEN_BENCH_CHECK_H
