//===- Nvfp4Cases.cpp - NVFP4 caches, every byte --------------------------===//
//
// The reference follows docs/CONTRACT.md's "NVFP4" steps: each an f32
// operation rounded to nearest even (computed in double and rounded once to
// float, which is the correctly rounded f32 result of one +, -, *, /), the
// e4m3 and e2m1 roundings by the nearest value of their tables, ties to the
// even code. It shares no code with the lowering.
//
//===----------------------------------------------------------------------===//

#include "conformance/Nvfp4Cases.h"

#include "conformance/Float16.h"
#include "conformance/Harness.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <sstream>

namespace kvgen::conformance {

namespace {

constexpr int64_t kGroup = 16;

Description nvfp4(Layout layout, int64_t blockSize, int64_t heads,
                  int64_t headDim, DType source, bool kSwizzled, bool vSwizzled,
                  bool fourOverSix) {
  Description d;
  d.kind = Kind::Append;
  d.layout = layout;
  d.blockSize = blockSize;
  d.numKvHeads = heads;
  d.headDim = headDim;
  d.sourceDtype = source;
  d.cacheDtype = DType::I8;
  d.nvfp4 = true;
  d.nvfp4KSwizzled = kSwizzled;
  d.nvfp4VSwizzled = vSwizzled;
  d.nvfp4FourOverSix = fourOverSix;
  std::ostringstream os;
  os << "nvfp4_" << layoutName(layout) << "_bs" << blockSize << "_h" << heads
     << "_d" << headDim << "_from_" << dtypeName(source) << "_k"
     << (kSwizzled ? "swizzled" : "linear") << "_v"
     << (vSwizzled ? "swizzled" : "linear")
     << (fourOverSix ? "_four_over_six" : "");
  d.name = os.str();
  return d;
}

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

// One rounded f32 operation.
float mul(float a, float b) {
  return static_cast<float>(static_cast<double>(a) * b);
}
float sub(float a, float b) {
  return static_cast<float>(static_cast<double>(a) - b);
}
float add(float a, float b) {
  return static_cast<float>(static_cast<double>(a) + b);
}
float div(float a, float b) {
  return static_cast<float>(static_cast<double>(a) / b);
}

/// The magnitudes of e4m3 (codes 0 to 0x7E) and e2m1 (codes 0 to 7).
double e4m3Magnitude(int code) {
  int e = code >> 3, m = code & 7;
  return e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1 + m / 8.0, e - 7);
}
constexpr double kE2M1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};

/// The code of the nearest magnitude, ties to the even code.
template <typename Magnitude>
int nearest(double a, int count, Magnitude magnitude) {
  int best = 0;
  for (int i = 1; i < count; ++i) {
    double d = std::fabs(magnitude(i) - a), bd = std::fabs(magnitude(best) - a);
    if (d < bd || (d == bd && i % 2 == 0 && best % 2 != 0))
      best = i;
  }
  return best;
}

uint8_t e4m3(float x) {
  if (std::isnan(x))
    return 0x7F;
  uint8_t sign = std::signbit(x) ? 0x80 : 0;
  double a = std::fabs(static_cast<double>(x));
  if (a >= 448)
    return sign | 0x7E;
  return sign | nearest(a, 0x7F, e4m3Magnitude);
}

float e4m3Value(uint8_t code) {
  float v = static_cast<float>(e4m3Magnitude(code & 0x7F));
  return code & 0x80 ? -v : v;
}

uint8_t e2m1(float x) {
  if (std::isnan(x))
    return 0;
  uint8_t sign = std::signbit(x) ? 8 : 0;
  double a = std::fabs(static_cast<double>(x));
  if (a >= 6)
    return sign | 7;
  return sign | nearest(a, 8, [](int i) { return kE2M1[i]; });
}

float e2m1Value(uint8_t code) {
  float v = static_cast<float>(kE2M1[code & 7]);
  return code & 8 ? -v : v;
}

struct Candidate {
  uint8_t scale;
  std::array<uint8_t, kGroup> q;
  float factor;
};

Candidate candidate(const float *x, float amax, float g, float invG, float d) {
  Candidate c;
  c.scale = e4m3(mul(g, mul(amax, div(1.0f, d))));
  float s = e4m3Value(c.scale);
  c.factor = s != 0.0f ? div(1.0f, mul(s, invG)) : 0.0f;
  for (int i = 0; i < kGroup; ++i)
    c.q[i] = e2m1(mul(x[i], c.factor));
  return c;
}

float error(const float *x, const Candidate &c) {
  float e = c.factor != 0.0f ? div(1.0f, c.factor) : 0.0f;
  float err = 0.0f;
  for (int i = 0; i < kGroup; i += 2) {
    float dx = sub(mul(e2m1Value(c.q[i]), e), x[i]);
    float dy = sub(mul(e2m1Value(c.q[i + 1]), e), x[i + 1]);
    err = add(err, add(mul(dx, dx), mul(dy, dy)));
  }
  return err;
}

/// A group's scale byte and its eight bytes of values.
Candidate group(const float *x, float k, bool fourOverSix) {
  float g = div(1.0f, k);
  float invG = div(1.0f, g);
  float amax = 0.0f;
  for (int i = 0; i < kGroup; ++i)
    if (std::isfinite(x[i]))
      amax = std::max(amax, std::fabs(x[i]));
  Candidate six = candidate(x, amax, g, invG, 6.0f);
  if (!fourOverSix)
    return six;
  Candidate four = candidate(x, amax, g, invG, 4.0f);
  return error(x, four) < error(x, six) ? four : six;
}

/// How a case lays out its tensors and picks its values.
struct Spec {
  int64_t tokens = 3;
  /// Every `padEvery`-th token is padding (slot -1); 0: none.
  int64_t padEvery = 0;
  /// NaN, infinities, zero groups, groups whose scale saturates e4m3.
  bool extremes = false;
  kvrt_variant variant = KVRT_VARIANT_AUTO;
};

bool runCase(Nvfp4CaseEnv &env, const Spec &spec, std::string &failure) {
  const Description &d = env.desc;
  Backend &backend = env.backend;
  const int64_t H = d.numKvHeads, D = d.headDim, T = d.blockSize;
  const int64_t S = D / kGroup, F = D / 2 + S;
  const int64_t side = T * H * F;
  const bool hnd = d.layout == Layout::PagedHND;
  const int64_t srcBytes = static_cast<int64_t>(dtypeBytes(d.sourceDtype));
  const int64_t numBlocks = std::max<int64_t>(3, (spec.tokens + T - 1) / T + 1);
  const int64_t tokens = spec.tokens;

  std::vector<int64_t> all(numBlocks * T);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), env.rng);
  std::vector<int64_t> slots(all.begin(), all.begin() + tokens);
  if (spec.padEvery)
    for (int64_t t = spec.padEvery - 1; t < tokens; t += spec.padEvery)
      slots[t] = -1;

  // K then V, each [tokens, H, D] compact; a spread of magnitudes a group.
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-8, 8);
  const int64_t rowElems = H * D;
  std::vector<unsigned char> source(
      static_cast<size_t>(2 * tokens * rowElems * srcBytes));
  auto at = [&](int sideIndex, int64_t t, int64_t e) {
    return source.data() + ((sideIndex * tokens + t) * rowElems + e) * srcBytes;
  };
  const float inf = std::numeric_limits<float>::infinity();
  for (int s = 0; s < 2; ++s)
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t g = 0; g < rowElems / kGroup; ++g) {
        float mag = std::ldexp(1.0f, exponent(env.rng));
        for (int64_t i = 0; i < kGroup; ++i) {
          float v = normal(env.rng) * mag;
          if (spec.extremes) {
            int64_t pick = (t + g + s) % 5;
            if (pick == 0)
              v = 0.0f;
            else if (pick == 1 && i == 3)
              v = (g % 2) ? std::numeric_limits<float>::quiet_NaN() : -inf;
            else if (pick == 2)
              v *= 1e4f; // the scale saturates at 448
          }
          storeSource(at(s, t, g * kGroup + i), d.sourceDtype, v);
        }
      }
  const float scales[2] = {0.0375f, 1.5f};

  // vLLM's buffer: [num_blocks, 2, T, H, F] (NHD) or [num_blocks, 2, H, T,
  // F] (HND); each side's block is [values | scales].
  const size_t cacheSize = static_cast<size_t>(numBlocks * 2 * side);
  std::vector<unsigned char> expected(cacheSize), got(cacheSize);
  fillPoison(expected.data(), cacheSize, env.rng());
  std::vector<unsigned char> poison = expected;
  for (int64_t t = 0; t < tokens; ++t) {
    if (slots[t] < 0)
      continue;
    int64_t blk = slots[t] / T, pos = slots[t] % T;
    for (int s = 0; s < 2; ++s) {
      bool swizzled = s == 0 ? d.nvfp4KSwizzled : d.nvfp4VSwizzled;
      unsigned char *base = expected.data() + (blk * 2 + s) * side;
      for (int64_t h = 0; h < H; ++h) {
        int64_t row = hnd ? h * T + pos : pos * H + h;
        for (int64_t j = 0; j < S; ++j) {
          float x[kGroup];
          for (int64_t i = 0; i < kGroup; ++i)
            x[i] = loadSource(at(s, t, h * D + j * kGroup + i), d.sourceDtype);
          Candidate c = group(x, scales[s], d.nvfp4FourOverSix);
          for (int64_t b = 0; b < kGroup / 2; ++b)
            base[row * (D / 2) + j * 8 + b] =
                static_cast<unsigned char>(c.q[2 * b] | c.q[2 * b + 1] << 4);
          int64_t sRow = row, sj = j;
          if (swizzled) {
            int64_t grp = S / 4;
            int64_t tp = pos / 4 * 4 + j / grp;
            sj = j % grp * 4 + pos % 4;
            sRow = hnd ? h * T + tp : tp * H + h;
          }
          base[T * H * (D / 2) + sRow * S + sj] = c.scale;
        }
      }
    }
  }

  DeviceBuffer srcBuf(backend, source.size() + 16),
      cacheBuf(backend, cacheSize), slotBuf(backend, slots.size() * 8 + 8),
      scaleBuf(backend, 16);
  if (!srcBuf.valid() || !cacheBuf.valid() || !slotBuf.valid() ||
      !scaleBuf.valid() ||
      !backend.copyToDevice(srcBuf.get(), source.data(), source.size()) ||
      !backend.copyToDevice(cacheBuf.get(), poison.data(), cacheSize) ||
      !backend.copyToDevice(slotBuf.get(), slots.data(), slots.size() * 8) ||
      !backend.copyToDevice(scaleBuf.get(), scales, sizeof(scales))) {
    failure = "device buffers: " + backend.lastError();
    return false;
  }
  DLDevice device = backend.device();
  DLDataType srcType = toDLDataType(d.sourceDtype);
  DLDataType u8{kDLUInt, 8, 1};
  DLDataType f32{kDLFloat, 32, 1};
  uint64_t vOffset = static_cast<uint64_t>(tokens * rowElems * srcBytes);
  TensorArg key(srcBuf.get(), 0, device, srcType, {tokens, H, D},
                {H * D, D, 1});
  TensorArg value(srcBuf.get(), vOffset, device, srcType, {tokens, H, D},
                  {H * D, D, 1});
  TensorArg slotArg(slotBuf.get(), 0, device, {kDLInt, 64, 1}, {tokens}, {1});
  // The sides as vLLM's views, in the layout's axes: NHD [B, T, H, F], HND
  // [B, H, T, F]; block stride two sides.
  std::vector<int64_t> shape = hnd ? std::vector<int64_t>{numBlocks, H, T, F}
                                   : std::vector<int64_t>{numBlocks, T, H, F};
  std::vector<int64_t> strides =
      hnd ? std::vector<int64_t>{2 * side, T * F, F, 1}
          : std::vector<int64_t>{2 * side, H * F, F, 1};
  TensorArg kCache(cacheBuf.get(), 0, device, u8, shape, strides);
  TensorArg vCache(cacheBuf.get(), static_cast<uint64_t>(side), device, u8,
                   shape, strides);
  TensorArg kScale(scaleBuf.get(), 0, device, f32, {1}, {1});
  TensorArg vScale(scaleBuf.get(), 4, device, f32, {1}, {1});
  kvrt_append_args args = KVRT_ARGS_INIT(kvrt_append_args);
  args.kernel = d.name.c_str();
  args.key = key.get();
  args.value = value.get();
  args.slot_mapping = slotArg.get();
  args.key_cache = kCache.get();
  args.value_cache = vCache.get();
  args.key_scale = kScale.get();
  args.value_scale = vScale.get();
  args.variant = spec.variant;
  if (kvrt_append(env.bundle, &args, backend.stream()) != KVRT_SUCCESS) {
    failure = std::string("kvrt_append: ") + kvrt_last_error();
    return false;
  }
  std::vector<unsigned char> after(source.size());
  if (!backend.synchronize() ||
      !backend.copyToHost(got.data(), cacheBuf.get(), cacheSize) ||
      !backend.copyToHost(after.data(), srcBuf.get(), source.size())) {
    failure = "copy back: " + backend.lastError();
    return false;
  }
  if (after != source) {
    failure = "the append wrote into key or value";
    return false;
  }
  env.bytesCompared += static_cast<int64_t>(cacheSize);
  for (size_t i = 0; i < cacheSize; ++i) {
    if (got[i] == expected[i])
      continue;
    int64_t inSide = static_cast<int64_t>(i) % side;
    int64_t s = static_cast<int64_t>(i) / side % 2;
    std::ostringstream os;
    os << "byte " << inSide << " of " << (s ? "V" : "K") << "'s block "
       << static_cast<int64_t>(i) / side / 2 << " ("
       << (inSide < T * H * (D / 2) ? "a value" : "a scale") << "): got 0x"
       << std::hex << int(got[i]) << ", expected 0x" << int(expected[i])
       << (poison[i] == expected[i] ? " (poison)" : "");
    failure = os.str();
    return false;
  }
  return true;
}

} // namespace

std::vector<Description> nvfp4Matrix() {
  std::vector<Description> m;
  // vLLM's nvfp4 (K linear, V swizzled) and nvfp4_4over6.
  m.push_back(
      nvfp4(Layout::PagedNHD, 16, 8, 128, DType::BF16, false, true, false));
  m.push_back(
      nvfp4(Layout::PagedHND, 16, 2, 64, DType::F16, false, true, true));
  // Linear scales of a head of 5 groups, from f32, 6 slots a block; both
  // swizzled at a block size of 4 (one tile).
  m.push_back(
      nvfp4(Layout::PagedNHD, 6, 3, 80, DType::F32, false, false, false));
  m.push_back(
      nvfp4(Layout::PagedHND, 4, 1, 256, DType::BF16, true, true, true));
  return m;
}

std::vector<Nvfp4Case> nvfp4Cases(const Description &desc) {
  (void)desc;
  std::vector<Nvfp4Case> cases;
  auto add = [&](const char *name, Spec spec) {
    cases.push_back({name, [spec](Nvfp4CaseEnv &env, std::string &failure) {
                       return runCase(env, spec, failure);
                     }});
  };
  add("decode", Spec{});
  add("prefill_with_padding", Spec{200, 7});
  add("extremes", Spec{40, 0, /*extremes=*/true});
  add("scalar", Spec{40, 3, true, KVRT_VARIANT_SCALAR});
  return cases;
}

} // namespace kvgen::conformance
