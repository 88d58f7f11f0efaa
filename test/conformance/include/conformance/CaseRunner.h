//===- CaseRunner.h - what the special cases share --------------*- C++ -*-===//
//
// The cases whose launches differ from the common ones (LatentCases.cpp:
// caches without V; AsymmetricCases.cpp: K and V of two head sizes) run
// alike: random slots over the description's blocks, one kvrt launch, and
// kvrt's answer checked against what the case expects (a launch, or a
// refusal that names the problem) before every byte is compared.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_CONFORMANCE_CASERUNNER_H
#define KVGEN_CONFORMANCE_CASERUNNER_H

#include "conformance/Backend.h"
#include "conformance/Description.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace kvgen::conformance {

/// What a case runs with; `bytesCompared` is added to, `maxShown` bounds
/// the mismatches a failure lists.
struct RunnerEnv {
  Backend &backend;
  const Description &desc;
  kvrt_bundle *bundle;
  std::mt19937_64 &rng;
  int64_t &bytesCompared;
  int maxShown = 0;
};

/// The base of a case's runner: the cache's blocks (`pagedBlocks`, or
/// `contiguousBatch` rows of a contiguous cache), random draws, and the
/// check of kvrt's answer.
class CaseRunner {
public:
  CaseRunner(RunnerEnv &env, int64_t pagedBlocks, int64_t contiguousBatch)
      : env(env), desc(env.desc), pagedBlocks(pagedBlocks),
        contiguousBatch(contiguousBatch) {}

  int64_t numBlocks() const {
    return desc.layout == Layout::Contiguous ? contiguousBatch : pagedBlocks;
  }
  /// Uniform in [lo, hi].
  int64_t uniform(int64_t lo, int64_t hi) {
    return lo +
           static_cast<int64_t>(env.rng() % static_cast<uint64_t>(hi - lo + 1));
  }
  /// The cache's blocks in a random order.
  std::vector<int64_t> shuffledBlocks() {
    std::vector<int64_t> blocks(numBlocks());
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), env.rng);
    return blocks;
  }

  /// Whether kvrt answered as the case expects: KVRT_SUCCESS, or, where
  /// `refused`, KVRT_ERROR_INVALID_ARGUMENT with a message that names
  /// `message`. `failure` says what differs otherwise.
  static bool answered(kvrt_status status, bool refused,
                       const std::string &message, std::string &failure) {
    if (!refused) {
      if (status == KVRT_SUCCESS)
        return true;
      failure = std::string("kvrt: ") + kvrt_status_name(status) + ": " +
                kvrt_last_error();
      return false;
    }
    std::string said = kvrt_last_error();
    if (status != KVRT_ERROR_INVALID_ARGUMENT) {
      failure =
          std::string("kvrt should have refused the launch, it returned ") +
          kvrt_status_name(status);
      return false;
    }
    if (said.find(message) == std::string::npos) {
      failure = "the refusal should name \"" + message + "\", it says \"" +
                said + "\"";
      return false;
    }
    return true;
  }

protected:
  RunnerEnv &env;
  const Description &desc;

private:
  int64_t pagedBlocks, contiguousBatch;
};

} // namespace kvgen::conformance

#endif // KVGEN_CONFORMANCE_CASERUNNER_H
