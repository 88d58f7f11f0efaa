//===- InlineScalesCases.cpp - latent entries with inline scales ----------===//
//
// A latent entry with inline scales is bytes: kv_lora_rank values quantized
// in groups of group_size, each group's f32 scale, then rope_dim RoPE values
// in the source dtype (docs/CONTRACT.md, "Latent entries with inline
// scales"). The reference below writes that definition out in plain C++ on
// the host: a group's scale is amax / qmax in fp32 (amax over the finite
// magnitudes), at least min_scale or else 1 for a group of zeros, raised to
// the next power of two where asked (frexp/ldexp, a scale below 2^-126
// becoming 2^-126); a value is the quantization kind's saturating rounding of
// x / scale (conformance/Quant.h). Each case poisons the whole cache
// (padding included), appends, and compares every byte with the expected
// image: the entries of the valid slots and the poison everywhere else.
//
//===----------------------------------------------------------------------===//

#include "conformance/InlineScalesCases.h"

#include "conformance/Float16.h"
#include "conformance/Harness.h"
#include "conformance/Quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>

namespace kvgen::conformance {

namespace {

Description inlineScales(int64_t blockSize, int64_t rank, int64_t rope,
                         int64_t group, DType source, QuantKind kind,
                         float minScale, bool powerOfTwo) {
  Description d;
  d.kind = Kind::MlaAppend;
  d.layout = Layout::PagedNHD;
  d.blockSize = blockSize;
  d.numKvHeads = 1;
  d.headDim = rank + rope;
  d.kvLoraRank = rank;
  d.ropeDim = rope;
  d.sourceDtype = source;
  d.cacheDtype = storageType(kind);
  d.quant = QuantSpec{kind, Granularity::PerToken, ScaleMode::Dynamic, false};
  d.kOnly = true;
  d.inlineGroup = group;
  d.inlineMinScale = minScale;
  d.inlinePowerOfTwo = powerOfTwo;
  std::ostringstream os;
  os << "inline_scales_bs" << blockSize << "_r" << rank << "_p" << rope << "_g"
     << group << "_" << dtypeName(d.cacheDtype) << "_from_" << dtypeName(source)
     << (minScale > 0 ? "_floor" : "") << (powerOfTwo ? "_pow2" : "");
  d.name = os.str();
  return d;
}

/// Source element `v` (fp32) stored in `type` (round to nearest even).
void storeSource(unsigned char *at, DType type, float v) {
  if (type == DType::F32) {
    std::memcpy(at, &v, 4);
    return;
  }
  uint16_t bits = type == DType::BF16 ? floatToBfloat16(v) : floatToHalf(v);
  std::memcpy(at, &bits, 2);
}

float loadSource(const unsigned char *at, DType type) {
  if (type == DType::F32) {
    float v;
    std::memcpy(&v, at, 4);
    return v;
  }
  uint16_t bits;
  std::memcpy(&bits, at, 2);
  return type == DType::BF16 ? bfloat16ToFloat(bits) : halfToFloat(bits);
}

/// The scale of a group of amax `amax`, by the description's rule.
float groupScale(const Description &d, float amax) {
  QuantKind kind = d.quant->kind;
  float s = amax / quantMax(kind);
  if (d.inlineMinScale > 0)
    s = std::max(s, d.inlineMinScale);
  else if (!(amax > 0))
    s = 1.0f;
  if (!d.inlinePowerOfTwo)
    return s;
  int e = 0;
  float m = std::frexp(s, &e); // s = m * 2^e, m in [0.5, 1)
  float p = m == 0.5f ? s : std::ldexp(1.0f, e);
  return std::max(p, std::ldexp(1.0f, -126));
}

/// How a case lays out its tensors and picks its values.
struct Spec {
  int64_t tokens = 3;
  /// Every `padEvery`-th token is padding (slot -1); 0: none.
  int64_t padEvery = 0;
  /// kv_c and k_pe as views of one [tokens, rank + rope] row (vLLM slices
  /// them so), else two compact tensors.
  bool sliced = false;
  /// Cache rows of 16 bytes more than the entry, blocks of one more row.
  bool padded = false;
  /// Groups of zeros, of one large value, of tiny values.
  bool extremes = false;
  kvrt_variant variant = KVRT_VARIANT_AUTO;
};

bool runCase(InlineScalesCaseEnv &env, const Spec &spec, std::string &failure) {
  const Description &d = env.desc;
  Backend &backend = env.backend;
  const int64_t rank = d.kvLoraRank, rope = d.ropeDim, group = d.inlineGroup;
  const int64_t groups = rank / group;
  const int64_t srcBytes = static_cast<int64_t>(dtypeBytes(d.sourceDtype));
  const int64_t entry = d.entryBytes();
  const int64_t rowBytes = entry + (spec.padded ? 16 : 0);
  const int64_t rowsPerBlock = d.blockSize + (spec.padded ? 1 : 0);
  const int64_t numBlocks =
      std::max<int64_t>(3, (spec.tokens + d.blockSize - 1) / d.blockSize + 1);
  const int64_t capacity = numBlocks * d.blockSize;
  const int64_t tokens = spec.tokens;

  // Distinct slots over the whole cache, some of them padding.
  std::vector<int64_t> all(capacity);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), env.rng);
  std::vector<int64_t> slots(all.begin(), all.begin() + tokens);
  if (spec.padEvery)
    for (int64_t t = spec.padEvery - 1; t < tokens; t += spec.padEvery)
      slots[t] = -1;

  // The values: normal draws of a spread of magnitudes per group.
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-6, 6);
  const int64_t row = rank + rope;
  std::vector<unsigned char> source(
      static_cast<size_t>(tokens * row * srcBytes));
  auto at = [&](int64_t t, int64_t e) {
    return source.data() + (t * row + e) * srcBytes;
  };
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t g = 0; g <= groups; ++g) {
      float mag = std::ldexp(1.0f, exponent(env.rng));
      int64_t lo = g * group, hi = g < groups ? lo + group : row;
      for (int64_t e = lo; e < hi; ++e) {
        float v = normal(env.rng) * mag;
        if (spec.extremes && g < groups) {
          if ((t + g) % 3 == 0)
            v = 0.0f; // a group of zeros: the floor, or 1
          else if ((t + g) % 3 == 1)
            v = e == lo + 1 ? 60000.0f : v * 1e-3f; // one value sets amax
          else
            v *= 1e-6f; // tiny values: subnormal fp8 codes
        }
        storeSource(at(t, e), d.sourceDtype, v);
      }
    }

  // The expected cache: poison, then the valid slots' entries.
  const size_t cacheSize =
      static_cast<size_t>(numBlocks * rowsPerBlock * rowBytes);
  std::vector<unsigned char> expected(cacheSize), got(cacheSize);
  fillPoison(expected.data(), cacheSize, env.rng());
  std::vector<unsigned char> poison = expected;
  for (int64_t t = 0; t < tokens; ++t) {
    if (slots[t] < 0)
      continue;
    unsigned char *e =
        expected.data() +
        (slots[t] / d.blockSize * rowsPerBlock + slots[t] % d.blockSize) *
            rowBytes;
    for (int64_t g = 0; g < groups; ++g) {
      float amax = 0.0f;
      for (int64_t i = g * group; i < (g + 1) * group; ++i)
        amax = foldAmax(amax, loadSource(at(t, i), d.sourceDtype));
      float s = groupScale(d, amax);
      for (int64_t i = g * group; i < (g + 1) * group; ++i)
        e[i] = quantize(d.quant->kind, loadSource(at(t, i), d.sourceDtype), s,
                        /*reciprocal=*/false);
      std::memcpy(e + rank + 4 * g, &s, 4);
    }
    std::memcpy(e + rank + 4 * groups, at(t, rank),
                static_cast<size_t>(rope * srcBytes));
  }

  // kv_c and k_pe: views of one row, or two compact tensors.
  std::vector<unsigned char> uploaded = source;
  uint64_t peOffset = static_cast<uint64_t>(rank * srcBytes);
  int64_t cStride = row, pStride = row;
  if (!spec.sliced) {
    uploaded.assign(source.size(), 0);
    for (int64_t t = 0; t < tokens; ++t) {
      std::memcpy(uploaded.data() + t * rank * srcBytes, at(t, 0),
                  static_cast<size_t>(rank * srcBytes));
      std::memcpy(uploaded.data() + (tokens * rank + t * rope) * srcBytes,
                  at(t, rank), static_cast<size_t>(rope * srcBytes));
    }
    peOffset = static_cast<uint64_t>(tokens * rank * srcBytes);
    cStride = rank;
    pStride = rope;
  }
  DeviceBuffer srcBuf(backend, uploaded.size() + 16),
      cacheBuf(backend, cacheSize), slotBuf(backend, slots.size() * 8 + 8);
  if (!srcBuf.valid() || !cacheBuf.valid() || !slotBuf.valid() ||
      !backend.copyToDevice(srcBuf.get(), uploaded.data(), uploaded.size()) ||
      !backend.copyToDevice(cacheBuf.get(), poison.data(), cacheSize) ||
      !backend.copyToDevice(slotBuf.get(), slots.data(), slots.size() * 8)) {
    failure = "device buffers: " + backend.lastError();
    return false;
  }
  DLDevice device = backend.device();
  DLDataType srcType = toDLDataType(d.sourceDtype);
  TensorArg kvC(srcBuf.get(), 0, device, srcType, {tokens, rank}, {cStride, 1});
  TensorArg kPe(srcBuf.get(), peOffset, device, srcType, {tokens, rope},
                {pStride, 1});
  TensorArg slotArg(slotBuf.get(), 0, device, {kDLInt, 64, 1}, {tokens}, {1});
  // A view of the cache's first block_size rows of entry bytes.
  TensorArg cacheArg(cacheBuf.get(), 0, device, toDLDataType(d.cacheDtype),
                     {numBlocks, d.blockSize, entry},
                     {rowsPerBlock * rowBytes, rowBytes, 1});
  kvrt_mla_append_args args = KVRT_ARGS_INIT(kvrt_mla_append_args);
  args.kernel = d.name.c_str();
  args.kv_c = kvC.get();
  args.k_pe = kPe.get();
  args.slot_mapping = slotArg.get();
  args.key_cache = cacheArg.get();
  args.variant = spec.variant;
  if (kvrt_mla_append(env.bundle, &args, backend.stream()) != KVRT_SUCCESS) {
    failure = std::string("kvrt_mla_append: ") + kvrt_last_error();
    return false;
  }
  std::vector<unsigned char> after(uploaded.size());
  if (!backend.synchronize() ||
      !backend.copyToHost(got.data(), cacheBuf.get(), cacheSize) ||
      !backend.copyToHost(after.data(), srcBuf.get(), uploaded.size())) {
    failure = "copy back: " + backend.lastError();
    return false;
  }
  if (after != uploaded) {
    failure = "the append wrote into kv_c or k_pe";
    return false;
  }
  env.bytesCompared += static_cast<int64_t>(cacheSize);
  for (size_t i = 0; i < cacheSize; ++i) {
    if (got[i] == expected[i])
      continue;
    int64_t r = static_cast<int64_t>(i) / rowBytes;
    int64_t b = static_cast<int64_t>(i) % rowBytes;
    std::ostringstream os;
    os << "byte " << b << " of row " << r % rowsPerBlock << " of block "
       << r / rowsPerBlock << " ("
       << (b >= entry                        ? "row padding"
           : r % rowsPerBlock >= d.blockSize ? "block padding"
           : b < rank                        ? "a latent value"
           : b < rank + 4 * groups           ? "a scale"
                                             : "the RoPE part")
       << "): got 0x" << std::hex << int(got[i]) << ", expected 0x"
       << int(expected[i]) << (poison[i] == expected[i] ? " (poison)" : "");
    failure = os.str();
    return false;
  }
  return true;
}

} // namespace

std::vector<Description> inlineScalesMatrix() {
  std::vector<Description> m;
  // DeepSeek V3.2's fp8_ds_mla (vLLM's block sizes 64), its nope rows, an
  // f16 source.
  m.push_back(inlineScales(64, 512, 64, 128, DType::BF16, QuantKind::FP8E4M3,
                           1e-4f, true));
  m.push_back(inlineScales(16, 512, 0, 128, DType::BF16, QuantKind::FP8E4M3,
                           1e-4f, true));
  m.push_back(inlineScales(16, 512, 64, 128, DType::F16, QuantKind::FP8E4M3,
                           1e-4f, true));
  // Other kinds and groups: e5m2 in groups of 64; int8 of an f32 source in
  // groups of 32 with f32 RoPE, plain dynamic scales, 3 slots a block.
  m.push_back(inlineScales(16, 256, 32, 64, DType::BF16, QuantKind::FP8E5M2,
                           0.0f, true));
  m.push_back(
      inlineScales(3, 256, 32, 32, DType::F32, QuantKind::Int8, 0.0f, false));
  return m;
}

std::vector<InlineScalesCase> inlineScalesCases(const Description &desc) {
  (void)desc;
  std::vector<InlineScalesCase> cases;
  auto add = [&](const char *name, Spec spec) {
    cases.push_back(
        {name, [spec](InlineScalesCaseEnv &env, std::string &failure) {
           return runCase(env, spec, failure);
         }});
  };
  add("decode", Spec{});
  add("prefill_with_padding", Spec{200, 7});
  add("sliced_rows", Spec{40, 5, /*sliced=*/true});
  add("padded_cache", Spec{40, 0, false, /*padded=*/true});
  add("zeros_and_extremes", Spec{40, 0, false, false, /*extremes=*/true});
  add("scalar", Spec{40, 3, true, true, true, KVRT_VARIANT_SCALAR});
  return cases;
}

} // namespace kvgen::conformance
