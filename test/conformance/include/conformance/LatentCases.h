//===- LatentCases.h - cases of caches without V ----------------*- C++ -*-===//
//
// K-only appends (plain and fused) and MLA latent appends: their own cases
// because their launches take no V (kvrt_mla_append takes kv_c and k_pe).
// Each poisons the cache, runs kvrt, and compares every byte with a plain
// loop over the tokens (LatentCases.cpp), independent of the lowering.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_CONFORMANCE_LATENTCASES_H
#define KVGEN_CONFORMANCE_LATENTCASES_H

#include "conformance/CaseRunner.h"
#include "conformance/Description.h"

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace kvgen::conformance {

/// What a case runs with (CaseRunner.h).
using LatentCaseEnv = RunnerEnv;

using LatentCase =
    std::pair<std::string, std::function<bool(LatentCaseEnv &, std::string &)>>;

/// The cases of a K-only (`desc.kOnly`) or latent description; `wide`: its
/// bundle has a wide kernel (a K-only append's, Description::hasWideKernel)
/// for cases to force.
std::vector<LatentCase> latentCases(const Description &desc, bool wide);

} // namespace kvgen::conformance

#endif // KVGEN_CONFORMANCE_LATENTCASES_H
