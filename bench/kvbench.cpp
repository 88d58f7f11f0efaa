//===- kvbench.cpp - time KV-cache appends against the ceilings -----------===//
//
// Measures one generated append kernel (through kvrt) and the hand-written
// CUDA reference for the same description, beside the ceilings of the same
// run, with the method of /work/shared/PERF-TARGETS.md: caches of >= 1 GiB,
// random data, inputs rotated so every timing loop touches >= 256 MiB, L2
// flushed by a 1 GiB read-only pass before each cold timing. Without
// --bundle it benchmarks only the reference and the ceilings, which checks
// the bench itself before any generated kernel exists.
//
// The first GPU run has to count: every CUDA and kvrt call is checked, the
// log says what was set up and what each step measured, and the JSON is
// rewritten after every step so a crash still leaves the numbers so far.
//
//===----------------------------------------------------------------------===//

#include "BenchKernels.h"
#include "BenchRandom.h"

#if KVBENCH_WITH_KVRT
#include "kvrt/kvrt.h"
#endif

#include <cuda.h> // CUfunction and cuLaunchKernel's signature only: no libcuda link.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <unordered_map>
#include <vector>

using json = nlohmann::ordered_json;

namespace {

//===----------------------------------------------------------------------===//
// The method's constants (PERF-TARGETS.md)
//===----------------------------------------------------------------------===//

constexpr uint64_t kGiB = uint64_t(1) << 30;
constexpr uint64_t kMiB = uint64_t(1) << 20;
/// Each of K and V cache is at least this big.
constexpr uint64_t kMinCacheBytes = kGiB;
/// Every timing loop touches at least this many (minimum) bytes: 256 MiB is
/// more than the 256 MB the method asks for.
constexpr uint64_t kMinTouchBytes = 256 * kMiB;
/// The L2 flush reads at least this much (and at least 8x the L2).
constexpr uint64_t kMinFlushBytes = kGiB;
/// The device-to-device copy of the ceiling: 4 GiB read + 4 GiB written.
constexpr uint64_t kCopyBytes = 4 * kGiB;
constexpr int kGraphCalls = 100;
const std::vector<int64_t> kDecodeTokens = {1, 8, 32, 128, 512};
const std::vector<int64_t> kPrefillTokens = {1024, 4096, 16384, 65536};
constexpr int64_t kPrefillRequestTokens = 1024;
/// Paged prefill requests start after a context of [0, this) tokens.
constexpr int64_t kPagedMaxContext = 8192;
/// Max_seq_len of the reference-only contiguous description: 512 requests
/// (one per decode token at 512) of 2048 positions make a 2 GiB cache.
constexpr int64_t kDefaultContiguousMaxSeqLen = 2048;

constexpr uint32_t kSeedKeyPool = 0x1001;
constexpr uint32_t kSeedValuePool = 0x1002;
constexpr uint32_t kSeedKeyCache = 0x2001;
constexpr uint32_t kSeedValueCache = 0x2002;
constexpr uint32_t kSeedFlush = 0x3001;
constexpr uint32_t kSeedCopy = 0x3002;

const double kNaN = std::numeric_limits<double>::quiet_NaN();

//===----------------------------------------------------------------------===//
// Failure and logging
//===----------------------------------------------------------------------===//

std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  char buffer[2048];
  vsnprintf(buffer, sizeof(buffer), fmt, args);
  va_end(args);
  return buffer;
}

[[noreturn]] void fatal(const std::string &message) {
  std::fflush(stdout);
  std::fprintf(stderr, "\nkvbench: FATAL: %s\n", message.c_str());
  std::fflush(stderr);
  std::exit(2);
}

void checkCuda(cudaError_t error, const char *call, const char *file,
               int line) {
  if (error == cudaSuccess)
    return;
  fatal(format("%s failed at %s:%d: %s (%s)", call, file, line,
               cudaGetErrorName(error), cudaGetErrorString(error)));
}
#define CUDA_CHECK(call) checkCuda((call), #call, __FILE__, __LINE__)

void logLine(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void logLine(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::vprintf(fmt, args);
  va_end(args);
  std::printf("\n");
  std::fflush(stdout);
}

double nowSeconds() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

//===----------------------------------------------------------------------===//
// Statistics
//===----------------------------------------------------------------------===//

struct Stats {
  double median = kNaN, min = kNaN, max = kNaN;
  std::vector<double> samples;
};

Stats summarize(std::vector<double> samples) {
  Stats stats;
  stats.samples = samples;
  if (samples.empty())
    return stats;
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  stats.median =
      n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  stats.min = samples.front();
  stats.max = samples.back();
  return stats;
}

json statsJson(const Stats &stats) {
  json out;
  out["median"] = stats.median;
  out["min"] = stats.min;
  out["max"] = stats.max;
  out["n"] = stats.samples.size();
  out["samples"] = stats.samples;
  return out;
}

//===----------------------------------------------------------------------===//
// Options
//===----------------------------------------------------------------------===//

struct Options {
  std::string bundlePath;
  std::string kernel;
  std::string variant = "vector";
  std::string layout = "paged_nhd";
  std::string outDir;
  bool quick = false;
  uint64_t seed = 20261202;
};

void printUsage() {
  std::printf(
      "usage: kvbench [--bundle FILE --kernel NAME [--variant V]] "
      "[--layout L] [--quick] [--seed N] [OUT_DIR]\n"
      "  --bundle FILE   a kvgen bundle (kvgen --emit=bundle)\n"
      "  --kernel NAME   the kernel to time (NAME or NAME_scalar); may be\n"
      "                  left out when the bundle has one append\n"
      "  --variant V     vector (default), scalar or auto (kvrt's choice)\n"
      "  --layout L      without --bundle: time only the reference and the\n"
      "                  ceilings for the bf16 8x128 block-16 description\n"
      "                  of layout L (paged_nhd, paged_hnd, contiguous,\n"
      "                  vllm_vectorized, dual_stacked)\n"
      "  --quick         fewer repetitions: a smoke test, not a measurement\n"
      "  OUT_DIR         where the JSON, CSV and table go (default $OUT,\n"
      "                  else ./kvbench-out)\n");
}

Options parseOptions(int argc, char **argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        fatal("option " + arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--bundle")
      options.bundlePath = value();
    else if (arg == "--kernel")
      options.kernel = value();
    else if (arg == "--variant")
      options.variant = value();
    else if (arg == "--layout")
      options.layout = value();
    else if (arg == "--out")
      options.outDir = value();
    else if (arg == "--seed")
      options.seed = std::strtoull(value().c_str(), nullptr, 0);
    else if (arg == "--quick")
      options.quick = true;
    else if (arg == "-h" || arg == "--help") {
      printUsage();
      std::exit(0);
    } else if (!arg.empty() && arg[0] == '-') {
      printUsage();
      fatal("unknown option " + arg);
    } else if (options.outDir.empty()) {
      options.outDir = arg;
    } else {
      fatal("more than one output directory: " + arg);
    }
  }
  if (options.outDir.empty()) {
    const char *out = std::getenv("OUT");
    options.outDir = out && *out ? out : "kvbench-out";
  }
  if (options.variant != "vector" && options.variant != "scalar" &&
      options.variant != "auto")
    fatal("--variant must be vector, scalar or auto, not " + options.variant);
  if (!options.kernel.empty() && options.bundlePath.empty())
    fatal("--kernel needs --bundle");
  return options;
}

//===----------------------------------------------------------------------===//
// The description and the cache geometry
//===----------------------------------------------------------------------===//

enum class Layout {
  Contiguous,
  PagedNHD,
  PagedHND,
  VllmVectorized,
  DualStacked
};

bool parseLayout(const std::string &name, Layout *out) {
  static const std::map<std::string, Layout> names = {
      {"contiguous", Layout::Contiguous},
      {"paged_nhd", Layout::PagedNHD},
      {"paged_hnd", Layout::PagedHND},
      {"vllm_vectorized", Layout::VllmVectorized},
      {"dual_stacked", Layout::DualStacked}};
  auto it = names.find(name);
  if (it == names.end())
    return false;
  *out = it->second;
  return true;
}

const char *layoutName(Layout layout) {
  switch (layout) {
  case Layout::Contiguous:
    return "contiguous";
  case Layout::PagedNHD:
    return "paged_nhd";
  case Layout::PagedHND:
    return "paged_hnd";
  case Layout::VllmVectorized:
    return "vllm_vectorized";
  case Layout::DualStacked:
    return "dual_stacked";
  }
  return "?";
}

/// What kvbench needs of a kernel's description (the manifest's "cache" and
/// "source_dtype", KERNEL-ABI.md).
struct Description {
  Layout layout = Layout::PagedNHD;
  /// Slots per block; max_seq_len for contiguous.
  int64_t blockSize = 16;
  int64_t numHeads = 8;
  int64_t headDim = 128;
  int64_t x = 8;
  std::string cacheDtype = "bf16";
  std::string sourceDtype = "bf16";
};

bool isPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

int log2Exact(int64_t v) {
  int log = 0;
  while ((int64_t(1) << log) < v)
    ++log;
  return log;
}

/// The strides of one cache tensor in elements, and how the element
/// (block, head, pos, d) is found in it (KERNEL-ABI.md's offset table).
struct CacheStrides {
  int64_t block = 0, head = 0, pos = 0, dim = 0;
  /// vllm_vectorized key cache: `dim` strides d / x and d % x is innermost.
  int64_t x = 0;
  /// Element offset of this tensor in its allocation (dual_stacked's V).
  int64_t base = 0;

  int64_t offset(int64_t b, int64_t h, int64_t p, int64_t d) const {
    const int64_t dimPart = x ? (d / x) * dim + d % x : d * dim;
    return base + b * block + h * head + p * pos + dimPart;
  }
};

/// The caches of a description sized for the bench: >= 1 GiB each.
struct CacheGeometry {
  Description desc;
  int64_t numBlocks = 0;
  bool dual = false;
  /// DLPack shapes (compact row-major); valueShape is empty for dual.
  std::vector<int64_t> keyShape, valueShape;
  CacheStrides key, value;
  /// Elements of each allocation; dual_stacked has one (valueElems = 0).
  int64_t keyElems = 0, valueElems = 0;
};

int64_t product(const std::vector<int64_t> &shape) {
  int64_t p = 1;
  for (int64_t v : shape)
    p *= v;
  return p;
}

CacheGeometry makeGeometry(const Description &desc) {
  if (desc.cacheDtype != desc.sourceDtype ||
      (desc.cacheDtype != "bf16" && desc.cacheDtype != "f16"))
    fatal(format("kvbench times 16-bit caches fed from the same dtype (its "
                 "reference and check copy bits); this description is %s "
                 "from %s",
                 desc.cacheDtype.c_str(), desc.sourceDtype.c_str()));
  if (!isPowerOfTwo(desc.blockSize) || !isPowerOfTwo(desc.headDim) ||
      desc.headDim < 8 || desc.numHeads <= 0)
    fatal(format("kvbench needs a power-of-two block size (max_seq_len) and "
                 "head_dim >= 8, got block %lld head_dim %lld heads %lld",
                 (long long)desc.blockSize, (long long)desc.headDim,
                 (long long)desc.numHeads));
  if (desc.layout == Layout::VllmVectorized && desc.x != 8)
    fatal(format("vllm_vectorized with 16-bit elements has x = 8, the "
                 "manifest says %lld",
                 (long long)desc.x));

  CacheGeometry g;
  g.desc = desc;
  const int64_t H = desc.numHeads, D = desc.headDim, bs = desc.blockSize;
  const int64_t blockBytes = bs * H * D * 2;
  g.numBlocks = int64_t((kMinCacheBytes + blockBytes - 1) / blockBytes);
  if (desc.layout == Layout::Contiguous) {
    // A decode token gets its own request, so the batch covers the largest
    // decode size.
    g.numBlocks = std::max<int64_t>(g.numBlocks, kDecodeTokens.back());
    if (bs < kPrefillRequestTokens)
      fatal(format("the prefill sweep puts requests of %lld tokens in one "
                   "row: a contiguous description needs max_seq_len >= "
                   "that, not %lld",
                   (long long)kPrefillRequestTokens, (long long)bs));
  }
  const int64_t nb = g.numBlocks;
  switch (desc.layout) {
  case Layout::Contiguous:
    g.keyShape = {nb, H, bs, D};
    g.key = {H * bs * D, bs * D, D, 1, 0, 0};
    g.valueShape = g.keyShape;
    g.value = g.key;
    break;
  case Layout::PagedNHD:
    g.keyShape = {nb, bs, H, D};
    g.key = {bs * H * D, D, H * D, 1, 0, 0};
    g.valueShape = g.keyShape;
    g.value = g.key;
    break;
  case Layout::PagedHND:
    g.keyShape = {nb, H, bs, D};
    g.key = {H * bs * D, bs * D, D, 1, 0, 0};
    g.valueShape = g.keyShape;
    g.value = g.key;
    break;
  case Layout::VllmVectorized:
    g.keyShape = {nb, H, D / desc.x, bs, desc.x};
    g.key = {H * D * bs, D * bs, desc.x, bs * desc.x, desc.x, 0};
    g.valueShape = {nb, H, D, bs};
    g.value = {H * D * bs, D * bs, 1, bs, 0, 0};
    break;
  case Layout::DualStacked:
    g.dual = true;
    g.keyShape = {nb, 2, H, bs, D};
    g.key = {2 * H * bs * D, bs * D, D, 1, 0, 0};
    g.value = g.key;
    g.value.base = H * bs * D;
    break;
  }
  g.keyElems = product(g.keyShape);
  g.valueElems = g.dual ? 0 : product(g.valueShape);
  return g;
}

std::string describe(const CacheGeometry &g) {
  std::string shape = "[";
  for (size_t i = 0; i < g.keyShape.size(); ++i)
    shape += (i ? "," : "") + std::to_string(g.keyShape[i]);
  shape += "]";
  return format("%s, %s %lld, %lld heads x %lld, %s from %s, %lld blocks, "
                "key cache %s (%.2f GiB%s)",
                layoutName(g.desc.layout),
                g.desc.layout == Layout::Contiguous ? "max_seq_len"
                                                    : "block_size",
                (long long)g.desc.blockSize, (long long)g.desc.numHeads,
                (long long)g.desc.headDim, g.desc.cacheDtype.c_str(),
                g.desc.sourceDtype.c_str(), (long long)g.numBlocks,
                shape.c_str(), double(g.keyElems) * 2 / double(kGiB),
                g.dual ? ", K and V in one buffer" : ", V the same size");
}

/// The minimum bytes of one token (PERF-TARGETS.md): read K+V in the source
/// dtype + the 8-byte slot, write K+V in the cache dtype.
double bytesPerToken(const Description &d) {
  return double(d.numHeads * d.headDim) * (2 * 2 + 2 * 2) + 8;
}

//===----------------------------------------------------------------------===//
// Device state
//===----------------------------------------------------------------------===//

struct DeviceState {
  int device = 0;
  cudaDeviceProp props{};
  cudaStream_t stream = nullptr;
  uint16_t *keyPool = nullptr, *valuePool = nullptr;
  int64_t poolTokens = 0;
  int64_t *slotPool = nullptr;
  int64_t slotPoolEntries = 0;
  uint16_t *keyCache = nullptr;
  /// The value cache's first element (dual_stacked: inside keyCache).
  uint16_t *valueCache = nullptr;
  /// The allocation behind valueCache (null for dual_stacked).
  uint16_t *valueAlloc = nullptr;
  void *flushBuffer = nullptr;
  uint64_t flushBytes = 0;
  uint32_t *sink = nullptr;
  unsigned long long *counter = nullptr;
  std::vector<cudaEvent_t> startEvents, stopEvents;
};

void flushL2(DeviceState &state) {
  CUDA_CHECK(kvbench::flushL2(state.flushBuffer, state.flushBytes, state.sink,
                              state.stream));
}

void fillCaches(DeviceState &state, const CacheGeometry &g) {
  CUDA_CHECK(kvbench::fillRandom16(state.keyCache, uint64_t(g.keyElems),
                                   kSeedKeyCache, state.stream));
  if (!g.dual)
    CUDA_CHECK(kvbench::fillRandom16(state.valueAlloc, uint64_t(g.valueElems),
                                     kSeedValueCache, state.stream));
  CUDA_CHECK(cudaStreamSynchronize(state.stream));
}

//===----------------------------------------------------------------------===//
// Sizes and their slot mappings
//===----------------------------------------------------------------------===//

/// One point of the sweep: `sets` independent input sets of `tokens` tokens
/// (K/V rows and slots), rotated so a timing loop touches >= 256 MiB.
struct SizeCase {
  std::string phase;
  int64_t tokens = 0;
  int sets = 0;
  /// sets * tokens slots, set after set.
  std::vector<int64_t> slots;
};

/// Draws `count` distinct blocks out of `pool` (a permutation of all
/// blocks, reshuffled in place: a partial Fisher-Yates).
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

int setsFor(int64_t tokens, const Description &d) {
  const double perCall = double(tokens) * bytesPerToken(d);
  return std::max(1, int(std::ceil(double(kMinTouchBytes) / perCall)));
}

/// Decode: one token per request, each in its own random block (contiguous:
/// its own request row) at a random position.
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

/// Prefill: requests of 1024 tokens at contiguous positions after a random
/// context length. Paged: each request's block table is a fresh draw of
/// distinct random blocks (randomly permuted blocks); contiguous: each
/// request is a distinct random row.
SizeCase makePrefill(const CacheGeometry &g, int64_t tokens,
                     std::vector<int64_t> &blockPool, std::mt19937_64 &rng) {
  SizeCase c;
  c.phase = "prefill";
  c.tokens = tokens;
  c.sets = setsFor(tokens, g.desc);
  const int64_t bs = g.desc.blockSize;
  const int64_t requests = tokens / kPrefillRequestTokens;
  c.slots.reserve(size_t(c.sets * tokens));
  for (int s = 0; s < c.sets; ++s) {
    if (g.desc.layout == Layout::Contiguous) {
      std::uniform_int_distribution<int64_t> context(
          0, bs - kPrefillRequestTokens);
      for (int64_t row : drawDistinct(blockPool, requests, rng)) {
        const int64_t start = context(rng);
        for (int64_t i = 0; i < kPrefillRequestTokens; ++i)
          c.slots.push_back(row * bs + start + i);
      }
      continue;
    }
    std::uniform_int_distribution<int64_t> context(
        0, kPagedMaxContext - kPrefillRequestTokens);
    std::vector<int64_t> starts(static_cast<size_t>(requests));
    int64_t blocksNeeded = 0;
    for (int64_t &start : starts) {
      start = context(rng);
      blocksNeeded += (start + kPrefillRequestTokens - 1) / bs - start / bs + 1;
    }
    // Only the blocks a request writes need a table entry; all of one set's
    // are distinct, as in a real cache.
    std::vector<int64_t> blocks = drawDistinct(blockPool, blocksNeeded, rng);
    size_t next = 0;
    for (int64_t start : starts) {
      const int64_t firstLogical = start / bs;
      const int64_t lastLogical = (start + kPrefillRequestTokens - 1) / bs;
      std::vector<int64_t> table(blocks.begin() + next,
                                 blocks.begin() + next +
                                     (lastLogical - firstLogical + 1));
      next += table.size();
      for (int64_t pos = start; pos < start + kPrefillRequestTokens; ++pos)
        c.slots.push_back(table[size_t(pos / bs - firstLogical)] * bs +
                          pos % bs);
    }
  }
  return c;
}

/// The correctness case: a run of 20 positions across block boundaries
/// (contiguous: the last 20 positions of a row), 17 decode-like tokens, and
/// three tokens that must write nothing (slot -1, a slot past the cache, a
/// large negative slot), at positions that break every tile of the
/// reference (37 tokens).
SizeCase makeCheckCase(const CacheGeometry &g, std::vector<int64_t> &pool,
                       std::mt19937_64 &rng) {
  SizeCase c;
  c.phase = "check";
  c.tokens = 37;
  c.sets = 1;
  const int64_t bs = g.desc.blockSize;
  const bool contiguous = g.desc.layout == Layout::Contiguous;
  const int64_t runLength = 20;
  const int64_t runStart = contiguous ? bs - runLength : bs - 3;
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

struct SetPointers {
  const uint16_t *key = nullptr;
  const uint16_t *value = nullptr;
  const int64_t *slots = nullptr;
};

/// Uploads a case's slots and points set s at tokens [s*T, (s+1)*T) of the
/// pools (compact [T, H, D] rows).
std::vector<SetPointers> uploadCase(DeviceState &state, const CacheGeometry &g,
                                    const SizeCase &c) {
  const int64_t entries = int64_t(c.slots.size());
  if (entries > state.slotPoolEntries ||
      int64_t(c.sets) * c.tokens > state.poolTokens)
    fatal(format("case %s/%lld needs %lld tokens of pool, have %lld",
                 c.phase.c_str(), (long long)c.tokens,
                 (long long)(int64_t(c.sets) * c.tokens),
                 (long long)state.poolTokens));
  // The stream is non-blocking (it does not wait for the legacy stream a
  // plain cudaMemcpy uses): let it drain before its slots are replaced.
  CUDA_CHECK(cudaStreamSynchronize(state.stream));
  CUDA_CHECK(cudaMemcpy(state.slotPool, c.slots.data(),
                        size_t(entries) * sizeof(int64_t),
                        cudaMemcpyHostToDevice));
  const int64_t rowElems = g.desc.numHeads * g.desc.headDim;
  std::vector<SetPointers> sets(size_t(c.sets));
  for (int s = 0; s < c.sets; ++s) {
    sets[size_t(s)].key = state.keyPool + int64_t(s) * c.tokens * rowElems;
    sets[size_t(s)].value = state.valuePool + int64_t(s) * c.tokens * rowElems;
    sets[size_t(s)].slots = state.slotPool + int64_t(s) * c.tokens;
  }
  return sets;
}

//===----------------------------------------------------------------------===//
// What gets timed
//===----------------------------------------------------------------------===//

/// One thing launched by the timing loops: an append (generated through kvrt,
/// or the reference) or an empty kernel. Every timing mode goes through
/// launch(), so the C++ loop around an empty kernel and around kvrt is the
/// same loop.
class Launchable {
public:
  virtual ~Launchable() = default;
  virtual std::string name() const = 0;
  /// Builds the arguments of every set (outside all timed regions).
  virtual void prepare(int64_t tokens, const std::vector<SetPointers> &sets) {
    (void)tokens;
    (void)sets;
  }
  /// Enqueues one call on input set `set`; false (with lastError()) if the
  /// launch was refused. Never synchronizes.
  virtual bool launch(int set, cudaStream_t stream) = 0;
  virtual std::string lastError() const { return error; }

protected:
  std::string error;
};

class EmptyKernel : public Launchable {
public:
  std::string name() const override { return "empty kernel <<<1,1>>>"; }
  bool launch(int, cudaStream_t stream) override {
    const cudaError_t e = kvbench::launchEmptyKernel(stream);
    if (e == cudaSuccess)
      return true;
    error = cudaGetErrorString(e);
    return false;
  }
};

using LaunchKernelFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned,
                                    unsigned, unsigned, unsigned, unsigned,
                                    CUstream, void **, void **);

/// An empty kernel with the append's 41 8-byte parameters, launched through
/// cuLaunchKernel with the decode-1 geometry (1 x 128): what a kvrt launch
/// costs when the runtime adds nothing.
class EmptyAbiKernel : public Launchable {
public:
  /// An anchor, not the subject: if the driver's entry point or the
  /// function handle cannot be had, available() is false and the run goes
  /// on without this one number.
  EmptyAbiKernel() {
    for (int i = 0; i < kvbench::kAppendAbiParams; ++i) {
      values[i] = 0;
      params[i] = &values[i];
    }
    void *entry = nullptr;
    cudaDriverEntryPointQueryResult query{};
    cudaError_t e = cudaGetDriverEntryPointByVersion(
        "cuLaunchKernel", &entry, CUDART_VERSION, cudaEnableDefault, &query);
    if (e != cudaSuccess || query != cudaDriverEntryPointSuccess || !entry) {
      error = format("no cuLaunchKernel entry point (%s, query %d)",
                     cudaGetErrorString(e), int(query));
      (void)cudaGetLastError();
      return;
    }
    launchKernel = reinterpret_cast<LaunchKernelFn>(entry);
    cudaFunction_t function = nullptr;
    e = cudaGetFuncBySymbol(&function, kvbench::emptyAbiKernelSymbol());
    if (e != cudaSuccess || !function) {
      error = format("cudaGetFuncBySymbol: %s", cudaGetErrorString(e));
      (void)cudaGetLastError();
      return;
    }
    kernel = reinterpret_cast<CUfunction>(function);
    // One launch proves the path before any loop relies on it.
    if (!launch(0, nullptr) || cudaDeviceSynchronize() != cudaSuccess) {
      error = "first launch failed: " + error;
      (void)cudaGetLastError();
      kernel = nullptr;
    }
  }
  bool available() const { return kernel != nullptr; }
  std::string name() const override {
    return "empty kernel, 41 params, cuLaunchKernel 1x128";
  }
  bool launch(int, cudaStream_t stream) override {
    if (!launchKernel || !kernel) {
      error = "the 41-parameter empty kernel is not available";
      return false;
    }
    const CUresult r =
        launchKernel(kernel, 1, 1, 1, 128, 1, 1, 0,
                     reinterpret_cast<CUstream>(stream), params, nullptr);
    if (r == CUDA_SUCCESS)
      return true;
    error = format("cuLaunchKernel returned %d", int(r));
    return false;
  }

private:
  LaunchKernelFn launchKernel = nullptr;
  CUfunction kernel = nullptr;
  uint64_t values[kvbench::kAppendAbiParams];
  void *params[kvbench::kAppendAbiParams];
};

class ReferenceAppend : public Launchable {
public:
  ReferenceAppend(const CacheGeometry &g, const DeviceState &state) {
    const int64_t H = g.desc.numHeads, D = g.desc.headDim;
    base.keyCache = state.keyCache;
    base.valueCache = state.valueCache;
    base.numBlocks = g.numBlocks;
    base.numHeads = H;
    base.log2BlockSize = log2Exact(g.desc.blockSize);
    base.log2ChunksPerHead = log2Exact(D / 8);
    base.keyStrideToken = H * D;
    base.keyStrideHead = D;
    base.valueStrideToken = H * D;
    base.valueStrideHead = D;
    base.keyCacheStrideBlock = g.key.block;
    base.keyCacheStrideHead = g.key.head;
    base.keyCacheStridePos = g.key.pos;
    // A 16-byte chunk is 8 elements along d: 8 * dim apart, but in the
    // vectorized key cache one chunk is one x group, `dim` apart.
    base.keyCacheStrideChunk = g.key.x ? g.key.dim : 8 * g.key.dim;
    base.valueCacheStrideBlock = g.value.block;
    base.valueCacheStrideHead = g.value.head;
    base.valueCacheStridePos = g.value.pos;
    base.valueTransposed = g.desc.layout == Layout::VllmVectorized;
    base.valueCacheStrideChunk = 8 * g.value.dim;
    base.valueCacheStrideDim = g.value.dim;
  }
  void setConfig(int index) { config = index; }
  /// Caps the grid (0: none) from the next prepare() on; see
  /// ReferenceAppendParams::maxGridBlocks.
  void setMaxGridBlocks(int64_t blocks) { base.maxGridBlocks = blocks; }
  int configIndex() const { return config; }
  std::string configName() const {
    return kvbench::referenceConfigs()[size_t(config)].name;
  }
  std::string name() const override {
    return "reference (" + configName() + ")";
  }
  void prepare(int64_t tokens, const std::vector<SetPointers> &sets) override {
    params.assign(sets.size(), base);
    for (size_t s = 0; s < sets.size(); ++s) {
      params[s].numTokens = tokens;
      params[s].key = sets[s].key;
      params[s].value = sets[s].value;
      params[s].slotMapping = sets[s].slots;
    }
  }
  bool launch(int set, cudaStream_t stream) override {
    const cudaError_t e =
        kvbench::launchReferenceAppend(params[size_t(set)], config, stream);
    if (e == cudaSuccess)
      return true;
    error = format("reference launch (%s): %s", configName().c_str(),
                   cudaGetErrorString(e));
    return false;
  }
  int64_t gridFor(int64_t tokens) const {
    kvbench::ReferenceAppendParams p = base;
    p.numTokens = tokens;
    return kvbench::referenceGridSize(p, config);
  }

private:
  kvbench::ReferenceAppendParams base;
  std::vector<kvbench::ReferenceAppendParams> params;
  int config = 0;
};

#if KVBENCH_WITH_KVRT
DLDataType dlpackDtype(const std::string &name) {
  if (name == "bf16")
    return DLDataType{kDLBfloat, 16, 1};
  if (name == "f16")
    return DLDataType{kDLFloat, 16, 1};
  fatal("no DLPack dtype for " + name);
}

/// The generated kernel, launched through kvrt_append exactly as an
/// application would: DLPack tensors in, a stream, nothing else.
class GeneratedAppend : public Launchable {
public:
  GeneratedAppend(kvrt_bundle *bundle, std::string kernelName,
                  kvrt_variant variant, const CacheGeometry &g,
                  const DeviceState &state)
      : bundle(bundle), kernelName(std::move(kernelName)), variant(variant),
        geometry(g), device(state.device) {
    keyCacheShape = g.keyShape;
    valueCacheShape = g.valueShape;
    keyCache =
        tensor(state.keyCache, dlpackDtype(g.desc.cacheDtype), keyCacheShape);
    if (!g.dual)
      valueCache = tensor(state.valueAlloc, dlpackDtype(g.desc.cacheDtype),
                          valueCacheShape);
  }
  std::string name() const override {
    return "generated " + kernelName + " via kvrt";
  }
  void prepare(int64_t tokens, const std::vector<SetPointers> &sets) override {
    inputShape = {tokens, geometry.desc.numHeads, geometry.desc.headDim};
    slotShape = {tokens};
    const DLDataType source = dlpackDtype(geometry.desc.sourceDtype);
    keys.clear();
    values.clear();
    slots.clear();
    for (const SetPointers &s : sets) {
      keys.push_back(tensor(s.key, source, inputShape));
      values.push_back(tensor(s.value, source, inputShape));
      slots.push_back(tensor(s.slots, DLDataType{kDLInt, 64, 1}, slotShape));
    }
    // The argument structs point into the vectors: fill them last.
    args.assign(sets.size(), kvrt_append_args{});
    for (size_t i = 0; i < sets.size(); ++i) {
      args[i].kernel = kernelName.c_str();
      args[i].key = &keys[i];
      args[i].value = &values[i];
      args[i].slot_mapping = &slots[i];
      args[i].key_cache = &keyCache;
      args[i].value_cache = geometry.dual ? nullptr : &valueCache;
      args[i].variant = variant;
    }
  }
  bool launch(int set, cudaStream_t stream) override {
    const kvrt_status status = kvrt_append(bundle, &args[size_t(set)], stream);
    if (status == KVRT_SUCCESS)
      return true;
    error =
        format("kvrt_append returned %d: %s", int(status), kvrt_last_error());
    return false;
  }

private:
  DLTensor tensor(const void *data, DLDataType dtype,
                  std::vector<int64_t> &shape) const {
    DLTensor t{};
    t.data = const_cast<void *>(data);
    t.device = DLDevice{kDLCUDA, int32_t(device)};
    t.ndim = int32_t(shape.size());
    t.dtype = dtype;
    t.shape = shape.data();
    t.strides = nullptr; // compact row-major, as DLPack defines NULL
    t.byte_offset = 0;
    return t;
  }

  kvrt_bundle *bundle;
  std::string kernelName;
  kvrt_variant variant;
  CacheGeometry geometry;
  int device;
  std::vector<int64_t> keyCacheShape, valueCacheShape, inputShape, slotShape;
  DLTensor keyCache{}, valueCache{};
  std::vector<DLTensor> keys, values, slots;
  std::vector<kvrt_append_args> args;
};
#endif // KVBENCH_WITH_KVRT

void launchOrDie(Launchable &what, int set, cudaStream_t stream) {
  if (!what.launch(set, stream))
    fatal(what.name() + ": " + what.lastError());
}

/// Launches `calls` calls, rotating through `sets` sets from `*nextSet`.
void launchLoop(Launchable &what, int sets, int64_t calls, cudaStream_t stream,
                int *nextSet) {
  int set = *nextSet;
  for (int64_t k = 0; k < calls; ++k) {
    if (!what.launch(set, stream))
      fatal(what.name() + ": " + what.lastError());
    if (++set == sets)
      set = 0;
  }
  *nextSet = set;
}

//===----------------------------------------------------------------------===//
// Timing
//===----------------------------------------------------------------------===//

struct Repetitions {
  int eager = 5;
  int graph = 5;
  int cold = 100;
  int tune = 25;
  int launchRounds = 2;
  int launchReps = 3;
  int hostEnqueue = 50;
  double loopSeconds = 0.02;
};

/// Eager: us per call of a C++ loop of launches, host clock from the first
/// launch to the end of the stream synchronize, so it is what an application
/// sees (host-bound when the launch costs more than the kernel). `calls` = 0
/// sizes the loop to >= loopSeconds and >= one pass over every set.
Stats timeEager(Launchable &what, int sets, cudaStream_t stream, int reps,
                int64_t calls, double loopSeconds) {
  int next = 0;
  const int64_t warm = std::min<int64_t>(std::max(sets, 16), 512);
  launchLoop(what, sets, warm, stream, &next);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  if (calls == 0) {
    const double t0 = nowSeconds();
    launchLoop(what, sets, warm, stream, &next);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const double perCall = (nowSeconds() - t0) / double(warm);
    calls = std::max<int64_t>(
        sets, int64_t(std::ceil(loopSeconds / std::max(perCall, 1e-7))));
    calls = std::min<int64_t>(calls, 2000000);
  }
  std::vector<double> samples;
  for (int r = 0; r < reps; ++r) {
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const double t0 = nowSeconds();
    launchLoop(what, sets, calls, stream, &next);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    samples.push_back((nowSeconds() - t0) * 1e6 / double(calls));
  }
  CUDA_CHECK(cudaGetLastError());
  return summarize(samples);
}

/// Host enqueue: us per launch of a batch of 256 launches into an idle
/// stream, host clock, no synchronize inside: the launch path's own cost,
/// whatever the kernel's device time.
Stats timeHostEnqueue(Launchable &what, int sets, cudaStream_t stream,
                      int reps) {
  constexpr int64_t kBatch = 256;
  int next = 0;
  launchLoop(what, sets, kBatch, stream, &next);
  std::vector<double> samples;
  for (int r = 0; r < reps; ++r) {
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const double t0 = nowSeconds();
    launchLoop(what, sets, kBatch, stream, &next);
    samples.push_back((nowSeconds() - t0) * 1e6 / double(kBatch));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return summarize(samples);
}

struct GraphTiming {
  Stats perCall;
  std::string captureMode;
  std::string error;
  int graphs = 0;
  int64_t loops = 0;
};

/// Captures graphs of 100 calls, each on the next sets, so one pass over the
/// graphs touches every set; times replays of all of them with events.
GraphTiming timeGraph(Launchable &what, int sets, cudaStream_t stream, int reps,
                      double loopSeconds) {
  GraphTiming result;
  const int graphs = (sets + kGraphCalls - 1) / kGraphCalls;
  result.graphs = graphs;
  std::vector<cudaGraphExec_t> execs;
  // Global mode refuses any unsafe CUDA call made anywhere during capture:
  // the strict test of "capturable". Relaxed is tried only if that fails,
  // and the JSON says which one worked.
  const cudaStreamCaptureMode modes[] = {cudaStreamCaptureModeGlobal,
                                         cudaStreamCaptureModeRelaxed};
  const char *modeNames[] = {"global", "relaxed"};
  for (int m = 0; m < 2 && execs.empty(); ++m) {
    std::string failure;
    for (int gi = 0; gi < graphs && failure.empty(); ++gi) {
      CUDA_CHECK(cudaStreamBeginCapture(stream, modes[m]));
      bool launched = true;
      for (int j = 0; j < kGraphCalls; ++j) {
        if (!what.launch((gi * kGraphCalls + j) % sets, stream)) {
          launched = false;
          failure = "launch during capture: " + what.lastError();
          break;
        }
      }
      cudaGraph_t graph = nullptr;
      const cudaError_t end = cudaStreamEndCapture(stream, &graph);
      if (launched && end != cudaSuccess)
        failure = format("cudaStreamEndCapture: %s", cudaGetErrorString(end));
      cudaGraphExec_t exec = nullptr;
      if (failure.empty()) {
        const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
        if (inst != cudaSuccess)
          failure =
              format("cudaGraphInstantiate: %s", cudaGetErrorString(inst));
      }
      if (graph)
        CUDA_CHECK(cudaGraphDestroy(graph));
      if (!failure.empty()) {
        // Capture errors are not sticky: clear it so later calls succeed.
        (void)cudaGetLastError();
        break;
      }
      execs.push_back(exec);
    }
    if (!failure.empty()) {
      for (cudaGraphExec_t exec : execs)
        CUDA_CHECK(cudaGraphExecDestroy(exec));
      execs.clear();
      logLine("  graph capture (%s mode) of %s FAILED: %s", modeNames[m],
              what.name().c_str(), failure.c_str());
      result.error += std::string(modeNames[m]) + ": " + failure + "; ";
      continue;
    }
    result.captureMode = modeNames[m];
  }
  if (execs.empty())
    return result;

  // Upload and warm-up: the first replay of a graph costs more.
  for (cudaGraphExec_t exec : execs)
    CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const double t0 = nowSeconds();
  for (cudaGraphExec_t exec : execs)
    CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const double pass = nowSeconds() - t0;
  result.loops = std::max<int64_t>(
      1, int64_t(std::ceil(loopSeconds / std::max(pass, 1e-7))));

  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> samples;
  for (int r = 0; r < reps; ++r) {
    CUDA_CHECK(cudaEventRecord(start, stream));
    for (int64_t l = 0; l < result.loops; ++l)
      for (cudaGraphExec_t exec : execs)
        CUDA_CHECK(cudaGraphLaunch(exec, stream));
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    samples.push_back(double(ms) * 1e3 /
                      double(result.loops * graphs * kGraphCalls));
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  for (cudaGraphExec_t exec : execs)
    CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGetLastError());
  result.perCall = summarize(samples);
  return result;
}

/// Cold device time: per repetition an L2 flush, then events around one
/// call. Everything is enqueued before the first synchronize, so the call is
/// already queued when its start event fires and no host gap is timed.
Stats timeCold(Launchable &what, int sets, DeviceState &state, int reps) {
  reps = std::min<int>(reps, int(state.startEvents.size()));
  launchOrDie(what, 0, state.stream);
  CUDA_CHECK(cudaStreamSynchronize(state.stream));
  for (int r = 0; r < reps; ++r) {
    flushL2(state);
    CUDA_CHECK(cudaEventRecord(state.startEvents[size_t(r)], state.stream));
    launchOrDie(what, r % sets, state.stream);
    CUDA_CHECK(cudaEventRecord(state.stopEvents[size_t(r)], state.stream));
  }
  CUDA_CHECK(cudaStreamSynchronize(state.stream));
  CUDA_CHECK(cudaGetLastError());
  std::vector<double> samples;
  for (int r = 0; r < reps; ++r) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, state.startEvents[size_t(r)],
                                    state.stopEvents[size_t(r)]));
    samples.push_back(double(ms) * 1e3);
  }
  return summarize(samples);
}

//===----------------------------------------------------------------------===//
// Correctness
//===----------------------------------------------------------------------===//

struct CheckResult {
  bool ok = false;
  /// False if the launch was refused: then there is nothing to time either.
  bool launched = true;
  std::string detail;
};

/// Runs the check case once (eagerly, or replayed from a captured graph) on
/// freshly randomized caches and compares with a host loop: every element
/// of the written positions and their neighbours (positions +-1 in the
/// same, previous and next block, all heads and dims) must hold exactly what
/// the host expects, and a device count over every element of both caches
/// must find exactly as many changed elements as the host wrote (so nothing
/// was written anywhere else).
CheckResult checkAppend(Launchable &what, bool viaGraph, DeviceState &state,
                        const CacheGeometry &g, const SizeCase &checkCase) {
  const Description &d = g.desc;
  const int64_t H = d.numHeads, D = d.headDim, bs = d.blockSize;
  fillCaches(state, g);
  std::vector<SetPointers> sets = uploadCase(state, g, checkCase);
  what.prepare(checkCase.tokens, sets);
  if (!viaGraph) {
    if (!what.launch(0, state.stream))
      return {false, false, "launch refused: " + what.lastError()};
  } else {
    CUDA_CHECK(
        cudaStreamBeginCapture(state.stream, cudaStreamCaptureModeRelaxed));
    const bool launched = what.launch(0, state.stream);
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(state.stream, &graph);
    if (!launched || end != cudaSuccess) {
      if (graph)
        CUDA_CHECK(cudaGraphDestroy(graph));
      (void)cudaGetLastError();
      return {false, true,
              "graph capture failed: " +
                  (launched ? std::string(cudaGetErrorString(end))
                            : what.lastError())};
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

  // The host's append. Allocation 0 is the key cache (dual_stacked: both),
  // allocation 1 the value cache.
  const int allocations = g.dual ? 1 : 2;
  uint16_t *allocBase[2] = {state.keyCache, state.valueAlloc};
  const uint32_t allocSeed[2] = {kSeedKeyCache, kSeedValueCache};
  const int64_t allocElems[2] = {g.keyElems, g.valueElems};
  std::unordered_map<int64_t, uint16_t> written[2];
  std::vector<int64_t> wanted[2];
  int validTokens = 0;
  for (int64_t t = 0; t < checkCase.tokens; ++t) {
    const int64_t slot = checkCase.slots[size_t(t)];
    if (slot < 0 || slot / bs >= g.numBlocks)
      continue;
    ++validTokens;
    const int64_t block = slot / bs, pos = slot % bs;
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t e = 0; e < D; ++e) {
        const uint64_t source = uint64_t(t * H * D + h * D + e);
        written[0][g.key.offset(block, h, pos, e)] =
            kvbench::randomBits16(kSeedKeyPool, source);
        written[g.dual ? 0 : 1][g.value.offset(block, h, pos, e)] =
            kvbench::randomBits16(kSeedValuePool, source);
      }
    }
    for (int64_t b = block - 1; b <= block + 1; ++b) {
      if (b < 0 || b >= g.numBlocks)
        continue;
      for (int64_t p = pos - 1; p <= pos + 1; ++p) {
        if (p < 0 || p >= bs)
          continue;
        for (int64_t h = 0; h < H; ++h) {
          for (int64_t e = 0; e < D; ++e) {
            wanted[0].push_back(g.key.offset(b, h, p, e));
            wanted[g.dual ? 0 : 1].push_back(g.value.offset(b, h, p, e));
          }
        }
      }
    }
  }

  int64_t compared = 0, mismatches = 0, expectedChanged = 0, deviceChanged = 0,
          copies = 0;
  std::string firstMismatches;
  for (int a = 0; a < allocations; ++a) {
    std::vector<int64_t> &offsets = wanted[a];
    std::sort(offsets.begin(), offsets.end());
    offsets.erase(std::unique(offsets.begin(), offsets.end()), offsets.end());
    // Copy runs of nearby offsets as one range: every element of a range has
    // a known expected value, so the gaps are checked too, for free.
    std::vector<uint16_t> host;
    size_t i = 0;
    while (i < offsets.size()) {
      size_t j = i;
      while (j + 1 < offsets.size() && offsets[j + 1] - offsets[j] <= 4096)
        ++j;
      const int64_t begin = offsets[i], end = offsets[j] + 1;
      host.resize(size_t(end - begin));
      CUDA_CHECK(cudaMemcpy(host.data(), allocBase[a] + begin,
                            size_t(end - begin) * 2, cudaMemcpyDeviceToHost));
      ++copies;
      for (int64_t k = begin; k < end; ++k) {
        auto it = written[a].find(k);
        const uint16_t expected =
            it != written[a].end()
                ? it->second
                : kvbench::randomBits16(allocSeed[a], uint64_t(k));
        const uint16_t got = host[size_t(k - begin)];
        ++compared;
        if (got != expected) {
          if (mismatches < 8)
            firstMismatches += format(
                " [%s cache element %lld: got 0x%04x, expected 0x%04x (%s)]",
                a == 0 ? "key" : "value", (long long)k, got, expected,
                it != written[a].end() ? "a written element"
                                       : "must be unchanged");
          ++mismatches;
        }
      }
      i = j + 1;
    }
    for (const auto &[offset, value] : written[a])
      expectedChanged +=
          value != kvbench::randomBits16(allocSeed[a], uint64_t(offset));
    CUDA_CHECK(cudaMemsetAsync(state.counter, 0, sizeof(unsigned long long),
                               state.stream));
    CUDA_CHECK(kvbench::countMismatches16(allocBase[a], uint64_t(allocElems[a]),
                                          allocSeed[a], state.counter,
                                          state.stream));
    unsigned long long count = 0;
    CUDA_CHECK(cudaMemcpyAsync(&count, state.counter, sizeof(count),
                               cudaMemcpyDeviceToHost, state.stream));
    CUDA_CHECK(cudaStreamSynchronize(state.stream));
    deviceChanged += int64_t(count);
  }

  CheckResult result;
  // The case has exactly three tokens that must write nothing.
  result.ok = mismatches == 0 && deviceChanged == expectedChanged &&
              validTokens == checkCase.tokens - 3;
  result.detail =
      format("%lld tokens (%d valid, 3 that must write nothing), %lld elements "
             "compared in %lld ranges, %lld mismatches; whole caches: %lld "
             "elements changed on the device, %lld expected%s",
             (long long)checkCase.tokens, validTokens, (long long)compared,
             (long long)copies, (long long)mismatches, (long long)deviceChanged,
             (long long)expectedChanged, firstMismatches.c_str());
  return result;
}

//===----------------------------------------------------------------------===//
// Results
//===----------------------------------------------------------------------===//

struct Row {
  std::string impl; // "generated" or "reference"
  std::string config;
  std::string phase;
  int64_t tokens = 0;
  int sets = 0;
  double bytes = 0;
  Stats eager, graph, cold;
  std::string graphMode, graphError;
  int graphs = 0;
  int64_t graphLoops = 0;
  int64_t grid = -1;
  json tuning; // reference: cold median per config

  /// The number PERF-TARGETS.md reports: graph us/call for decode, cold
  /// device time for prefill.
  double headline() const {
    return phase == "decode" ? graph.median : cold.median;
  }
};

struct Report {
  json doc;
  std::string outDir, tag;
  double copyGBps = kNaN;
  std::vector<Row> rows;
  std::vector<std::string> failures;

  const Row *find(const std::string &impl, const std::string &phase,
                  int64_t tokens) const {
    for (const Row &r : rows)
      if (r.impl == impl && r.phase == phase && r.tokens == tokens)
        return &r;
    return nullptr;
  }
};

double gbps(double bytes, double us) { return bytes / us / 1e3; }

json rowJson(const Row &r, double copyGBps) {
  json j;
  j["impl"] = r.impl;
  j["config"] = r.config;
  j["phase"] = r.phase;
  j["tokens"] = r.tokens;
  j["sets"] = r.sets;
  j["bytes_per_call"] = r.bytes;
  j["grid"] = r.grid;
  j["eager_us"] = statsJson(r.eager);
  j["graph_us"] = statsJson(r.graph);
  j["graph_capture_mode"] = r.graphMode;
  j["graph_error"] = r.graphError;
  j["graphs_of_100"] = r.graphs;
  j["graph_passes_per_sample"] = r.graphLoops;
  j["cold_us"] = statsJson(r.cold);
  j["headline"] = r.phase == "decode" ? "graph_us" : "cold_us";
  j["headline_us"] = r.headline();
  j["GBps"] = gbps(r.bytes, r.headline());
  j["fraction_of_copy"] = gbps(r.bytes, r.headline()) / copyGBps;
  if (!r.tuning.is_null())
    j["tuning_cold_us"] = r.tuning;
  return j;
}

void writeFile(const std::string &path, const std::string &text) {
  std::ofstream out(path);
  out << text;
  if (!out)
    fatal("could not write " + path);
}

void writeResults(Report &report) {
  report.doc["rows"] = json::array();
  for (const Row &r : report.rows)
    report.doc["rows"].push_back(rowJson(r, report.copyGBps));
  json comparison = json::array();
  for (const Row &r : report.rows) {
    if (r.impl != "generated")
      continue;
    const Row *ref = report.find("reference", r.phase, r.tokens);
    json c;
    c["phase"] = r.phase;
    c["tokens"] = r.tokens;
    c["generated_over_reference_time"] =
        ref ? r.headline() / ref->headline() : kNaN;
    c["eager_ratio"] = ref ? r.eager.median / ref->eager.median : kNaN;
    c["graph_ratio"] = ref ? r.graph.median / ref->graph.median : kNaN;
    c["cold_ratio"] = ref ? r.cold.median / ref->cold.median : kNaN;
    comparison.push_back(c);
  }
  report.doc["generated_vs_reference"] = comparison;
  report.doc["failures"] = report.failures;
  writeFile(report.outDir + "/kvbench-" + report.tag + ".json",
            report.doc.dump(1) + "\n");

  std::ostringstream csv;
  csv << "impl,config,phase,tokens,sets,bytes_per_call,eager_us,graph_us,"
         "cold_us,cold_us_min,cold_us_max,headline_us,GBps,"
         "fraction_of_copy,generated_over_reference\n";
  for (const Row &r : report.rows) {
    const Row *ref = r.impl == "generated"
                         ? report.find("reference", r.phase, r.tokens)
                         : nullptr;
    const double h = r.headline();
    csv << format("%s,%s,%s,%lld,%d,%.0f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,"
                  "%.2f,%.4f,%.4f\n",
                  r.impl.c_str(), r.config.c_str(), r.phase.c_str(),
                  (long long)r.tokens, r.sets, r.bytes, r.eager.median,
                  r.graph.median, r.cold.median, r.cold.min, r.cold.max, h,
                  gbps(r.bytes, h), gbps(r.bytes, h) / report.copyGBps,
                  ref ? h / ref->headline() : kNaN);
  }
  writeFile(report.outDir + "/kvbench-" + report.tag + ".csv", csv.str());
}

std::string fmtNum(double v, const char *fmt = "%.2f") {
  return std::isnan(v) ? std::string("n/a") : format(fmt, v);
}

//===----------------------------------------------------------------------===//
// The run
//===----------------------------------------------------------------------===//

struct Target {
  std::string kernelName; // the kvrt name (the vector variant's)
  std::string manifestName;
  std::string variant;
  json manifestEntry;
};

Description descriptionFromManifest(const json &entry) {
  Description d;
  try {
    const json &cache = entry.at("cache");
    if (!parseLayout(cache.at("layout").get<std::string>(), &d.layout))
      fatal("unknown layout in the manifest: " + cache.at("layout").dump());
    d.blockSize = d.layout == Layout::Contiguous
                      ? cache.at("max_seq_len").get<int64_t>()
                      : cache.at("block_size").get<int64_t>();
    d.numHeads = cache.at("num_kv_heads").get<int64_t>();
    d.headDim = cache.at("head_dim").get<int64_t>();
    d.cacheDtype = cache.at("dtype").get<std::string>();
    d.x = cache.contains("x") ? cache.at("x").get<int64_t>() : 8;
    d.sourceDtype = entry.at("source_dtype").get<std::string>();
  } catch (const json::exception &e) {
    fatal(std::string("the manifest entry lacks a field kvbench needs: ") +
          e.what() + "\nentry: " + entry.dump());
  }
  return d;
}

Target pickKernel(const std::string &bundlePath, const std::string &wanted,
                  const std::string &variant) {
  std::ifstream in(bundlePath);
  if (!in)
    fatal("cannot read the bundle " + bundlePath);
  json bundle;
  try {
    bundle = json::parse(in);
  } catch (const json::exception &e) {
    fatal("the bundle " + bundlePath + " is not JSON: " + e.what());
  }
  if (!bundle.contains("kernels") || !bundle["kernels"].is_array())
    fatal("the bundle " + bundlePath + " has no kernels array");
  std::string names;
  std::vector<const json *> appends;
  const json *match = nullptr;
  for (const json &k : bundle["kernels"]) {
    const std::string name = k.value("name", "");
    names += " " + name + "(" + k.value("kind", "?") + "," +
             k.value("variant", "?") + ")";
    if (k.value("kind", "") == "append" && k.value("variant", "") == "vector")
      appends.push_back(&k);
    if (name == wanted)
      match = &k;
  }
  logLine("bundle %s: target %s, kernels:%s", bundlePath.c_str(),
          bundle.value("target", json::object()).dump().c_str(), names.c_str());
  if (wanted.empty()) {
    if (appends.size() != 1)
      fatal("the bundle has " + std::to_string(appends.size()) +
            " append descriptions; name one with --kernel");
    match = appends[0];
  }
  if (!match)
    fatal("no kernel '" + wanted + "' in the bundle; it has:" + names);
  if (match->value("kind", "") != "append")
    fatal("kvbench times append kernels; '" + wanted + "' is a " +
          match->value("kind", "?"));
  Target t;
  t.manifestName = match->value("name", "");
  t.manifestEntry = *match;
  t.kernelName = t.manifestName;
  t.variant = variant;
  if (match->value("variant", "") == "scalar") {
    const std::string suffix = "_scalar";
    if (t.kernelName.size() <= suffix.size() ||
        t.kernelName.compare(t.kernelName.size() - suffix.size(), suffix.size(),
                             suffix) != 0)
      fatal("scalar kernel '" + t.kernelName + "' does not end in _scalar");
    t.kernelName.resize(t.kernelName.size() - suffix.size());
    t.variant = "scalar";
  }
  return t;
}

/// Measures one Launchable at one size in every mode and fills a Row.
Row measure(Launchable &what, const std::string &impl, const SizeCase &c,
            DeviceState &state, const CacheGeometry &g,
            const Repetitions &reps) {
  Row row;
  row.impl = impl;
  row.phase = c.phase;
  row.tokens = c.tokens;
  row.sets = c.sets;
  row.bytes = double(c.tokens) * bytesPerToken(g.desc);
  row.eager =
      timeEager(what, c.sets, state.stream, reps.eager, 0, reps.loopSeconds);
  GraphTiming graph =
      timeGraph(what, c.sets, state.stream, reps.graph, reps.loopSeconds);
  row.graph = graph.perCall;
  row.graphMode = graph.captureMode;
  row.graphError = graph.error;
  row.graphs = graph.graphs;
  row.graphLoops = graph.loops;
  row.cold = timeCold(what, c.sets, state, reps.cold);
  logLine("  %-9s %-8s %6lld tok  eager %9s us  graph %9s us  cold %9s us "
          "(min %s, max %s)  %s GB/s",
          impl.c_str(), c.phase.c_str(), (long long)c.tokens,
          fmtNum(row.eager.median, "%.3f").c_str(),
          fmtNum(row.graph.median, "%.3f").c_str(),
          fmtNum(row.cold.median, "%.3f").c_str(),
          fmtNum(row.cold.min, "%.3f").c_str(),
          fmtNum(row.cold.max, "%.3f").c_str(),
          fmtNum(gbps(row.bytes, row.headline()), "%.0f").c_str());
  return row;
}

std::string tableText(const Report &report, const CacheGeometry &g,
                      bool haveGenerated, const json &launch) {
  std::ostringstream out;
  const double ceiling = report.copyGBps;
  out << "\n=== kvbench " << report.tag << ": " << describe(g) << "\n";
  out << format("device %s; copy ceiling %.1f GB/s (4 GiB D2D, read + "
                "written); fractions below are of it\n",
                report.doc["device"].value("name", "?").c_str(), ceiling);
  if (!launch.is_null()) {
    out << format(
        "launch: empty kernel eager %s us (host enqueue %s), graph node %s "
        "us; 41-param empty via cuLaunchKernel eager %s us (enqueue %s)\n",
        fmtNum(launch.value("empty_eager_us", kNaN), "%.3f").c_str(),
        fmtNum(launch.value("empty_host_enqueue_us", kNaN), "%.3f").c_str(),
        fmtNum(launch.value("empty_graph_node_us", kNaN), "%.3f").c_str(),
        fmtNum(launch.value("empty_abi_eager_us", kNaN), "%.3f").c_str(),
        fmtNum(launch.value("empty_abi_host_enqueue_us", kNaN), "%.3f")
            .c_str());
    out << format(
        "        reference append (1 token) eager %s us "
        "(enqueue %s): %s x the empty kernel\n",
        fmtNum(launch.value("reference_eager_us", kNaN), "%.3f").c_str(),
        fmtNum(launch.value("reference_host_enqueue_us", kNaN), "%.3f").c_str(),
        fmtNum(launch.value("reference_over_empty_eager", kNaN), "%.3f")
            .c_str());
    if (haveGenerated)
      out << format(
          "        kvrt append (1 token) eager %s us (enqueue %s): %s x the "
          "empty kernel, %s x the 41-param one (target <= 1.10)\n",
          fmtNum(launch.value("kvrt_eager_us", kNaN), "%.3f").c_str(),
          fmtNum(launch.value("kvrt_host_enqueue_us", kNaN), "%.3f").c_str(),
          fmtNum(launch.value("kvrt_over_empty_eager", kNaN), "%.3f").c_str(),
          fmtNum(launch.value("kvrt_over_empty_abi_eager", kNaN), "%.3f")
              .c_str());
  }
  const std::string main = haveGenerated ? "generated" : "reference";
  for (const std::string phase : {"decode", "prefill"}) {
    const bool decode = phase == "decode";
    out << (decode ? "decode: headline = us per call in a CUDA graph of 100 "
                     "calls\n"
                   : "prefill: headline = cold device time (L2 flushed), "
                     "us\n");
    out << format("%8s %10s %8s %7s %10s %10s", "tokens", "us", "GB/s", "%copy",
                  "eager_us", decode ? "cold_us" : "graph_us");
    if (haveGenerated)
      out << format(" | %10s %7s %8s", "ref_us", "ref_%", "gen/ref");
    out << format(" %8s\n", "ref_cfg");
    for (const Row &r : report.rows) {
      if (r.impl != main || r.phase != phase)
        continue;
      const double h = r.headline();
      out << format(
          "%8lld %10s %8s %7s %10s %10s", (long long)r.tokens,
          fmtNum(h, "%.3f").c_str(), fmtNum(gbps(r.bytes, h), "%.0f").c_str(),
          fmtNum(100 * gbps(r.bytes, h) / ceiling, "%.1f").c_str(),
          fmtNum(r.eager.median, "%.3f").c_str(),
          fmtNum(decode ? r.cold.median : r.graph.median, "%.3f").c_str());
      const Row *ref = report.find("reference", phase, r.tokens);
      if (haveGenerated) {
        const double rh = ref ? ref->headline() : kNaN;
        out << format(" | %10s %7s %8s", fmtNum(rh, "%.3f").c_str(),
                      fmtNum(100 * gbps(r.bytes, rh) / ceiling, "%.1f").c_str(),
                      fmtNum(h / rh, "%.3f").c_str());
      }
      out << format(" %8s\n", ref ? ref->config.c_str() : "-");
    }
  }
  return out.str();
}

/// PERF-TARGETS.md's targets, judged on this run's numbers (they are set for
/// paged_nhd bf16 8x128 block 16; other layouts are shown for comparison).
json judgeTargets(const Report &report, const std::string &impl,
                  const json &launch, std::string *text) {
  json targets = json::array();
  auto add = [&](const std::string &what, double value, double limit,
                 bool atMost) {
    json t;
    t["target"] = what;
    t["value"] = value;
    t["limit"] = limit;
    const bool pass =
        !std::isnan(value) && (atMost ? value <= limit : value >= limit);
    t["pass"] = pass;
    targets.push_back(t);
    *text += format("  %-4s %-58s %10s %s %s\n", pass ? "MET" : "MISS",
                    what.c_str(), fmtNum(value, "%.3f").c_str(),
                    atMost ? "<=" : ">=", fmtNum(limit, "%.3f").c_str());
  };
  const double ceiling = report.copyGBps;
  auto fraction = [&](int64_t tokens) {
    const Row *r = report.find(impl, "prefill", tokens);
    return r ? gbps(r->bytes, r->headline()) / ceiling : kNaN;
  };
  auto graphUs = [&](int64_t tokens) {
    const Row *r = report.find(impl, "decode", tokens);
    return r ? r->graph.median : kNaN;
  };
  add("prefill 65536: fraction of copy ceiling", fraction(65536), 0.95, false);
  add("prefill 16384: fraction of copy ceiling", fraction(16384), 0.95, false);
  add("prefill 4096: fraction of copy ceiling", fraction(4096), 0.75, false);
  for (int64_t t : {1, 8, 32})
    add(format("decode %lld: us per call in a graph", (long long)t), graphUs(t),
        1.1, true);
  add("decode 512: us per call in a graph", graphUs(512), 2.8, true);
  // The best peer of PERF-TARGETS.md at each size (another run's absolute
  // times: indicative only).
  const std::map<int64_t, double> bestPrefill = {
      {1024, 6.58}, {4096, 12.1}, {16384, 35.7}, {65536, 135}};
  const std::map<int64_t, double> bestDecode = {
      {1, 1.26}, {32, 1.36}, {128, 1.82}, {512, 3.13}};
  for (const auto &[t, us] : bestPrefill) {
    const Row *r = report.find(impl, "prefill", t);
    add(format("prefill %lld: cold us below the best peer (anchor run)",
               (long long)t),
        r ? r->headline() : kNaN, us, true);
  }
  for (const auto &[t, us] : bestDecode)
    add(format("decode %lld: graph us below the best peer (anchor run)",
               (long long)t),
        graphUs(t), us, true);
  if (impl == "generated") {
    add("kvrt eager launch over empty kernel eager",
        launch.value("kvrt_over_empty_eager", kNaN), 1.10, true);
    // The same ratio on host time alone: the purer measure if the 1-token
    // kernel runs longer on the device than a launch takes on the host.
    add("kvrt host enqueue over empty kernel host enqueue",
        launch.value("kvrt_over_empty_host_enqueue", kNaN), 1.10, true);
  }
  return targets;
}

/// The launch path at 1 token, where the eager loop is host-bound: the same
/// C++ loop around an empty kernel, an empty 41-parameter kernel through
/// cuLaunchKernel, the reference and (if there is one) kvrt's append, in
/// interleaved rounds so drift between them shows. Fills `launch`.
void compareLaunchPaths(Launchable &empty, EmptyAbiKernel &emptyAbi,
                        Launchable *generated, Launchable &reference, int sets,
                        DeviceState &state, const Repetitions &reps,
                        json &launch) {
  std::vector<double> e, ea, k, r;
  const int64_t calls = std::max<int64_t>(sets, 20000);
  for (int round = 0; round < reps.launchRounds; ++round) {
    for (double v :
         timeEager(empty, 1, state.stream, reps.launchReps, calls, 0).samples)
      e.push_back(v);
    if (emptyAbi.available())
      for (double v :
           timeEager(emptyAbi, 1, state.stream, reps.launchReps, calls, 0)
               .samples)
        ea.push_back(v);
    if (generated)
      for (double v :
           timeEager(*generated, sets, state.stream, reps.launchReps, calls, 0)
               .samples)
        k.push_back(v);
    for (double v :
         timeEager(reference, sets, state.stream, reps.launchReps, calls, 0)
             .samples)
      r.push_back(v);
  }
  const Stats se = summarize(e), sea = summarize(ea), sk = summarize(k),
              sr = summarize(r);
  const Stats rEnqueue =
      timeHostEnqueue(reference, sets, state.stream, reps.hostEnqueue);
  Stats kEnqueue;
  if (generated)
    kEnqueue =
        timeHostEnqueue(*generated, sets, state.stream, reps.hostEnqueue);
  launch["comparison_calls"] = calls;
  launch["comparison_rounds"] = reps.launchRounds;
  launch["comparison_empty_eager_us"] = se.median;
  launch["comparison_empty_abi_eager_us"] = sea.median;
  launch["kvrt_eager_us"] = sk.median;
  launch["reference_eager_us"] = sr.median;
  launch["kvrt_host_enqueue_us"] = kEnqueue.median;
  launch["reference_host_enqueue_us"] = rEnqueue.median;
  launch["kvrt_over_empty_eager"] = sk.median / se.median;
  launch["kvrt_over_empty_abi_eager"] = sk.median / sea.median;
  launch["kvrt_over_empty_host_enqueue"] =
      kEnqueue.median / launch.value("empty_host_enqueue_us", kNaN);
  launch["reference_over_empty_eager"] = sr.median / se.median;
  launch["detail"]["comparison"] = {{"empty", statsJson(se)},
                                    {"empty_abi", statsJson(sea)},
                                    {"kvrt", statsJson(sk)},
                                    {"reference", statsJson(sr)},
                                    {"kvrt_enqueue", statsJson(kEnqueue)},
                                    {"reference_enqueue", statsJson(rEnqueue)}};
  logLine("  launch path, %lld calls x %d rounds x %d reps: empty %.3f, "
          "41-param empty %.3f, kvrt %s, reference %.3f us/call; kvrt/empty "
          "= %s; host enqueue: kvrt %s, reference %.3f us",
          (long long)calls, reps.launchRounds, reps.launchReps, se.median,
          sea.median, fmtNum(sk.median, "%.3f").c_str(), sr.median,
          fmtNum(sk.median / se.median, "%.3f").c_str(),
          fmtNum(kEnqueue.median, "%.3f").c_str(), rEnqueue.median);
}

int run(const Options &options) {
  Repetitions reps;
  if (options.quick) {
    reps.eager = 2;
    reps.graph = 2;
    reps.cold = 20;
    reps.tune = 8;
    reps.launchRounds = 1;
    reps.launchReps = 2;
    reps.hostEnqueue = 10;
    reps.loopSeconds = 0.005;
  }
  const double startTime = nowSeconds();
  Report report;
  report.outDir = options.outDir;
  if (mkdir(options.outDir.c_str(), 0755) != 0 && errno != EEXIST)
    fatal("cannot create the output directory " + options.outDir);

  // The description: the manifest's, or the reference-only default.
  Description desc;
  Target target;
  const bool generated = !options.bundlePath.empty();
  if (generated) {
#if !KVBENCH_WITH_KVRT
    fatal("this kvbench was built without kvrt (the runtime target did not "
          "exist at configure time): it can only run without --bundle");
#endif
    target = pickKernel(options.bundlePath, options.kernel, options.variant);
    desc = descriptionFromManifest(target.manifestEntry);
    report.tag = target.manifestName;
  } else {
    if (!parseLayout(options.layout, &desc.layout))
      fatal("unknown --layout " + options.layout);
    if (desc.layout == Layout::Contiguous)
      desc.blockSize = kDefaultContiguousMaxSeqLen;
    report.tag = "reference_" + options.layout;
  }
  const CacheGeometry g = makeGeometry(desc);

  // The device. cudaFree(0) makes the primary context current on this
  // thread, the context kvrt then finds and launches in.
  DeviceState state;
  CUDA_CHECK(cudaSetDevice(0));
  CUDA_CHECK(cudaFree(nullptr));
  CUDA_CHECK(cudaGetDevice(&state.device));
  CUDA_CHECK(cudaGetDeviceProperties(&state.props, state.device));
  int driverVersion = 0, runtimeVersion = 0, smClockKHz = 0, memClockKHz = 0;
  CUDA_CHECK(cudaDriverGetVersion(&driverVersion));
  CUDA_CHECK(cudaRuntimeGetVersion(&runtimeVersion));
  CUDA_CHECK(
      cudaDeviceGetAttribute(&smClockKHz, cudaDevAttrClockRate, state.device));
  CUDA_CHECK(cudaDeviceGetAttribute(&memClockKHz, cudaDevAttrMemoryClockRate,
                                    state.device));
  size_t freeBytes = 0, totalBytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&freeBytes, &totalBytes));
  const cudaDeviceProp &p = state.props;
  logLine("kvbench: %s, sm_%d%d, %d SMs, L2 %.1f MiB, %.1f GiB (%.1f free), "
          "peak SM clock %d MHz, memory clock %d MHz; driver %d, runtime %d",
          p.name, p.major, p.minor, p.multiProcessorCount,
          double(p.l2CacheSize) / double(kMiB),
          double(totalBytes) / double(kGiB), double(freeBytes) / double(kGiB),
          smClockKHz / 1000, memClockKHz / 1000, driverVersion, runtimeVersion);
  if (p.major != 9)
    logLine("WARNING: the reference is built for sm_90 only; this device is "
            "sm_%d%d",
            p.major, p.minor);
  logLine("description: %s", describe(g).c_str());
  logLine("mode: %s; %s",
          generated ? "generated + reference" : "reference only",
          options.quick ? "QUICK (smoke test: too few repetitions to quote)"
                        : "full repetitions");
  CUDA_CHECK(cudaStreamCreateWithFlags(&state.stream, cudaStreamNonBlocking));
  CUDA_CHECK(kvbench::initReference(state.device));

  report.doc["tool"] = "kvbench";
  report.doc["format_version"] = 1;
  report.doc["tag"] = report.tag;
  report.doc["quick"] = options.quick;
  report.doc["seed"] = options.seed;
  report.doc["device"] = {{"name", p.name},
                          {"cc", format("%d.%d", p.major, p.minor)},
                          {"sms", p.multiProcessorCount},
                          {"l2_bytes", p.l2CacheSize},
                          {"memory_bytes", totalBytes},
                          {"peak_sm_clock_mhz", smClockKHz / 1000},
                          {"memory_clock_mhz", memClockKHz / 1000},
                          {"driver", driverVersion},
                          {"runtime", runtimeVersion}};
  report.doc["description"] = {{"layout", layoutName(desc.layout)},
                               {"block_size_or_max_seq_len", desc.blockSize},
                               {"num_kv_heads", desc.numHeads},
                               {"head_dim", desc.headDim},
                               {"x", desc.x},
                               {"dtype", desc.cacheDtype},
                               {"source_dtype", desc.sourceDtype}};
  if (generated) {
    report.doc["kernel"] = {{"manifest_name", target.manifestName},
                            {"kvrt_name", target.kernelName},
                            {"variant", target.variant},
                            {"bundle", options.bundlePath},
                            {"manifest", target.manifestEntry}};
    logLine("kernel: %s (kvrt name %s, variant %s); manifest entry: %s",
            target.manifestName.c_str(), target.kernelName.c_str(),
            target.variant.c_str(), target.manifestEntry.dump().c_str());
  }

  // Sizes first: the pools are sized from them.
  std::mt19937_64 rng(options.seed);
  std::vector<int64_t> blockPool(size_t(g.numBlocks));
  std::iota(blockPool.begin(), blockPool.end(), int64_t(0));
  std::vector<SizeCase> cases;
  for (int64_t t : kDecodeTokens)
    cases.push_back(makeDecode(g, t, blockPool, rng));
  for (int64_t t : kPrefillTokens)
    cases.push_back(makePrefill(g, t, blockPool, rng));
  const SizeCase checkCase = makeCheckCase(g, blockPool, rng);
  for (const SizeCase &c : cases) {
    state.poolTokens = std::max(state.poolTokens, int64_t(c.sets) * c.tokens);
    state.slotPoolEntries =
        std::max(state.slotPoolEntries, int64_t(c.slots.size()));
  }

  // Allocations. The pools' K and V alone are >= 256 MiB.
  const int64_t rowElems = desc.numHeads * desc.headDim;
  const uint64_t poolBytes = uint64_t(state.poolTokens * rowElems) * 2;
  state.flushBytes =
      std::max<uint64_t>(kMinFlushBytes, 8 * uint64_t(p.l2CacheSize));
  state.flushBytes = (state.flushBytes + 15) / 16 * 16;
  CUDA_CHECK(cudaMalloc(&state.keyPool, poolBytes));
  CUDA_CHECK(cudaMalloc(&state.valuePool, poolBytes));
  CUDA_CHECK(cudaMalloc(&state.slotPool,
                        size_t(state.slotPoolEntries) * sizeof(int64_t)));
  CUDA_CHECK(cudaMalloc(&state.keyCache, size_t(g.keyElems) * 2));
  if (g.dual) {
    state.valueCache = state.keyCache + g.value.base;
  } else {
    CUDA_CHECK(cudaMalloc(&state.valueAlloc, size_t(g.valueElems) * 2));
    state.valueCache = state.valueAlloc;
  }
  CUDA_CHECK(cudaMalloc(&state.flushBuffer, state.flushBytes));
  CUDA_CHECK(cudaMalloc(&state.sink, sizeof(uint32_t)));
  CUDA_CHECK(cudaMalloc(&state.counter, sizeof(unsigned long long)));
  CUDA_CHECK(kvbench::fillRandom16(state.keyPool, poolBytes / 2, kSeedKeyPool,
                                   state.stream));
  CUDA_CHECK(kvbench::fillRandom16(state.valuePool, poolBytes / 2,
                                   kSeedValuePool, state.stream));
  CUDA_CHECK(kvbench::fillRandom16(static_cast<uint16_t *>(state.flushBuffer),
                                   state.flushBytes / 2, kSeedFlush,
                                   state.stream));
  fillCaches(state, g);
  state.startEvents.resize(size_t(std::max(reps.cold, reps.tune)));
  state.stopEvents.resize(state.startEvents.size());
  for (size_t i = 0; i < state.startEvents.size(); ++i) {
    CUDA_CHECK(cudaEventCreate(&state.startEvents[i]));
    CUDA_CHECK(cudaEventCreate(&state.stopEvents[i]));
  }
  logLine("buffers: input pools 2 x %.0f MiB (%lld tokens), slot pool %lld "
          "entries, caches %.2f GiB, flush %.2f GiB",
          double(poolBytes) / double(kMiB), (long long)state.poolTokens,
          (long long)state.slotPoolEntries,
          double(g.keyElems + g.valueElems) * 2 / double(kGiB),
          double(state.flushBytes) / double(kGiB));
  json setup;
  setup["num_blocks"] = g.numBlocks;
  setup["key_cache_shape"] = g.keyShape;
  setup["value_cache_shape"] = g.valueShape;
  setup["cache_bytes_each"] = double(g.keyElems) * 2 / (g.dual ? 2 : 1);
  setup["pool_tokens"] = state.poolTokens;
  setup["min_touch_bytes"] = kMinTouchBytes;
  setup["flush_bytes"] = state.flushBytes;
  setup["bytes_per_token"] = bytesPerToken(desc);
  setup["graph_calls"] = kGraphCalls;
  setup["reps"] = {{"eager", reps.eager},
                   {"graph", reps.graph},
                   {"cold", reps.cold},
                   {"tune", reps.tune},
                   {"loop_seconds", reps.loopSeconds}};
  report.doc["setup"] = setup;
  for (const SizeCase &c : cases) {
    std::string sample;
    for (size_t i = 0; i < std::min<size_t>(4, c.slots.size()); ++i)
      sample += " " + std::to_string(c.slots[i]);
    logLine("  case %-7s %6lld tokens: %5d sets (%.0f MiB touched per pass); "
            "first slots%s",
            c.phase.c_str(), (long long)c.tokens, c.sets,
            double(c.sets) * double(c.tokens) * bytesPerToken(desc) /
                double(kMiB),
            sample.c_str());
  }

  // Warm the clocks up (the SM idles at a few hundred MHz) and time the
  // flush itself: it is the sanity check of the cold timings.
  {
    cudaEvent_t a = state.startEvents[0], b = state.stopEvents[0];
    const double warmUntil = nowSeconds() + 0.3;
    while (nowSeconds() < warmUntil) {
      flushL2(state);
      CUDA_CHECK(cudaStreamSynchronize(state.stream));
    }
    std::vector<double> flushUs;
    for (int r = 0; r < 5; ++r) {
      CUDA_CHECK(cudaEventRecord(a, state.stream));
      flushL2(state);
      CUDA_CHECK(cudaEventRecord(b, state.stream));
      CUDA_CHECK(cudaEventSynchronize(b));
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
      flushUs.push_back(double(ms) * 1e3);
    }
    const Stats flush = summarize(flushUs);
    logLine("L2 flush: %.1f us for %.2f GiB read (%.0f GB/s)", flush.median,
            double(state.flushBytes) / double(kGiB),
            gbps(double(state.flushBytes), flush.median));
    report.doc["flush_us"] = statsJson(flush);
  }

  // The copy ceiling: 4 GiB device to device, read + written.
  {
    void *src = nullptr, *dst = nullptr;
    CUDA_CHECK(cudaMalloc(&src, kCopyBytes));
    CUDA_CHECK(cudaMalloc(&dst, kCopyBytes));
    CUDA_CHECK(kvbench::fillRandom16(static_cast<uint16_t *>(src),
                                     kCopyBytes / 2, kSeedCopy, state.stream));
    CUDA_CHECK(cudaMemcpyAsync(dst, src, kCopyBytes, cudaMemcpyDeviceToDevice,
                               state.stream));
    CUDA_CHECK(cudaStreamSynchronize(state.stream));
    std::vector<double> copyUs;
    for (int r = 0; r < (options.quick ? 3 : 10); ++r) {
      CUDA_CHECK(cudaEventRecord(state.startEvents[0], state.stream));
      CUDA_CHECK(cudaMemcpyAsync(dst, src, kCopyBytes, cudaMemcpyDeviceToDevice,
                                 state.stream));
      CUDA_CHECK(cudaEventRecord(state.stopEvents[0], state.stream));
      CUDA_CHECK(cudaEventSynchronize(state.stopEvents[0]));
      float ms = 0;
      CUDA_CHECK(
          cudaEventElapsedTime(&ms, state.startEvents[0], state.stopEvents[0]));
      copyUs.push_back(double(ms) * 1e3);
    }
    CUDA_CHECK(cudaFree(src));
    CUDA_CHECK(cudaFree(dst));
    const Stats copy = summarize(copyUs);
    report.copyGBps = gbps(2.0 * double(kCopyBytes), copy.median);
    report.doc["ceilings"] = {
        {"copy_bytes_read_plus_written", 2.0 * double(kCopyBytes)},
        {"copy_us", statsJson(copy)},
        {"copy_GBps", report.copyGBps},
        {"copy_GBps_best", gbps(2.0 * double(kCopyBytes), copy.min)}};
    logLine("copy ceiling: 4 GiB D2D in %.1f us (min %.1f, max %.1f): %.1f "
            "GB/s read + written",
            copy.median, copy.min, copy.max, report.copyGBps);
  }

  // Launch anchors.
  json launch;
  EmptyKernel empty;
  EmptyAbiKernel emptyAbi;
  {
    const Stats eager = timeEager(empty, 1, state.stream, reps.eager, 20000, 0);
    const Stats enqueue =
        timeHostEnqueue(empty, 1, state.stream, reps.hostEnqueue);
    const GraphTiming graph =
        timeGraph(empty, 1, state.stream, reps.graph, reps.loopSeconds);
    Stats abiEager, abiEnqueue;
    if (emptyAbi.available()) {
      abiEager = timeEager(emptyAbi, 1, state.stream, reps.eager, 20000, 0);
      abiEnqueue = timeHostEnqueue(emptyAbi, 1, state.stream, reps.hostEnqueue);
    } else {
      logLine("WARNING: the 41-parameter empty kernel is not measured: %s",
              emptyAbi.lastError().c_str());
    }
    launch["empty_eager_us"] = eager.median;
    launch["empty_host_enqueue_us"] = enqueue.median;
    launch["empty_graph_node_us"] = graph.perCall.median;
    launch["empty_abi_eager_us"] = abiEager.median;
    launch["empty_abi_host_enqueue_us"] = abiEnqueue.median;
    launch["detail"] = {{"empty_eager", statsJson(eager)},
                        {"empty_enqueue", statsJson(enqueue)},
                        {"empty_graph", statsJson(graph.perCall)},
                        {"empty_abi_eager", statsJson(abiEager)},
                        {"empty_abi_enqueue", statsJson(abiEnqueue)}};
    logLine("empty kernel: eager %.3f us/launch (enqueue %.3f), graph %.3f "
            "us/node; 41-param cuLaunchKernel: eager %.3f (enqueue %.3f)",
            eager.median, enqueue.median, graph.perCall.median, abiEager.median,
            abiEnqueue.median);
  }
  report.doc["launch"] = launch;
  writeResults(report);

  // The reference: correct in every configuration, or nothing it says counts.
  ReferenceAppend reference(g, state);
  json checks = json::array();
  const auto &configs = kvbench::referenceConfigs();
  for (size_t i = 0; i < configs.size(); ++i) {
    reference.setConfig(int(i));
    // Twice: with its own grid, and with 3 blocks, so that every block
    // strides over several token groups as the persistent grid does at the
    // large sizes.
    for (int64_t maxBlocks : {int64_t(0), int64_t(3)}) {
      reference.setMaxGridBlocks(maxBlocks);
      const CheckResult r = checkAppend(reference, false, state, g, checkCase);
      const std::string name =
          reference.name() + (maxBlocks ? ", grid of 3" : "");
      logLine("check %-32s %s: %s", name.c_str(), r.ok ? "ok" : "WRONG",
              r.detail.c_str());
      checks.push_back({{"impl", name},
                        {"mode", "eager"},
                        {"ok", r.ok},
                        {"detail", r.detail}});
      if (!r.ok) {
        report.doc["checks"] = checks;
        report.failures.push_back("reference wrong: " + r.detail);
        writeResults(report);
        fatal("the hand-written reference (" + name +
              ") wrote the wrong cache: the bench itself is broken. " +
              r.detail);
      }
    }
  }
  reference.setMaxGridBlocks(0);

  std::unique_ptr<Launchable> gen;
#if KVBENCH_WITH_KVRT
  kvrt_bundle *bundle = nullptr;
  if (generated) {
    const double t0 = nowSeconds();
    // A generated kernel that cannot be loaded or launched is a result,
    // not a reason to lose the reference's numbers: record it, go on with
    // the reference alone, exit 3.
    if (kvrt_bundle_load_file(options.bundlePath.c_str(), &bundle) !=
        KVRT_SUCCESS) {
      report.failures.push_back(std::string("kvrt_bundle_load_file: ") +
                                kvrt_last_error());
      logLine("!!! %s", report.failures.back().c_str());
      bundle = nullptr;
    } else {
      logLine("kvrt: bundle loaded in %.1f ms, %zu kernels",
              (nowSeconds() - t0) * 1e3, kvrt_bundle_num_kernels(bundle));
    }
  }
  if (bundle) {
    const kvrt_variant variant =
        target.variant == "scalar" ? KVRT_VARIANT_SCALAR
        : target.variant == "auto" ? KVRT_VARIANT_AUTO
                                   : KVRT_VARIANT_VECTOR;
    gen = std::make_unique<GeneratedAppend>(bundle, target.kernelName, variant,
                                            g, state);
    // The first launch loads the module (JIT from PTX if no cubin fits):
    // time it once, outside everything else.
    const double t1 = nowSeconds();
    for (bool viaGraph : {false, true}) {
      const CheckResult r = checkAppend(*gen, viaGraph, state, g, checkCase);
      if (!viaGraph)
        logLine("kvrt: first launch + check took %.1f ms",
                (nowSeconds() - t1) * 1e3);
      logLine("check %-22s %s (%s): %s", "generated", r.ok ? "ok" : "WRONG",
              viaGraph ? "graph replay" : "eager", r.detail.c_str());
      checks.push_back({{"impl", "generated"},
                        {"mode", viaGraph ? "graph" : "eager"},
                        {"ok", r.ok},
                        {"detail", r.detail}});
      if (!r.ok)
        report.failures.push_back(std::string("generated check failed (") +
                                  (viaGraph ? "graph" : "eager") +
                                  "): " + r.detail);
      if (!r.launched) {
        logLine("!!! kvrt refused the generated kernel's launch: timing the "
                "reference alone");
        gen.reset();
        break;
      }
    }
    if (gen && !report.failures.empty())
      logLine("!!! THE GENERATED KERNEL FAILED ITS CHECK (above): its times "
              "below may be of a wrong kernel !!!");
  }
#endif
  report.doc["checks"] = checks;
  // The checks overwrote parts of the caches; the data stays random.
  fillCaches(state, g);

  for (const SizeCase &c : cases) {
    logLine("size %s %lld tokens (%d sets):", c.phase.c_str(),
            (long long)c.tokens, c.sets);
    const std::vector<SetPointers> sets = uploadCase(state, g, c);
    // Reference: the fastest configuration by cold time, then every mode.
    reference.prepare(c.tokens, sets);
    json tuning;
    int best = 0;
    double bestUs = kNaN;
    for (size_t i = 0; i < configs.size(); ++i) {
      reference.setConfig(int(i));
      const Stats s = timeCold(reference, c.sets, state, reps.tune);
      tuning[configs[i].name] = s.median;
      if (std::isnan(bestUs) || s.median < bestUs) {
        bestUs = s.median;
        best = int(i);
      }
    }
    reference.setConfig(best);
    Row refRow = measure(reference, "reference", c, state, g, reps);
    refRow.config = configs[size_t(best)].name;
    refRow.grid = reference.gridFor(c.tokens);
    refRow.tuning = tuning;
    logLine("  reference tuning (cold us): %s -> %s", tuning.dump().c_str(),
            refRow.config.c_str());
    report.rows.push_back(refRow);
    writeResults(report);
    if (gen) {
      gen->prepare(c.tokens, sets);
      Row genRow = measure(*gen, "generated", c, state, g, reps);
      genRow.config = target.variant;
      report.rows.push_back(genRow);
    }
    // The launch path: at 1 token the eager loop is host-bound, so kvrt's
    // loop against the empty kernels' loop is the runtime's own cost.
    // Interleaved rounds expose drift between them.
    if (c.tokens == 1) {
      compareLaunchPaths(empty, emptyAbi, gen.get(), reference, c.sets, state,
                         reps, launch);
      report.doc["launch"] = launch;
    }
    writeResults(report);
  }

  std::string targetsText;
  report.doc["targets"] = judgeTargets(report, gen ? "generated" : "reference",
                                       launch, &targetsText);
  report.doc["elapsed_s"] = nowSeconds() - startTime;
  writeResults(report);
  const std::string table = tableText(report, g, gen != nullptr, launch) +
                            "targets (PERF-TARGETS.md; set for paged_nhd, " +
                            (gen ? "generated" : "REFERENCE") + " kernel):\n" +
                            targetsText;
  writeFile(report.outDir + "/kvbench-" + report.tag + ".txt", table);
  std::printf("%s", table.c_str());
  for (const std::string &f : report.failures)
    std::printf("FAILURE: %s\n", f.c_str());
  std::printf("kvbench %s: done in %.1f s; results in %s/kvbench-%s.{json,"
              "csv,txt}\n",
              report.tag.c_str(), nowSeconds() - startTime,
              report.outDir.c_str(), report.tag.c_str());

#if KVBENCH_WITH_KVRT
  gen.reset();
  if (bundle)
    kvrt_bundle_destroy(bundle);
#endif
  for (size_t i = 0; i < state.startEvents.size(); ++i) {
    CUDA_CHECK(cudaEventDestroy(state.startEvents[i]));
    CUDA_CHECK(cudaEventDestroy(state.stopEvents[i]));
  }
  CUDA_CHECK(cudaStreamDestroy(state.stream));
  for (void *ptr :
       {static_cast<void *>(state.keyPool),
        static_cast<void *>(state.valuePool),
        static_cast<void *>(state.slotPool),
        static_cast<void *>(state.keyCache),
        static_cast<void *>(state.valueAlloc), state.flushBuffer,
        static_cast<void *>(state.sink), static_cast<void *>(state.counter)})
    if (ptr)
      CUDA_CHECK(cudaFree(ptr));
  return report.failures.empty() ? 0 : 3;
}

} // namespace

int main(int argc, char **argv) { return run(parseOptions(argc, argv)); }
