//===- Cases.cpp - The conformance cases ----------------------------------===//
//
// Each case builds a batch the way a serving stack would (decode, prefill,
// chunked prefill, padded CUDA-graph batches, ...), runs it through kvrt on
// the Backend, and compares every byte with the reference.
//
//===----------------------------------------------------------------------===//

#include "conformance/Conformance.h"

#include "conformance/AsymmetricCases.h"
#include "conformance/Harness.h"
#include "conformance/InlineScalesCases.h"
#include "conformance/LatentCases.h"
#include "conformance/Nvfp4Cases.h"
#include "conformance/QuantHarness.h"
#include "conformance/Reference.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <numeric>
#include <sstream>

namespace kvgen::conformance {

void RunStats::merge(const RunStats &other) {
  descriptions += other.descriptions;
  cases += other.cases;
  failedCases += other.failedCases;
  bytesCompared += other.bytesCompared;
  failures.insert(failures.end(), other.failures.begin(), other.failures.end());
}

std::string RunStats::summary() const {
  std::ostringstream os;
  os << descriptions << " descriptions, " << cases << " cases checked ("
     << bytesCompared << " bytes compared), " << failedCases << " failed";
  return os.str();
}

namespace {

// Blocks in a paged test cache, and requests in a contiguous one: enough for
// every case to give each request blocks of its own.
constexpr int64_t kPagedBlocks = 24;
constexpr int64_t kContiguousBatch = 8;

uint64_t hashString(uint64_t hash, const std::string &text) {
  for (unsigned char c : text) // FNV-1a
    hash = (hash ^ c) * 0x100000001b3ull;
  return hash;
}

/// Hands out distinct blocks (requests, for contiguous) in random order, the
/// way a block allocator fragments over time.
class BlockPool {
public:
  BlockPool(int64_t numBlocks, std::mt19937_64 &rng) : blocks(numBlocks) {
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), rng);
  }
  int64_t take() {
    int64_t block = blocks.back();
    blocks.pop_back();
    return block;
  }

private:
  std::vector<int64_t> blocks;
};

/// The block table and per-request positions of a batch.
struct Tables {
  int64_t numReqs = 0;
  int64_t maxBlocksPerReq = 0;
  int64_t stride = 0;
  std::vector<int32_t> blockTable; // numReqs * stride
  std::vector<int32_t> queryStartLoc, contextLens;
  int64_t numTokens = 0;

  SlotMappingInputs inputs() const {
    SlotMappingInputs in;
    in.blockTable = blockTable.data();
    in.blockTableStride = stride;
    in.maxBlocksPerReq = maxBlocksPerReq;
    in.queryStartLoc = queryStartLoc.data();
    in.contextLens = contextLens.data();
    in.numReqs = numReqs;
    return in;
  }
};

struct Request {
  int32_t contextLen;
  int32_t newTokens;
};

class CaseEnv;

struct CaseDef {
  std::string name;
  std::function<bool(CaseEnv &, std::string &)> run;
};

/// What one case runs with.
class CaseEnv {
public:
  CaseEnv(Backend &backend, const Description &desc, kvrt_bundle *bundle,
          uint64_t seed, RunStats &stats, int maxShown)
      : backend(backend), desc(desc), bundle(bundle), rng(seed), stats(stats),
        maxShown(maxShown) {}

  Backend &backend;
  const Description &desc;
  kvrt_bundle *bundle;
  std::mt19937_64 rng;
  RunStats &stats;
  int maxShown;

  bool contiguous() const { return desc.layout == Layout::Contiguous; }
  int64_t numBlocks() const {
    return contiguous() ? kContiguousBatch : kPagedBlocks;
  }
  int64_t uniform(int64_t lo, int64_t hi) { // inclusive
    return lo +
           static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
  }

  //===--------------------------------------------------------------------===//
  // Slot lists for the append
  //===--------------------------------------------------------------------===//

  /// One token per request, each in a block of its own at a random position.
  std::vector<int64_t> decodeSlots(int64_t count, BlockPool &pool) {
    std::vector<int64_t> slots;
    for (int64_t i = 0; i < count; ++i)
      slots.push_back(pool.take() * desc.blockSize +
                      uniform(0, desc.blockSize - 1));
    return slots;
  }

  /// `length` consecutive positions of one request from a random start: paged,
  /// over as many (randomly chosen) blocks as that takes, so the run crosses
  /// block boundaries; contiguous, inside one request's row.
  std::vector<int64_t> prefillSlots(int64_t length, BlockPool &pool) {
    std::vector<int64_t> slots;
    int64_t bs = desc.blockSize;
    if (contiguous()) {
      int64_t request = pool.take();
      int64_t start = uniform(0, bs - length);
      for (int64_t i = 0; i < length; ++i)
        slots.push_back(request * bs + start + i);
      return slots;
    }
    int64_t start = uniform(0, bs - 1);
    std::vector<int64_t> blocks;
    for (int64_t b = 0; b < (start + length + bs - 1) / bs; ++b)
      blocks.push_back(pool.take());
    for (int64_t i = 0; i < length; ++i) {
      int64_t pos = start + i;
      slots.push_back(blocks[pos / bs] * bs + pos % bs);
    }
    return slots;
  }

  /// A long prompt: crosses two block boundaries (contiguous: half a row).
  int64_t longPrompt() const {
    return contiguous() ? desc.blockSize / 2 + 3
                        : 2 * desc.blockSize + desc.blockSize / 2 + 3;
  }
  int64_t shortPrompt() const {
    return contiguous() ? desc.blockSize / 4 + 5 : desc.blockSize + 5;
  }

  static void appendTo(std::vector<int64_t> &slots,
                       const std::vector<int64_t> &more) {
    slots.insert(slots.end(), more.begin(), more.end());
  }

  std::vector<int64_t> mixedSlots() {
    // A continuous-batching step: decodes and (chunks of) prompts together.
    BlockPool pool(numBlocks(), rng);
    std::vector<int64_t> slots = decodeSlots(2, pool);
    appendTo(slots, prefillSlots(shortPrompt(), pool));
    appendTo(slots, decodeSlots(1, pool));
    appendTo(slots, prefillSlots(shortPrompt() / 2 + 1, pool));
    return slots;
  }

  //===--------------------------------------------------------------------===//
  // Running and checking
  //===--------------------------------------------------------------------===//

  struct AppendSpec {
    std::vector<int64_t> slots;
    SourceStorage source = SourceStorage::Compact;
    int64_t storedTokens = -1;
    CacheStorage cache = CacheStorage::Compact;
    kvrt_variant variant = KVRT_VARIANT_AUTO;
    int repeats = 1;
    bool expectRefusal = false;
    /// Quantized: fp8 caches as DLPack float8 codes instead of uint8.
    bool float8Codes = false;
    /// Quantized: token 0's K all zeros and token 1's V head 0 all
    /// infinities and NaN (each group's finite amax is 0: scale 1).
    bool emptyGroups = false;
    /// Launch in kvrt's checked mode; a refusal's message must contain
    /// `message`.
    bool checked = false;
    std::string message;
  };

  /// Turns kvrt's checked mode on for one launch.
  class CheckedMode {
  public:
    CheckedMode(kvrt_bundle *bundle, bool on) : bundle(on ? bundle : nullptr) {
      if (this->bundle)
        status = kvrt_bundle_set_checked(this->bundle, 1);
    }
    ~CheckedMode() {
      if (bundle)
        kvrt_bundle_set_checked(bundle, 0);
    }
    kvrt_status status = KVRT_SUCCESS;

  private:
    kvrt_bundle *bundle;
  };

  bool checkMessage(const std::string &want, std::string &failure) {
    std::string got = kvrt_last_error();
    if (want.empty() || got.find(want) != std::string::npos)
      return true;
    failure =
        "the refusal should say \"" + want + "\", it says \"" + got + "\"";
    return false;
  }

  /// The scale tensors of a launch (NULL where the description takes none).
  template <typename Args> static void setScales(Args &args, ScaleSet &scales) {
    args.key_scale = scales.keyScale();
    args.value_scale = scales.valueScale();
    args.key_scale_cache = scales.keyScaleCache();
    args.value_scale_cache = scales.valueScaleCache();
  }

  bool launchGather(const std::string &kernel, CacheSet &caches,
                    const DLTensor *slots, OutputSet &out, ScaleSet &scales,
                    std::string &failure,
                    kvrt_variant variant = KVRT_VARIANT_AUTO) {
    kvrt_gather_args args = KVRT_ARGS_INIT(kvrt_gather_args);
    args.kernel = kernel.c_str();
    args.key_cache = caches.keyCache();
    args.value_cache = caches.valueCache();
    args.slot_mapping = slots;
    args.key_out = out.keyOut();
    args.value_out = out.valueOut();
    args.variant = variant;
    setScales(args, scales);
    return checkStatus("kvrt_gather",
                       kvrt_gather(bundle, &args, backend.stream()), false,
                       failure);
  }

  /// The block of a token's slot, for its per_block scale (0 for a token
  /// that writes nothing).
  int64_t blockOf(int64_t slot) const {
    int64_t block = slot < 0 ? 0 : slot / desc.blockSize;
    return block < numBlocks() ? block : 0;
  }

  /// For a quantized description: the scales of the launch, and source
  /// values placed around them.
  bool prepareQuant(const std::vector<int64_t> &slots, SourceSet &source,
                    ScaleSet &scales, bool emptyGroups, std::string &failure) {
    int64_t tokens = static_cast<int64_t>(slots.size());
    if (!scales.create(backend, desc, tokens, numBlocks(), rng, failure))
      return false;
    // A dynamic scale is computed, not given: each token gets a magnitude
    // of its own so the scales differ.
    std::vector<float> magnitude(static_cast<size_t>(tokens));
    for (float &m : magnitude)
      m = std::ldexp(1.0f, static_cast<int>(uniform(-6, 0)));
    QuantKind kind = desc.quant->kind;
    return source.refillWith(
        [&](int64_t t, int64_t h, int64_t d, bool key) {
          if (emptyGroups && t == 0 && key)
            return 0.0f;
          if (emptyGroups && t == 1 && !key && h == 0)
            return d % 3 == 0 ? NAN : d % 3 == 1 ? INFINITY : -INFINITY;
          float s = desc.quant->dynamic()
                        ? magnitude[t]
                        : scales.staticScale(key, t, h, blockOf(slots[t]));
          return quantSourceValue(kind, s, /*specials=*/true, rng,
                                  /*outliers=*/!desc.quant->dynamic());
        },
        failure);
  }

  /// A quantized append's roundtrip: gathers the slots it wrote back to f32
  /// with the same scales, checks the gathered bytes against the reference
  /// of the gather and each value against its source.
  bool checkRoundtripGather(const std::vector<int64_t> &slotList,
                            const DLTensor *slots, const SourceSet &source,
                            CacheSet &caches, ScaleSet &scales,
                            std::string &failure) {
    Description gather = desc.roundtripGather();
    int64_t rows = static_cast<int64_t>(slotList.size());
    OutputSet out;
    if (!out.create(backend, gather, rows, /*padded=*/true, rng(), failure))
      return false;
    if (!launchGather(gather.name, caches, slots, out, scales, failure))
      return false;
    if (!backend.synchronize()) {
      failure = "synchronize failed: " + backend.lastError();
      return false;
    }
    std::vector<unsigned char> &cacheImage = caches.expectedImage();
    ScaleArgs used = scales.expectedArgs();
    std::vector<unsigned char> &outImage = out.expectedImage();
    gatherReference(gather, caches.hostView(CacheSide::Key, cacheImage.data()),
                    caches.hostView(CacheSide::Value, cacheImage.data()),
                    slotList.data(), rows, &used,
                    out.view(true, outImage.data()),
                    out.view(false, outImage.data()));
    stats.bytesCompared += static_cast<int64_t>(out.storageBytes());
    std::string report;
    if (!out.check(report, maxShown)) {
      failure = "gather after the append: " + report;
      return false;
    }
    std::vector<unsigned char> gathered;
    if (!out.readBack(gathered, failure))
      return false;
    return checkRoundtrip(desc, source.hostKey(), source.hostValue(), slotList,
                          numBlocks(), used, out.view(true, gathered.data()),
                          out.view(false, gathered.data()), failure, maxShown);
  }

  /// After a launch: the caches, the scales and (quantized) the roundtrip.
  bool checkAppended(const std::vector<int64_t> &slotList,
                     const DLTensor *slots, const SourceSet &source,
                     CacheSet &caches, ScaleSet &scales, bool refused,
                     std::string &failure) {
    ScaleArgs expectedScales;
    if (desc.quant)
      expectedScales = scales.expectedArgs();
    if (!refused)
      caches.expectAppend(source, slotList,
                          desc.quant ? &expectedScales : nullptr);
    stats.bytesCompared += static_cast<int64_t>(caches.storageBytes());
    if (!caches.check(failure, maxShown))
      return false;
    if (!desc.quant)
      return true;
    stats.bytesCompared += static_cast<int64_t>(scales.storageBytes());
    if (!scales.check(failure, maxShown))
      return false;
    if (refused || !desc.hasRoundtripGather())
      return true;
    return checkRoundtripGather(slotList, slots, source, caches, scales,
                                failure);
  }

  bool runAppend(const AppendSpec &spec, std::string &failure) {
    int64_t tokens = static_cast<int64_t>(spec.slots.size());
    SourceSet source;
    CacheSet caches;
    ScaleSet scales;
    DeviceBuffer slotBuffer;
    if (!source.create(backend, desc, tokens, spec.source, rng, failure,
                       spec.storedTokens) ||
        !caches.create(backend, desc, numBlocks(), spec.cache, rng(), failure,
                       spec.float8Codes) ||
        !uploadVector(backend, spec.slots, slotBuffer, failure))
      return false;
    if (desc.quant &&
        !prepareQuant(spec.slots, source, scales, spec.emptyGroups, failure))
      return false;
    TensorArg slots(slotBuffer.get(), 0, backend.device(), int64Type(),
                    {tokens}, {1});

    kvrt_append_args args = KVRT_ARGS_INIT(kvrt_append_args);
    args.kernel = desc.name.c_str();
    args.key = source.key();
    args.value = source.value();
    args.slot_mapping = slots.get();
    args.key_cache = caches.keyCache();
    args.value_cache = caches.valueCache();
    args.variant = spec.variant;
    setScales(args, scales);
    CheckedMode checked(bundle, spec.checked);
    if (checked.status != KVRT_SUCCESS) {
      failure = kvrtFailure("kvrt_bundle_set_checked", checked.status);
      return false;
    }
    for (int i = 0; i < spec.repeats; ++i) {
      kvrt_status status = kvrt_append(bundle, &args, backend.stream());
      if (!checkStatus("kvrt_append", status, spec.expectRefusal, failure) ||
          (spec.expectRefusal && !checkMessage(spec.message, failure)))
        return false;
    }
    if (!backend.synchronize()) {
      failure = "synchronize failed: " + backend.lastError();
      return false;
    }
    if (!checkAppended(spec.slots, slots.get(), source, caches, scales,
                       spec.expectRefusal, failure))
      return false;
    // What an append only reads, as it was uploaded.
    stats.bytesCompared +=
        static_cast<int64_t>(source.storageBytes() + spec.slots.size() * 8);
    return source.checkUnchanged(failure) &&
           checkUnchanged(backend, spec.slots, slotBuffer.get(), "slot_mapping",
                          failure);
  }

  bool checkStatus(const char *call, kvrt_status status, bool expectRefusal,
                   std::string &failure) {
    if (expectRefusal) {
      if (status == KVRT_ERROR_INVALID_ARGUMENT)
        return true;
      failure = std::string(call) +
                " should refuse with KVRT_ERROR_INVALID_ARGUMENT, returned " +
                std::to_string(status);
      if (status != KVRT_SUCCESS)
        failure += std::string(" (") + kvrt_last_error() + ")";
      return false;
    }
    if (status == KVRT_SUCCESS)
      return true;
    failure = kvrtFailure(call, status);
    return false;
  }

  /// Builds block tables for `requests`: the columns a request's new tokens
  /// touch get distinct blocks; every other entry (unused columns, the gap
  /// of a strided table) holds some other valid block, so reading the wrong
  /// entry writes somewhere visible.
  Tables makeTables(const std::vector<Request> &requests,
                    int64_t maxBlocksPerReq, int64_t stride,
                    int64_t paddingTokens) {
    Tables t;
    t.numReqs = static_cast<int64_t>(requests.size());
    t.maxBlocksPerReq = maxBlocksPerReq;
    t.stride = stride;
    t.blockTable.resize(static_cast<size_t>(t.numReqs * stride));
    for (int32_t &entry : t.blockTable)
      entry = static_cast<int32_t>(uniform(0, kPagedBlocks - 1));
    BlockPool pool(kPagedBlocks, rng);
    t.queryStartLoc.push_back(0);
    for (int64_t r = 0; r < t.numReqs; ++r) {
      const Request &req = requests[r];
      t.contextLens.push_back(req.contextLen);
      t.queryStartLoc.push_back(t.queryStartLoc.back() + req.newTokens);
      if (req.newTokens == 0)
        continue;
      int64_t first = req.contextLen / desc.blockSize;
      int64_t last = (req.contextLen + req.newTokens - 1) / desc.blockSize;
      for (int64_t c = first; c <= std::min(last, maxBlocksPerReq - 1); ++c)
        t.blockTable[r * stride + c] = static_cast<int32_t>(pool.take());
    }
    t.numTokens = t.queryStartLoc.back() + paddingTokens;
    return t;
  }

  /// Decode: one new token per request, at context lengths that include the
  /// block-boundary cases (0, bs - 1, bs: the new token opens a block; a
  /// post-increment bug puts it in the previous one).
  Tables decodeTables(int64_t numReqs, int64_t stride = 4) {
    const int64_t maxBlocks = 4, bs = desc.blockSize;
    std::vector<Request> requests;
    const int64_t edges[] = {0, bs - 1, bs, 2 * bs - 1, maxBlocks * bs - 1};
    for (int64_t r = 0; r < numReqs; ++r) {
      int64_t ctx = r < 5 ? edges[r] : uniform(0, maxBlocks * bs - 1);
      requests.push_back({static_cast<int32_t>(ctx), 1});
    }
    std::shuffle(requests.begin(), requests.end(), rng);
    return makeTables(requests, maxBlocks, std::max<int64_t>(stride, maxBlocks),
                      0);
  }

  /// Prefill with a chunked prompt: a fresh prompt over three blocks, a
  /// second chunk of a prompt already in the cache, a one-token prompt.
  Tables prefillTables() {
    const int32_t bs = static_cast<int32_t>(desc.blockSize);
    return makeTables({{0, 2 * bs + 5}, {bs + 3, bs - 1}, {0, 1}}, 4, 4, 0);
  }

  /// Everything that must give slot -1 or write nothing: tokens running past
  /// the block-table row, a negative table entry, an entry past the cache's
  /// blocks, and padding tokens after query_start_loc[num_reqs].
  Tables overflowTables() {
    const int32_t bs = static_cast<int32_t>(desc.blockSize);
    const int64_t maxBlocks = 3;
    Tables t = makeTables({{5, 1},
                           {static_cast<int32_t>(maxBlocks) * bs - 2, 5},
                           {bs, 2},
                           {2 * bs + 1, 1},
                           {0, 1}},
                          maxBlocks, maxBlocks, /*paddingTokens=*/3);
    t.blockTable[2 * t.stride + 1] = -1;
    t.blockTable[3 * t.stride + 2] = static_cast<int32_t>(kPagedBlocks + 2);
    return t;
  }

  struct TableTensors {
    DeviceBuffer table, starts, lens;
    TensorArg tableArg, startsArg, lensArg;
  };

  bool uploadTables(const Tables &t, TableTensors &out, std::string &failure) {
    if (!uploadVector(backend, t.blockTable, out.table, failure) ||
        !uploadVector(backend, t.queryStartLoc, out.starts, failure) ||
        !uploadVector(backend, t.contextLens, out.lens, failure))
      return false;
    DLDevice dev = backend.device();
    out.tableArg = TensorArg(out.table.get(), 0, dev, int32Type(),
                             {t.numReqs, t.maxBlocksPerReq}, {t.stride, 1});
    out.startsArg =
        TensorArg(out.starts.get(), 0, dev, int32Type(), {t.numReqs + 1}, {1});
    out.lensArg =
        TensorArg(out.lens.get(), 0, dev, int32Type(), {t.numReqs}, {1});
    return true;
  }

  /// The block table, query_start_loc and context_lens, as uploaded.
  bool checkTablesUnchanged(const Tables &t, const TableTensors &tables,
                            std::string &failure) {
    stats.bytesCompared += static_cast<int64_t>(
        t.blockTable.size() * sizeof(t.blockTable[0]) +
        t.queryStartLoc.size() * sizeof(t.queryStartLoc[0]) +
        t.contextLens.size() * sizeof(t.contextLens[0]));
    return checkUnchanged(backend, t.blockTable, tables.table.get(),
                          "block_table", failure) &&
           checkUnchanged(backend, t.queryStartLoc, tables.starts.get(),
                          "query_start_loc", failure) &&
           checkUnchanged(backend, t.contextLens, tables.lens.get(),
                          "context_lens", failure);
  }

  struct FusedSpec {
    Tables tables;
    SourceStorage source = SourceStorage::Compact;
    kvrt_variant variant = KVRT_VARIANT_AUTO;
    int repeats = 1;
    /// Checked mode, as in AppendSpec.
    bool checked = false;
    bool expectRefusal = false;
    std::string message;
  };

  bool runFused(const FusedSpec &spec, std::string &failure) {
    const Tables &t = spec.tables;
    SourceSet source;
    CacheSet caches;
    ScaleSet scales;
    TableTensors tables;
    DeviceBuffer slotBuffer;
    // The fused kernel must equal the two-step path: build slots, append.
    std::vector<int64_t> slots =
        slotMappingReference(desc.blockSize, t.inputs(), t.numTokens);
    if (!source.create(backend, desc, t.numTokens, spec.source, rng, failure) ||
        !caches.create(backend, desc, kPagedBlocks, CacheStorage::Compact,
                       rng(), failure) ||
        !uploadTables(t, tables, failure))
      return false;
    if (desc.quant && (!prepareQuant(slots, source, scales, false, failure) ||
                       !uploadVector(backend, slots, slotBuffer, failure)))
      return false;
    TensorArg slotArg(slotBuffer.get(), 0, backend.device(), int64Type(),
                      {t.numTokens}, {1});
    kvrt_fused_append_args args = KVRT_ARGS_INIT(kvrt_fused_append_args);
    args.kernel = desc.name.c_str();
    args.key = source.key();
    args.value = source.value();
    args.block_table = tables.tableArg.get();
    args.query_start_loc = tables.startsArg.get();
    args.context_lens = tables.lensArg.get();
    args.key_cache = caches.keyCache();
    args.value_cache = caches.valueCache();
    args.variant = spec.variant;
    setScales(args, scales);
    CheckedMode checked(bundle, spec.checked);
    if (checked.status != KVRT_SUCCESS) {
      failure = kvrtFailure("kvrt_bundle_set_checked", checked.status);
      return false;
    }
    for (int i = 0; i < spec.repeats; ++i) {
      kvrt_status status = kvrt_fused_append(bundle, &args, backend.stream());
      if (!checkStatus("kvrt_fused_append", status, spec.expectRefusal,
                       failure) ||
          (spec.expectRefusal && !checkMessage(spec.message, failure)))
        return false;
    }
    if (!backend.synchronize()) {
      failure = "synchronize failed: " + backend.lastError();
      return false;
    }
    if (!checkAppended(slots, slotArg.get(), source, caches, scales,
                       spec.expectRefusal, failure))
      return false;
    stats.bytesCompared += static_cast<int64_t>(source.storageBytes());
    return source.checkUnchanged(failure) &&
           checkTablesUnchanged(t, tables, failure);
  }

  //===--------------------------------------------------------------------===//
  // FlashInfer's page table (paged_kv_append)
  //===--------------------------------------------------------------------===//

  /// FlashInfer's inputs for `requests`: each request's pages (enough for
  /// context_len + new tokens) drawn from a shuffled pool, listed in
  /// kv_indices in request order; its new tokens at positions context_len
  /// onwards. `shuffleTokens` sends the tokens in a random order.
  PageTableInputs makePageTable(const std::vector<Request> &requests,
                                bool shuffleTokens = false) {
    PageTableInputs in;
    BlockPool pool(kPagedBlocks, rng);
    in.kvIndptr.push_back(0);
    for (size_t r = 0; r < requests.size(); ++r) {
      int64_t length = requests[r].contextLen + requests[r].newTokens;
      int64_t pages = (length + desc.blockSize - 1) / desc.blockSize;
      for (int64_t k = 0; k < pages; ++k)
        in.kvIndices.push_back(static_cast<int32_t>(pool.take()));
      in.kvIndptr.push_back(static_cast<int32_t>(in.kvIndices.size()));
      for (int32_t i = 0; i < requests[r].newTokens; ++i) {
        in.batchIndices.push_back(static_cast<int32_t>(r));
        in.positions.push_back(requests[r].contextLen + i);
      }
    }
    if (shuffleTokens) {
      std::vector<size_t> order(in.positions.size());
      std::iota(order.begin(), order.end(), size_t{0});
      std::shuffle(order.begin(), order.end(), rng);
      PageTableInputs shuffled = in;
      for (size_t i = 0; i < order.size(); ++i) {
        shuffled.batchIndices[i] = in.batchIndices[order[i]];
        shuffled.positions[i] = in.positions[order[i]];
      }
      in = shuffled;
    }
    return in;
  }

  /// Decode: one token per request at the block-boundary context lengths.
  PageTableInputs decodePages(int64_t numReqs) {
    const int64_t bs = desc.blockSize;
    const int64_t edges[] = {0, bs - 1, bs, 2 * bs - 1, 3 * bs - 1};
    std::vector<Request> requests;
    for (int64_t r = 0; r < numReqs; ++r)
      requests.push_back(
          {static_cast<int32_t>(r < 5 ? edges[r] : uniform(0, 3 * bs - 1)), 1});
    return makePageTable(requests, /*shuffleTokens=*/true);
  }

  /// Prefill: a fresh prompt over three blocks, a second chunk of a prompt
  /// already in the cache, a one-token prompt.
  PageTableInputs prefillPages() {
    const int32_t bs = static_cast<int32_t>(desc.blockSize);
    return makePageTable({{0, 2 * bs + 5}, {bs + 3, bs - 1}, {0, 1}});
  }

  struct PagedSpec {
    PageTableInputs pages;
    SourceStorage source = SourceStorage::Compact;
    /// KvInterleavedTruncated: the rows backed by memory; the tokens after
    /// them must write nothing and are never read.
    int64_t storedTokens = -1;
    kvrt_variant variant = KVRT_VARIANT_AUTO;
    int repeats = 1;
    bool checked = false;
    bool expectRefusal = false;
    std::string message;
  };

  bool runPaged(const PagedSpec &spec, std::string &failure) {
    const PageTableInputs &in = spec.pages;
    int64_t tokens = static_cast<int64_t>(in.positions.size());
    SourceSet source;
    CacheSet caches;
    ScaleSet scales;
    DeviceBuffer batchBuf, posBuf, indicesBuf, indptrBuf, slotBuffer;
    std::vector<int64_t> slots =
        pageTableSlotsReference(desc.blockSize, kPagedBlocks, in);
    if (!source.create(backend, desc, tokens, spec.source, rng, failure,
                       spec.storedTokens) ||
        !caches.create(backend, desc, kPagedBlocks, CacheStorage::Compact,
                       rng(), failure) ||
        !uploadVector(backend, in.batchIndices, batchBuf, failure) ||
        !uploadVector(backend, in.positions, posBuf, failure) ||
        !uploadVector(backend, in.kvIndices, indicesBuf, failure) ||
        !uploadVector(backend, in.kvIndptr, indptrBuf, failure))
      return false;
    if (desc.quant && (!prepareQuant(slots, source, scales, false, failure) ||
                       !uploadVector(backend, slots, slotBuffer, failure)))
      return false;
    DLDevice dev = backend.device();
    TensorArg slotArg(slotBuffer.get(), 0, dev, int64Type(), {tokens}, {1});
    TensorArg batchArg(batchBuf.get(), 0, dev, int32Type(), {tokens}, {1});
    TensorArg posArg(posBuf.get(), 0, dev, int32Type(), {tokens}, {1});
    TensorArg indicesArg(indicesBuf.get(), 0, dev, int32Type(),
                         {static_cast<int64_t>(in.kvIndices.size())}, {1});
    TensorArg indptrArg(indptrBuf.get(), 0, dev, int32Type(),
                        {static_cast<int64_t>(in.kvIndptr.size())}, {1});
    kvrt_paged_kv_append_args args = KVRT_ARGS_INIT(kvrt_paged_kv_append_args);
    args.kernel = desc.name.c_str();
    args.key = source.key();
    args.value = source.value();
    args.batch_indices = batchArg.get();
    args.positions = posArg.get();
    args.kv_indices = indicesArg.get();
    args.kv_indptr = indptrArg.get();
    args.key_cache = caches.keyCache();
    args.value_cache = caches.valueCache();
    args.variant = spec.variant;
    setScales(args, scales);
    CheckedMode checked(bundle, spec.checked);
    if (checked.status != KVRT_SUCCESS) {
      failure = kvrtFailure("kvrt_bundle_set_checked", checked.status);
      return false;
    }
    for (int i = 0; i < spec.repeats; ++i) {
      kvrt_status status =
          kvrt_paged_kv_append(bundle, &args, backend.stream());
      if (!checkStatus("kvrt_paged_kv_append", status, spec.expectRefusal,
                       failure) ||
          (spec.expectRefusal && !checkMessage(spec.message, failure)))
        return false;
    }
    if (!backend.synchronize()) {
      failure = "synchronize failed: " + backend.lastError();
      return false;
    }
    if (!checkAppended(slots, slotArg.get(), source, caches, scales,
                       spec.expectRefusal, failure))
      return false;
    stats.bytesCompared +=
        static_cast<int64_t>(source.storageBytes() +
                             4 * (in.batchIndices.size() + in.positions.size() +
                                  in.kvIndices.size() + in.kvIndptr.size()));
    return source.checkUnchanged(failure) &&
           checkUnchanged(backend, in.batchIndices, batchBuf.get(),
                          "batch_indices", failure) &&
           checkUnchanged(backend, in.positions, posBuf.get(), "positions",
                          failure) &&
           checkUnchanged(backend, in.kvIndices, indicesBuf.get(), "kv_indices",
                          failure) &&
           checkUnchanged(backend, in.kvIndptr, indptrBuf.get(), "kv_indptr",
                          failure);
  }

  /// A gather of caches holding arbitrary bytes (their poison): every
  /// output element against the reference, rows of padding and
  /// out-of-range slots untouched, the caches and scales untouched.
  bool runGather(const std::vector<int64_t> &slotList, bool padded,
                 bool float8Codes, kvrt_variant variant, std::string &failure) {
    int64_t rows = static_cast<int64_t>(slotList.size());
    CacheSet caches;
    ScaleSet scales;
    OutputSet out;
    DeviceBuffer slotBuffer;
    if (!caches.create(backend, desc, numBlocks(), CacheStorage::Compact, rng(),
                       failure, float8Codes) ||
        !out.create(backend, desc, rows, padded, rng(), failure) ||
        !uploadVector(backend, slotList, slotBuffer, failure))
      return false;
    if (desc.quant &&
        (!scales.create(backend, desc, rows, numBlocks(), rng, failure) ||
         (desc.quant->dynamic() && !scales.fillScaleCaches(rng, failure))))
      return false;
    TensorArg slots(slotBuffer.get(), 0, backend.device(), int64Type(), {rows},
                    {1});
    if (!launchGather(desc.name, caches, slots.get(), out, scales, failure,
                      variant))
      return false;
    if (!backend.synchronize()) {
      failure = "synchronize failed: " + backend.lastError();
      return false;
    }
    std::vector<unsigned char> &image = caches.expectedImage();
    ScaleArgs used;
    if (desc.quant)
      used = scales.expectedArgs();
    std::vector<unsigned char> &outImage = out.expectedImage();
    gatherReference(desc, caches.hostView(CacheSide::Key, image.data()),
                    caches.hostView(CacheSide::Value, image.data()),
                    slotList.data(), rows, desc.quant ? &used : nullptr,
                    out.view(true, outImage.data()),
                    out.view(false, outImage.data()));
    stats.bytesCompared +=
        static_cast<int64_t>(out.storageBytes() + caches.storageBytes());
    if (!out.check(failure, maxShown) || !caches.check(failure, maxShown))
      return false;
    if (!desc.quant)
      return true;
    stats.bytesCompared += static_cast<int64_t>(scales.storageBytes());
    return scales.check(failure, maxShown);
  }

  bool runSlotMapping(const Tables &t, std::string &failure) {
    TableTensors tables;
    DeviceBuffer out;
    // Poison the output so that a token the kernel skips (padding must get
    // an explicit -1) shows up.
    std::vector<int64_t> poison(static_cast<size_t>(t.numTokens));
    fillPoison(poison.data(), poison.size() * sizeof(int64_t), rng());
    if (!uploadTables(t, tables, failure) ||
        !uploadVector(backend, poison, out, failure))
      return false;
    TensorArg outArg(out.get(), 0, backend.device(), int64Type(), {t.numTokens},
                     {1});
    kvrt_slot_mapping_args args = KVRT_ARGS_INIT(kvrt_slot_mapping_args);
    args.kernel = desc.name.c_str();
    args.block_table = tables.tableArg.get();
    args.query_start_loc = tables.startsArg.get();
    args.context_lens = tables.lensArg.get();
    args.slot_mapping = outArg.get();
    kvrt_status status =
        kvrt_build_slot_mapping(bundle, &args, backend.stream());
    if (!checkStatus("kvrt_build_slot_mapping", status, false, failure))
      return false;
    if (!backend.synchronize()) {
      failure = "synchronize failed: " + backend.lastError();
      return false;
    }
    std::vector<int64_t> actual(poison.size());
    if (!actual.empty() &&
        !backend.copyToHost(actual.data(), out.get(),
                            actual.size() * sizeof(int64_t))) {
      failure = "copying slot_mapping back failed: " + backend.lastError();
      return false;
    }
    stats.bytesCompared += static_cast<int64_t>(actual.size() * 8);
    std::vector<int64_t> want =
        slotMappingReference(desc.blockSize, t.inputs(), t.numTokens);
    int64_t differing = 0;
    std::string details;
    for (int64_t i = 0; i < t.numTokens; ++i) {
      if (actual[i] == want[i])
        continue;
      if (differing++ >= maxShown)
        continue;
      int64_t r = 0;
      while (r < t.numReqs && i >= t.queryStartLoc[r + 1])
        ++r;
      char line[200];
      if (r < t.numReqs)
        std::snprintf(
            line, sizeof(line),
            "\n    token %" PRId64 " (request %" PRId64 ", position %" PRId64
            "): expected %" PRId64 ", got %" PRId64,
            i, r,
            static_cast<int64_t>(t.contextLens[r]) + i - t.queryStartLoc[r],
            want[i], actual[i]);
      else
        std::snprintf(line, sizeof(line),
                      "\n    token %" PRId64 " (padding): expected %" PRId64
                      ", got %" PRId64,
                      i, want[i], actual[i]);
      details += line;
    }
    if (differing == 0)
      return checkTablesUnchanged(t, tables, failure);
    failure = std::to_string(differing) + " of " + std::to_string(t.numTokens) +
              " slots differ; first:" + details;
    return false;
  }
};

using Spec = CaseEnv::AppendSpec;

/// The case-name suffix of a variant.
std::string variantSuffix(kvrt_variant variant) {
  switch (variant) {
  case KVRT_VARIANT_AUTO:
    return "/auto";
  case KVRT_VARIANT_VECTOR:
    return "/vector";
  case KVRT_VARIANT_SCALAR:
    return "/scalar";
  case KVRT_VARIANT_WIDE:
    return "/wide";
  }
  return "/?";
}

/// The variants each main append and fused append case runs under: AUTO,
/// which at the cases' token counts picks the vector kernel, SCALAR, and,
/// where the description has a wide kernel, WIDE: AUTO picks the wide kernel
/// only from its manifest's min_tokens on (thousands of tokens), which no
/// case reaches, so without it the wide kernel would run nowhere.
std::vector<kvrt_variant> appendVariants(bool wide) {
  std::vector<kvrt_variant> variants = {KVRT_VARIANT_AUTO, KVRT_VARIANT_SCALAR};
  if (wide)
    variants.push_back(KVRT_VARIANT_WIDE);
  return variants;
}

/// `name` under each of appendVariants(wide).
void addVariants(std::vector<CaseDef> &cases, const std::string &name,
                 bool wide, std::function<Spec(CaseEnv &)> make) {
  for (kvrt_variant variant : appendVariants(wide)) {
    cases.push_back({name + variantSuffix(variant),
                     [make, variant](CaseEnv &env, std::string &failure) {
                       Spec spec = make(env);
                       spec.variant = variant;
                       return env.runAppend(spec, failure);
                     }});
  }
}

void addAppend(std::vector<CaseDef> &cases, const std::string &name,
               std::function<Spec(CaseEnv &)> make) {
  cases.push_back({name, [make](CaseEnv &env, std::string &failure) {
                     return env.runAppend(make(env), failure);
                   }});
}

/// `wide`: the description has a wide kernel (Description::hasWideKernel).
std::vector<CaseDef> appendCases(bool wide) {
  std::vector<CaseDef> cases;
  addVariants(cases, "decode", wide, [](CaseEnv &env) {
    BlockPool pool(env.numBlocks(), env.rng);
    Spec spec;
    spec.slots = env.decodeSlots(7, pool);
    return spec;
  });
  addVariants(cases, "prefill", wide, [](CaseEnv &env) {
    BlockPool pool(env.numBlocks(), env.rng);
    Spec spec;
    spec.slots = env.prefillSlots(env.longPrompt(), pool);
    CaseEnv::appendTo(spec.slots, env.prefillSlots(env.longPrompt(), pool));
    return spec;
  });
  addVariants(cases, "mixed", wide, [](CaseEnv &env) {
    Spec spec;
    spec.slots = env.mixedSlots();
    return spec;
  });
  // A CUDA-graph batch padded to a fixed size: slot -1 (and another negative
  // value) in the middle and at the end. The padding rows at the end are not
  // even allocated: a kernel must not read a token before it knows its slot.
  addVariants(cases, "padding", wide, [](CaseEnv &env) {
    BlockPool pool(env.numBlocks(), env.rng);
    std::vector<int64_t> real = env.decodeSlots(5, pool);
    Spec spec;
    spec.slots = {real[0], -1, real[1], real[2], -5, real[3],
                  real[4], -1, -1,      -1,      -1, -1};
    spec.source = SourceStorage::KvInterleavedTruncated;
    spec.storedTokens = 7;
    return spec;
  });
  addVariants(cases, "out_of_range", wide, [](CaseEnv &env) {
    BlockPool pool(env.numBlocks(), env.rng);
    std::vector<int64_t> real = env.decodeSlots(4, pool);
    int64_t end = env.numBlocks() * env.desc.blockSize;
    Spec spec;
    spec.slots = {end,
                  real[0],
                  end + 3 * env.desc.blockSize + 1,
                  real[1],
                  int64_t(1) << 40,
                  real[2],
                  std::numeric_limits<int64_t>::max(),
                  real[3]};
    return spec;
  });
  // K and V as the views PyTorch hands over after splitting a fused QKV
  // projection: aligned (the vector variant must accept them), and with an
  // odd row stride (only the scalar variant may run; AUTO must fall back to
  // it; VECTOR must be refused with nothing written).
  // The wide kernel makes the vector kernel's promise: the same views.
  auto fusedQkv = [&cases](const std::string &name, SourceStorage source,
                           kvrt_variant variant) {
    addAppend(cases, name + variantSuffix(variant),
              [source, variant](CaseEnv &env) {
                Spec spec;
                spec.slots = env.mixedSlots();
                spec.source = source;
                spec.variant = variant;
                return spec;
              });
  };
  fusedQkv("fused_qkv", SourceStorage::FusedQkv, KVRT_VARIANT_VECTOR);
  if (wide)
    fusedQkv("fused_qkv", SourceStorage::FusedQkv, KVRT_VARIANT_WIDE);
  for (kvrt_variant variant : {KVRT_VARIANT_SCALAR, KVRT_VARIANT_AUTO})
    fusedQkv("fused_qkv_odd_stride", SourceStorage::FusedQkvOddStride, variant);
  addAppend(cases, "fused_qkv_odd_stride/vector_refused", [](CaseEnv &env) {
    Spec spec;
    spec.slots = env.mixedSlots();
    spec.source = SourceStorage::FusedQkvOddStride;
    spec.variant = KVRT_VARIANT_VECTOR;
    spec.expectRefusal = true;
    return spec;
  });
  // Forcing the wide kernel past its promise is refused too, naming it.
  if (wide)
    addAppend(cases, "fused_qkv_odd_stride/wide_refused", [](CaseEnv &env) {
      Spec spec;
      spec.slots = env.mixedSlots();
      spec.source = SourceStorage::FusedQkvOddStride;
      spec.variant = KVRT_VARIANT_WIDE;
      spec.expectRefusal = true;
      spec.message = "'" + env.desc.wideKernelName() + "'";
      return spec;
    });
  addAppend(cases, "permuted_source/auto", [](CaseEnv &env) {
    BlockPool pool(env.numBlocks(), env.rng);
    Spec spec;
    spec.slots = env.prefillSlots(env.longPrompt(), pool);
    spec.source = SourceStorage::Permuted;
    return spec;
  });
  // Caches as views with a block stride larger than the block.
  addAppend(cases, "strided_cache/auto", [](CaseEnv &env) {
    Spec spec;
    spec.slots = env.mixedSlots();
    spec.cache = CacheStorage::BlockStrided;
    return spec;
  });
  // K and V caches taking turns block by block in one allocation.
  addAppend(cases, "interleaved_caches/auto", [](CaseEnv &env) {
    Spec spec;
    spec.slots = env.mixedSlots();
    spec.cache = CacheStorage::Interleaved;
    return spec;
  });
  addAppend(cases, "twice_equals_once/auto", [](CaseEnv &env) {
    Spec spec;
    spec.slots = env.mixedSlots();
    spec.repeats = 2;
    return spec;
  });
  addAppend(cases, "empty/auto", [](CaseEnv &) { return Spec(); });
  // kvrt's checked mode: a slot used twice and a slot past the cache are
  // refused, naming the token, with nothing written; a valid batch with
  // padding still runs.
  addAppend(cases, "checked_duplicate/auto", [](CaseEnv &env) {
    BlockPool pool(env.numBlocks(), env.rng);
    Spec spec;
    spec.slots = env.decodeSlots(8, pool);
    spec.slots[7] = spec.slots[3];
    spec.checked = true;
    spec.expectRefusal = true;
    spec.message = "slot_mapping[7] = " + std::to_string(spec.slots[7]) +
                   " is also used by token 3";
    return spec;
  });
  addAppend(cases, "checked_out_of_range/auto", [](CaseEnv &env) {
    BlockPool pool(env.numBlocks(), env.rng);
    Spec spec;
    spec.slots = env.decodeSlots(5, pool);
    spec.slots[2] = env.numBlocks() * env.desc.blockSize + 1;
    spec.checked = true;
    spec.expectRefusal = true;
    spec.message = "slot_mapping[2] = " + std::to_string(spec.slots[2]);
    return spec;
  });
  addAppend(cases, "checked_valid/auto", [](CaseEnv &env) {
    Spec spec;
    spec.slots = env.mixedSlots();
    spec.slots.insert(spec.slots.begin() + 1, -1);
    spec.slots.push_back(-1);
    spec.checked = true;
    return spec;
  });
  return cases;
}

/// What a quantized append adds: groups whose finite amax is 0, and fp8
/// caches that say DLPack's float8 codes. `wide` as for appendCases (a
/// static scale's append has a wide kernel where its chunks allow).
void addQuantCases(std::vector<CaseDef> &cases, const Description &desc,
                   bool wide) {
  addVariants(cases, "empty_groups", wide, [](CaseEnv &env) {
    BlockPool pool(env.numBlocks(), env.rng);
    Spec spec;
    spec.slots = env.decodeSlots(4, pool);
    spec.emptyGroups = true;
    return spec;
  });
  if (desc.cacheDtype != DType::I8)
    addAppend(cases, "float8_dtype/auto", [](CaseEnv &env) {
      Spec spec;
      spec.slots = env.mixedSlots();
      spec.float8Codes = true;
      return spec;
    });
}

/// A gather case; `name` ends in the variant it asks for.
void addGather(std::vector<CaseDef> &cases, const std::string &name,
               bool padded, bool float8Codes,
               std::function<std::vector<int64_t>(CaseEnv &)> make) {
  kvrt_variant variant =
      name.size() > 7 && name.compare(name.size() - 7, 7, "/scalar") == 0
          ? KVRT_VARIANT_SCALAR
          : KVRT_VARIANT_AUTO;
  cases.push_back({name, [=](CaseEnv &env, std::string &failure) {
                     return env.runGather(make(env), padded, float8Codes,
                                          variant, failure);
                   }});
}

std::vector<CaseDef> gatherCases(const Description &desc) {
  std::vector<CaseDef> cases;
  // Decode-like rows with padding (-1, -5), slots past the cache and a slot
  // read twice.
  auto scattered = [](CaseEnv &env) {
    BlockPool pool(env.numBlocks(), env.rng);
    std::vector<int64_t> real = env.decodeSlots(6, pool);
    int64_t end = env.numBlocks() * env.desc.blockSize;
    return std::vector<int64_t>{
        real[0], -1, real[1], real[2],          end,    real[3],
        real[0], -5, real[4], int64_t(1) << 40, real[5]};
  };
  addGather(cases, "scattered/auto", true, false, scattered);
  addGather(cases, "scattered/scalar", true, false, scattered);
  addGather(cases, "compact_out/auto", false, false, scattered);
  addGather(cases, "prefill/auto", true, false, [](CaseEnv &env) {
    BlockPool pool(env.numBlocks(), env.rng);
    return env.prefillSlots(env.shortPrompt(), pool);
  });
  if (desc.cacheDtype == DType::F8E4M3 || desc.cacheDtype == DType::F8E5M2)
    addGather(cases, "float8_dtype/auto", true, true, scattered);
  addGather(cases, "empty/auto", true, false,
            [](CaseEnv &) { return std::vector<int64_t>(); });
  return cases;
}

using FSpec = CaseEnv::FusedSpec;

void addFused(std::vector<CaseDef> &cases, const std::string &name,
              std::function<FSpec(CaseEnv &)> make) {
  cases.push_back({name, [make](CaseEnv &env, std::string &failure) {
                     return env.runFused(make(env), failure);
                   }});
}

/// `wide` as for appendCases.
std::vector<CaseDef> fusedCases(bool wide) {
  std::vector<CaseDef> cases;
  for (kvrt_variant variant : appendVariants(wide)) {
    std::string suffix = variantSuffix(variant);
    addFused(cases, "decode" + suffix, [variant](CaseEnv &env) {
      FSpec spec;
      spec.tables = env.decodeTables(7);
      spec.variant = variant;
      return spec;
    });
    addFused(cases, "prefill" + suffix, [variant](CaseEnv &env) {
      FSpec spec;
      spec.tables = env.prefillTables();
      spec.variant = variant;
      return spec;
    });
    addFused(cases, "padding_overflow" + suffix, [variant](CaseEnv &env) {
      FSpec spec;
      spec.tables = env.overflowTables();
      spec.variant = variant;
      return spec;
    });
  }
  for (kvrt_variant variant : {KVRT_VARIANT_VECTOR, KVRT_VARIANT_WIDE}) {
    if (variant == KVRT_VARIANT_WIDE && !wide)
      continue;
    addFused(cases, "fused_qkv" + variantSuffix(variant),
             [variant](CaseEnv &env) {
               FSpec spec;
               spec.tables = env.decodeTables(7);
               spec.source = SourceStorage::FusedQkv;
               spec.variant = variant;
               return spec;
             });
  }
  addFused(cases, "fused_qkv_odd_stride/scalar", [](CaseEnv &env) {
    FSpec spec;
    spec.tables = env.prefillTables();
    spec.source = SourceStorage::FusedQkvOddStride;
    spec.variant = KVRT_VARIANT_SCALAR;
    return spec;
  });
  addFused(cases, "twice_equals_once/auto", [](CaseEnv &env) {
    FSpec spec;
    spec.tables = env.prefillTables();
    spec.repeats = 2;
    return spec;
  });
  addFused(cases, "empty/auto", [](CaseEnv &env) {
    FSpec spec;
    spec.tables = env.makeTables({{3, 0}, {0, 0}}, 4, 4, 0);
    return spec;
  });
  // Checked mode: a block id past the cache, and two tokens that the block
  // table sends to one slot, are refused with nothing written.
  addFused(cases, "checked_bad_block/auto", [](CaseEnv &env) {
    FSpec spec;
    spec.tables = env.makeTables({{1, 1}, {2, 1}, {0, 1}}, 4, 4, 0);
    Tables &t = spec.tables;
    t.blockTable[1 * t.stride + 2 / env.desc.blockSize] =
        static_cast<int32_t>(kPagedBlocks + 3);
    spec.checked = true;
    spec.expectRefusal = true;
    spec.message = "block_table[1][" + std::to_string(2 / env.desc.blockSize) +
                   "] = " + std::to_string(kPagedBlocks + 3) + " (token 1)";
    return spec;
  });
  addFused(cases, "checked_duplicate/auto", [](CaseEnv &env) {
    FSpec spec;
    spec.tables = env.makeTables({{0, 1}, {0, 1}}, 4, 4, 0);
    Tables &t = spec.tables;
    t.blockTable[t.stride] = t.blockTable[0]; // both tokens: slot block * bs
    spec.checked = true;
    spec.expectRefusal = true;
    spec.message = "writes slot " +
                   std::to_string(t.blockTable[0] * env.desc.blockSize) +
                   ", also used by token 0";
    return spec;
  });
  return cases;
}

using PSpec = CaseEnv::PagedSpec;

void addPaged(std::vector<CaseDef> &cases, const std::string &name,
              std::function<PSpec(CaseEnv &)> make) {
  cases.push_back({name, [make](CaseEnv &env, std::string &failure) {
                     return env.runPaged(make(env), failure);
                   }});
}

/// One hostile token appended to a valid prefill batch: `spoil` changes the
/// inputs so that token (the last) must write nothing, and returns what
/// checked mode's refusal says. The other tokens are written as usual, the
/// spoiled one's K/V row lies past the end of the fenced source (where the
/// backend has fences: reading it faults) and every byte of the cache is
/// compared, so a write into another request's page is seen.
void addHostile(
    std::vector<CaseDef> &cases, const std::string &name,
    std::function<std::string(CaseEnv &, PageTableInputs &)> spoil) {
  for (bool checked : {false, true})
    addPaged(cases, (checked ? "checked_" : "hostile_") + name + "/auto",
             [spoil, checked](CaseEnv &env) {
               PSpec spec;
               spec.pages = env.prefillPages();
               // The extra token: request 1's, at a valid position first.
               PageTableInputs &in = spec.pages;
               in.batchIndices.push_back(1);
               in.positions.push_back(0);
               spec.message = spoil(env, in);
               spec.source = SourceStorage::KvInterleavedTruncated;
               spec.storedTokens =
                   static_cast<int64_t>(in.positions.size()) - 1;
               spec.checked = checked;
               spec.expectRefusal = checked;
               return spec;
             });
}

std::vector<CaseDef> pagedCases(bool wide) {
  std::vector<CaseDef> cases;
  for (kvrt_variant variant : appendVariants(wide)) {
    std::string suffix = variantSuffix(variant);
    addPaged(cases, "decode" + suffix, [variant](CaseEnv &env) {
      PSpec spec;
      spec.pages = env.decodePages(7);
      spec.variant = variant;
      return spec;
    });
    addPaged(cases, "prefill" + suffix, [variant](CaseEnv &env) {
      PSpec spec;
      spec.pages = env.prefillPages();
      spec.variant = variant;
      return spec;
    });
  }
  addPaged(cases, "fused_qkv/vector", [](CaseEnv &env) {
    PSpec spec;
    spec.pages = env.decodePages(7);
    spec.source = SourceStorage::FusedQkv;
    spec.variant = KVRT_VARIANT_VECTOR;
    return spec;
  });
  addPaged(cases, "twice_equals_once/auto", [](CaseEnv &env) {
    PSpec spec;
    spec.pages = env.prefillPages();
    spec.repeats = 2;
    return spec;
  });
  addPaged(cases, "empty/auto", [](CaseEnv &env) {
    PSpec spec;
    spec.pages = env.makePageTable({{3, 0}, {0, 0}});
    return spec;
  });
  // Each input FlashInfer's kernel trusts, out of range in one token.
  // Position -1 of request 1 was request 0's last page's last row when the
  // position was added to the start of the request's pages unchecked.
  addHostile(cases, "position_minus_one", [](CaseEnv &, PageTableInputs &in) {
    in.positions.back() = -1;
    return std::string("positions[") + std::to_string(in.positions.size() - 1) +
           "] = -1 is out of range";
  });
  addHostile(
      cases, "position_past_last_page", [](CaseEnv &env, PageTableInputs &in) {
        int64_t pages = in.kvIndptr[2] - in.kvIndptr[1];
        in.positions.back() = static_cast<int32_t>(pages * env.desc.blockSize);
        return "positions[" + std::to_string(in.positions.size() - 1) +
               "] = " + std::to_string(in.positions.back()) +
               " is out of range: request 1 has " + std::to_string(pages) +
               " pages";
      });
  addHostile(cases, "position_int32_max", [](CaseEnv &, PageTableInputs &in) {
    in.positions.back() = std::numeric_limits<int32_t>::max();
    return std::string("positions[") + std::to_string(in.positions.size() - 1) +
           "] = 2147483647";
  });
  addHostile(cases, "batch_minus_one", [](CaseEnv &, PageTableInputs &in) {
    in.batchIndices.back() = -1;
    return std::string("batch_indices[") +
           std::to_string(in.batchIndices.size() - 1) +
           "] = -1 is out of range: batch_size is 3";
  });
  addHostile(cases, "batch_is_batch_size", [](CaseEnv &, PageTableInputs &in) {
    in.batchIndices.back() = 3;
    return std::string("batch_indices[") +
           std::to_string(in.batchIndices.size() - 1) +
           "] = 3 is out of range: batch_size is 3";
  });
  addHostile(cases, "indptr_past_indices", [](CaseEnv &, PageTableInputs &in) {
    // The spoiled token's request is the last one, whose range now ends one
    // past kv_indices: none of its tokens may write.
    in.batchIndices.back() = 2;
    in.kvIndptr[3] = static_cast<int32_t>(in.kvIndices.size()) + 1;
    return std::string("kv_indptr[2] .. kv_indptr[3]");
  });
  addHostile(cases, "indptr_negative", [](CaseEnv &, PageTableInputs &in) {
    in.batchIndices.back() = 0;
    in.kvIndptr[0] = -1;
    return std::string("kv_indptr[0] .. kv_indptr[1] = -1 ..");
  });
  addHostile(cases, "negative_page", [](CaseEnv &, PageTableInputs &in) {
    // Request 1's first page: token 0 of request 1 (position bs + 3 is on
    // its second page) keeps writing.
    in.kvIndices[in.kvIndptr[1]] = -1;
    return "kv_indices[" + std::to_string(in.kvIndptr[1]) + "] = -1";
  });
  addHostile(cases, "page_past_num_blocks", [](CaseEnv &, PageTableInputs &in) {
    in.kvIndices[in.kvIndptr[1]] = static_cast<int32_t>(kPagedBlocks + 2);
    return "kv_indices[" + std::to_string(in.kvIndptr[1]) +
           "] = " + std::to_string(kPagedBlocks + 2) + " (token";
  });
  addPaged(cases, "checked_valid/auto", [](CaseEnv &env) {
    PSpec spec;
    spec.pages = env.decodePages(7);
    spec.checked = true;
    return spec;
  });
  addPaged(cases, "checked_duplicate/auto", [](CaseEnv &env) {
    PSpec spec;
    spec.pages = env.prefillPages();
    spec.pages.batchIndices.push_back(spec.pages.batchIndices.front());
    spec.pages.positions.push_back(spec.pages.positions.front());
    spec.checked = true;
    spec.expectRefusal = true;
    spec.message = "also used by token 0";
    return spec;
  });
  return cases;
}

void addSlots(std::vector<CaseDef> &cases, const std::string &name,
              std::function<Tables(CaseEnv &)> make) {
  cases.push_back({name, [make](CaseEnv &env, std::string &failure) {
                     return env.runSlotMapping(make(env), failure);
                   }});
}

std::vector<CaseDef> slotMappingCases() {
  std::vector<CaseDef> cases;
  addSlots(cases, "decode", [](CaseEnv &env) { return env.decodeTables(9); });
  addSlots(cases, "prefill", [](CaseEnv &env) { return env.prefillTables(); });
  addSlots(cases, "padding_overflow",
           [](CaseEnv &env) { return env.overflowTables(); });
  // A view into a wider table: rows further apart than max_blocks_per_req.
  addSlots(cases, "strided_table",
           [](CaseEnv &env) { return env.decodeTables(5, /*stride=*/7); });
  addSlots(cases, "empty", [](CaseEnv &env) {
    return env.makeTables({{3, 0}, {0, 0}}, 4, 4, 0);
  });
  return cases;
}

/// The cases of `desc`; `wide`: its bundle has a wide kernel to force
/// (Description::hasWideKernel, unless the plan is overridden).
std::vector<CaseDef> casesFor(const Description &desc, bool wide) {
  std::vector<CaseDef> cases;
  // A latent entry with inline scales: its own reference
  // (InlineScalesCases.cpp).
  // An NVFP4 cache: its own reference (Nvfp4Cases.cpp).
  if (desc.nvfp4) {
    for (Nvfp4Case &c : nvfp4Cases(desc))
      cases.push_back(
          {c.first, [run = c.second](CaseEnv &env, std::string &failure) {
             Nvfp4CaseEnv n{env.backend, env.desc, env.bundle, env.rng,
                            env.stats.bytesCompared};
             return run(n, failure);
           }});
    return cases;
  }
  if (desc.inlineGroup) {
    for (InlineScalesCase &c : inlineScalesCases(desc))
      cases.push_back(
          {c.first, [run = c.second](CaseEnv &env, std::string &failure) {
             InlineScalesCaseEnv inl{env.backend, env.desc, env.bundle, env.rng,
                                     env.stats.bytesCompared};
             return run(inl, failure);
           }});
    return cases;
  }
  if (desc.kOnly || desc.latent()) {
    // No V: the launches differ (LatentCases.cpp).
    for (LatentCase &c : latentCases(desc, wide))
      cases.push_back(
          {c.first, [run = c.second](CaseEnv &env, std::string &failure) {
             LatentCaseEnv latent{env.backend,
                                  env.desc,
                                  env.bundle,
                                  env.rng,
                                  env.stats.bytesCompared,
                                  env.maxShown};
             return run(latent, failure);
           }});
    return cases;
  }
  // K and V of different head sizes: their sources and caches have two
  // shapes (AsymmetricCases.cpp).
  if (desc.vHeadDim) {
    for (AsymmetricCase &c : asymmetricCases(desc, wide))
      cases.push_back(
          {c.first, [run = c.second](CaseEnv &env, std::string &failure) {
             AsymmetricCaseEnv asym{env.backend, env.desc, env.bundle, env.rng,
                                    env.stats.bytesCompared};
             return run(asym, failure);
           }});
    return cases;
  }
  switch (desc.kind) {
  case Kind::Append:
    cases = appendCases(wide);
    if (desc.quant)
      addQuantCases(cases, desc, wide);
    return cases;
  case Kind::FusedAppend:
    return fusedCases(wide);
  case Kind::PagedKvAppend:
    return pagedCases(wide);
  case Kind::SlotMapping:
    return slotMappingCases();
  case Kind::Gather:
    return gatherCases(desc);
  case Kind::MlaAppend:
  case Kind::MlaFusedAppend:
  case Kind::FusedGather: // K-only and latent caches only (LatentCases.cpp)
    break;
  }
  return {};
}

bool hasKernel(const kvrt_bundle *bundle, const std::string &name) {
  size_t count = kvrt_bundle_num_kernels(bundle);
  for (size_t i = 0; i < count; ++i)
    if (name == kvrt_bundle_kernel_name(bundle, i))
      return true;
  return false;
}

/// The kernels the cases of `desc` test: desc.kernelNames(), with the wide
/// kernel where `wide` says.
std::vector<std::string> testedKernels(const Description &desc, bool wide) {
  std::vector<std::string> names = desc.kernelNames();
  names.erase(std::remove(names.begin(), names.end(), desc.wideKernelName()),
              names.end());
  if (wide)
    names.push_back(desc.wideKernelName());
  return names;
}

/// Empty if `bundle` holds every kernel of `desc` that the cases test, and
/// no variant of it that they do not (a wide or scalar kernel the plan gives
/// a description that Description does not know of would run nowhere); else
/// what differs. Only the exact variant names count: a bundle may hold
/// other kernels that start with the name (a quantized append's
/// NAME_gather, an MLA append's NAME_slots, or another description's).
std::string kernelSetMismatch(const kvrt_bundle *bundle,
                              const Description &desc, bool wide) {
  std::vector<std::string> tested = testedKernels(desc, wide);
  std::string missing, untested;
  for (const std::string &kernel : tested)
    if (!hasKernel(bundle, kernel))
      missing += (missing.empty() ? "" : ", ") + kernel;
  for (const std::string &kernel :
       {desc.scalarKernelName(), desc.wideKernelName()})
    if (std::find(tested.begin(), tested.end(), kernel) == tested.end() &&
        hasKernel(bundle, kernel))
      untested += (untested.empty() ? "" : ", ") + kernel;
  std::string why;
  if (!missing.empty())
    why = "the bundle lacks kernel(s) " + missing;
  if (!untested.empty())
    why += (why.empty() ? "" : "; ") +
           std::string("the bundle has kernel(s) ") + untested +
           " that the suite does not test (Description::kernelNames no "
           "longer mirrors the kernel plan)";
  return why;
}

} // namespace

std::vector<std::string> caseNames(const Description &desc) {
  std::vector<std::string> names;
  for (const CaseDef &c : casesFor(desc, desc.hasWideKernel()))
    names.push_back(c.name);
  return names;
}

RunStats runDescription(Backend &backend, const Description &desc,
                        const RunOptions &options, std::ostream &log) {
  RunStats stats;
  stats.descriptions = 1;
  kvrt_bundle *bundle = backend.bundleFor(desc);
  // Under an overridden plan, the bundle says whether there is a wide
  // kernel; otherwise Description does, and the bundle must agree.
  bool wide = bundle && options.planOverridden
                  ? hasKernel(bundle, desc.wideKernelName())
                  : desc.hasWideKernel();
  std::vector<CaseDef> cases = casesFor(desc, wide);
  if (!options.caseFilter.empty())
    cases.erase(std::remove_if(cases.begin(), cases.end(),
                               [&](const CaseDef &c) {
                                 return c.name.find(options.caseFilter) ==
                                        std::string::npos;
                               }),
                cases.end());

  auto fail = [&](const std::string &caseName, const std::string &message) {
    ++stats.failedCases;
    stats.failures.push_back({desc.name, caseName, message});
    char seed[32];
    std::snprintf(seed, sizeof(seed), "0x%" PRIx64, options.seed);
    log << "FAIL " << desc.name << " " << caseName << " (seed " << seed
        << "): " << message << "\n";
  };

  std::string why = bundle ? kernelSetMismatch(bundle, desc, wide)
                           : "no bundle: " + backend.lastError();
  if (!why.empty()) {
    // Every case counts as failed: a description that does not compile has
    // passed none of them, and one whose kernels are not what the cases
    // test has not been tested.
    for (const CaseDef &c : cases) {
      ++stats.cases;
      fail(c.name, why);
    }
    return stats;
  }

  for (const CaseDef &c : cases) {
    ++stats.cases;
    uint64_t seed = hashString(
        hashString(options.seed ^ 0xcbf29ce484222325ull, desc.name), c.name);
    CaseEnv env(backend, desc, bundle, seed, stats, options.maxMismatchesShown);
    std::string failure;
    int64_t before = stats.bytesCompared;
    if (!c.run(env, failure)) {
      fail(c.name, failure.empty() ? "failed" : failure);
      continue;
    }
    if (options.verbose)
      log << "ok   " << desc.name << " " << c.name << " ("
          << stats.bytesCompared - before << " bytes)\n";
  }
  return stats;
}

RunStats runMatrix(Backend &backend, const std::vector<Description> &matrix,
                   const RunOptions &options, std::ostream &log) {
  RunStats total;
  for (const Description &desc : matrix)
    total.merge(runDescription(backend, desc, options, log));
  return total;
}

} // namespace kvgen::conformance
