//===- Check.cpp - is what was timed a correct append? --------------------===//

#include "Check.h"
#include "BenchRandom.h"

#include <algorithm>
#include <unordered_map>

namespace kvbench {
namespace {

/// Launches the case's one set, eagerly or from a captured graph, and waits.
/// "" on success, else why nothing (or not all) ran; `*launched` says
/// whether the launch itself was accepted.
std::string runOnce(Launchable &what, bool viaGraph, DeviceState &state,
                    bool *launched) {
  *launched = true;
  if (!viaGraph) {
    if (!what.launch(0, state.stream)) {
      *launched = false;
      return "launch refused: " + what.lastError();
    }
  } else {
    CUDA_CHECK(
        cudaStreamBeginCapture(state.stream, cudaStreamCaptureModeRelaxed));
    const bool ok = what.launch(0, state.stream);
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(state.stream, &graph);
    if (!ok || end != cudaSuccess) {
      if (graph)
        CUDA_CHECK(cudaGraphDestroy(graph));
      (void)cudaGetLastError();
      return "graph capture failed: " +
             (ok ? std::string(cudaGetErrorString(end)) : what.lastError());
    }
    cudaGraphExec_t exec = nullptr;
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaGraphLaunch(exec, state.stream));
    CUDA_CHECK(cudaStreamSynchronize(state.stream));
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
  }
  CUDA_CHECK(cudaStreamSynchronize(state.stream));
  CUDA_CHECK(cudaGetLastError());
  return "";
}

/// The host's append: per allocation (0 = the key cache, or both for a
/// stacked layout; 1 = the value cache) the element offsets written with their
/// values, and the offsets to compare (the written positions and their
/// neighbours).
struct Expected {
  std::unordered_map<int64_t, uint16_t> written[2];
  std::vector<int64_t> wanted[2];
  int validTokens = 0;
};

Expected hostAppend(const CacheGeometry &g, const SizeCase &checkCase) {
  const int64_t H = g.desc.numHeads, D = g.desc.headDim, bs = g.desc.blockSize;
  const int valueAlloc = g.dual ? 0 : 1;
  Expected ex;
  for (int64_t t = 0; t < checkCase.tokens; ++t) {
    const int64_t slot = checkCase.slots[size_t(t)];
    if (slot < 0 || slot / bs >= g.numBlocks)
      continue;
    ++ex.validTokens;
    const int64_t block = slot / bs, pos = slot % bs;
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t e = 0; e < D; ++e) {
        const uint64_t source = uint64_t(t * H * D + h * D + e);
        ex.written[0][g.key.offset(block, h, pos, e)] =
            randomBits16(kSeedKeyPool, source);
        if (!g.desc.kOnly)
          ex.written[valueAlloc][g.value.offset(block, h, pos, e)] =
              randomBits16(kSeedValuePool, source);
      }
    }
    for (int64_t b = std::max<int64_t>(block - 1, 0);
         b <= std::min(block + 1, g.numBlocks - 1); ++b) {
      for (int64_t p = std::max<int64_t>(pos - 1, 0);
           p <= std::min(pos + 1, bs - 1); ++p) {
        for (int64_t h = 0; h < H; ++h) {
          for (int64_t e = 0; e < D; ++e) {
            ex.wanted[0].push_back(g.key.offset(b, h, p, e));
            if (!g.desc.kOnly)
              ex.wanted[valueAlloc].push_back(g.value.offset(b, h, p, e));
          }
        }
      }
    }
  }
  return ex;
}

struct Tally {
  int64_t compared = 0, mismatches = 0, expectedChanged = 0, deviceChanged = 0,
          copies = 0;
  std::string firstMismatches;
};

/// Compares allocation `a` with the host's append: the wanted offsets
/// element by element, and the whole allocation by a device count.
void compareAllocation(int a, const uint16_t *base, int64_t elems,
                       uint32_t seed, Expected &ex, DeviceState &state,
                       Tally &tally) {
  std::vector<int64_t> &offsets = ex.wanted[a];
  const auto &written = ex.written[a];
  std::sort(offsets.begin(), offsets.end());
  offsets.erase(std::unique(offsets.begin(), offsets.end()), offsets.end());
  // Copy runs of nearby offsets as one range: every element of a range has a
  // known expected value, so the gaps are checked too, for free.
  std::vector<uint16_t> host;
  size_t i = 0;
  while (i < offsets.size()) {
    size_t j = i;
    while (j + 1 < offsets.size() && offsets[j + 1] - offsets[j] <= 4096)
      ++j;
    const int64_t begin = offsets[i], end = offsets[j] + 1;
    host.resize(size_t(end - begin));
    CUDA_CHECK(cudaMemcpy(host.data(), base + begin, size_t(end - begin) * 2,
                          cudaMemcpyDeviceToHost));
    ++tally.copies;
    for (int64_t k = begin; k < end; ++k) {
      auto it = written.find(k);
      const bool isWritten = it != written.end();
      const uint16_t expected =
          isWritten ? it->second : randomBits16(seed, uint64_t(k));
      const uint16_t got = host[size_t(k - begin)];
      ++tally.compared;
      if (got == expected)
        continue;
      if (tally.mismatches < 8)
        tally.firstMismatches +=
            format(" [%s cache element %lld: got 0x%04x, expected 0x%04x (%s)]",
                   a == 0 ? "key" : "value", (long long)k, got, expected,
                   isWritten ? "a written element" : "must be unchanged");
      ++tally.mismatches;
    }
    i = j + 1;
  }
  for (const auto &[offset, value] : written)
    tally.expectedChanged += value != randomBits16(seed, uint64_t(offset));
  CUDA_CHECK(cudaMemsetAsync(state.counter, 0, sizeof(unsigned long long),
                             state.stream));
  CUDA_CHECK(countMismatches16(base, uint64_t(elems), seed, state.counter,
                               state.stream));
  unsigned long long count = 0;
  CUDA_CHECK(cudaMemcpyAsync(&count, state.counter, sizeof(count),
                             cudaMemcpyDeviceToHost, state.stream));
  CUDA_CHECK(cudaStreamSynchronize(state.stream));
  tally.deviceChanged += int64_t(count);
}

} // namespace

CheckResult checkAppend(Launchable &what, bool viaGraph, DeviceState &state,
                        const CacheGeometry &g, const SizeCase &checkCase) {
  fillCaches(state, g);
  what.prepare(checkCase.tokens, uploadCase(state, g, checkCase));
  bool launched = true;
  const std::string failure = runOnce(what, viaGraph, state, &launched);
  if (!failure.empty())
    return {false, launched, failure};

  Expected ex = hostAppend(g, checkCase);
  Tally tally;
  compareAllocation(0, reinterpret_cast<const uint16_t *>(state.keyCache),
                    g.keyElems, kSeedKeyCache, ex, state, tally);
  if (!g.dual && !g.desc.kOnly)
    compareAllocation(1, reinterpret_cast<const uint16_t *>(state.valueAlloc),
                      g.valueElems, kSeedValueCache, ex, state, tally);
  CheckResult result;
  // The case has exactly three tokens that must write nothing.
  result.ok = tally.mismatches == 0 &&
              tally.deviceChanged == tally.expectedChanged &&
              ex.validTokens == checkCase.tokens - 3;
  result.detail = format(
      "%lld tokens (%d valid, 3 that must write nothing), %lld elements "
      "compared in %lld ranges, %lld mismatches; whole caches: %lld elements "
      "changed on the device, %lld expected%s",
      (long long)checkCase.tokens, ex.validTokens, (long long)tally.compared,
      (long long)tally.copies, (long long)tally.mismatches,
      (long long)tally.deviceChanged, (long long)tally.expectedChanged,
      tally.firstMismatches.c_str());
  return result;
}

} // namespace kvbench
