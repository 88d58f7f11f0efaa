//===- Report.h - kvbench's rows, JSON, CSV and table -----------*- C++ -*-===//
//
// The results of one run: a row per (implementation, size) with every
// timing mode, written as JSON (everything, samples included), CSV (the
// medians) and a text table (the headline numbers beside the reference's).
// The JSON is rewritten after every step, so a crash keeps the numbers so
// far.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_BENCH_REPORT_H
#define KVGEN_BENCH_REPORT_H

#include "Geometry.h"
#include "Support.h"

#include <string>
#include <vector>

namespace kvbench {

struct Row {
  std::string impl; // "generated" or "reference"
  std::string config;
  std::string phase;
  int64_t tokens = 0;
  int sets = 0;
  double bytes = 0;
  Stats eager, graph, cold;
  std::string graphMode, graphError;
  int graphs = 0;
  int64_t graphLoops = 0;
  int64_t grid = -1;
  json tuning; // reference: cold median per config

  /// The number the method reports: graph us/call for decode, cold device
  /// time for prefill.
  double headline() const {
    return phase == "decode" ? graph.median : cold.median;
  }
};

struct Report {
  json doc;
  std::string outDir, tag;
  double copyGBps = kNaN;
  std::vector<Row> rows;
  std::vector<std::string> failures;

  const Row *find(const std::string &impl, const std::string &phase,
                  int64_t tokens) const;
  /// The fraction of the copy ceiling of a row's headline.
  double fraction(const Row &r) const {
    return gbps(r.bytes, r.headline()) / copyGBps;
  }
};

json rowJson(const Row &r, double copyGBps);

/// Writes kvbench-TAG.json and kvbench-TAG.csv under the output directory.
void writeResults(Report &report);

void writeFile(const std::string &path, const std::string &text);

/// The text table: the launch anchors, then decode and prefill rows of
/// `main` ("generated" or "reference") beside the reference's.
std::string tableText(const Report &report, const CacheGeometry &g,
                      const std::string &main, const json &launch);

} // namespace kvbench

#endif // KVGEN_BENCH_REPORT_H
