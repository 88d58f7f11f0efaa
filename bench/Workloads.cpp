//===- Workloads.cpp - the sweep's sizes and their slot mappings ----------===//

#include "Workloads.h"
#include "Geometry.h"
#include "Support.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kvbench {

int setsFor(int64_t tokens, const Description &d) {
  const double perCall = double(tokens) * bytesPerToken(d);
  return std::max(1, int(std::ceil(double(kMinTouchBytes) / perCall)));
}

std::vector<int64_t> drawDistinct(std::vector<int64_t> &pool, int64_t count,
                                  std::mt19937_64 &rng) {
  if (count > int64_t(pool.size()))
    fatal(format("need %lld distinct blocks, the cache has %zu",
                 (long long)count, pool.size()));
  for (int64_t i = 0; i < count; ++i) {
    std::uniform_int_distribution<int64_t> pick(i, int64_t(pool.size()) - 1);
    std::swap(pool[size_t(i)], pool[size_t(pick(rng))]);
  }
  return std::vector<int64_t>(pool.begin(), pool.begin() + count);
}

SizeCase makeDecode(const CacheGeometry &g, int64_t tokens,
                    std::vector<int64_t> &blockPool, std::mt19937_64 &rng) {
  SizeCase c;
  c.phase = "decode";
  c.tokens = tokens;
  c.sets = setsFor(tokens, g.desc);
  const int64_t bs = g.desc.blockSize;
  std::uniform_int_distribution<int64_t> position(0, bs - 1);
  c.slots.reserve(size_t(c.sets * tokens));
  for (int s = 0; s < c.sets; ++s)
    for (int64_t block : drawDistinct(blockPool, tokens, rng))
      c.slots.push_back(block * bs + position(rng));
  return c;
}

namespace {

/// Prefill without blocks: each request a distinct random row, after a
/// random context.
void appendRowPrefillSet(const CacheGeometry &g, int64_t requests,
                         std::vector<int64_t> &pool, std::mt19937_64 &rng,
                         SizeCase &c) {
  const int64_t bs = g.desc.blockSize;
  std::uniform_int_distribution<int64_t> context(0, bs - kPrefillRequestTokens);
  for (int64_t row : drawDistinct(pool, requests, rng)) {
    const int64_t start = context(rng);
    for (int64_t i = 0; i < kPrefillRequestTokens; ++i)
      c.slots.push_back(row * bs + start + i);
  }
}

/// Paged prefill: each request's block table a fresh draw of distinct random
/// blocks. Only the blocks a request writes need a table entry; all of one
/// set's are distinct, as in a real cache.
void appendPagedPrefillSet(const CacheGeometry &g, int64_t requests,
                           std::vector<int64_t> &pool, std::mt19937_64 &rng,
                           SizeCase &c) {
  const int64_t bs = g.desc.blockSize;
  std::uniform_int_distribution<int64_t> context(0, kPagedMaxContext -
                                                        kPrefillRequestTokens);
  std::vector<int64_t> starts(static_cast<size_t>(requests));
  int64_t blocksNeeded = 0;
  for (int64_t &start : starts) {
    start = context(rng);
    blocksNeeded += (start + kPrefillRequestTokens - 1) / bs - start / bs + 1;
  }
  std::vector<int64_t> blocks = drawDistinct(pool, blocksNeeded, rng);
  size_t next = 0;
  for (int64_t start : starts) {
    const int64_t firstLogical = start / bs;
    const int64_t lastLogical = (start + kPrefillRequestTokens - 1) / bs;
    const size_t count = size_t(lastLogical - firstLogical + 1);
    std::vector<int64_t> table(blocks.begin() + next,
                               blocks.begin() + next + count);
    next += count;
    for (int64_t pos = start; pos < start + kPrefillRequestTokens; ++pos)
      c.slots.push_back(table[size_t(pos / bs - firstLogical)] * bs + pos % bs);
  }
}

} // namespace

SizeCase makePrefill(const CacheGeometry &g, int64_t tokens,
                     std::vector<int64_t> &blockPool, std::mt19937_64 &rng) {
  SizeCase c;
  c.phase = "prefill";
  c.tokens = tokens;
  c.sets = setsFor(tokens, g.desc);
  const int64_t requests = tokens / kPrefillRequestTokens;
  c.slots.reserve(size_t(c.sets * tokens));
  for (int s = 0; s < c.sets; ++s) {
    if (!abi::layoutInfo(g.desc.layout).paged())
      appendRowPrefillSet(g, requests, blockPool, rng, c);
    else
      appendPagedPrefillSet(g, requests, blockPool, rng, c);
  }
  return c;
}

SizeCase makeCheckCase(const CacheGeometry &g, std::vector<int64_t> &pool,
                       std::mt19937_64 &rng) {
  SizeCase c;
  c.phase = "check";
  c.tokens = 37;
  c.sets = 1;
  const int64_t bs = g.desc.blockSize;
  const bool rows = !abi::layoutInfo(g.desc.layout).paged();
  const int64_t runLength = 20;
  const int64_t runStart = rows ? bs - runLength : bs - 3;
  const int64_t runBlocks = (runStart + runLength - 1) / bs + 1;
  std::vector<int64_t> blocks = drawDistinct(pool, runBlocks + 17, rng);
  for (int64_t i = 0; i < runLength; ++i) {
    const int64_t pos = runStart + i;
    c.slots.push_back(blocks[size_t(pos / bs)] * bs + pos % bs);
  }
  std::uniform_int_distribution<int64_t> position(0, bs - 1);
  for (int64_t i = 0; i < 17; ++i)
    c.slots.push_back(blocks[size_t(runBlocks + i)] * bs + position(rng));
  c.slots[5] = -1;
  c.slots[11] = g.numBlocks * bs + 7;
  c.slots[30] = -123456;
  return c;
}

std::vector<SizeCase> makeSweep(const CacheGeometry &g, uint64_t seed,
                                SizeCase *checkCase) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> blockPool(size_t(g.numBlocks));
  std::iota(blockPool.begin(), blockPool.end(), int64_t(0));
  std::vector<SizeCase> cases;
  for (int64_t t : kDecodeTokens)
    cases.push_back(makeDecode(g, t, blockPool, rng));
  for (int64_t t : kPrefillTokens)
    cases.push_back(makePrefill(g, t, blockPool, rng));
  *checkCase = makeCheckCase(g, blockPool, rng);
  return cases;
}

} // namespace kvbench
