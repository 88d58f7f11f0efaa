//===- QuantHarness.cpp - Scales, gather outputs, the roundtrip -----------===//

#include "conformance/QuantHarness.h"

#include "conformance/Float16.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace kvgen::conformance {

static size_t roundUp256(size_t bytes) { return (bytes + 255) / 256 * 256; }

static int64_t product(const std::vector<int64_t> &values) {
  int64_t p = 1;
  for (int64_t v : values)
    p *= v;
  return p;
}

static float loadFloat(const unsigned char *p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}

static void storeFloat(unsigned char *p, float f) { std::memcpy(p, &f, 4); }

//===----------------------------------------------------------------------===//
// ScaleSet
//===----------------------------------------------------------------------===//

/// A random positive scale: 2^k, or 2^k times a random mantissa, with k in a
/// range that keeps qmax * scale well inside every source dtype (f16 tops
/// out at 65504).
static float randomScale(QuantKind kind, std::mt19937_64 &rng) {
  int lo = kind == QuantKind::FP8E5M2 ? -10 : -6;
  int k = lo + static_cast<int>(rng() % 7);
  float mantissa = 1.0f;
  if (rng() & 1)
    mantissa += static_cast<float>(rng() % 8192) / 8192;
  return std::ldexp(mantissa, k);
}

bool ScaleSet::create(Backend &backend, const Description &desc, int64_t rows,
                      int64_t numBlocks, std::mt19937_64 &rng,
                      std::string &error) {
  this->backend = &backend;
  this->desc = desc;
  this->rows = rows;
  blocks = numBlocks;
  dynamic = desc.quant->dynamic();
  shape = dynamic ? scaleCacheShape(desc, numBlocks)
                  : staticScaleShape(desc, rows, numBlocks);
  elements = static_cast<size_t>(product(shape));
  keyOffset = 256;
  valueOffset = keyOffset + roundUp256(elements * 4);
  size_t total = valueOffset + roundUp256(elements * 4) + 256;
  poison.resize(total);
  fillPoison(poison.data(), total, rng());
  if (!dynamic)
    for (size_t i = 0; i < elements; ++i) {
      storeFloat(&poison[keyOffset + 4 * i],
                 randomScale(desc.quant->kind, rng));
      storeFloat(&poison[valueOffset + 4 * i],
                 randomScale(desc.quant->kind, rng));
    }
  expected = poison;
  device = DeviceBuffer(backend, total);
  if (!device.valid()) {
    error = "allocating " + std::to_string(total) +
            " bytes of scales failed: " + backend.lastError();
    return false;
  }
  if (!backend.copyToDevice(device.get(), poison.data(), total)) {
    error = "copying the scales failed: " + backend.lastError();
    return false;
  }
  DLDevice dev = backend.device();
  DLDataType f32{kDLFloat, 32, 1};
  std::vector<int64_t> strides = TensorView::compactStrides(shape);
  TensorArg key(device.get() + keyOffset, 0, dev, f32, shape, strides);
  TensorArg value(device.get(), valueOffset, dev, f32, shape, strides);
  if (dynamic) {
    keyCacheArg = std::move(key);
    valueCacheArg = std::move(value);
  } else {
    keyScaleArg = std::move(key);
    valueScaleArg = std::move(value);
  }
  return true;
}

bool ScaleSet::fillScaleCaches(std::mt19937_64 &rng, std::string &error) {
  for (size_t i = 0; i < elements; ++i) {
    storeFloat(&poison[keyOffset + 4 * i], randomScale(desc.quant->kind, rng));
    storeFloat(&poison[valueOffset + 4 * i],
               randomScale(desc.quant->kind, rng));
  }
  expected = poison;
  if (!backend->copyToDevice(device.get(), poison.data(), poison.size())) {
    error = "copying the scales failed: " + backend->lastError();
    return false;
  }
  return true;
}

ScaleArgs ScaleSet::argsIn(std::vector<unsigned char> &image) const {
  ScaleArgs args;
  float *key = reinterpret_cast<float *>(&image[keyOffset]);
  float *value = reinterpret_cast<float *>(&image[valueOffset]);
  if (dynamic) {
    args.keyScaleCache = key;
    args.valueScaleCache = value;
  } else {
    args.keyScale = key;
    args.valueScale = value;
  }
  return args;
}

bool ScaleSet::readBack(std::vector<unsigned char> &image, std::string &error) {
  image.resize(expected.size());
  if (!backend->copyToHost(image.data(), device.get(), image.size())) {
    error = "copying the scales back failed: " + backend->lastError();
    return false;
  }
  return true;
}

float ScaleSet::staticScale(bool key, int64_t row, int64_t head,
                            int64_t block) const {
  if (dynamic)
    return 0;
  size_t at = key ? keyOffset : valueOffset;
  return loadFloat(
      &expected[at + 4 * staticScaleIndex(desc, row, head, block)]);
}

std::string ScaleSet::describeFloat(size_t byte) const {
  char text[160];
  for (bool key : {true, false}) {
    size_t begin = key ? keyOffset : valueOffset;
    if (byte < begin || byte >= begin + 4 * elements)
      continue;
    int64_t i = static_cast<int64_t>((byte - begin) / 4);
    const char *what = key ? "key" : "value";
    if (!dynamic) {
      std::snprintf(text, sizeof(text), "%s_scale[%" PRId64 "]", what, i);
    } else if (shape.size() == 2) {
      std::snprintf(text, sizeof(text),
                    "%s_scale_cache (block %" PRId64 ", pos %" PRId64 ")", what,
                    i / shape[1], i % shape[1]);
    } else {
      std::snprintf(text, sizeof(text),
                    "%s_scale_cache (block %" PRId64 ", pos %" PRId64
                    ", head %" PRId64 ")",
                    what, i / (shape[1] * shape[2]), i / shape[2] % shape[1],
                    i % shape[2]);
    }
    return text;
  }
  return "guard or gap around the scales";
}

bool ScaleSet::check(std::string &report, int maxShown) {
  std::vector<unsigned char> actual;
  if (!readBack(actual, report))
    return false;
  if (std::memcmp(actual.data(), expected.data(), actual.size()) == 0)
    return true;
  size_t differing = 0;
  int shown = 0;
  std::string details;
  for (size_t i = 0; i < actual.size(); i += 4) {
    if (std::memcmp(&actual[i], &expected[i], 4) == 0)
      continue;
    ++differing;
    if (shown++ >= maxShown)
      continue;
    bool wasPoison = std::memcmp(&actual[i], &poison[i], 4) == 0;
    bool shouldBePoison = std::memcmp(&expected[i], &poison[i], 4) == 0;
    char line[256];
    std::snprintf(line, sizeof(line), "\n    %s: expected %a, got %a%s",
                  describeFloat(i).c_str(), loadFloat(&expected[i]),
                  loadFloat(&actual[i]),
                  wasPoison        ? " (not written: still poison)"
                  : shouldBePoison ? " (written: should be untouched)"
                                   : "");
    details += line;
  }
  report = std::to_string(differing) + " scale words differ; first:" + details;
  return false;
}

//===----------------------------------------------------------------------===//
// OutputSet
//===----------------------------------------------------------------------===//

bool OutputSet::create(Backend &backend, const Description &desc, int64_t rows,
                       bool padded, uint64_t poisonSeed, std::string &error) {
  this->backend = &backend;
  this->desc = desc;
  this->rows = rows;
  const int64_t h = desc.numKvHeads, d = desc.headDim;
  const size_t elem = dtypeBytes(desc.outputDtype);
  // Padding of 16 bytes keeps every row 16-byte aligned (a vector variant
  // applies) while the token stride differs from H * D.
  rowStride = h * d + (padded ? static_cast<int64_t>(16 / elem) : 0);
  size_t one = roundUp256(static_cast<size_t>(rows * rowStride) * elem);
  valueOffset = guardBytes + one;
  size_t total = valueOffset + one + guardBytes;
  poison.resize(total);
  fillPoison(poison.data(), total, poisonSeed);
  expected = poison;
  device = DeviceBuffer(backend, total);
  if (!device.valid() ||
      !backend.copyToDevice(device.get(), poison.data(), total)) {
    error = "allocating or poisoning the gather outputs failed: " +
            backend.lastError();
    return false;
  }
  DLDevice dev = backend.device();
  DLDataType type = toDLDataType(desc.outputDtype);
  keyArg = TensorArg(device.get(), guardBytes, dev, type, {rows, h, d},
                     {rowStride, d, 1});
  valueArg = TensorArg(device.get() + valueOffset, 0, dev, type, {rows, h, d},
                       {rowStride, d, 1});
  return true;
}

TensorView OutputSet::view(bool key, unsigned char *base) const {
  TensorView v;
  v.data = base + (key ? guardBytes : valueOffset);
  v.dtype = desc.outputDtype;
  v.shape = {rows, desc.numKvHeads, desc.headDim};
  v.strides = {rowStride, desc.headDim, 1};
  return v;
}

bool OutputSet::readBack(std::vector<unsigned char> &image,
                         std::string &error) {
  image.resize(expected.size());
  if (!backend->copyToHost(image.data(), device.get(), image.size())) {
    error = "copying the gather outputs back failed: " + backend->lastError();
    return false;
  }
  return true;
}

static bool isNaNBits(uint32_t bits, DType type) {
  switch (type) {
  case DType::F32:
    return (bits & 0x7fffffff) > 0x7f800000;
  case DType::F16:
    return (bits & 0x7fff) > 0x7c00;
  case DType::BF16:
    return (bits & 0x7fff) > 0x7f80;
  default:
    return false;
  }
}

bool OutputSet::check(std::string &report, int maxShown) {
  std::vector<unsigned char> actual;
  if (!readBack(actual, report))
    return false;
  if (std::memcmp(actual.data(), expected.data(), actual.size()) == 0)
    return true;
  const size_t elem = dtypeBytes(desc.outputDtype);
  size_t differing = 0;
  int shown = 0;
  std::string details;
  for (size_t i = 0; i < actual.size(); i += elem) {
    if (std::memcmp(&actual[i], &expected[i], elem) == 0)
      continue;
    uint32_t want = loadBits(&expected[i], desc.outputDtype);
    uint32_t got = loadBits(&actual[i], desc.outputDtype);
    bool inOutput = i >= guardBytes && i < expected.size() - guardBytes;
    if (inOutput && isNaNBits(want, desc.outputDtype) &&
        isNaNBits(got, desc.outputDtype))
      continue;
    ++differing;
    if (shown++ >= maxShown)
      continue;
    char where[96];
    if (!inOutput) {
      std::snprintf(where, sizeof(where), "guard byte %zu", i);
    } else {
      bool key = i < valueOffset;
      int64_t e =
          static_cast<int64_t>((i - (key ? guardBytes : valueOffset)) / elem);
      int64_t row = e / rowStride, rest = e % rowStride;
      if (row >= rows || rest >= desc.numKvHeads * desc.headDim)
        std::snprintf(where, sizeof(where), "%s_out padding element %" PRId64,
                      key ? "key" : "value", e);
      else
        std::snprintf(where, sizeof(where),
                      "%s_out[%" PRId64 ", %" PRId64 ", %" PRId64 "]",
                      key ? "key" : "value", row, rest / desc.headDim,
                      rest % desc.headDim);
    }
    bool wasPoison = std::memcmp(&actual[i], &poison[i], elem) == 0;
    bool shouldBePoison = std::memcmp(&expected[i], &poison[i], elem) == 0;
    char line[256];
    std::snprintf(line, sizeof(line), "\n    %s: expected 0x%0*x, got 0x%0*x%s",
                  where, static_cast<int>(2 * elem), want,
                  static_cast<int>(2 * elem), got,
                  wasPoison        ? " (not written: still poison)"
                  : shouldBePoison ? " (written: should be untouched)"
                                   : "");
    details += line;
  }
  if (differing == 0)
    return true;
  report = std::to_string(differing) +
           " gather output elements differ; first:" + details;
  return false;
}

//===----------------------------------------------------------------------===//
// Values and the roundtrip
//===----------------------------------------------------------------------===//

float quantSourceValue(QuantKind kind, float scale, bool specials,
                       std::mt19937_64 &rng, bool outliers) {
  const float qmax = quantMax(kind);
  // log2 of the span from the smallest subnormal (or 1 for int8) to qmax.
  const int span = kind == QuantKind::FP8E4M3   ? 18
                   : kind == QuantKind::FP8E5M2 ? 32
                                                : 8;
  unsigned pick = static_cast<unsigned>(rng() % 100);
  float sign = rng() & 1 ? -1.0f : 1.0f;
  float y;
  if (pick < 55) {
    double u = static_cast<double>(rng() % 1000000) / 1000000 * (span + 1);
    y = static_cast<float>(qmax * std::exp2(-u));
  } else if (pick < 75) {
    // A code, or the midpoint between a code and the next: with a power of
    // two scale these stay exact ties through x = y * s.
    if (kind == QuantKind::Int8) {
      y = static_cast<float>(rng() % 127) + (rng() & 1 ? 0.5f : 0.0f);
    } else {
      uint8_t code = static_cast<uint8_t>(
          rng() % (kind == QuantKind::FP8E4M3 ? 0x7e : 0x7b));
      y = decode(kind, code);
      if (rng() & 1)
        y = (y + decode(kind, code + 1)) / 2;
    }
  } else if (pick < 87) {
    y = qmax * (1.0f + static_cast<float>(rng() % 1000) / 250); // saturates
  } else if (pick < 92) {
    y = 0.0f;
  } else if (specials && pick < 94) {
    return sign * INFINITY;
  } else if (specials && pick < 96) {
    return NAN;
  } else if (outliers && pick < 97) {
    // Finite, past 2^60 (a bf16 source keeps it; f16 makes it infinite).
    return sign * std::ldexp(1.0f + static_cast<float>(rng() % 128) / 128,
                             61 + static_cast<int>(rng() % 66));
  } else if (outliers && pick < 98) {
    // Nonzero, under 2^-60: bf16 keeps it (as a subnormal below 2^-126),
    // f16 flushes it to zero.
    return sign * std::ldexp(1.0f + static_cast<float>(rng() % 128) / 128,
                             -133 + static_cast<int>(rng() % 73));
  } else {
    y = qmax * static_cast<float>(rng() % 1000) / 1000;
  }
  return sign * y * scale;
}

static float groupScale(const Description &desc, const ScaleArgs &scales,
                        bool key, int64_t row, int64_t head, int64_t block,
                        int64_t pos) {
  if (desc.quant->dynamic())
    return (
        key ? scales.keyScaleCache
            : scales.valueScaleCache)[scaleCacheIndex(desc, block, pos, head)];
  return (key ? scales.keyScale
              : scales.valueScale)[staticScaleIndex(desc, row, head, block)];
}

bool checkRoundtrip(const Description &desc, const TensorView &key,
                    const TensorView &value, const std::vector<int64_t> &slots,
                    int64_t numBlocks, const ScaleArgs &scales,
                    const TensorView &keyGathered,
                    const TensorView &valueGathered, std::string &report,
                    int maxShown) {
  const QuantSpec &quant = *desc.quant;
  const float qmax = quantMax(quant.kind);
  int64_t bad = 0, checked = 0;
  std::string details;
  for (size_t i = 0; i < slots.size(); ++i) {
    int64_t slot = slots[i];
    if (slot < 0 || slot / desc.blockSize >= numBlocks)
      continue;
    int64_t block = slot / desc.blockSize, pos = slot % desc.blockSize;
    int64_t row = static_cast<int64_t>(i);
    for (bool isKey : {true, false}) {
      const TensorView &src = isKey ? key : value;
      const TensorView &out = isKey ? keyGathered : valueGathered;
      for (int64_t h = 0; h < desc.numKvHeads; ++h) {
        float s = groupScale(desc, scales, isKey, row, h, block, pos);
        for (int64_t d = 0; d < desc.headDim; ++d) {
          Index index;
          index.rank = 3;
          index.values = {row, h, d};
          float x = elementToFloat(
              loadBits(src.elementPointer(index), src.dtype), src.dtype);
          float got =
              bitsToFloat(loadBits(out.elementPointer(index), DType::F32));
          volatile float y = quant.reciprocal ? x * (1.0f / s) : x / s;
          uint8_t q = quantize(quant.kind, x, s, quant.reciprocal);
          bool ok;
          const char *rule;
          if (std::isnan(x)) {
            ok = quant.kind == QuantKind::Int8 ? got == 0 : std::isnan(got);
            rule = "NaN";
          } else if (std::fabs(y) > qmax) {
            ok = got == std::copysign(qmax, x) * s ||
                 got == dequantize(quant.kind, q, s);
            rule = "saturated";
          } else {
            ok = std::fabs(got - x) <= quantStep(quant.kind, q) * s;
            rule = "within one step";
          }
          ++checked;
          if (ok)
            continue;
          if (bad++ >= maxShown)
            continue;
          char line[240];
          std::snprintf(line, sizeof(line),
                        "\n    %s row %zu head %" PRId64 " d %" PRId64
                        ": x = %a, scale %a, read back %a (%s)",
                        isKey ? "key" : "value", i, h, d, x, s, got, rule);
          details += line;
        }
      }
    }
  }
  if (bad == 0)
    return true;
  report = "roundtrip: " + std::to_string(bad) + " of " +
           std::to_string(checked) + " values off; first:" + details;
  return false;
}

} // namespace kvgen::conformance
