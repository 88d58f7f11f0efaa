//===- PrologueHost.h - the prologue's host runs: plan and launcher -------===//
//
// What the host programs (kvgen-prologue-suite, kvgen-prologue-unfused)
// share on top of PrologueCases.h: a plan's launch as the cases see it, and
// the JIT's packed entry point as a Launcher. Kept out of PrologueCases so
// that kvgen-prologue-gpu links neither the plan nor the JIT.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_TEST_HOST_PROLOGUEHOST_H
#define KVGEN_TEST_HOST_PROLOGUEHOST_H

#include "PrologueCases.h"

#include "kvgen/Pipeline/HostJIT.h"
#include "kvgen/Plan/KernelPlan.h"

#include <utility>

namespace kvgen::prologue {

/// What the check needs of `plan`.
inline Kernel kernelOf(const KernelPlan &plan) {
  Kernel k;
  k.name = plan.name;
  k.params = plan.getParams();
  k.vectorElems = plan.vectorElems;
  k.lanesPerGroup = plan.lanesPerGroup;
  k.threadsX = plan.threadsX;
  k.tokensPerBlock = plan.tokensPerBlock;
  return k;
}

/// The host: the JIT's packed entry point on the host copies themselves;
/// `after`, when given, then sees the same buffers (and its answer is the
/// launch's).
inline Launcher hostLauncher(HostKernels::Entry entry,
                             Launcher after = nullptr) {
  return [entry, after = std::move(after)](
             const Kernel &kernel, int64_t numTokens,
             std::vector<HostBuffer> &buffers, std::vector<int32_t> &scalars,
             const std::vector<bool> &isBuffer) {
    std::vector<void *> pointers, params;
    pointers.reserve(buffers.size());
    size_t b = 0, s = 0;
    for (bool buffer : isBuffer) {
      if (buffer) {
        pointers.push_back(buffers[b++].data);
        params.push_back(&pointers.back());
      } else {
        params.push_back(&scalars[s++]);
      }
    }
    entry(params.data());
    return after ? after(kernel, numTokens, buffers, scalars, isBuffer)
                 : std::string();
  };
}

} // namespace kvgen::prologue

#endif // KVGEN_TEST_HOST_PROLOGUEHOST_H
