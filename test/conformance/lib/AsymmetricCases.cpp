//===- AsymmetricCases.cpp - K and V of different head sizes, byte by byte
//-===//
//
// Caches whose V head size differs from K's (`v_head_dim`), as a model with
// MLA-style K 192 / V 128 heads lays them out: K and V are views of one
// packed layer buffer, [..., head_dim + v_head_dim] per head and slot, so
// that a side's head and slot strides span both. Each case poisons the whole
// buffer, appends through kvrt and compares every byte of it with a plain
// loop over the tokens: each element of a written row cast or quantized
// (static scales) at its place, everything else (the other side's part,
// unwritten slots) keeping its poison. The refusals leave every byte as it
// was.
//
//===----------------------------------------------------------------------===//

#include "conformance/AsymmetricCases.h"

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

Description asym(Layout layout, int64_t blockSize, int64_t heads,
                 int64_t headDim, int64_t vHeadDim, DType source, DType cache,
                 std::optional<QuantSpec> quant = {}) {
  Description d;
  d.kind = Kind::Append;
  d.layout = layout;
  d.blockSize = blockSize;
  d.numKvHeads = heads;
  d.headDim = headDim;
  d.vHeadDim = vHeadDim;
  d.sourceDtype = source;
  d.cacheDtype = cache;
  d.quant = quant;
  std::ostringstream os;
  os << "asym_append_" << layoutName(layout)
     << (layout == Layout::Contiguous ? "_msl" : "_bs") << blockSize << "_h"
     << heads << "_d" << headDim << "_v" << vHeadDim << "_" << dtypeName(cache)
     << "_from_" << dtypeName(source);
  if (quant)
    os << "_" << quant->tag();
  d.name = os.str();
  return d;
}

constexpr int64_t kPagedBlocks = 12;
constexpr int64_t kContiguousBatch = 5;

/// What a case launches with.
struct Spec {
  kvrt_variant variant = KVRT_VARIANT_AUTO;
  /// K and V are views of one projection row [H * D + H * Dv + 8], as a
  /// fused qkv output is split; else two compact tensors.
  bool fusedSource = false;
  /// Refusals: V given with K's head size, or value_cache with head_dim.
  bool valueOfKeySize = false;
  bool valueCacheOfKeySize = false;
  std::string message;
};

class Runner : public CaseRunner {
public:
  explicit Runner(AsymmetricCaseEnv &env)
      : CaseRunner(env, kPagedBlocks, kContiguousBatch) {}

  std::vector<int64_t> decodeSlots() {
    std::vector<int64_t> blocks = shuffledBlocks(), slots;
    for (int i = 0; i < 4; ++i)
      slots.push_back(blocks[i] * desc.blockSize +
                      uniform(0, desc.blockSize - 1));
    return slots;
  }
  std::vector<int64_t> prefillSlots() {
    // Consecutive slots over three blocks (one request's row when not
    // paged), then padding and a block past the cache.
    int64_t bs = desc.blockSize, first = uniform(0, numBlocks() - 3);
    int64_t length = desc.layout == Layout::Contiguous ? bs : 2 * bs + bs / 2;
    std::vector<int64_t> slots;
    for (int64_t i = 0; i < length; ++i)
      slots.push_back(first * bs + i);
    slots.push_back(-1);
    slots.push_back(numBlocks() * bs + 1);
    return slots;
  }

  bool run(const std::vector<int64_t> &slots, const Spec &spec,
           std::string &failure);
};

bool Runner::run(const std::vector<int64_t> &slots, const Spec &spec,
                 std::string &failure) {
  Backend &backend = env.backend;
  DLDevice device = backend.device();
  const int64_t tokens = static_cast<int64_t>(slots.size());
  const int64_t h = desc.numKvHeads, kd = desc.headDim,
                vd = desc.valueHeadDim(), c = kd + vd, bs = desc.blockSize,
                nb = numBlocks();
  const size_t srcBytes = dtypeBytes(desc.sourceDtype);
  const size_t cacheBytes = dtypeBytes(desc.cacheDtype);
  const bool tokenMajor = desc.layout == Layout::PagedNHD;

  // Static scales of each side, powers of two times 1 + k/8.
  std::vector<float> scales[2];
  std::vector<int64_t> scaleShape;
  if (desc.quant) {
    scaleShape = staticScaleShape(desc, tokens, nb);
    int64_t count = 1;
    for (int64_t extent : scaleShape)
      count *= extent;
    for (std::vector<float> &side : scales)
      for (int64_t i = 0; i < count; ++i)
        side.push_back(std::ldexp(1.0f + uniform(0, 7) / 8.0f,
                                  static_cast<int>(uniform(-4, 2))));
  }
  auto blockOf = [&](int64_t slot) {
    return slot < 0 || slot / bs >= nb ? 0 : slot / bs;
  };

  // The source: K [T, H, D] and V [T, H, Dv], compact in one buffer (V
  // after K) or side by side in one padded projection row.
  int64_t row = spec.fusedSource ? h * kd + h * vd + 8 : 0;
  int64_t kStrideT = spec.fusedSource ? row : h * kd;
  int64_t vStrideT = spec.fusedSource ? row : h * vd;
  int64_t kOffset = 0;
  int64_t vOffset = spec.fusedSource ? h * kd : tokens * h * kd;
  size_t srcElems = static_cast<size_t>(
      spec.fusedSource ? tokens * row : tokens * h * (kd + vd));
  std::vector<unsigned char> source(srcElems * srcBytes + 16);
  auto srcAt = [&](bool isKey, int64_t t, int64_t hh, int64_t d) {
    int64_t dim = isKey ? kd : vd;
    return source.data() + ((isKey ? kOffset : vOffset) +
                            t * (isKey ? kStrideT : vStrideT) + hh * dim + d) *
                               srcBytes;
  };
  for (bool isKey : {true, false})
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t hh = 0; hh < h; ++hh)
        for (int64_t d = 0; d < (isKey ? kd : vd); ++d) {
          unsigned char *p = srcAt(isKey, t, hh, d);
          if (!desc.quant) {
            fillSourceValues(p, 1, desc.sourceDtype, desc.cacheDtype, env.rng);
            continue;
          }
          float s = scales[isKey ? 0 : 1]
                          [staticScaleIndex(desc, t, hh, blockOf(slots[t]))];
          storeBits(p, desc.sourceDtype,
                    floatToElement(quantSourceValue(desc.quant->kind, s,
                                                    /*specials=*/true, env.rng,
                                                    /*outliers=*/true),
                                   desc.sourceDtype));
        }

  // The packed layer buffer, poisoned; the expected image starts as the
  // same poison.
  auto packedOffset = [&](bool isKey, int64_t b, int64_t hh, int64_t pos,
                          int64_t d) {
    int64_t slotRow =
        tokenMajor ? (b * bs + pos) * h + hh : (b * h + hh) * bs + pos;
    return slotRow * c + (isKey ? 0 : kd) + d;
  };
  size_t cacheSize = static_cast<size_t>(nb * bs * h * c) * cacheBytes;
  std::vector<unsigned char> expected(cacheSize), got(cacheSize);
  fillPoison(expected.data(), cacheSize, env.rng());
  std::vector<unsigned char> poison = expected;

  bool refused = spec.valueOfKeySize || spec.valueCacheOfKeySize;
  if (!refused)
    for (int64_t t = 0; t < tokens; ++t) {
      int64_t slot = slots[t];
      if (slot < 0 || slot / bs >= nb)
        continue;
      int64_t b = slot / bs, pos = slot % bs;
      for (bool isKey : {true, false})
        for (int64_t hh = 0; hh < h; ++hh)
          for (int64_t d = 0; d < (isKey ? kd : vd); ++d) {
            uint32_t bits = loadBits(srcAt(isKey, t, hh, d), desc.sourceDtype);
            uint32_t stored;
            if (desc.quant) {
              float s = scales[isKey ? 0 : 1][staticScaleIndex(desc, t, hh, b)];
              stored = quantize(desc.quant->kind,
                                elementToFloat(bits, desc.sourceDtype), s,
                                desc.quant->reciprocal);
            } else {
              stored = convertElement(bits, desc.sourceDtype, desc.cacheDtype);
            }
            storeBits(expected.data() +
                          packedOffset(isKey, b, hh, pos, d) * cacheBytes,
                      desc.cacheDtype, stored);
          }
    }

  DeviceBuffer srcBuf(backend, source.size()), cacheBuf(backend, cacheSize),
      slotBuf(backend, slots.size() * 8 + 8),
      kScaleBuf(backend, scales[0].size() * 4 + 4),
      vScaleBuf(backend, scales[1].size() * 4 + 4);
  if (!srcBuf.valid() || !cacheBuf.valid() || !slotBuf.valid() ||
      !kScaleBuf.valid() || !vScaleBuf.valid() ||
      !backend.copyToDevice(srcBuf.get(), source.data(), source.size()) ||
      !backend.copyToDevice(cacheBuf.get(), poison.data(), cacheSize) ||
      !backend.copyToDevice(slotBuf.get(), slots.data(), slots.size() * 8) ||
      !backend.copyToDevice(kScaleBuf.get(), scales[0].data(),
                            scales[0].size() * 4) ||
      !backend.copyToDevice(vScaleBuf.get(), scales[1].data(),
                            scales[1].size() * 4)) {
    failure = "device buffers: " + backend.lastError();
    return false;
  }

  DLDataType srcType = toDLDataType(desc.sourceDtype);
  DLDataType cacheType = toDLDataType(desc.cacheDtype);
  int64_t vGiven = spec.valueOfKeySize ? kd : vd;
  TensorArg key(srcBuf.get(), static_cast<uint64_t>(kOffset * srcBytes), device,
                srcType, {tokens, h, kd}, {kStrideT, kd, 1});
  TensorArg value(srcBuf.get(), static_cast<uint64_t>(vOffset * srcBytes),
                  device, srcType, {tokens, h, vGiven}, {vStrideT, vd, 1});
  // The cache views: [nb, bs, H, D] (NHD) or [nb, H, bs, D] (HND,
  // contiguous) of rows c elements apart.
  std::vector<int64_t> strides =
      tokenMajor ? std::vector<int64_t>{bs * h * c, h * c, c, 1}
                 : std::vector<int64_t>{h * bs * c, bs * c, c, 1};
  auto shape = [&](int64_t dim) {
    return tokenMajor ? std::vector<int64_t>{nb, bs, h, dim}
                      : std::vector<int64_t>{nb, h, bs, dim};
  };
  TensorArg keyCache(cacheBuf.get(), 0, device, cacheType, shape(kd), strides);
  TensorArg valueCache(cacheBuf.get(), static_cast<uint64_t>(kd * cacheBytes),
                       device, cacheType,
                       shape(spec.valueCacheOfKeySize ? kd : vd), strides);
  TensorArg slotArg(slotBuf.get(), 0, device, {kDLInt, 64, 1}, {tokens}, {1});
  TensorArg kScale, vScale;
  if (desc.quant) {
    std::vector<int64_t> compact = TensorView::compactStrides(scaleShape);
    kScale = TensorArg(kScaleBuf.get(), 0, device, {kDLFloat, 32, 1},
                       scaleShape, compact);
    vScale = TensorArg(vScaleBuf.get(), 0, device, {kDLFloat, 32, 1},
                       scaleShape, compact);
  }

  kvrt_append_args args = KVRT_ARGS_INIT(kvrt_append_args);
  args.kernel = desc.name.c_str();
  args.key = key.get();
  args.value = value.get();
  args.slot_mapping = slotArg.get();
  args.key_cache = keyCache.get();
  args.value_cache = valueCache.get();
  args.variant = spec.variant;
  args.key_scale = kScale.get();
  args.value_scale = vScale.get();
  kvrt_status status = kvrt_append(env.bundle, &args, backend.stream());
  if (!answered(status, refused, spec.message, failure))
    return false;
  if (!backend.synchronize() ||
      !backend.copyToHost(got.data(), cacheBuf.get(), cacheSize)) {
    failure = "reading the cache back: " + backend.lastError();
    return false;
  }
  env.bytesCompared += static_cast<int64_t>(cacheSize);
  for (size_t i = 0; i < cacheSize; i += cacheBytes) {
    if (std::memcmp(got.data() + i, expected.data() + i, cacheBytes) == 0)
      continue;
    int64_t e = static_cast<int64_t>(i / cacheBytes);
    int64_t within = e % c, slotRow = e / c;
    bool isKey = within < kd;
    int64_t hh = tokenMajor ? slotRow % h : (slotRow / bs) % h;
    int64_t pos = tokenMajor ? (slotRow / h) % bs : slotRow % bs;
    int64_t b = tokenMajor ? slotRow / (h * bs) : slotRow / (h * bs);
    std::ostringstream os;
    os << (isKey ? "key_cache" : "value_cache") << "[block " << b << ", pos "
       << pos << ", head " << hh << ", d " << (isKey ? within : within - kd)
       << "] is 0x" << std::hex << loadBits(got.data() + i, desc.cacheDtype)
       << ", expected 0x" << loadBits(expected.data() + i, desc.cacheDtype)
       << (std::memcmp(expected.data() + i, poison.data() + i, cacheBytes) == 0
               ? " (its poison: nothing may write it)"
               : "");
    failure = os.str();
    return false;
  }
  return true;
}

void add(std::vector<AsymmetricCase> &cases, const std::string &name,
         std::function<std::vector<int64_t>(Runner &)> slots, Spec spec) {
  cases.push_back(
      {name, [slots, spec](AsymmetricCaseEnv &env, std::string &failure) {
         Runner runner(env);
         return runner.run(slots(runner), spec, failure);
       }});
}

} // namespace

std::vector<Description> asymmetricMatrix() {
  QuantSpec fp8Tensor{QuantKind::FP8E4M3, Granularity::PerTensor,
                      ScaleMode::Static, false};
  QuantSpec fp8Head{QuantKind::FP8E4M3, Granularity::PerHead, ScaleMode::Static,
                    false};
  QuantSpec int8TokenHead{QuantKind::Int8, Granularity::PerTokenHead,
                          ScaleMode::Static, true};
  return {
      // K 192 / V 128 (an MLA model's attention heads, vLLM's test).
      asym(Layout::PagedNHD, 16, 8, 192, 128, DType::BF16, DType::BF16),
      asym(Layout::PagedHND, 16, 8, 192, 128, DType::BF16, DType::BF16),
      // vLLM's tiny head: 16 / 8 elements, one head.
      asym(Layout::PagedHND, 16, 1, 16, 8, DType::BF16, DType::BF16),
      // V longer than K, a cast, a layout without blocks.
      asym(Layout::Contiguous, 40, 2, 64, 128, DType::F32, DType::F16),
      // A block size that is not a power of two.
      asym(Layout::PagedNHD, 3, 4, 96, 32, DType::F16, DType::F16),
      // fp8, as vLLM's test: per tensor and per head.
      asym(Layout::PagedNHD, 16, 8, 192, 128, DType::BF16, DType::F8E4M3,
           fp8Tensor),
      asym(Layout::PagedHND, 16, 8, 192, 128, DType::BF16, DType::F8E4M3,
           fp8Head),
      asym(Layout::PagedNHD, 16, 2, 32, 16, DType::BF16, DType::F8E4M3,
           fp8Head),
      asym(Layout::PagedHND, 5, 2, 64, 32, DType::F16, DType::I8,
           int8TokenHead),
  };
}

std::vector<AsymmetricCase> asymmetricCases(const Description &desc,
                                            bool wide) {
  std::vector<AsymmetricCase> cases;
  auto decode = [](Runner &r) { return r.decodeSlots(); };
  auto prefill = [](Runner &r) { return r.prefillSlots(); };
  add(cases, "decode", decode, {});
  add(cases, "prefill", prefill, {});
  Spec fused;
  fused.fusedSource = true;
  add(cases, "fused_source", prefill, fused);
  Spec scalar;
  scalar.variant = KVRT_VARIANT_SCALAR;
  add(cases, "scalar", prefill, scalar);
  // The vector variant, where the packed rows keep its 16-byte promise.
  int64_t rowBytes = (desc.headDim + desc.valueHeadDim()) *
                     static_cast<int64_t>(dtypeBytes(desc.cacheDtype));
  int64_t keyBytes =
      desc.headDim * static_cast<int64_t>(dtypeBytes(desc.cacheDtype));
  if (rowBytes % 16 == 0 && keyBytes % 16 == 0) {
    Spec vector;
    vector.variant = KVRT_VARIANT_VECTOR;
    add(cases, "vector", prefill, vector);
    if (wide) {
      Spec forced;
      forced.variant = KVRT_VARIANT_WIDE;
      add(cases, "prefill/wide", prefill, forced);
    }
  }
  Spec badValue;
  badValue.valueOfKeySize = true;
  badValue.message = "value: shape[2] (v_head_dim) is " +
                     std::to_string(desc.headDim) + " but";
  add(cases, "refuse_value_of_head_dim", decode, badValue);
  Spec badValueCache;
  badValueCache.valueCacheOfKeySize = true;
  badValueCache.message = "value_cache: shape[3] (v_head_dim) is " +
                          std::to_string(desc.headDim) + " but";
  add(cases, "refuse_value_cache_of_head_dim", decode, badValueCache);
  return cases;
}

} // namespace kvgen::conformance
