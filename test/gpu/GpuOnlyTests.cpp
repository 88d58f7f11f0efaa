//===- GpuOnlyTests.cpp - What only a GPU can show ------------------------===//
//
// CUDA graphs: a launch captured once must replay correctly with new slot
// (or block-table) contents in the same buffers, which holds only if the
// grid depends on the shapes alone and kvrt allocates and synchronizes
// nothing. Large caches: a cache past 2^32 elements written near its end
// and around the 2^31 / 2^32 element offsets, which holds only if every
// offset is computed in 64 bits.
//
//===----------------------------------------------------------------------===//

#include "GpuSuite.h"

#include "conformance/Harness.h"
#include "conformance/Reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>

using namespace kvgen;
using namespace kvgen::conformance;

namespace {

Description need(const char *name) {
  std::optional<Description> desc = findDescription(gpu::suite().matrix, name);
  if (!desc) {
    ADD_FAILURE() << "the matrix has no description " << name;
    return Description();
  }
  return *desc;
}

/// A captured graph and its executable, released on every path out.
struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~Graph() {
    if (exec)
      cudaGraphExecDestroy(exec);
    if (graph)
      cudaGraphDestroy(graph);
  }

  /// Kernel nodes in the graph (and false if anything but kernels is in it).
  bool onlyKernels(size_t &kernels) const {
    size_t count = 0;
    if (cudaGraphGetNodes(graph, nullptr, &count) != cudaSuccess)
      return false;
    std::vector<cudaGraphNode_t> nodes(count);
    if (cudaGraphGetNodes(graph, nodes.data(), &count) != cudaSuccess)
      return false;
    kernels = 0;
    for (cudaGraphNode_t node : nodes) {
      cudaGraphNodeType type;
      if (cudaGraphNodeGetType(node, &type) != cudaSuccess ||
          type != cudaGraphNodeTypeKernel)
        return false;
      ++kernels;
    }
    return true;
  }
};

constexpr int64_t kGraphTokens = 16; // the padded batch the graph is sized for
constexpr int64_t kGraphBlocks = 64;

/// Slots for `real` tokens in distinct random blocks, then padding.
std::vector<int64_t> paddedSlots(int64_t real, int64_t blockSize,
                                 std::mt19937_64 &rng) {
  std::vector<int64_t> blocks(kGraphBlocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  std::vector<int64_t> slots(kGraphTokens, -1);
  for (int64_t t = 0; t < real; ++t)
    slots[t] = blocks[t] * blockSize + static_cast<int64_t>(rng() % blockSize);
  return slots;
}

TEST(CudaGraph, AppendReplaysWithNewSlots) {
  gpu::Suite &s = gpu::suite();
  Description desc = need("gpu_append_paged_nhd");
  ASSERT_FALSE(desc.name.empty());
  Backend &b = *s.backend;
  cudaStream_t stream = s.backend->cuda();
  std::mt19937_64 rng(s.options.seed);
  std::string error;
  SourceSet source;
  CacheSet caches;
  DeviceBuffer slotBuffer;
  std::vector<int64_t> slots(kGraphTokens, -1);
  ASSERT_TRUE(
      source.create(b, desc, kGraphTokens, SourceStorage::FusedQkv, rng, error))
      << error;
  ASSERT_TRUE(
      caches.create(b, desc, kGraphBlocks, CacheStorage::Compact, rng(), error))
      << error;
  ASSERT_TRUE(uploadVector(b, slots, slotBuffer, error)) << error;
  TensorArg slotArg(slotBuffer.get(), 0, b.device(), int64Type(),
                    {kGraphTokens}, {1});
  kvrt_append_args args = KVRT_ARGS_INIT(kvrt_append_args);
  args.kernel = desc.name.c_str();
  args.key = source.key();
  args.value = source.value();
  args.slot_mapping = slotArg.get();
  args.key_cache = caches.keyCache();
  args.value_cache = caches.valueCache();
  args.variant = KVRT_VARIANT_AUTO;

  // Serving stacks warm up before capture; kvrt loads its module then.
  ASSERT_EQ(kvrt_append(s.bundle, &args, stream), KVRT_SUCCESS)
      << kvrt_last_error();
  ASSERT_TRUE(b.synchronize()) << b.lastError();

  Graph g;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal),
            cudaSuccess);
  kvrt_status status = kvrt_append(s.bundle, &args, stream);
  cudaError_t ended = cudaStreamEndCapture(stream, &g.graph);
  ASSERT_EQ(status, KVRT_SUCCESS) << kvrt_last_error();
  ASSERT_EQ(ended, cudaSuccess) << cudaGetErrorString(ended);
  size_t kernels = 0;
  ASSERT_TRUE(g.onlyKernels(kernels)) << "the capture holds a non-kernel node";
  EXPECT_EQ(kernels, 1u) << "K and V must be written by one launch";
  ASSERT_EQ(cudaGraphInstantiate(&g.exec, g.graph, 0), cudaSuccess);

  // Each replay: a different number of real tokens, new K/V, new slots, all
  // copied into the buffers the graph captured.
  for (int64_t real : {1, 7, 16, 3}) {
    slots = paddedSlots(real, desc.blockSize, rng);
    if (real == 7)
      slots[2] = -1; // a hole in the middle, too
    ASSERT_TRUE(caches.reset(error)) << error;
    ASSERT_TRUE(source.refill(rng, error)) << error;
    ASSERT_TRUE(b.copyToDevice(slotBuffer.get(), slots.data(),
                               slots.size() * sizeof(int64_t)));
    ASSERT_EQ(cudaGraphLaunch(g.exec, stream), cudaSuccess);
    ASSERT_TRUE(b.synchronize()) << b.lastError();
    caches.expectAppend(source, slots);
    std::string report;
    EXPECT_TRUE(caches.check(report)) << real << " real tokens: " << report;
  }
}

/// Random tables for `lens.size()` requests in a [num_reqs, maxBlocks]
/// table, every entry a distinct block.
struct GraphTables {
  std::vector<int32_t> table, starts, lens;
};

GraphTables randomTables(const std::vector<int32_t> &newTokens,
                         int64_t maxBlocks, int64_t blockSize,
                         std::mt19937_64 &rng) {
  GraphTables t;
  std::vector<int32_t> blocks(kGraphBlocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  t.table.assign(blocks.begin(), blocks.begin() + newTokens.size() * maxBlocks);
  t.starts.push_back(0);
  for (int32_t n : newTokens) {
    int64_t room = maxBlocks * blockSize - n;
    t.lens.push_back(static_cast<int32_t>(rng() % (room + 1)));
    t.starts.push_back(t.starts.back() + n);
  }
  return t;
}

struct TableBuffers {
  DeviceBuffer table, starts, lens;
  TensorArg tableArg, startsArg, lensArg;

  bool create(Backend &b, const GraphTables &t, int64_t maxBlocks,
              std::string &error) {
    if (!uploadVector(b, t.table, table, error) ||
        !uploadVector(b, t.starts, starts, error) ||
        !uploadVector(b, t.lens, lens, error))
      return false;
    int64_t reqs = static_cast<int64_t>(t.lens.size());
    tableArg = TensorArg(table.get(), 0, b.device(), int32Type(),
                         {reqs, maxBlocks}, {maxBlocks, 1});
    startsArg =
        TensorArg(starts.get(), 0, b.device(), int32Type(), {reqs + 1}, {1});
    lensArg = TensorArg(lens.get(), 0, b.device(), int32Type(), {reqs}, {1});
    return true;
  }
  bool update(Backend &b, const GraphTables &t) {
    return b.copyToDevice(table.get(), t.table.data(), t.table.size() * 4) &&
           b.copyToDevice(starts.get(), t.starts.data(), t.starts.size() * 4) &&
           b.copyToDevice(lens.get(), t.lens.data(), t.lens.size() * 4);
  }
  SlotMappingInputs inputs(const GraphTables &t, int64_t maxBlocks) const {
    SlotMappingInputs in;
    in.blockTable = t.table.data();
    in.blockTableStride = maxBlocks;
    in.maxBlocksPerReq = maxBlocks;
    in.queryStartLoc = t.starts.data();
    in.contextLens = t.lens.data();
    in.numReqs = static_cast<int64_t>(t.lens.size());
    return in;
  }
};

// The replays' batches: 4 requests, at most 16 tokens, the rest padding.
const std::vector<std::vector<int32_t>> kReplayBatches = {
    {1, 1, 1, 1}, {5, 1, 9, 1}, {0, 3, 0, 2}, {4, 4, 4, 4}};
constexpr int64_t kMaxBlocks = 8;

/// Captures `launch` on the suite's stream, checks the graph holds
/// `expectKernels` kernels and nothing else, then replays it once per batch
/// of kReplayBatches with new tables, checking the caches each time.
void captureAndReplayWithTables(
    const Description &desc, int expectKernels,
    const std::function<kvrt_status(const TableBuffers &, SourceSet &,
                                    CacheSet &)> &launch) {
  gpu::Suite &s = gpu::suite();
  Backend &b = *s.backend;
  cudaStream_t stream = s.backend->cuda();
  std::mt19937_64 rng(s.options.seed + 1);
  std::string error;
  SourceSet source;
  CacheSet caches;
  TableBuffers tables;
  GraphTables t =
      randomTables(kReplayBatches[0], kMaxBlocks, desc.blockSize, rng);
  ASSERT_TRUE(
      source.create(b, desc, kGraphTokens, SourceStorage::Compact, rng, error))
      << error;
  ASSERT_TRUE(
      caches.create(b, desc, kGraphBlocks, CacheStorage::Compact, rng(), error))
      << error;
  ASSERT_TRUE(tables.create(b, t, kMaxBlocks, error)) << error;

  ASSERT_EQ(launch(tables, source, caches), KVRT_SUCCESS) << kvrt_last_error();
  ASSERT_TRUE(b.synchronize()) << b.lastError();

  Graph g;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal),
            cudaSuccess);
  kvrt_status status = launch(tables, source, caches);
  cudaError_t ended = cudaStreamEndCapture(stream, &g.graph);
  ASSERT_EQ(status, KVRT_SUCCESS) << kvrt_last_error();
  ASSERT_EQ(ended, cudaSuccess) << cudaGetErrorString(ended);
  size_t kernels = 0;
  ASSERT_TRUE(g.onlyKernels(kernels)) << "the capture holds a non-kernel node";
  EXPECT_EQ(kernels, static_cast<size_t>(expectKernels));
  ASSERT_EQ(cudaGraphInstantiate(&g.exec, g.graph, 0), cudaSuccess);

  for (const std::vector<int32_t> &batch : kReplayBatches) {
    t = randomTables(batch, kMaxBlocks, desc.blockSize, rng);
    ASSERT_TRUE(caches.reset(error)) << error;
    ASSERT_TRUE(source.refill(rng, error)) << error;
    ASSERT_TRUE(tables.update(b, t)) << b.lastError();
    ASSERT_EQ(cudaGraphLaunch(g.exec, stream), cudaSuccess);
    ASSERT_TRUE(b.synchronize()) << b.lastError();
    caches.expectAppend(source,
                        slotMappingReference(desc.blockSize,
                                             tables.inputs(t, kMaxBlocks),
                                             kGraphTokens));
    std::string report;
    EXPECT_TRUE(caches.check(report))
        << "batch of " << t.starts.back() << " tokens: " << report;
  }
}

TEST(CudaGraph, FusedAppendReplaysWithNewBlockTables) {
  Description desc = need("gpu_fused_append_paged_nhd");
  ASSERT_FALSE(desc.name.empty());
  gpu::Suite &s = gpu::suite();
  captureAndReplayWithTables(
      desc, 1,
      [&](const TableBuffers &tables, SourceSet &source, CacheSet &caches) {
        kvrt_fused_append_args args = KVRT_ARGS_INIT(kvrt_fused_append_args);
        args.kernel = desc.name.c_str();
        args.key = source.key();
        args.value = source.value();
        args.block_table = tables.tableArg.get();
        args.query_start_loc = tables.startsArg.get();
        args.context_lens = tables.lensArg.get();
        args.key_cache = caches.keyCache();
        args.value_cache = caches.valueCache();
        args.variant = KVRT_VARIANT_AUTO;
        return kvrt_fused_append(s.bundle, &args, s.backend->stream());
      });
}

TEST(CudaGraph, SlotMappingThenAppendReplays) {
  // The two-launch path a serving stack captures: build the slots on the
  // device, then append through them.
  Description append = need("gpu_append_paged_nhd");
  Description slots = need("slot_mapping_paged_nhd_bs16_h8_d128_bf16");
  ASSERT_FALSE(append.name.empty() || slots.name.empty());
  ASSERT_EQ(append.blockSize, slots.blockSize);
  gpu::Suite &s = gpu::suite();
  DeviceBuffer slotBuffer(*s.backend, kGraphTokens * sizeof(int64_t));
  ASSERT_TRUE(slotBuffer.valid());
  TensorArg slotArg(slotBuffer.get(), 0, s.backend->device(), int64Type(),
                    {kGraphTokens}, {1});
  captureAndReplayWithTables(
      append, 2,
      [&](const TableBuffers &tables, SourceSet &source, CacheSet &caches) {
        kvrt_slot_mapping_args build = KVRT_ARGS_INIT(kvrt_slot_mapping_args);
        build.kernel = slots.name.c_str();
        build.block_table = tables.tableArg.get();
        build.query_start_loc = tables.startsArg.get();
        build.context_lens = tables.lensArg.get();
        build.slot_mapping = slotArg.get();
        kvrt_status status =
            kvrt_build_slot_mapping(s.bundle, &build, s.backend->stream());
        if (status != KVRT_SUCCESS)
          return status;
        kvrt_append_args args = KVRT_ARGS_INIT(kvrt_append_args);
        args.kernel = append.name.c_str();
        args.key = source.key();
        args.value = source.value();
        args.slot_mapping = slotArg.get();
        args.key_cache = caches.keyCache();
        args.value_cache = caches.valueCache();
        args.variant = KVRT_VARIANT_AUTO;
        return kvrt_append(s.bundle, &args, s.backend->stream());
      });
}

//===----------------------------------------------------------------------===//
// Caches past 2^32 elements
//===----------------------------------------------------------------------===//

/// One element the kernel must have written: its byte offset in its cache
/// and its bits.
struct Written {
  uint64_t byte;
  uint32_t bits;
  bool operator<(const Written &other) const { return byte < other.byte; }
};

constexpr size_t kChunk = size_t(256) << 20;

/// Copies `bytes` of a device cache back in chunks and checks that exactly
/// the `written` elements changed (to their bits) and every other byte still
/// holds `poison`.
bool checkLargeCache(cudaStream_t stream, const char *which, const char *device,
                     size_t bytes, size_t elem, unsigned char poison,
                     std::vector<Written> written, size_t bytesPerBlock,
                     std::string &report) {
  std::sort(written.begin(), written.end());
  unsigned char *host = nullptr;
  if (cudaMallocHost(&host, kChunk) != cudaSuccess) {
    report = "cudaMallocHost failed";
    return false;
  }
  std::vector<unsigned char> clean(kChunk, poison);
  size_t next = 0, wrong = 0;
  char line[200];
  for (size_t start = 0; start < bytes; start += kChunk) {
    size_t n = std::min(kChunk, bytes - start);
    if (cudaMemcpyAsync(host, device + start, n, cudaMemcpyDeviceToHost,
                        stream) != cudaSuccess ||
        cudaStreamSynchronize(stream) != cudaSuccess) {
      report += "copying the cache back failed";
      cudaFreeHost(host);
      return false;
    }
    for (; next < written.size() && written[next].byte < start + n; ++next) {
      unsigned char *at = host + (written[next].byte - start);
      uint32_t got = 0;
      std::memcpy(&got, at, elem);
      if (got != written[next].bits && wrong++ < 5) {
        std::snprintf(line, sizeof(line),
                      "\n  %s cache byte %zu (block %zu): expected 0x%x, got "
                      "0x%x",
                      which, static_cast<size_t>(written[next].byte),
                      static_cast<size_t>(written[next].byte / bytesPerBlock),
                      written[next].bits, got);
        report += line;
      }
      std::memset(at, poison, elem); // checked; now it must look untouched
    }
    if (std::memcmp(host, clean.data(), n) != 0) {
      size_t i = 0;
      while (host[i] == poison)
        ++i;
      ++wrong;
      std::snprintf(line, sizeof(line),
                    "\n  %s cache byte %zu (block %zu) was written: 0x%02x",
                    which, start + i, (start + i) / bytesPerBlock, host[i]);
      report += line;
    }
  }
  cudaFreeHost(host);
  return wrong == 0;
}

/// A cache of more than 2^32 elements per side, written around element
/// offsets 2^31 and 2^32 and in its last block, by the vector variant and
/// then by the scalar variant (each with its own tokens).
void runLargeCache(const char *name) {
  gpu::Suite &s = gpu::suite();
  Description desc = need(name);
  ASSERT_FALSE(desc.name.empty());
  Backend &b = *s.backend;
  cudaStream_t stream = s.backend->cuda();
  const size_t elem = dtypeBytes(desc.cacheDtype);
  const int64_t bs = desc.blockSize;
  const int64_t blockElems =
      static_cast<int64_t>(desc.numKvHeads * desc.headDim * bs);
  const int64_t numBlocks = (int64_t(1) << 32) / blockElems + 16;
  const size_t cacheBytes = static_cast<size_t>(numBlocks * blockElems) * elem;
  ASSERT_GT(numBlocks * blockElems, int64_t(1) << 32);

  size_t freeBytes = 0, totalBytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&freeBytes, &totalBytes), cudaSuccess);
  if (freeBytes < 2 * cacheBytes + (size_t(1) << 30))
    GTEST_SKIP() << "needs " << 2 * cacheBytes << " bytes of device memory, "
                 << freeBytes << " free";

  const bool fused = desc.kind == Kind::FusedAppend;
  const bool stacked = desc.layout == Layout::DualStacked;
  ASSERT_FALSE(stacked) << "two separate caches expected";
  DeviceBuffer keyCache(b, cacheBytes), valueCache(b, cacheBytes);
  ASSERT_TRUE(keyCache.valid() && valueCache.valid()) << b.lastError();
  // Different poison in K and V: a K element written into V shows.
  const unsigned char keyPoison = 0xa5, valuePoison = 0x5a;
  ASSERT_TRUE(b.fill(keyCache.get(), keyPoison, cacheBytes)) << b.lastError();
  ASSERT_TRUE(b.fill(valueCache.get(), valuePoison, cacheBytes))
      << b.lastError();

  // Blocks around the 2^31 and 2^32 element offsets, and the last blocks.
  const int64_t b31 = (int64_t(1) << 31) / blockElems;
  const int64_t b32 = (int64_t(1) << 32) / blockElems;
  std::vector<int64_t> blocks = {0,       b31 - 1,       b31,
                                 b31 + 1, b32 - 1,       b32,
                                 b32 + 1, numBlocks - 2, numBlocks - 1};
  // Two tokens per block (its first and last position), then padding and
  // the first slot past the end, which must write nothing.
  std::vector<int64_t> slots;
  for (int64_t block : blocks) {
    slots.push_back(block * bs);
    slots.push_back(block * bs + bs - 1);
  }
  slots.push_back(-1);
  slots.push_back(numBlocks * bs);
  const int64_t tokens = static_cast<int64_t>(slots.size());

  std::mt19937_64 rng(s.options.seed + 2);
  std::string error;
  SourceSet source;
  ASSERT_TRUE(
      source.create(b, desc, tokens, SourceStorage::Compact, rng, error))
      << error;

  std::vector<int64_t> keyShape = cacheShape(desc, CacheSide::Key, numBlocks);
  std::vector<int64_t> valueShape =
      cacheShape(desc, CacheSide::Value, numBlocks);
  DLDataType type = toDLDataType(desc.cacheDtype);
  TensorArg keyArg(keyCache.get(), 0, b.device(), type, keyShape,
                   TensorView::compactStrides(keyShape));
  TensorArg valueArg(valueCache.get(), 0, b.device(), type, valueShape,
                     TensorView::compactStrides(valueShape));

  // Even tokens go through the vector variant (AUTO), odd ones through the
  // scalar variant; each launch sees the other's tokens as padding.
  std::vector<int64_t> expectedSlots(tokens, -1);
  for (kvrt_variant variant : {KVRT_VARIANT_AUTO, KVRT_VARIANT_SCALAR}) {
    int parity = variant == KVRT_VARIANT_AUTO ? 0 : 1;
    std::vector<int64_t> launchSlots(tokens, -1);
    for (int64_t t = 0; t < tokens; ++t)
      if (t % 2 == parity || slots[t] >= numBlocks * bs)
        launchSlots[t] = slots[t];
    kvrt_status status;
    DeviceBuffer slotBuffer;
    // Fused: one request per token, one block-table column, the token at
    // position slot % bs of block slot / bs.
    GraphTables t;
    TableBuffers tables;
    if (fused) {
      t.starts.push_back(0);
      for (int64_t slot : launchSlots) {
        t.table.push_back(slot < 0 ? -1 : static_cast<int32_t>(slot / bs));
        t.lens.push_back(slot < 0 ? 0 : static_cast<int32_t>(slot % bs));
        t.starts.push_back(t.starts.back() + 1);
      }
      ASSERT_TRUE(tables.create(b, t, 1, error)) << error;
      kvrt_fused_append_args args = KVRT_ARGS_INIT(kvrt_fused_append_args);
      args.kernel = desc.name.c_str();
      args.key = source.key();
      args.value = source.value();
      args.block_table = tables.tableArg.get();
      args.query_start_loc = tables.startsArg.get();
      args.context_lens = tables.lensArg.get();
      args.key_cache = keyArg.get();
      args.value_cache = valueArg.get();
      args.variant = variant;
      status = kvrt_fused_append(s.bundle, &args, stream);
      std::vector<int64_t> built =
          slotMappingReference(bs, tables.inputs(t, 1), tokens);
      ASSERT_EQ(built, launchSlots) << "the test's tables are wrong";
    } else {
      ASSERT_TRUE(uploadVector(b, launchSlots, slotBuffer, error)) << error;
      TensorArg slotArg(slotBuffer.get(), 0, b.device(), int64Type(), {tokens},
                        {1});
      kvrt_append_args args = KVRT_ARGS_INIT(kvrt_append_args);
      args.kernel = desc.name.c_str();
      args.key = source.key();
      args.value = source.value();
      args.slot_mapping = slotArg.get();
      args.key_cache = keyArg.get();
      args.value_cache = valueArg.get();
      args.variant = variant;
      status = kvrt_append(s.bundle, &args, stream);
    }
    ASSERT_EQ(status, KVRT_SUCCESS) << kvrt_last_error();
    ASSERT_TRUE(b.synchronize()) << b.lastError();
    for (int64_t i = 0; i < tokens; ++i)
      if (launchSlots[i] >= 0)
        expectedSlots[i] = launchSlots[i];
  }

  // The expected elements, located with the reference's own index math.
  TensorView keyView = TensorView::compact(nullptr, desc.cacheDtype, keyShape);
  TensorView valueView =
      TensorView::compact(nullptr, desc.cacheDtype, valueShape);
  TensorView keySource = source.hostKey(), valueSource = source.hostValue();
  std::vector<Written> keyWritten, valueWritten;
  for (int64_t t = 0; t < tokens; ++t) {
    int64_t slot = expectedSlots[t];
    if (slot < 0 || slot / bs >= numBlocks)
      continue;
    for (int64_t h = 0; h < desc.numKvHeads; ++h) {
      for (int64_t d = 0; d < desc.headDim; ++d) {
        Index src;
        src.rank = 3;
        src.values = {t, h, d};
        Index k = cacheIndex(desc, CacheSide::Key, slot / bs, h, slot % bs, d);
        Index v =
            cacheIndex(desc, CacheSide::Value, slot / bs, h, slot % bs, d);
        keyWritten.push_back(
            {static_cast<uint64_t>(keyView.elementOffset(k)) * elem,
             convertElement(
                 loadBits(keySource.elementPointer(src), desc.sourceDtype),
                 desc.sourceDtype, desc.cacheDtype)});
        valueWritten.push_back(
            {static_cast<uint64_t>(valueView.elementOffset(v)) * elem,
             convertElement(
                 loadBits(valueSource.elementPointer(src), desc.sourceDtype),
                 desc.sourceDtype, desc.cacheDtype)});
      }
    }
  }
  ASSERT_FALSE(keyWritten.empty());
  EXPECT_GT(std::max_element(keyWritten.begin(), keyWritten.end())->byte / elem,
            uint64_t(1) << 32)
      << "the test must write past element 2^32";
  std::string report;
  size_t blockBytes = static_cast<size_t>(blockElems) * elem;
  EXPECT_TRUE(checkLargeCache(stream, "key", keyCache.get(), cacheBytes, elem,
                              keyPoison, keyWritten, blockBytes, report))
      << report;
  report.clear();
  EXPECT_TRUE(checkLargeCache(stream, "value", valueCache.get(), cacheBytes,
                              elem, valuePoison, valueWritten, blockBytes,
                              report))
      << report;
}

TEST(LargeCache, PagedNhdPast2To32Elements) {
  runLargeCache("gpu_append_paged_nhd");
}
TEST(LargeCache, VllmVectorizedPast2To32Elements) {
  runLargeCache("gpu_append_vllm_vectorized");
}
TEST(LargeCache, ContiguousPast2To32Elements) {
  runLargeCache("gpu_append_contiguous");
}
TEST(LargeCache, FusedAppendPast2To32Elements) {
  runLargeCache("gpu_fused_append_paged_nhd");
}

} // namespace
