//===- PrologueCases.cpp - the fused prologue's cases, without MLIR -------===//
//
// See PrologueCases.h. The inputs of a kernel call are drawn from its seed
// alone, so the suite (which compiles the kernels) and the GPU runner (which
// only launches them) give a kernel the same bytes and expect the same.
//
//===----------------------------------------------------------------------===//

#include "PrologueCases.h"

#include "conformance/Quant.h"
#include "conformance/Reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <dlfcn.h>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <type_traits>

using namespace kvgen;
using namespace kvgen::conformance;
using namespace kvgen::prologue;

namespace {

/// Bytes of `count` elements of `type`, each `poison`.
std::vector<uint8_t> poisoned(int64_t count, DType type, uint8_t poison) {
  return std::vector<uint8_t>(count * dtypeBytes(type), poison);
}

int64_t product(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t s : shape)
    n *= s;
  return n;
}

/// What one kernel call is given and what it must leave.
class Run {
public:
  Run(const Case &c, const Kernel &plan, uint32_t seed)
      : c(c), plan(plan), rng(seed) {}

  /// Runs the kernel through `launch` and compares; returns the failures'
  /// descriptions.
  std::vector<std::string> check(const Launcher &launch);

private:
  float uniform(float lo, float hi) {
    return std::uniform_real_distribution<float>(lo, hi)(rng);
  }
  /// `value` rounded to the source dtype, stored at element `i` of `bytes`.
  void put(std::vector<uint8_t> &bytes, int64_t i, float value) {
    DType src = c.desc.sourceDtype;
    storeBits(bytes.data() + i * dtypeBytes(src), src,
              floatToElement(value, src));
  }
  float get(const std::vector<uint8_t> &bytes, int64_t i) const {
    DType src = c.desc.sourceDtype;
    return elementToFloat(loadBits(bytes.data() + i * dtypeBytes(src), src),
                          src);
  }
  int64_t cacheStride(CacheSide side, int axis) const;

  const Case &c;
  const Kernel &plan;
  std::mt19937 rng;
};

int64_t Run::cacheStride(CacheSide side, int axis) const {
  // One head: its stride multiplies only head 0.
  if (axis == 1 && c.desc.numKvHeads == 1)
    return 0;
  std::vector<int64_t> shape = cacheShape(c.desc, side, 2);
  TensorView view = TensorView::compact(nullptr, c.desc.cacheDtype, shape);
  int64_t at[4] = {0, 0, 0, 0};
  at[axis] = 1;
  return view.elementOffset(
             cacheIndex(c.desc, side, at[0], at[1], at[2], at[3])) -
         view.elementOffset(cacheIndex(c.desc, side, 0, 0, 0, 0));
}

std::vector<std::string> Run::check(const Launcher &launch) {
  const Description &d = c.desc;
  const PrologueSpec &spec = c.spec;
  const int64_t numTokens = 9, H = d.numKvHeads, D = d.headDim;
  const int64_t qH = spec.qHeads;
  const int64_t numBlocks = d.layout == Layout::Contiguous ? 3 : 6;
  const int64_t capacity = numBlocks * d.blockSize;
  const int64_t maxPosition = 40;
  const int64_t rotary = spec.rotaryDim;

  // K, V and Q: views of one fused QKV row per token, padded so that no
  // stride is the compact one.
  const int64_t rowElems = (qH + 2 * H) * D + 8;
  std::vector<uint8_t> qkv = poisoned(numTokens * rowElems, d.sourceDtype, 0);
  for (int64_t i = 0; i < numTokens * rowElems; ++i)
    put(qkv, i, uniform(-2.0f, 2.0f));
  const int64_t qOffset = 0, kOffset = qH * D, vOffset = (qH + H) * D;
  auto rowAt = [&](int64_t base, int64_t t, int64_t h) {
    std::vector<float> row(D);
    for (int64_t e = 0; e < D; ++e)
      row[e] = get(qkv, base + t * rowElems + h * D + e);
    return row;
  };

  // Slots: distinct, a padding token, one past the cache. Positions: one
  // past the cos/sin cache and one negative.
  std::vector<int64_t> slots(numTokens), positions(numTokens);
  std::vector<int64_t> all(capacity);
  for (int64_t i = 0; i < capacity; ++i)
    all[i] = i;
  std::shuffle(all.begin(), all.end(), rng);
  for (int64_t t = 0; t < numTokens; ++t) {
    slots[t] = all[t];
    positions[t] =
        std::uniform_int_distribution<int64_t>(0, maxPosition - 1)(rng);
  }
  slots[2] = -1;
  slots[5] = capacity + 3;
  positions[6] = maxPosition;
  positions[8] = -5;

  // fused_append: the slots and positions are the slot rule's
  // (docs/KERNEL-ABI.md) over a block table. Request 1's block id is
  // negative (its token has a position, no slot), request 2's last token is
  // at max_position (and with 8-token blocks its positions are past the
  // block-table row), tokens 7 and 8 are padding (no slot, no position).
  const bool fused = d.kind == Kind::FusedAppend;
  const int64_t numReqs = 3, maxBlocksPerReq = 4;
  std::vector<int32_t> blockTable(numReqs * maxBlocksPerReq, -1);
  std::vector<int32_t> queryStartLoc{0, 3, 4, 7};
  std::vector<int32_t> contextLens{5, 0, int32_t(maxPosition - 2)};
  if (fused) {
    std::vector<int32_t> ids(numBlocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    blockTable[0] = ids[0];
    for (int64_t col = 0; col < maxBlocksPerReq; ++col)
      blockTable[2 * maxBlocksPerReq + col] = ids[1 + col];
    for (int64_t t = 0; t < numTokens; ++t) {
      slots[t] = positions[t] = -1;
      for (int64_t r = 0; r < numReqs; ++r) {
        if (t < queryStartLoc[r] || t >= queryStartLoc[r + 1])
          continue;
        int64_t pos = contextLens[r] + t - queryStartLoc[r];
        int64_t col = pos / d.blockSize;
        positions[t] = pos;
        if (col < maxBlocksPerReq && blockTable[r * maxBlocksPerReq + col] >= 0)
          slots[t] = blockTable[r * maxBlocksPerReq + col] * d.blockSize +
                     pos % d.blockSize;
      }
    }
  }

  // paged_kv_append: FlashInfer's page table. The slot is the page table's
  // (batch_indices, positions, kv_indptr, kv_indices); the RoPE position is
  // rope_positions, drawn above, apart from it (FlashInfer's pos_ids).
  // Request 0 has two pages, request 1 one whose id is negative (its token
  // has no slot, its Q is written), request 2 three. Token 3 is padding
  // (batch index -1), token 4's position is past its request's pages, token
  // 7's batch index is past the batch; neither has a slot.
  const bool paged = d.kind == Kind::PagedKvAppend;
  std::vector<int32_t> batchIndices, pagePositions, kvIndices, kvIndptr;
  if (paged) {
    std::vector<int32_t> ids(numBlocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    kvIndices = {ids[0], ids[1], -1, ids[2], ids[3], ids[4]};
    kvIndptr = {0, 2, 3, 6};
    const int64_t bs = d.blockSize;
    batchIndices = {0, 0, 2, -1, 0, 1, 2, 3, 2};
    pagePositions = {0,
                     int32_t(2 * bs - 1),
                     int32_t(bs + 1),
                     0,
                     int32_t(2 * bs),
                     0,
                     int32_t(3 * bs - 1),
                     0,
                     1};
    for (int64_t t = 0; t < numTokens; ++t) {
      slots[t] = -1;
      int64_t b = batchIndices[t], p = pagePositions[t];
      if (b < 0 || b >= int64_t(kvIndptr.size()) - 1)
        continue;
      int64_t column = kvIndptr[b] + p / bs;
      if (column >= kvIndptr[b + 1] || kvIndices[column] < 0)
        continue;
      slots[t] = kvIndices[column] * bs + p % bs;
    }
  }

  std::vector<uint8_t> kWeight = poisoned(D, d.sourceDtype, 0);
  std::vector<uint8_t> qWeight = poisoned(D, d.sourceDtype, 0);
  for (int64_t e = 0; e < D; ++e) {
    put(kWeight, e, uniform(0.5f, 1.5f));
    put(qWeight, e, uniform(0.5f, 1.5f));
  }
  // vLLM's cos/sin cache: cos(p * f_i) then sin(p * f_i) per row, in the
  // source dtype, or f32 (cos_sin = f32, FlashInfer's).
  const DType csType = spec.f32CosSin ? DType::F32 : d.sourceDtype;
  std::vector<uint8_t> cosSin =
      poisoned(maxPosition * std::max<int64_t>(rotary, 1), csType, 0);
  auto putCs = [&](int64_t i, float value) {
    storeBits(cosSin.data() + i * dtypeBytes(csType), csType,
              floatToElement(value, csType));
  };
  for (int64_t p = 0; p < maxPosition; ++p)
    for (int64_t i = 0; i < rotary / 2; ++i) {
      double freq = std::pow(10000.0, -2.0 * i / rotary);
      putCs(p * rotary + i, float(std::cos(p * freq)));
      putCs(p * rotary + rotary / 2 + i, float(std::sin(p * freq)));
    }
  // Q quantized (q_quant = fp8_e4m3): its static scale.
  const DType qType = spec.qQuant ? DType::F8E4M3 : d.sourceDtype;
  float qScale = uniform(0.004f, 0.02f);
  float epsilon = 1e-5f;

  // Caches and q_out, poisoned; the expected copies start alike.
  std::vector<int64_t> kShape = cacheShape(d, CacheSide::Key, numBlocks);
  std::vector<int64_t> vShape = cacheShape(d, CacheSide::Value, numBlocks);
  std::vector<uint8_t> keyCache = poisoned(product(kShape), d.cacheDtype, 0xA5);
  std::vector<uint8_t> valueCache =
      poisoned(product(vShape), d.cacheDtype, 0x5A);
  std::vector<uint8_t> qOut =
      poisoned(numTokens * std::max<int64_t>(qH, 1) * D, qType, 0xC3);
  std::vector<uint8_t> wantKey = keyCache, wantValue = valueCache, wantQ = qOut;
  // In place, q_out is query's elements of the QKV buffer: everything else
  // in it (K, V, the rows' padding, the Q rows of tokens that write no Q)
  // must come back as it went.
  std::vector<uint8_t> wantQkv = qkv;
  const int64_t qOutStrideToken = c.inPlace ? rowElems : qH * D;
  std::vector<uint8_t> &qOutWant = c.inPlace ? wantQkv : wantQ;
  const int64_t qOutBase = c.inPlace ? qOffset : 0;

  // Static scales.
  std::vector<float> keyScale, valueScale;
  if (d.quant) {
    int64_t n = product(staticScaleShape(d, numTokens, numBlocks));
    for (int64_t i = 0; i < n; ++i) {
      keyScale.push_back(uniform(0.004f, 0.02f));
      valueScale.push_back(uniform(0.004f, 0.02f));
    }
  }

  // The reference, on the expected copies, with the head's split as
  // docs/CONTRACT.md derives it; a plan that splits otherwise fails.
  int64_t vec =
      16 / std::max(dtypeBytes(d.sourceDtype), dtypeBytes(d.cacheDtype));
  int64_t part = D;
  if (spec.rope != Rope::None)
    part = std::gcd(part, spec.rope == Rope::Neox ? rotary / 2 : rotary);
  while (part % vec != 0)
    vec /= 2;
  int64_t chunks = D / vec;
  int64_t units = chunks - (spec.rope == Rope::Neox ? rotary / 2 / vec : 0);
  int64_t unitLanes = 1;
  while (unitLanes * 2 <= units)
    unitLanes *= 2;
  HeadSplit split{std::min<int64_t>({chunks & -chunks, 32, unitLanes}), vec};
  if (split.vec != plan.vectorElems || split.lanes != plan.lanesPerGroup)
    return {"the plan splits a head into " +
            std::to_string(plan.lanesPerGroup) + " lanes of " +
            std::to_string(plan.vectorElems) +
            "-element chunks; docs/CONTRACT.md says " +
            std::to_string(split.lanes) + " of " + std::to_string(split.vec)};
  std::vector<float> kw(D), qw(D), cs(std::max<int64_t>(rotary, 1));
  for (int64_t e = 0; e < D; ++e) {
    kw[e] = get(kWeight, e);
    qw[e] = get(qWeight, e);
  }
  TensorView wantKeyView =
      TensorView::compact(wantKey.data(), d.cacheDtype, kShape);
  TensorView wantValueView =
      TensorView::compact(wantValue.data(), d.cacheDtype, vShape);
  auto toCache = [&](float x, const std::vector<float> &scales, int64_t t,
                     int64_t h, int64_t block) -> uint32_t {
    if (!d.quant)
      return floatToElement(x, d.cacheDtype);
    float s = scales[staticScaleIndex(d, t, h, block)];
    return quantize(d.quant->kind, x, s, d.quant->reciprocal);
  };
  for (int64_t t = 0; t < numTokens; ++t) {
    bool inCache = spec.rope == Rope::None ||
                   (positions[t] >= 0 && positions[t] < maxPosition);
    if (!inCache)
      continue;
    for (int64_t i = 0; i < rotary; ++i)
      cs[i] =
          elementToFloat(loadBits(cosSin.data() + (positions[t] * rotary + i) *
                                                      dtypeBytes(csType),
                                  csType),
                         csType);
    for (int64_t h = 0; h < qH; ++h) {
      std::vector<float> y = prologueHead(spec, split, rowAt(qOffset, t, h), qw,
                                          epsilon, cs.data());
      for (int64_t e = 0; e < D; ++e) {
        int64_t at = qOutBase + t * qOutStrideToken + h * D + e;
        if (spec.qQuant)
          qOutWant[at] = quantize(QuantKind::FP8E4M3, y[e], qScale, false);
        else
          put(qOutWant, at, y[e]);
      }
    }
    if (slots[t] < 0 || slots[t] >= capacity)
      continue;
    int64_t block = slots[t] / d.blockSize, pos = slots[t] % d.blockSize;
    for (int64_t h = 0; h < H; ++h) {
      std::vector<float> k = prologueHead(spec, split, rowAt(kOffset, t, h), kw,
                                          epsilon, cs.data());
      std::vector<float> v = rowAt(vOffset, t, h);
      for (int64_t e = 0; e < D; ++e) {
        storeBits(wantKeyView.elementPointer(
                      cacheIndex(d, CacheSide::Key, block, h, pos, e)),
                  d.cacheDtype, toCache(k[e], keyScale, t, h, block));
        storeBits(wantValueView.elementPointer(
                      cacheIndex(d, CacheSide::Value, block, h, pos, e)),
                  d.cacheDtype, toCache(v[e], valueScale, t, h, block));
      }
    }
  }

  // The kernel's parameters, in the plan's order. K, V and Q are views of
  // one QKV buffer: each is the rest of that buffer from its first element.
  std::vector<HostBuffer> buffers;
  std::vector<int32_t> scalars;
  std::vector<bool> isBuffer;
  std::vector<abi::Param> list = plan.params;
  size_t srcBytes = dtypeBytes(d.sourceDtype);
  auto vecBuffer = [](auto &v) {
    return HostBuffer{v.data(), v.size() * sizeof(v[0])};
  };
  auto qkvView = [&](int64_t offset) {
    return HostBuffer{qkv.data() + offset * srcBytes,
                      qkv.size() - offset * srcBytes};
  };
  for (abi::Param p : list) {
    using P = abi::Param;
    if (abi::paramInfo(p).role == abi::ParamRole::Buffer) {
      HostBuffer buffer{nullptr, 0};
      switch (p) {
      case P::Key:
        buffer = qkvView(kOffset);
        break;
      case P::Value:
        buffer = qkvView(vOffset);
        break;
      case P::Query:
        buffer = qkvView(qOffset);
        break;
      case P::BlockTable:
        buffer = vecBuffer(blockTable);
        break;
      case P::QueryStartLoc:
        buffer = vecBuffer(queryStartLoc);
        break;
      case P::ContextLens:
        buffer = vecBuffer(contextLens);
        break;
      case P::SlotMapping:
        buffer = vecBuffer(slots);
        break;
      case P::BatchIndices:
        buffer = vecBuffer(batchIndices);
        break;
      case P::Positions:
        buffer = vecBuffer(pagePositions);
        break;
      case P::KvIndices:
        buffer = vecBuffer(kvIndices);
        break;
      case P::KvIndptr:
        buffer = vecBuffer(kvIndptr);
        break;
      case P::KeyCache:
        buffer = vecBuffer(keyCache);
        break;
      case P::ValueCache:
        buffer = vecBuffer(valueCache);
        break;
      case P::KeyScale:
        buffer = vecBuffer(keyScale);
        break;
      case P::ValueScale:
        buffer = vecBuffer(valueScale);
        break;
      case P::QOut:
        buffer = c.inPlace ? qkvView(qOffset) : vecBuffer(qOut);
        break;
      case P::RopePositions:
        buffer = vecBuffer(positions);
        break;
      case P::CosSinCache:
        buffer = vecBuffer(cosSin);
        break;
      case P::KNormWeight:
        buffer = vecBuffer(kWeight);
        break;
      case P::QNormWeight:
        buffer = vecBuffer(qWeight);
        break;
      case P::Epsilon:
        buffer = {&epsilon, sizeof(float)};
        break;
      case P::QScale:
        buffer = {&qScale, sizeof(float)};
        break;
      default:
        return {std::string("no tensor for buffer ") + abi::paramName(p)};
      }
      buffers.push_back(buffer);
      isBuffer.push_back(true);
      continue;
    }
    int64_t v = -1;
    switch (p) {
    case P::NumTokens:
      v = numTokens;
      break;
    case P::NumReqs:
      v = numReqs;
      break;
    case P::BlockTableStride:
    case P::MaxBlocksPerReq:
      v = maxBlocksPerReq;
      break;
    case P::NumBlocks:
      v = numBlocks;
      break;
    case P::BatchSize:
      v = int64_t(kvIndptr.size()) - 1;
      break;
    case P::NumIndices:
      v = int64_t(kvIndices.size());
      break;
    case P::KeyStrideToken:
    case P::ValueStrideToken:
    case P::QueryStrideToken:
      v = rowElems;
      break;
    case P::KeyStrideHead:
    case P::ValueStrideHead:
    case P::QueryStrideHead:
      v = D;
      break;
    case P::KeyStrideDim:
    case P::ValueStrideDim:
    case P::QueryStrideDim:
    case P::QOutStrideDim:
      v = 1;
      break;
    case P::QOutStrideToken:
      v = qOutStrideToken;
      break;
    case P::QOutStrideHead:
      v = D;
      break;
    case P::MaxPosition:
      v = maxPosition;
      break;
    case P::KeyCacheStrideBlock:
      v = cacheStride(CacheSide::Key, 0);
      break;
    case P::KeyCacheStrideHead:
      v = cacheStride(CacheSide::Key, 1);
      break;
    case P::KeyCacheStridePos:
      v = cacheStride(CacheSide::Key, 2);
      break;
    case P::KeyCacheStrideDim:
      v = cacheStride(CacheSide::Key, 3);
      break;
    case P::ValueCacheStrideBlock:
      v = cacheStride(CacheSide::Value, 0);
      break;
    case P::ValueCacheStrideHead:
      v = cacheStride(CacheSide::Value, 1);
      break;
    case P::ValueCacheStridePos:
      v = cacheStride(CacheSide::Value, 2);
      break;
    case P::ValueCacheStrideDim:
      v = cacheStride(CacheSide::Value, 3);
      break;
    default:
      return {std::string("no value for scalar ") + abi::paramName(p)};
    }
    scalars.push_back(static_cast<int32_t>(v));
    isBuffer.push_back(false);
  }
  if (std::string why = launch(plan, numTokens, buffers, scalars, isBuffer);
      !why.empty())
    return {why};

  std::vector<std::string> failures;
  auto compare = [&](const char *what, const std::vector<uint8_t> &got,
                     const std::vector<uint8_t> &want, DType type) {
    if (std::optional<std::string> why = compareBytes(what, got, want, type))
      failures.push_back(*why);
  };
  compare("key_cache", keyCache, wantKey, d.cacheDtype);
  compare("value_cache", valueCache, wantValue, d.cacheDtype);
  if (c.inPlace) {
    compare("q_out", qkv, wantQkv, d.sourceDtype);
  } else {
    compare("q_out", qOut, wantQ, qType);
    compare("qkv", qkv, wantQkv, d.sourceDtype);
  }
  return failures;
}

} // namespace

std::vector<std::string> prologue::check(const Case &c, const Kernel &kernel,
                                         uint32_t seed,
                                         const Launcher &launch) {
  return Run(c, kernel, seed).check(launch);
}

std::optional<std::string>
prologue::compareBytes(const char *what, const std::vector<uint8_t> &got,
                       const std::vector<uint8_t> &want, DType type) {
  if (got.size() != want.size())
    return std::string(what) + ": " + std::to_string(got.size()) +
           " bytes, expected " + std::to_string(want.size());
  size_t bytes = dtypeBytes(type), bad = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); i += bytes)
    if (std::memcmp(&got[i], &want[i], std::min(bytes, got.size() - i)) != 0) {
      if (bad++ < 3)
        first += " [" + std::to_string(i / bytes) + "] got " +
                 std::to_string(loadBits(&got[i], type)) + " want " +
                 std::to_string(loadBits(&want[i], type));
    }
  if (!bad)
    return std::nullopt;
  return std::string(what) + ": " + std::to_string(bad) +
         " elements differ:" + first;
}

std::string CudaDriver::init() {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    return "no CUDA driver (libcuda.so.1): " + std::string(dlerror());
  bool ok = true;
  auto sym = [&](auto &fn, const char *name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(
        dlsym(lib, name));
    ok &= fn != nullptr;
  };
  sym(cuInit, "cuInit");
  sym(cuDeviceGet, "cuDeviceGet");
  sym(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  sym(cuCtxSetCurrent, "cuCtxSetCurrent");
  sym(cuModuleLoadData, "cuModuleLoadData");
  sym(cuModuleUnload, "cuModuleUnload");
  sym(cuModuleGetFunction, "cuModuleGetFunction");
  sym(cuMemAlloc, "cuMemAlloc_v2");
  sym(cuMemFree, "cuMemFree_v2");
  sym(cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  sym(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  sym(cuLaunchKernel, "cuLaunchKernel");
  sym(cuCtxSynchronize, "cuCtxSynchronize");
  if (!ok)
    return "libcuda.so.1 lacks a driver entry point the suite needs";
  int device = 0;
  Handle context = nullptr;
  if (cuInit(0) != 0 || cuDeviceGet(&device, 0) != 0 ||
      cuDevicePrimaryCtxRetain(&context, device) != 0 ||
      cuCtxSetCurrent(context) != 0)
    return "no usable CUDA device";
  return "";
}

Launcher prologue::gpuLauncher(CudaDriver &cu, CudaDriver::Handle module) {
  return [&cu, module](const Kernel &plan, int64_t numTokens,
                       std::vector<HostBuffer> &buffers,
                       std::vector<int32_t> &scalars,
                       const std::vector<bool> &isBuffer) -> std::string {
    CudaDriver::Handle fn = nullptr;
    if (cu.cuModuleGetFunction(&fn, module, plan.name.c_str()) != 0)
      return "no kernel " + plan.name + " in the PTX";
    // The host ranges, merged where they overlap: one device copy each.
    struct Range {
      uint8_t *begin, *end;
      CudaDriver::CUdeviceptr device = 0;
    };
    std::vector<Range> ranges;
    for (const HostBuffer &buffer : buffers) {
      uint8_t *begin = static_cast<uint8_t *>(buffer.data);
      ranges.push_back({begin, begin + buffer.bytes});
    }
    std::sort(ranges.begin(), ranges.end(),
              [](const Range &a, const Range &b) { return a.begin < b.begin; });
    std::vector<Range> merged;
    for (const Range &r : ranges)
      if (!merged.empty() && r.begin < merged.back().end)
        merged.back().end = std::max(merged.back().end, r.end);
      else
        merged.push_back(r);
    std::string why;
    for (size_t i = 0; i < merged.size() && why.empty(); ++i) {
      size_t bytes = merged[i].end - merged[i].begin;
      if (cu.cuMemAlloc(&merged[i].device, std::max<size_t>(bytes, 16)) != 0 ||
          cu.cuMemcpyHtoD(merged[i].device, merged[i].begin, bytes) != 0)
        why = "cannot allocate or copy a buffer on the device";
    }
    std::vector<CudaDriver::CUdeviceptr> device;
    for (const HostBuffer &buffer : buffers) {
      uint8_t *begin = static_cast<uint8_t *>(buffer.data);
      const Range &r = *std::prev(std::upper_bound(
          merged.begin(), merged.end(), begin,
          [](uint8_t *p, const Range &r) { return p < r.begin; }));
      device.push_back(r.device + (begin - r.begin));
    }
    if (why.empty()) {
      std::vector<void *> params;
      size_t b = 0, s = 0;
      for (bool buffer : isBuffer)
        params.push_back(buffer ? static_cast<void *>(&device[b++])
                                : static_cast<void *>(&scalars[s++]));
      unsigned grid = static_cast<unsigned>(
          (numTokens + plan.tokensPerBlock - 1) / plan.tokensPerBlock);
      if (cu.cuLaunchKernel(fn, grid, 1, 1,
                            static_cast<unsigned>(plan.threadsX),
                            static_cast<unsigned>(plan.tokensPerBlock), 1, 0,
                            nullptr, params.data(), nullptr) != 0 ||
          cu.cuCtxSynchronize() != 0)
        why = "the launch of " + plan.name + " failed";
    }
    for (const Range &r : merged)
      if (r.device) {
        if (why.empty() &&
            cu.cuMemcpyDtoH(r.begin, r.device, r.end - r.begin) != 0)
          why = "cannot copy a buffer back from the device";
        cu.cuMemFree(r.device);
      }
    return why;
  };
}

std::vector<Case> prologue::cases() {
  std::vector<Case> out;
  struct Types {
    DType source, cache;
    std::optional<QuantSpec> quant;
  };
  QuantSpec fp8PerTensor, fp8PerHead;
  fp8PerHead.granularity = Granularity::PerHead;
  const Types types[] = {
      {DType::BF16, DType::BF16, std::nullopt},
      {DType::F16, DType::F16, std::nullopt},
      {DType::BF16, DType::F8E4M3, fp8PerTensor},
      {DType::F16, DType::F8E4M3, fp8PerHead},
      {DType::F32, DType::F32, std::nullopt},
  };
  struct Shape {
    Layout layout;
    int64_t blockSize, heads, headDim;
  };
  const Shape shapes[] = {{Layout::PagedNHD, 16, 2, 128},
                          {Layout::PagedHND, 8, 2, 64},
                          {Layout::Contiguous, 32, 1, 64}};
  struct Parts {
    bool norm;
    Rope rope;
    int64_t rotaryDiv; // rotary_dim = head_dim / rotaryDiv
    int64_t qPerKv;
  };
  const Parts parts[] = {
      {true, Rope::Neox, 1, 4}, {true, Rope::Gptj, 1, 2},
      {true, Rope::Neox, 2, 2}, {false, Rope::Gptj, 4, 1},
      {true, Rope::None, 0, 3}, {false, Rope::Neox, 1, 0},
      {true, Rope::Gptj, 2, 0},
  };
  auto add = [&](const Types &ty, const Shape &sh, bool norm, Rope rope,
                 int64_t rotaryDim, int64_t qHeads, Kind kind = Kind::Append,
                 bool inPlace = false) {
    Case c;
    c.inPlace = inPlace;
    Description &d = c.desc;
    d.kind = kind;
    d.layout = sh.layout;
    d.blockSize = sh.blockSize;
    d.numKvHeads = sh.heads;
    d.headDim = sh.headDim;
    d.sourceDtype = ty.source;
    d.cacheDtype = ty.cache;
    d.quant = ty.quant;
    c.spec.norm = norm;
    c.spec.rope = rope;
    c.spec.rotaryDim = rotaryDim;
    c.spec.qHeads = qHeads;
    d.name = std::string(kind == Kind::Append        ? "p_"
                         : kind == Kind::FusedAppend ? "pf_"
                                                     : "pp_") +
             layoutName(sh.layout) + "_" + dtypeName(ty.source) + "_" +
             (ty.quant ? ty.quant->tag() : std::string(dtypeName(ty.cache))) +
             "_h" + std::to_string(sh.heads) + "x" +
             std::to_string(sh.headDim) + (norm ? "_rms" : "") +
             (rope == Rope::Neox   ? "_neox"
              : rope == Rope::Gptj ? "_gptj"
                                   : "") +
             (rope != Rope::None ? std::to_string(rotaryDim) : "") + "_q" +
             std::to_string(qHeads) + (inPlace ? "_inplace" : "");
    out.push_back(c);
  };
  int n = 0;
  for (const Types &ty : types)
    for (const Shape &sh : shapes)
      for (const Parts &pa : parts) {
        // Every combination of parts on the first shape; a rotation of them
        // over the others.
        if (&sh != &shapes[0] && (n++ % 2) != 0)
          continue;
        add(ty, sh, pa.norm, pa.rope,
            pa.rotaryDiv ? sh.headDim / pa.rotaryDiv : 0, pa.qPerKv * sh.heads);
      }
  // Edges of the head's split: a NeoX half of 3 elements (chunks of one
  // element, 32 lanes of 2 chunks), GPT-J on 2 elements, a head of 96 (12
  // chunks, 4 lanes of 3), a head of 256 bf16 (32 chunks, one a lane), an
  // f32 source into a bf16 cache, and 36 heads a token (past 256 threads a
  // token: the GPU loops over the chunk loop).
  add(types[0], {Layout::PagedNHD, 16, 2, 64}, true, Rope::Neox, 6, 2);
  add(types[1], {Layout::PagedHND, 16, 2, 64}, true, Rope::Gptj, 2, 4);
  add(types[0], {Layout::PagedNHD, 16, 2, 96}, true, Rope::Neox, 96, 4);
  add(types[2], {Layout::PagedNHD, 16, 1, 256}, true, Rope::Neox, 64, 8);
  add({DType::F32, DType::BF16, std::nullopt}, {Layout::PagedNHD, 16, 2, 64},
      true, Rope::Gptj, 64, 2);
  add(types[0], {Layout::PagedNHD, 16, 4, 128}, true, Rope::Neox, 128, 32);
  // fused_append, whose positions come from the block table.
  add(types[0], shapes[0], true, Rope::Neox, 128, 8, Kind::FusedAppend);
  add(types[2], shapes[1], true, Rope::Gptj, 32, 2, Kind::FusedAppend);
  add(types[1], {Layout::PagedNHD, 8, 2, 64}, false, Rope::Neox, 64, 4,
      Kind::FusedAppend);
  add(types[3], shapes[0], true, Rope::None, 0, 4, Kind::FusedAppend);
  add(types[4], shapes[1], true, Rope::Neox, 32, 0, Kind::FusedAppend);
  // paged_kv_append (FlashInfer's page table), RoPE at rope_positions:
  // FlashInfer's fused op's cache (fp8 e4m3, static per-tensor scale, NHD
  // and HND, no norm, NeoX and GPT-J), and the other parts on 16-bit caches.
  add(types[2], shapes[0], false, Rope::Neox, 128, 8, Kind::PagedKvAppend);
  add(types[2], shapes[1], false, Rope::Gptj, 64, 4, Kind::PagedKvAppend);
  add(types[2], shapes[0], false, Rope::Neox, 64, 2, Kind::PagedKvAppend);
  add(types[0], shapes[1], true, Rope::Neox, 32, 2, Kind::PagedKvAppend);
  add(types[3], shapes[0], true, Rope::Gptj, 128, 0, Kind::PagedKvAppend);
  add(types[1], shapes[1], true, Rope::None, 0, 4, Kind::PagedKvAppend);
  add(types[2], shapes[0], false, Rope::Neox, 128, 4, Kind::PagedKvAppend,
      true);
  // Q written as fp8 e4m3 with its scale (q_quant) and the cos/sin cache in
  // f32 (cos_sin): FlashInfer's fused op on paged_kv_append, NeoX and
  // GPT-J, full and partial rotary; each alone on the other kinds.
  auto withQuantQ = [&](bool qQuant, bool f32CosSin) {
    Case &c = out.back();
    c.spec.qQuant = qQuant;
    c.spec.f32CosSin = f32CosSin;
    c.desc.name +=
        std::string(qQuant ? "_q8" : "") + (f32CosSin ? "_cs32" : "");
  };
  add(types[2], shapes[0], false, Rope::Neox, 128, 8, Kind::PagedKvAppend);
  withQuantQ(true, true);
  add(types[2], shapes[1], false, Rope::Gptj, 64, 4, Kind::PagedKvAppend);
  withQuantQ(true, true);
  add(types[3], shapes[0], false, Rope::Neox, 64, 2, Kind::PagedKvAppend);
  withQuantQ(true, true);
  add(types[0], shapes[0], true, Rope::Neox, 128, 4, Kind::Append);
  withQuantQ(true, false);
  add(types[1], shapes[1], true, Rope::Gptj, 32, 2, Kind::FusedAppend);
  withQuantQ(false, true);
  add(types[4], shapes[2], true, Rope::Neox, 64, 2, Kind::Append);
  withQuantQ(true, true);
  // In place: q_out is query, a strided view of the QKV buffer (vLLM's
  // call). NeoX and GPT-J, with and without norm, full and partial rotary;
  // NeoX rotary 32 of 128 (16 chunks: 2 pairs and 12 chunks alone, 14 units
  // on 8 lanes), of 64 (a half of 4 elements, chunks of 2), a head of 160
  // (18 units on 4 lanes, a loop of 5) and a head of 80 (GPT-J, 5 chunks a
  // lane in a loop).
  const Shape nhd128 = shapes[0];
  add(types[0], nhd128, true, Rope::Neox, 128, 8, Kind::Append, true);
  add(types[0], nhd128, false, Rope::Neox, 128, 4, Kind::Append, true);
  add(types[0], nhd128, true, Rope::Neox, 64, 4, Kind::Append, true);
  add(types[2], nhd128, false, Rope::Neox, 32, 2, Kind::Append, true);
  add(types[1], nhd128, true, Rope::Gptj, 128, 4, Kind::Append, true);
  add(types[0], nhd128, false, Rope::Gptj, 64, 2, Kind::Append, true);
  add(types[3], shapes[1], true, Rope::Neox, 32, 4, Kind::Append, true);
  add(types[4], shapes[2], true, Rope::Neox, 64, 2, Kind::Append, true);
  add(types[0], nhd128, true, Rope::None, 0, 4, Kind::Append, true);
  add(types[1], {Layout::PagedHND, 16, 2, 64}, true, Rope::Neox, 8, 2,
      Kind::Append, true);
  add(types[0], {Layout::PagedNHD, 16, 2, 160}, true, Rope::Neox, 32, 4,
      Kind::Append, true);
  add(types[0], {Layout::PagedNHD, 16, 2, 80}, true, Rope::Gptj, 80, 2,
      Kind::Append, true);
  add(types[0], nhd128, true, Rope::Neox, 128, 8, Kind::FusedAppend, true);
  add(types[2], shapes[1], false, Rope::Gptj, 32, 2, Kind::FusedAppend, true);
  return out;
}

std::string prologue::moduleText(const Case &c) {
  return std::string("module {\nkv.") + kindName(c.desc.kind) + " @" +
         c.desc.name + " : " + c.desc.cacheType() + " from " +
         dtypeName(c.desc.sourceDtype) + " prologue " + c.spec.attr() + "\n}\n";
}

// The manifest is text, a record a line, so that a stage can be read and
// compared by eye:
//   kvgen-prologue-manifest 1
//   chip sm_90
//   description NAME PTX_FILE
//   kernel NAME SEED VECTOR_ELEMS LANES THREADS_X TOKENS_PER_BLOCK PARAM...
// Each kernel belongs to the description above it.

static constexpr const char *kManifestHeader = "kvgen-prologue-manifest 1";

std::string prologue::writeManifest(const Manifest &manifest,
                                    const std::string &path) {
  std::ofstream out(path);
  if (!out)
    return "cannot write " + path;
  out << kManifestHeader << "\nchip " << manifest.chip << "\n";
  for (const Manifest::Description &d : manifest.descriptions) {
    out << "description " << d.name << " " << d.ptx << "\n";
    for (const Manifest::Entry &e : d.kernels) {
      const Kernel &k = e.kernel;
      out << "kernel " << k.name << " " << e.seed << " " << k.vectorElems << " "
          << k.lanesPerGroup << " " << k.threadsX << " " << k.tokensPerBlock;
      for (abi::Param p : k.params)
        out << " " << abi::paramName(p);
      out << "\n";
    }
  }
  out.close();
  return out ? "" : "cannot write " + path;
}

std::string prologue::readManifest(const std::string &path,
                                   Manifest &manifest) {
  std::ifstream in(path);
  if (!in)
    return "cannot read " + path;
  manifest = Manifest();
  std::string line;
  int number = 0;
  auto bad = [&](const std::string &why) {
    return path + ":" + std::to_string(number) + ": " + why;
  };
  bool header = false, chip = false;
  while (std::getline(in, line)) {
    ++number;
    if (!header) {
      if (line != kManifestHeader)
        return bad("not a prologue manifest (expected '" +
                   std::string(kManifestHeader) + "')");
      header = true;
      continue;
    }
    std::istringstream words(line);
    std::string record;
    words >> record;
    if (record == "chip" && !chip) {
      if (!(words >> manifest.chip))
        return bad("a chip without a name");
      chip = true;
    } else if (record == "description") {
      Manifest::Description d;
      if (!(words >> d.name >> d.ptx))
        return bad("a description needs a name and a PTX file");
      manifest.descriptions.push_back(d);
    } else if (record == "kernel") {
      if (manifest.descriptions.empty())
        return bad("a kernel before any description");
      Manifest::Entry e;
      Kernel &k = e.kernel;
      if (!(words >> k.name >> e.seed >> k.vectorElems >> k.lanesPerGroup >>
            k.threadsX >> k.tokensPerBlock) ||
          k.vectorElems < 1 || k.lanesPerGroup < 1 || k.threadsX < 1 ||
          k.tokensPerBlock < 1)
        return bad("a kernel needs a name, a seed and four positive counts");
      for (std::string name; words >> name;) {
        abi::Param p;
        bool found = false;
        for (const abi::ParamInfo &info : abi::kParams)
          if (name == info.name) {
            p = info.id;
            found = true;
          }
        if (!found)
          return bad("unknown parameter '" + name + "'");
        k.params.push_back(p);
      }
      if (k.params.empty())
        return bad("kernel " + k.name + " has no parameters");
      manifest.descriptions.back().kernels.push_back(e);
    } else if (!record.empty()) {
      return bad("unknown record '" + record + "'");
    }
  }
  if (!header)
    return path + ": empty, not a prologue manifest";
  if (!chip)
    return path + ": no chip record";
  if (manifest.descriptions.empty())
    return path + ": no description";
  return "";
}
