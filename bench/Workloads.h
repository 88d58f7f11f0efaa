//===- Workloads.h - the sweep's sizes and their slot mappings --*- C++ -*-===//
//
// Decode: one token per request, each in its own random block at a random
// position. Prefill: requests of 1024 tokens at contiguous positions after a
// random context, in randomly drawn blocks. Each size gets as many
// independent input sets as it takes for one pass over them to touch at least
// 256 MiB, so no timing loop runs out of the L2.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_BENCH_WORKLOADS_H
#define KVGEN_BENCH_WORKLOADS_H

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace kvbench {

struct CacheGeometry;
struct Description;

inline const std::vector<int64_t> kDecodeTokens = {1, 8, 32, 128, 512};
inline const std::vector<int64_t> kPrefillTokens = {1024, 4096, 16384, 65536};
constexpr int64_t kMaxDecodeTokens = 512;
constexpr int64_t kPrefillRequestTokens = 1024;
/// Paged prefill requests start after a context of [0, this) tokens.
constexpr int64_t kPagedMaxContext = 8192;

/// One point of the sweep: `sets` independent input sets of `tokens` tokens
/// (K/V rows and slots), rotated so a timing loop touches >= 256 MiB.
struct SizeCase {
  std::string phase;
  int64_t tokens = 0;
  int sets = 0;
  /// sets * tokens slots, set after set.
  std::vector<int64_t> slots;
};

/// The input sets `tokens` tokens need to touch kMinTouchBytes in one pass.
int setsFor(int64_t tokens, const Description &d);

/// Draws `count` distinct blocks out of `pool` (a permutation of all
/// blocks, reshuffled in place: a partial Fisher-Yates).
std::vector<int64_t> drawDistinct(std::vector<int64_t> &pool, int64_t count,
                                  std::mt19937_64 &rng);

SizeCase makeDecode(const CacheGeometry &g, int64_t tokens,
                    std::vector<int64_t> &blockPool, std::mt19937_64 &rng);
SizeCase makePrefill(const CacheGeometry &g, int64_t tokens,
                     std::vector<int64_t> &blockPool, std::mt19937_64 &rng);

/// The correctness case: a run of 20 positions across block boundaries
/// (a Batch-axis layout: the last 20 positions of a row), 17 decode-like
/// tokens, and three tokens that must write nothing (slot -1, a slot past
/// the cache, a large negative slot), at positions that break every tile of
/// the reference (37 tokens).
SizeCase makeCheckCase(const CacheGeometry &g, std::vector<int64_t> &pool,
                       std::mt19937_64 &rng);

/// Every size of the sweep, decode then prefill, drawn from `seed`, and the
/// check case after them.
std::vector<SizeCase> makeSweep(const CacheGeometry &g, uint64_t seed,
                                SizeCase *checkCase);

} // namespace kvbench

#endif // KVGEN_BENCH_WORKLOADS_H
