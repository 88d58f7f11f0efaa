//===- LatentCases.cpp - K-only and MLA latent appends, byte by byte ------===//
//
// The reference here is a plain loop: for each token with a valid slot,
// each element of its row (K-only) or of kv_c then k_pe (MLA) is cast or
// quantized and stored at the slot's place in the cache; everything else
// keeps its poison. Slots < 0 and blocks past the cache write nothing.
//
// A gather of such a cache is the same loop the other way: each row i of
// key_out with a slot the append would write becomes that slot's entry,
// dequantized (x = float(q) * s) or converted to the output dtype; the rows
// of padding (slots < 0) and of slots past the cache keep their poison, as
// for a gather of K and V (Cases.cpp). The cache, the slots and the scales
// stay as they were.
//
//===----------------------------------------------------------------------===//

#include "conformance/LatentCases.h"

#include "conformance/Harness.h"
#include "conformance/Quant.h"
#include "conformance/QuantHarness.h"
#include "conformance/Reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>

namespace kvgen::conformance {

namespace {

constexpr int64_t kPagedBlocks = 24;
constexpr int64_t kContiguousBatch = 8;

/// How the source rows are laid out.
enum class Rows {
  /// Compact tensors (MLA: kv_c and k_pe in two buffers).
  Compact,
  /// Views into one projection output whose rows are padded by 8 elements
  /// (MLA: kv_c and k_pe side by side, as vLLM slices them).
  Shared,
  /// The same padded by one element: an odd token stride, scalar only.
  SharedOdd,
};

/// The refusals a case provokes instead of a launch.
enum class Break { None, GiveValue, GiveValueCache, NoKPe, WideKvC };

struct Spec {
  Rows rows = Rows::Compact;
  kvrt_variant variant = KVRT_VARIANT_AUTO;
  bool vectorRefused = false;
  Break breaks = Break::None;
  /// MLA: slot_mapping is built on the device from the block table by the
  /// description's slot_mapping kernel, then the append reads it.
  bool slotsFromKernel = false;
  /// Fused: a negative block id and one past the cache in the table, at the
  /// first new token of requests 1 and 2 (their tokens write nothing).
  bool badBlocks = false;
  /// Launch in kvrt's checked mode, which must refuse the bad block id.
  bool checked = false;
  /// The refusal must name this.
  std::string message;
};

/// What a gather case launches with, besides its slots.
struct GatherSpec {
  kvrt_variant variant = KVRT_VARIANT_AUTO;
  /// key_out's rows are this many elements longer than a token's heads:
  /// a view into wider rows.
  int64_t rowPad = 0;
  /// Pass a value_out, which a cache without V refuses by name.
  bool giveValueOut = false;
  std::string message;
};

/// A fused gather's requests: its block table, query_start_loc and
/// context_lens, and the slot each output row reads (what the kernel
/// computes), -1 where the row must stay untouched.
struct GatherTables {
  std::vector<int32_t> blockTable, queryStartLoc, contextLens;
  int64_t numReqs = 0, maxBlocksPerReq = 0;
  std::vector<int64_t> slots;
};

class Runner : public CaseRunner {
public:
  Runner(LatentCaseEnv &env)
      : CaseRunner(env, kPagedBlocks, kContiguousBatch) {}

  /// One token per request; a prompt over several blocks; padding.
  std::vector<int64_t> decodeSlots() {
    std::vector<int64_t> blocks = shuffledBlocks(), slots;
    for (int i = 0; i < 5; ++i)
      slots.push_back(blocks[i] * desc.blockSize +
                      uniform(0, desc.blockSize - 1));
    return slots;
  }
  std::vector<int64_t> prefillSlots() {
    std::vector<int64_t> blocks = shuffledBlocks(), slots;
    int64_t bs = desc.blockSize;
    if (desc.layout == Layout::Contiguous) {
      int64_t length = bs / 2 + 3, start = uniform(0, bs - length);
      for (int64_t i = 0; i < length; ++i)
        slots.push_back(blocks[0] * bs + start + i);
      return slots;
    }
    int64_t start = uniform(0, bs - 1), length = 2 * bs + bs / 2 + 3;
    for (int64_t i = 0; i < length; ++i)
      slots.push_back(blocks[(start + i) / bs] * bs + (start + i) % bs);
    return slots;
  }
  std::vector<int64_t> mixedSlots() {
    std::vector<int64_t> slots = decodeSlots();
    int64_t past = numBlocks() * desc.blockSize;
    // Padding, a block just past the cache and one far past it.
    slots.insert(slots.begin() + 2,
                 {-1, past + desc.blockSize / 2, -7, past * 3 + 1});
    return slots;
  }

  bool run(const std::vector<int64_t> &slots, const Spec &spec,
           std::string &failure);
  bool runFused(const Spec &spec, std::string &failure);

  /// Rows read back: real slots, padding (-1, -5), a block just past the
  /// cache, one far past it, and a slot read twice.
  std::vector<int64_t> scatteredSlots() {
    std::vector<int64_t> real = decodeSlots();
    int64_t end = numBlocks() * desc.blockSize;
    return {real[0], -1,      real[1], real[2], end,
            real[3], real[0], -5,      real[4], int64_t(1) << 40};
  }
  /// Requests of a fused gather: a prompt from position 0, one from the
  /// middle of a block across blocks, an empty one, one whose last
  /// positions run past its block table row; a negative block id and one
  /// past the cache in the rows; two padding tokens past the last request.
  GatherTables gatherTables() {
    GatherTables g;
    int64_t bs = desc.blockSize;
    g.numReqs = 4;
    g.maxBlocksPerReq = 3;
    std::vector<int64_t> blocks = shuffledBlocks();
    for (int64_t r = 0; r < g.numReqs; ++r)
      for (int64_t j = 0; j < g.maxBlocksPerReq; ++j)
        g.blockTable.push_back(
            static_cast<int32_t>(blocks[r * g.maxBlocksPerReq + j]));
    g.blockTable[1 * 3 + 2] = -1;
    g.blockTable[0 * 3 + 1] = static_cast<int32_t>(numBlocks());
    const int64_t starts[] = {0, bs / 2 + 1, 1, 3 * bs - 2};
    const int64_t lens[] = {bs + 3, 2 * bs, 0, 5};
    g.queryStartLoc.push_back(0);
    for (int64_t r = 0; r < g.numReqs; ++r) {
      g.contextLens.push_back(static_cast<int32_t>(starts[r]));
      g.queryStartLoc.push_back(
          static_cast<int32_t>(g.queryStartLoc.back() + lens[r]));
    }
    for (int64_t r = 0; r < g.numReqs; ++r)
      for (int64_t i = 0; i < lens[r]; ++i) {
        int64_t pos = starts[r] + i, column = pos / bs;
        int64_t block = column < g.maxBlocksPerReq
                            ? g.blockTable[r * g.maxBlocksPerReq + column]
                            : -1;
        g.slots.push_back(block < 0 ? -1 : block * bs + pos % bs);
      }
    g.slots.push_back(-1);
    g.slots.push_back(-1);
    return g;
  }
  bool runGather(const std::vector<int64_t> &slots, const GatherSpec &spec,
                 std::string &failure, const GatherTables *tables = nullptr);

private:
  bool launch(const std::vector<int64_t> &slots, const Spec &spec,
              const TensorArg *fusedTables, std::string &failure);
  bool buildSlots(const std::vector<int64_t> &want, const TensorArg *tables,
                  DeviceBuffer &slotBuf, TensorArg &slotArg,
                  std::string &failure);
};

bool Runner::run(const std::vector<int64_t> &slots, const Spec &spec,
                 std::string &failure) {
  return launch(slots, spec, nullptr, failure);
}

bool Runner::runFused(const Spec &spec, std::string &failure) {
  // Three requests with contexts of their own, then two padding tokens.
  int64_t bs = desc.blockSize;
  std::vector<int64_t> blocks = shuffledBlocks();
  size_t next = 0;
  std::vector<int32_t> qsl = {0}, lens;
  std::vector<std::vector<int32_t>> rows;
  int64_t widest = 0;
  for (int r = 0; r < 3; ++r) {
    int32_t ctx = static_cast<int32_t>(uniform(0, 2 * bs));
    int32_t fresh = static_cast<int32_t>(uniform(1, bs + 3));
    lens.push_back(ctx);
    qsl.push_back(qsl.back() + fresh);
    std::vector<int32_t> row;
    for (int64_t b = 0; b < (ctx + fresh + bs - 1) / bs; ++b)
      row.push_back(static_cast<int32_t>(blocks[next++]));
    widest = std::max<int64_t>(widest, static_cast<int64_t>(row.size()));
    rows.push_back(row);
  }
  int64_t stride = widest + 1;
  std::vector<int32_t> table(3 * stride, -1);
  for (int r = 0; r < 3; ++r)
    std::copy(rows[r].begin(), rows[r].end(), table.begin() + r * stride);
  if (spec.badBlocks) {
    table[1 * stride + lens[1] / bs] = -1;
    table[2 * stride + lens[2] / bs] = static_cast<int32_t>(numBlocks() + 3);
  }
  Spec launchSpec = spec;
  if (spec.badBlocks && spec.checked)
    launchSpec.message = "block_table[2][" + std::to_string(lens[2] / bs) +
                         "] = " + std::to_string(numBlocks() + 3) + " (token " +
                         std::to_string(qsl[2]) +
                         ") is past the cache's num_blocks";
  SlotMappingInputs in;
  in.blockTable = table.data();
  in.blockTableStride = stride;
  in.maxBlocksPerReq = widest;
  in.queryStartLoc = qsl.data();
  in.contextLens = lens.data();
  in.numReqs = 3;
  std::vector<int64_t> slots = slotMappingReference(bs, in, qsl.back() + 2);

  Backend &backend = env.backend;
  DeviceBuffer tableBuf(backend, table.size() * 4),
      qslBuf(backend, qsl.size() * 4), lensBuf(backend, lens.size() * 4);
  if (!tableBuf.valid() || !qslBuf.valid() || !lensBuf.valid() ||
      !backend.copyToDevice(tableBuf.get(), table.data(), table.size() * 4) ||
      !backend.copyToDevice(qslBuf.get(), qsl.data(), qsl.size() * 4) ||
      !backend.copyToDevice(lensBuf.get(), lens.data(), lens.size() * 4)) {
    failure = "device tables: " + backend.lastError();
    return false;
  }
  DLDataType i32 = {kDLInt, 32, 1};
  TensorArg tables[3] = {
      TensorArg(tableBuf.get(), 0, backend.device(), i32, {3, widest},
                {stride, 1}),
      TensorArg(qslBuf.get(), 0, backend.device(), i32, {4}, {1}),
      TensorArg(lensBuf.get(), 0, backend.device(), i32, {3}, {1})};
  return launch(slots, launchSpec, tables, failure);
}

/// Poisons slot_mapping, builds it with the slot_mapping kernel of the same
/// cache and checks it against `want` (the host's slot rule) before the
/// append reads it.
bool Runner::buildSlots(const std::vector<int64_t> &want,
                        const TensorArg *tables, DeviceBuffer &slotBuf,
                        TensorArg &slotArg, std::string &failure) {
  Backend &backend = env.backend;
  std::vector<int64_t> poison(want.size()), got(want.size());
  fillPoison(poison.data(), poison.size() * 8, env.rng());
  if (!backend.copyToDevice(slotBuf.get(), poison.data(), poison.size() * 8)) {
    failure = "poisoning slot_mapping: " + backend.lastError();
    return false;
  }
  std::string kernel = desc.slotMappingKernelName();
  kvrt_slot_mapping_args args = KVRT_ARGS_INIT(kvrt_slot_mapping_args);
  args.kernel = kernel.c_str();
  args.block_table = tables[0].get();
  args.query_start_loc = tables[1].get();
  args.context_lens = tables[2].get();
  args.slot_mapping = slotArg.get();
  kvrt_status status =
      kvrt_build_slot_mapping(env.bundle, &args, backend.stream());
  if (status != KVRT_SUCCESS) {
    failure = std::string("kvrt_build_slot_mapping: ") +
              kvrt_status_name(status) + ": " + kvrt_last_error();
    return false;
  }
  if (!backend.synchronize() ||
      !backend.copyToHost(got.data(), slotBuf.get(), got.size() * 8)) {
    failure = "reading slot_mapping back: " + backend.lastError();
    return false;
  }
  env.bytesCompared += static_cast<int64_t>(got.size() * 8);
  for (size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i]) {
      failure = "slot_mapping[" + std::to_string(i) + "] is " +
                std::to_string(got[i]) + ", the slot rule gives " +
                std::to_string(want[i]);
      return false;
    }
  return true;
}

bool Runner::launch(const std::vector<int64_t> &slots, const Spec &spec,
                    const TensorArg *fusedTables, std::string &failure) {
  Backend &backend = env.backend;
  DLDevice device = backend.device();
  int64_t tokens = static_cast<int64_t>(slots.size());
  int64_t heads = desc.numKvHeads, dim = desc.headDim;
  size_t srcBytes = dtypeBytes(desc.sourceDtype);
  size_t cacheBytes = dtypeBytes(desc.cacheDtype);

  // The source: one buffer, rows of `rowElems`; a part (MLA) or the key
  // (K-only) starts at `partOffset` elements into each row.
  int64_t pad = spec.rows == Rows::Shared      ? 8
                : spec.rows == Rows::SharedOdd ? 1
                                               : 0;
  bool twoBuffers = desc.latent() && spec.rows == Rows::Compact;
  int64_t rowElems = heads * dim + pad;
  std::vector<unsigned char> source(
      static_cast<size_t>(tokens * rowElems) * srcBytes + 16);
  // Static scales, and values placed around them when quantized.
  std::vector<float> scales;
  if (desc.quant) {
    std::vector<int64_t> shape = staticScaleShape(desc, tokens, numBlocks());
    int64_t count = 1;
    for (int64_t extent : shape)
      count *= extent;
    for (int64_t i = 0; i < count; ++i)
      scales.push_back(std::ldexp(1.0f + uniform(0, 7) / 8.0f,
                                  static_cast<int>(uniform(-4, 2))));
  }
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t d = 0; d < dim; ++d) {
        unsigned char *p =
            source.data() + (t * rowElems + h * dim + d) * srcBytes;
        if (!desc.quant) {
          fillSourceValues(p, 1, desc.sourceDtype, desc.cacheDtype, env.rng);
          continue;
        }
        int64_t slot = slots[t];
        int64_t block = slot < 0 || slot / desc.blockSize >= numBlocks()
                            ? 0
                            : slot / desc.blockSize;
        float s = scales[staticScaleIndex(desc, t, h, block)];
        storeBits(p, desc.sourceDtype,
                  floatToElement(
                      quantSourceValue(desc.quant->kind, s, /*specials=*/true,
                                       env.rng,
                                       /*outliers=*/!desc.quant->dynamic()),
                      desc.sourceDtype));
      }
  auto element = [&](int64_t t, int64_t h, int64_t d) {
    return loadBits(source.data() + (t * rowElems + h * dim + d) * srcBytes,
                    desc.sourceDtype);
  };

  // The cache, poisoned; the expected image starts as the same poison.
  std::vector<int64_t> cacheDims =
      desc.latent() ? std::vector<int64_t>{numBlocks(), desc.blockSize, dim}
                    : cacheShape(desc, CacheSide::Key, numBlocks());
  TensorView expectedView =
      TensorView::compact(nullptr, desc.cacheDtype, cacheDims);
  int64_t cacheElems = 1;
  for (int64_t extent : cacheDims)
    cacheElems *= extent;
  size_t cacheSize = static_cast<size_t>(cacheElems) * cacheBytes;
  std::vector<unsigned char> expected(cacheSize), got(cacheSize);
  fillPoison(expected.data(), cacheSize, env.rng());
  expectedView.data = expected.data();

  DeviceBuffer srcBuf(backend, source.size()), cacheBuf(backend, cacheSize),
      slotBuf(backend, slots.size() * 8 + 8),
      scaleBuf(backend, scales.size() * 4 + 4),
      otherBuf(backend, source.size());
  if (!srcBuf.valid() || !cacheBuf.valid() || !slotBuf.valid() ||
      !scaleBuf.valid() || !otherBuf.valid() ||
      !backend.copyToDevice(srcBuf.get(), source.data(), source.size()) ||
      !backend.copyToDevice(cacheBuf.get(), expected.data(), cacheSize) ||
      !backend.copyToDevice(slotBuf.get(), slots.data(), slots.size() * 8) ||
      !backend.copyToDevice(scaleBuf.get(), scales.data(), scales.size() * 4)) {
    failure = "device buffers: " + backend.lastError();
    return false;
  }
  // The source's bytes as they stand on the device: the kernel only reads
  // them (Params.def's KVGEN_ABI_KERNEL_WRITES), so they must stay so.
  std::vector<unsigned char> uploaded = source;
  DLDataType srcType = toDLDataType(desc.sourceDtype);
  TensorArg slotArg(slotBuf.get(), 0, device, {kDLInt, 64, 1}, {tokens}, {1});
  TensorArg cacheArg(cacheBuf.get(), 0, device, toDLDataType(desc.cacheDtype),
                     cacheDims, TensorView::compactStrides(cacheDims));
  TensorArg scaleArg;
  if (desc.quant)
    scaleArg = TensorArg(scaleBuf.get(), 0, device, {kDLFloat, 32, 1},
                         staticScaleShape(desc, tokens, numBlocks()),
                         TensorView::compactStrides(
                             staticScaleShape(desc, tokens, numBlocks())));
  // A stand-in for tensors the description does not take.
  TensorArg other(otherBuf.get(), 0, device, srcType, {tokens, heads, dim},
                  {heads * dim, dim, 1});

  if (spec.slotsFromKernel &&
      !buildSlots(slots, fusedTables, slotBuf, slotArg, failure))
    return false;

  kvrt_status status;
  if (desc.latent()) {
    int64_t rank = desc.kvLoraRank, rope = desc.ropeDim;
    // Two buffers: kv_c compact at the start, k_pe compact after it.
    int64_t cStride = twoBuffers ? rank : rowElems;
    int64_t pStride = twoBuffers ? rope : rowElems;
    uint64_t pOffset = twoBuffers ? 0 : rank * srcBytes;
    if (twoBuffers) {
      // Re-lay the same values as two compact tensors.
      std::vector<unsigned char> split(source.size());
      for (int64_t t = 0; t < tokens; ++t) {
        std::memcpy(split.data() + t * rank * srcBytes,
                    source.data() + t * rowElems * srcBytes, rank * srcBytes);
        std::memcpy(split.data() + (tokens * rank + t * rope) * srcBytes,
                    source.data() + (t * rowElems + rank) * srcBytes,
                    rope * srcBytes);
      }
      if (!backend.copyToDevice(srcBuf.get(), split.data(), split.size())) {
        failure = "copy: " + backend.lastError();
        return false;
      }
      uploaded = split;
      pOffset = tokens * rank * srcBytes;
    }
    int64_t wide = spec.breaks == Break::WideKvC ? rank - 1 : rank;
    TensorArg kvC(srcBuf.get(), 0, device, srcType, {tokens, wide},
                  {cStride, 1});
    TensorArg kPe(srcBuf.get(), pOffset, device, srcType, {tokens, rope},
                  {pStride, 1});
    const DLTensor *kPeArg = spec.breaks == Break::NoKPe ? nullptr : kPe.get();
    if (desc.kind == Kind::MlaFusedAppend) {
      kvrt_mla_fused_append_args args =
          KVRT_ARGS_INIT(kvrt_mla_fused_append_args);
      args.kernel = desc.name.c_str();
      args.kv_c = kvC.get();
      args.k_pe = kPeArg;
      args.block_table = fusedTables[0].get();
      args.query_start_loc = fusedTables[1].get();
      args.context_lens = fusedTables[2].get();
      args.key_cache = cacheArg.get();
      args.variant = spec.variant;
      args.key_scale = scaleArg.get();
      if (spec.checked &&
          kvrt_bundle_set_checked(env.bundle, 1) != KVRT_SUCCESS) {
        failure = std::string("kvrt_bundle_set_checked: ") + kvrt_last_error();
        return false;
      }
      status = kvrt_mla_fused_append(env.bundle, &args, backend.stream());
      if (spec.checked)
        kvrt_bundle_set_checked(env.bundle, 0);
    } else {
      kvrt_mla_append_args args = KVRT_ARGS_INIT(kvrt_mla_append_args);
      args.kernel = desc.name.c_str();
      args.kv_c = kvC.get();
      args.k_pe = kPeArg;
      args.slot_mapping = slotArg.get();
      args.key_cache = cacheArg.get();
      args.variant = spec.variant;
      args.key_scale = scaleArg.get();
      status = kvrt_mla_append(env.bundle, &args, backend.stream());
    }
  } else {
    TensorArg key(srcBuf.get(), 0, device, srcType, {tokens, heads, dim},
                  {rowElems, dim, 1});
    const DLTensor *value =
        spec.breaks == Break::GiveValue ? other.get() : nullptr;
    const DLTensor *valueCache =
        spec.breaks == Break::GiveValueCache ? cacheArg.get() : nullptr;
    if (fusedTables) {
      kvrt_fused_append_args args = KVRT_ARGS_INIT(kvrt_fused_append_args);
      args.kernel = desc.name.c_str();
      args.key = key.get();
      args.value = value;
      args.block_table = fusedTables[0].get();
      args.query_start_loc = fusedTables[1].get();
      args.context_lens = fusedTables[2].get();
      args.key_cache = cacheArg.get();
      args.value_cache = valueCache;
      args.variant = spec.variant;
      args.key_scale = scaleArg.get();
      status = kvrt_fused_append(env.bundle, &args, backend.stream());
    } else {
      kvrt_append_args args = KVRT_ARGS_INIT(kvrt_append_args);
      args.kernel = desc.name.c_str();
      args.key = key.get();
      args.value = value;
      args.slot_mapping = slotArg.get();
      args.key_cache = cacheArg.get();
      args.value_cache = valueCache;
      args.variant = spec.variant;
      args.key_scale = scaleArg.get();
      status = kvrt_append(env.bundle, &args, backend.stream());
    }
  }

  bool refused = spec.vectorRefused || spec.breaks != Break::None ||
                 (spec.badBlocks && spec.checked);
  if (!answered(status, refused, spec.message, failure))
    return false;
  if (!refused) {
    // The reference: a plain loop over tokens and elements.
    for (int64_t t = 0; t < tokens; ++t) {
      int64_t slot = slots[t];
      if (slot < 0 || slot / desc.blockSize >= numBlocks())
        continue;
      int64_t block = slot / desc.blockSize, pos = slot % desc.blockSize;
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < dim; ++d) {
          uint32_t bits = element(t, h, d);
          uint32_t stored =
              desc.quant
                  ? quantize(desc.quant->kind,
                             elementToFloat(bits, desc.sourceDtype),
                             scales[staticScaleIndex(desc, t, h, block)],
                             desc.quant->reciprocal)
                  : convertElement(bits, desc.sourceDtype, desc.cacheDtype);
          Index index;
          if (desc.latent()) {
            index.values = {block, pos, d, 0, 0};
            index.rank = 3;
          } else {
            index = cacheIndex(desc, CacheSide::Key, block, h, pos, d);
          }
          storeBits(expectedView.elementPointer(index), desc.cacheDtype,
                    stored);
        }
    }
  }
  if (!backend.synchronize() ||
      !backend.copyToHost(got.data(), cacheBuf.get(), cacheSize)) {
    failure = "reading the cache back: " + backend.lastError();
    return false;
  }
  env.bytesCompared += static_cast<int64_t>(cacheSize);
  if (got == expected) {
    env.bytesCompared += static_cast<int64_t>(uploaded.size());
    return checkUnchanged(backend, uploaded, srcBuf.get(), "the source",
                          failure);
  }
  std::ostringstream os;
  int shown = 0;
  int64_t differing = 0;
  for (size_t i = 0; i < cacheSize; ++i) {
    if (got[i] == expected[i])
      continue;
    ++differing;
    if (shown++ < env.maxShown)
      os << " [element " << i / cacheBytes << " byte " << i % cacheBytes
         << ": got 0x" << std::hex << int(got[i]) << " want 0x"
         << int(expected[i]) << std::dec << "]";
  }
  failure = std::to_string(differing) + " cache bytes differ" +
            (refused ? " after a refused launch" : "") + ":" + os.str();
  return false;
}

bool Runner::runGather(const std::vector<int64_t> &slots,
                       const GatherSpec &spec, std::string &failure,
                       const GatherTables *tables) {
  Backend &backend = env.backend;
  DLDevice device = backend.device();
  int64_t rows = static_cast<int64_t>(slots.size());
  int64_t heads = desc.numKvHeads, dim = desc.headDim;
  size_t cacheBytes = dtypeBytes(desc.cacheDtype);
  size_t outBytes = dtypeBytes(desc.outputDtype);

  // The cache holds arbitrary bytes (its poison), as a K/V gather reads.
  std::vector<int64_t> cacheDims =
      desc.latent() ? std::vector<int64_t>{numBlocks(), desc.blockSize, dim}
                    : cacheShape(desc, CacheSide::Key, numBlocks());
  TensorView cacheView =
      TensorView::compact(nullptr, desc.cacheDtype, cacheDims);
  int64_t cacheElems = 1;
  for (int64_t extent : cacheDims)
    cacheElems *= extent;
  std::vector<unsigned char> cache(static_cast<size_t>(cacheElems) *
                                   cacheBytes);
  fillPoison(cache.data(), cache.size(), env.rng());
  cacheView.data = cache.data();

  // Static scales (a cache without V has no dynamic form).
  std::vector<float> scales;
  std::vector<int64_t> scaleShape;
  if (desc.quant) {
    scaleShape = staticScaleShape(desc, rows, numBlocks());
    int64_t count = 1;
    for (int64_t extent : scaleShape)
      count *= extent;
    for (int64_t i = 0; i < count; ++i)
      scales.push_back(std::ldexp(1.0f + uniform(0, 7) / 8.0f,
                                  static_cast<int>(uniform(-4, 2))));
  }

  // key_out: poisoned rows of `rowElems`; the expected image starts as the
  // same poison.
  int64_t rowElems = heads * dim + spec.rowPad;
  size_t outSize = static_cast<size_t>(rows * rowElems) * outBytes;
  std::vector<unsigned char> expected(outSize), got(outSize);
  fillPoison(expected.data(), outSize, env.rng());

  DeviceBuffer cacheBuf(backend, cache.size()),
      slotBuf(backend, slots.size() * 8 + 8),
      scaleBuf(backend, scales.size() * 4 + 4), outBuf(backend, outSize + 16),
      otherBuf(backend, outSize + 16);
  if (!cacheBuf.valid() || !slotBuf.valid() || !scaleBuf.valid() ||
      !outBuf.valid() || !otherBuf.valid() ||
      !backend.copyToDevice(cacheBuf.get(), cache.data(), cache.size()) ||
      !backend.copyToDevice(slotBuf.get(), slots.data(), slots.size() * 8) ||
      !backend.copyToDevice(scaleBuf.get(), scales.data(), scales.size() * 4) ||
      !backend.copyToDevice(outBuf.get(), expected.data(), outSize)) {
    failure = "device buffers: " + backend.lastError();
    return false;
  }
  DLDataType outType = toDLDataType(desc.outputDtype);
  TensorArg cacheArg(cacheBuf.get(), 0, device, toDLDataType(desc.cacheDtype),
                     cacheDims, TensorView::compactStrides(cacheDims));
  TensorArg slotArg(slotBuf.get(), 0, device, int64Type(), {rows}, {1});
  TensorArg outArg(outBuf.get(), 0, device, outType, {rows, heads, dim},
                   {rowElems, dim, 1});
  TensorArg other(otherBuf.get(), 0, device, outType, {rows, heads, dim},
                  {rowElems, dim, 1});
  TensorArg scaleArg;
  if (desc.quant)
    scaleArg = TensorArg(scaleBuf.get(), 0, device, {kDLFloat, 32, 1},
                         scaleShape, TensorView::compactStrides(scaleShape));

  kvrt_status status;
  std::vector<int32_t> noTable;
  const std::vector<int32_t> &table = tables ? tables->blockTable : noTable;
  const std::vector<int32_t> &qsl = tables ? tables->queryStartLoc : noTable;
  const std::vector<int32_t> &ctx = tables ? tables->contextLens : noTable;
  DeviceBuffer tableBuf(backend, table.size() * 4 + 4),
      qslBuf(backend, qsl.size() * 4 + 4), ctxBuf(backend, ctx.size() * 4 + 4);
  if (tables) {
    if (!tableBuf.valid() || !qslBuf.valid() || !ctxBuf.valid() ||
        !backend.copyToDevice(tableBuf.get(), table.data(), table.size() * 4) ||
        !backend.copyToDevice(qslBuf.get(), qsl.data(), qsl.size() * 4) ||
        !backend.copyToDevice(ctxBuf.get(), ctx.data(), ctx.size() * 4)) {
      failure = "device buffers: " + backend.lastError();
      return false;
    }
    DLDataType i32 = {kDLInt, 32, 1};
    TensorArg tableArg(tableBuf.get(), 0, device, i32,
                       {tables->numReqs, tables->maxBlocksPerReq},
                       {tables->maxBlocksPerReq, 1});
    TensorArg qslArg(qslBuf.get(), 0, device, i32, {tables->numReqs + 1}, {1});
    TensorArg ctxArg(ctxBuf.get(), 0, device, i32, {tables->numReqs}, {1});
    kvrt_fused_gather_args args = KVRT_ARGS_INIT(kvrt_fused_gather_args);
    args.kernel = desc.name.c_str();
    args.block_table = tableArg.get();
    args.query_start_loc = qslArg.get();
    args.context_lens = ctxArg.get();
    args.key_cache = cacheArg.get();
    args.key_out = outArg.get();
    args.value_out = spec.giveValueOut ? other.get() : nullptr;
    args.variant = spec.variant;
    args.key_scale = scaleArg.get();
    status = kvrt_fused_gather(env.bundle, &args, backend.stream());
  } else {
    kvrt_gather_args args = KVRT_ARGS_INIT(kvrt_gather_args);
    args.kernel = desc.name.c_str();
    args.key_cache = cacheArg.get();
    args.slot_mapping = slotArg.get();
    args.key_out = outArg.get();
    args.value_out = spec.giveValueOut ? other.get() : nullptr;
    args.variant = spec.variant;
    args.key_scale = scaleArg.get();
    status = kvrt_gather(env.bundle, &args, backend.stream());
  }

  bool refused = spec.giveValueOut;
  if (refused) {
    std::string message = kvrt_last_error();
    if (status != KVRT_ERROR_INVALID_ARGUMENT) {
      failure =
          std::string("kvrt should have refused the gather, it returned ") +
          kvrt_status_name(status);
      return false;
    }
    if (message.find(spec.message) == std::string::npos) {
      failure = "the refusal should name \"" + spec.message + "\", it says \"" +
                message + "\"";
      return false;
    }
  } else if (status != KVRT_SUCCESS) {
    failure = std::string(tables ? "kvrt_fused_gather: " : "kvrt_gather: ") +
              kvrt_status_name(status) + ": " + kvrt_last_error();
    return false;
  } else {
    // The reference: a plain loop over rows and elements.
    for (int64_t i = 0; i < rows; ++i) {
      int64_t slot = slots[i];
      if (slot < 0 || slot / desc.blockSize >= numBlocks())
        continue;
      int64_t block = slot / desc.blockSize, pos = slot % desc.blockSize;
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < dim; ++d) {
          Index index;
          if (desc.latent()) {
            index.values = {block, pos, d, 0, 0};
            index.rank = 3;
          } else {
            index = cacheIndex(desc, CacheSide::Key, block, h, pos, d);
          }
          uint32_t bits =
              loadBits(cacheView.elementPointer(index), desc.cacheDtype);
          float value =
              desc.quant
                  ? dequantize(desc.quant->kind, static_cast<uint8_t>(bits),
                               scales[staticScaleIndex(desc, i, h, block)])
                  : elementToFloat(bits, desc.cacheDtype);
          storeBits(expected.data() + (i * rowElems + h * dim + d) * outBytes,
                    desc.outputDtype, floatToElement(value, desc.outputDtype));
        }
    }
  }
  if (!backend.synchronize() ||
      (outSize > 0 && !backend.copyToHost(got.data(), outBuf.get(), outSize))) {
    failure = "reading key_out back: " + backend.lastError();
    return false;
  }
  env.bytesCompared += static_cast<int64_t>(outSize);
  // Bit for bit, except that a NaN the gather wrote matches any NaN: a
  // cache of arbitrary bytes holds NaNs, and their payloads are not part
  // of the contract (as for a K/V gather). What it must leave is exact.
  auto written = [&](int64_t row, int64_t inRow) {
    int64_t slot = slots[row];
    return !refused && inRow < heads * dim && slot >= 0 &&
           slot / desc.blockSize < numBlocks();
  };
  std::ostringstream os;
  int shown = 0;
  int64_t differing = 0;
  for (size_t e = 0; e < outSize / outBytes; ++e) {
    const unsigned char *want = expected.data() + e * outBytes;
    const unsigned char *have = got.data() + e * outBytes;
    if (std::memcmp(want, have, outBytes) == 0)
      continue;
    int64_t row = static_cast<int64_t>(e) / rowElems;
    int64_t inRow = static_cast<int64_t>(e) % rowElems;
    uint32_t wantBits = loadBits(want, desc.outputDtype);
    uint32_t gotBits = loadBits(have, desc.outputDtype);
    if (written(row, inRow) &&
        std::isnan(elementToFloat(wantBits, desc.outputDtype)) &&
        std::isnan(elementToFloat(gotBits, desc.outputDtype)))
      continue;
    ++differing;
    if (shown++ >= env.maxShown)
      continue;
    os << " [row " << row << " (slot " << slots[row] << ")";
    if (inRow < heads * dim)
      os << " head " << inRow / dim << " d " << inRow % dim;
    else
      os << " padding element " << inRow - heads * dim;
    os << ": got 0x" << std::hex << gotBits << " want 0x" << wantBits
       << std::dec << (written(row, inRow) ? "" : ", not to be written") << "]";
  }
  if (differing > 0) {
    failure = std::to_string(differing) + " key_out elements differ" +
              (refused ? " after a refused gather" : "") + ":" + os.str();
    return false;
  }
  env.bytesCompared +=
      static_cast<int64_t>(cache.size() + slots.size() * 8 + scales.size() * 4);
  if (tables &&
      (!checkUnchanged(backend, table, tableBuf.get(), "block_table",
                       failure) ||
       !checkUnchanged(backend, qsl, qslBuf.get(), "query_start_loc",
                       failure) ||
       !checkUnchanged(backend, ctx, ctxBuf.get(), "context_lens", failure)))
    return false;
  return checkUnchanged(backend, cache, cacheBuf.get(), "the cache", failure) &&
         checkUnchanged(backend, slots, slotBuf.get(), "slot_mapping",
                        failure) &&
         checkUnchanged(backend, scales, scaleBuf.get(), "key_scale", failure);
}

} // namespace

std::vector<LatentCase> latentCases(const Description &desc, bool wide) {
  std::vector<LatentCase> cases;
  auto add = [&](std::string name, Spec spec, int which) {
    cases.push_back({std::move(name),
                     [spec, which](LatentCaseEnv &env, std::string &failure) {
                       Runner runner(env);
                       switch (which) {
                       case 0:
                         return runner.run(runner.decodeSlots(), spec, failure);
                       case 1:
                         return runner.run(runner.prefillSlots(), spec,
                                           failure);
                       case 2:
                         return runner.run(runner.mixedSlots(), spec, failure);
                       default:
                         return runner.runFused(spec, failure);
                       }
                     }});
  };
  if (desc.kind == Kind::FusedGather) {
    auto fused = [&](std::string name, GatherSpec spec) {
      cases.push_back(
          {std::move(name), [spec](LatentCaseEnv &env, std::string &failure) {
             Runner runner(env);
             GatherTables tables = runner.gatherTables();
             return runner.runGather(tables.slots, spec, failure, &tables);
           }});
    };
    GatherSpec scalarGather, padded, valueOut;
    scalarGather.variant = KVRT_VARIANT_SCALAR;
    padded.rowPad = 8;
    valueOut.giveValueOut = true;
    valueOut.message = "value_out: must be NULL";
    fused("fused/auto", GatherSpec());
    fused("fused/scalar", scalarGather);
    fused("fused_padded_out/auto", padded);
    fused("fused_value_out_refused", valueOut);
    return cases;
  }
  if (desc.kind == Kind::Gather) {
    auto gather = [&](std::string name, GatherSpec spec, int which) {
      cases.push_back({std::move(name),
                       [spec, which](LatentCaseEnv &env, std::string &failure) {
                         Runner runner(env);
                         std::vector<int64_t> slots;
                         if (which == 0)
                           slots = runner.scatteredSlots();
                         else if (which == 1)
                           slots = runner.prefillSlots();
                         return runner.runGather(slots, spec, failure);
                       }});
    };
    GatherSpec scalarGather, padded, valueOut;
    scalarGather.variant = KVRT_VARIANT_SCALAR;
    padded.rowPad = 8;
    valueOut.giveValueOut = true;
    valueOut.message = "value_out: must be NULL";
    gather("scattered/auto", GatherSpec(), 0);
    gather("scattered/scalar", scalarGather, 0);
    gather("padded_out/auto", padded, 0);
    gather("prefill/auto", GatherSpec(), 1);
    gather("empty/auto", GatherSpec(), 2);
    gather("value_out_refused", valueOut, 0);
    return cases;
  }
  Spec scalar, vector, shared, odd, oddVector, wideSpec;
  scalar.variant = KVRT_VARIANT_SCALAR;
  vector.variant = KVRT_VARIANT_VECTOR;
  // A K-only append's wide kernel: AUTO picks it only from its min_tokens
  // on (thousands of tokens), far past these cases, so they force it.
  wideSpec.variant = KVRT_VARIANT_WIDE;
  shared.rows = Rows::Shared;
  odd.rows = Rows::SharedOdd;
  oddVector = odd;
  oddVector.variant = KVRT_VARIANT_VECTOR;
  oddVector.vectorRefused = true;
  oddVector.message = "the vector variant";
  if (desc.kind == Kind::MlaFusedAppend) {
    Spec sharedVector = shared, bad, badChecked, noPe;
    sharedVector.variant = KVRT_VARIANT_VECTOR;
    bad.badBlocks = true;
    badChecked.badBlocks = badChecked.checked = true;
    noPe.breaks = Break::NoKPe;
    noPe.message = "k_pe";
    add("fused/auto", Spec(), 3);
    add("fused/scalar", scalar, 3);
    add("fused_shared_rows/vector", sharedVector, 3);
    add("fused_shared_rows_odd/auto", odd, 3);
    add("fused_bad_block_ids/auto", bad, 3);
    add("fused_checked_bad_block_refused", badChecked, 3);
    add("fused_missing_k_pe_refused", noPe, 3);
    return cases;
  }
  if (desc.kind == Kind::FusedAppend) {
    add("fused/auto", Spec(), 3);
    add("fused/scalar", scalar, 3);
    if (wide)
      add("fused/wide", wideSpec, 3);
    add("fused_shared_rows_odd/auto", odd, 3);
    Spec value;
    value.breaks = Break::GiveValue;
    value.message = "value: must be NULL";
    add("fused_value_refused", value, 3);
    return cases;
  }
  add("decode/auto", Spec(), 0);
  add("decode/scalar", scalar, 0);
  add("prefill/auto", Spec(), 1);
  add("prefill/vector", vector, 1);
  if (wide) {
    add("decode/wide", wideSpec, 0);
    add("prefill/wide", wideSpec, 1);
    // Shared rows with padding and slots past the cache, and the odd row
    // stride that breaks the promise the wide kernel shares with the vector
    // one.
    Spec sharedWide = shared, oddWide = oddVector;
    sharedWide.variant = oddWide.variant = KVRT_VARIANT_WIDE;
    oddWide.message = "'" + desc.wideKernelName() + "'";
    add("shared_rows/wide", sharedWide, 2);
    add("shared_rows_odd/wide_refused", oddWide, 0);
  }
  add("mixed_padding/auto", Spec(), 2);
  add(
      "shared_rows/vector",
      [&] {
        Spec s = shared;
        s.variant = KVRT_VARIANT_VECTOR;
        return s;
      }(),
      2);
  add("shared_rows_odd/auto", odd, 2);
  add("shared_rows_odd/vector_refused", oddVector, 0);
  if (desc.latent()) {
    Spec noPe, wide;
    noPe.breaks = Break::NoKPe;
    noPe.message = "k_pe";
    wide.breaks = Break::WideKvC;
    wide.message = "kv_c";
    Spec fromKernel;
    fromKernel.slotsFromKernel = true;
    add("slots_from_block_table/auto", fromKernel, 3);
    add("missing_k_pe_refused", noPe, 0);
    add("kv_c_width_refused", wide, 0);
  } else {
    Spec value, valueCache;
    value.breaks = Break::GiveValue;
    value.message = "value: must be NULL";
    valueCache.breaks = Break::GiveValueCache;
    valueCache.message = "value_cache: must be NULL";
    add("value_refused", value, 0);
    add("value_cache_refused", valueCache, 0);
  }
  return cases;
}

} // namespace kvgen::conformance
