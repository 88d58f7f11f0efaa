//===- PrologueMlaCases.h - MLA prologue cases, no MLIR ---------*- C++ -*-===//
//
// What kvgen-prologue-mla-suite and kvgen-prologue-mla-gpu share: the MLA
// appends' prologue descriptions the suite covers, one kernel call's inputs
// (from a seed), the reference and the byte-for-byte comparison
// (PrologueMlaCases.cpp has the reference's words). No MLIR, so that the
// GPU runner links only this, PrologueCases' driver loader and the
// conformance library.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_TEST_HOST_PROLOGUEMLACASES_H
#define KVGEN_TEST_HOST_PROLOGUEMLACASES_H

#include "PrologueCases.h"

namespace kvgen::prologue {

/// A deliberately wrong reference (kvgen-prologue-mla-suite --break=B).
enum class Break { None, Swap, Sign, Unrounded, PaddingQ };

struct MlaCase {
  conformance::Description desc;
  conformance::Rope rope = conformance::Rope::Neox;
  int64_t qHeads = 0;
  /// q_out is q_pe and k_pe_out is k_pe (vLLM's call).
  bool inPlace = false;

  conformance::PrologueSpec spec() const;
  /// The kv op, as a module's text.
  std::string moduleText() const;
};

/// Every description the suite covers, in the suite's order.
std::vector<MlaCase> mlaCases();

/// Runs `kernel` of `c` through `launch` on inputs drawn from `seed` and
/// compares every byte of the cache, q_out and k_pe_out (and of the buffers
/// they are views of) with the reference, made wrong by `brk`; returns the
/// failures' descriptions (none: it passed).
std::vector<std::string> checkMla(const MlaCase &c, const Kernel &kernel,
                                  uint32_t seed, const Launcher &launch,
                                  Break brk = Break::None);

} // namespace kvgen::prologue

#endif // KVGEN_TEST_HOST_PROLOGUEMLACASES_H
