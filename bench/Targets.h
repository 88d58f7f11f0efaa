//===- Targets.h - the run judged against bench/targets.json ----*- C++ -*-===//
//
// The targets and the peers' numbers are data (bench/targets.json), not
// code: each group applies to the descriptions its "when" matches, and each
// target names one number of this run and its bound.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_BENCH_TARGETS_H
#define KVGEN_BENCH_TARGETS_H

#include "Report.h"

#include <string>

namespace kvbench {

/// Reads a targets file; fatal, naming the file and the problem, if it is
/// not one.
json loadTargets(const std::string &path);

/// Whether a group's "when" matches `desc` (every field it names).
bool targetsApply(const json &when, const Description &desc);

/// Judges the rows of `impl` and the launch numbers against every group of
/// `targets` that applies to `desc`. Returns one JSON object per target
/// (target, value, limit, pass) and appends a line per target to `*text`.
json judgeTargets(const json &targets, const Description &desc,
                  const Report &report, const std::string &impl,
                  const json &launch, std::string *text);

} // namespace kvbench

#endif // KVGEN_BENCH_TARGETS_H
