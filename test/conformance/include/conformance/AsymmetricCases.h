//===- AsymmetricCases.h - K and V of different head sizes ------*- C++ -*-===//
//
// Appends into a cache whose V head size differs from K's (`v_head_dim`),
// K and V views of one packed layer buffer: their own cases because every
// other case builds K and V of one shape. Each poisons the buffer, runs
// kvrt, and compares every byte with a plain loop over the tokens
// (AsymmetricCases.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_CONFORMANCE_ASYMMETRICCASES_H
#define KVGEN_CONFORMANCE_ASYMMETRICCASES_H

#include "conformance/CaseRunner.h"
#include "conformance/Description.h"

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace kvgen::conformance {

/// What a case runs with (CaseRunner.h).
using AsymmetricCaseEnv = RunnerEnv;

using AsymmetricCase =
    std::pair<std::string,
              std::function<bool(AsymmetricCaseEnv &, std::string &)>>;

/// The cases of a description with `vHeadDim` set; `wide`: its bundle has a
/// wide kernel for a case to force.
std::vector<AsymmetricCase> asymmetricCases(const Description &desc, bool wide);

} // namespace kvgen::conformance

#endif // KVGEN_CONFORMANCE_ASYMMETRICCASES_H
