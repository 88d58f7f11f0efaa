//===- Nvfp4Cases.h - NVFP4 caches ------------------------------*- C++ -*-===//
//
// Caches of quant kind nvfp4 (#kv.nvfp4: vLLM's flash page of e2m1 values
// then e4m3 scales): the descriptions, and cases that poison vLLM's buffer
// of both sides, append, and compare every byte with a reference written
// from docs/CONTRACT.md's "NVFP4" rules (Nvfp4Cases.cpp), independent of
// the lowering.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_CONFORMANCE_NVFP4CASES_H
#define KVGEN_CONFORMANCE_NVFP4CASES_H

#include "conformance/Backend.h"
#include "conformance/Description.h"

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace kvgen::conformance {

/// What a case runs with; `bytesCompared` is added to.
struct Nvfp4CaseEnv {
  Backend &backend;
  const Description &desc;
  kvrt_bundle *bundle;
  std::mt19937_64 &rng;
  int64_t &bytesCompared;
};

using Nvfp4Case =
    std::pair<std::string, std::function<bool(Nvfp4CaseEnv &, std::string &)>>;

/// The descriptions: vLLM's nvfp4 page (NHD, bf16, 8 heads of 128) and
/// nvfp4_4over6 (HND, f16, 64), and linear scales of a head_dim that is no
/// multiple of 64, from f32, at a block size that is no power of two.
std::vector<Description> nvfp4Matrix();

/// The cases of an NVFP4 description.
std::vector<Nvfp4Case> nvfp4Cases(const Description &desc);

} // namespace kvgen::conformance

#endif // KVGEN_CONFORMANCE_NVFP4CASES_H
