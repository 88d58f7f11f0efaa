//===- InlineScalesCases.h - latent entries with inline scales --*- C++ -*-===//
//
// Latent caches whose entry stores its group scales (#kv.inline_scales:
// DeepSeek V3.2's fp8_ds_mla and others): the descriptions, and cases that
// poison the cache, append, and compare every byte of the cache with a
// reference written from the format's definition (InlineScalesCases.cpp),
// independent of the lowering.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_CONFORMANCE_INLINESCALESCASES_H
#define KVGEN_CONFORMANCE_INLINESCALESCASES_H

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
struct InlineScalesCaseEnv {
  Backend &backend;
  const Description &desc;
  kvrt_bundle *bundle;
  std::mt19937_64 &rng;
  int64_t &bytesCompared;
};

using InlineScalesCase =
    std::pair<std::string,
              std::function<bool(InlineScalesCaseEnv &, std::string &)>>;

/// The descriptions: fp8_ds_mla (512 + 4 scales + 64 bf16) and its nope
/// rows, an f16 source, e5m2, and a small int8 entry of f32 RoPE with plain
/// dynamic scales (no floor, not a power of two) at a block size that is
/// not a power of two.
std::vector<Description> inlineScalesMatrix();

/// The cases of a description with inline scales.
std::vector<InlineScalesCase> inlineScalesCases(const Description &desc);

} // namespace kvgen::conformance

#endif // KVGEN_CONFORMANCE_INLINESCALESCASES_H
