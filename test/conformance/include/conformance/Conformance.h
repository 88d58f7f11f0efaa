//===- Conformance.h - The conformance cases, for any Backend ---*- C++ -*-===//
//
// The entry points the host and GPU suites call. Each description runs a
// fixed list of cases (decode, prefill, mixed batches, padding, out-of-range
// slots, fused-QKV views, each variant, ...); each case poisons the caches,
// runs kvrt on fresh random data, and compares every byte of the caches (or
// of the built slot mapping) with the reference.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_CONFORMANCE_CONFORMANCE_H
#define KVGEN_CONFORMANCE_CONFORMANCE_H

#include "conformance/Backend.h"
#include "conformance/Description.h"

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace kvgen::conformance {

struct RunOptions {
  /// Every case draws its data from (seed, description name, case name), so
  /// a failing case reproduces alone with the same seed.
  uint64_t seed = 0x6b7667656e; // "kvgen"
  /// Differing elements listed per failing case.
  int maxMismatchesShown = 5;
  /// Log every case, not only failures.
  bool verbose = false;
  /// Run only the cases whose name contains this (empty: all).
  std::string caseFilter;
  /// The compiler ran with options that may change its kernel plan (the
  /// host suite under KVGEN_OPTIONS: --pipeline-options='chunks-per-thread=2'
  /// or 'wide-min-tokens=0' leave no wide kernel). Whether a description
  /// has a wide kernel is then read from its bundle, not from
  /// Description::hasWideKernel(), which mirrors the default plan.
  bool planOverridden = false;
};

struct CaseFailure {
  std::string description;
  std::string caseName;
  std::string message;
};

struct RunStats {
  int64_t descriptions = 0;
  int64_t cases = 0;
  int64_t failedCases = 0;
  int64_t bytesCompared = 0;
  std::vector<CaseFailure> failures;

  bool ok() const { return failedCases == 0; }
  void merge(const RunStats &other);
  /// "N descriptions, M cases checked (B bytes compared), F failed".
  std::string summary() const;
};

/// The names of the cases runDescription() runs for `desc` under the
/// default plan, in order ("decode/auto", "prefill/scalar", "decode/wide"
/// where desc.hasWideKernel(), "fused_qkv_odd_stride/vector_refused", ...).
std::vector<std::string> caseNames(const Description &desc);

/// Runs every case of one description. Failures are logged to `log` (with
/// the seed) and returned in the stats.
RunStats runDescription(Backend &backend, const Description &desc,
                        const RunOptions &options, std::ostream &log);

/// runDescription() over a matrix.
RunStats runMatrix(Backend &backend, const std::vector<Description> &matrix,
                   const RunOptions &options, std::ostream &log);

} // namespace kvgen::conformance

#endif // KVGEN_CONFORMANCE_CONFORMANCE_H
