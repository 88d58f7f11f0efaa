//===- Quant.cpp - The quantization convention, element by element --------===//

#include "conformance/Quant.h"

#include "conformance/Float16.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace kvgen::conformance {

const char *quantKindName(QuantKind kind) {
  switch (kind) {
  case QuantKind::FP8E4M3:
    return "fp8_e4m3";
  case QuantKind::FP8E5M2:
    return "fp8_e5m2";
  case QuantKind::Int8:
    return "int8";
  }
  return "?";
}

const char *granularityName(Granularity granularity) {
  switch (granularity) {
  case Granularity::PerTensor:
    return "per_tensor";
  case Granularity::PerToken:
    return "per_token";
  case Granularity::PerHead:
    return "per_head";
  case Granularity::PerTokenHead:
    return "per_token_head";
  case Granularity::PerBlock:
    return "per_block";
  }
  return "?";
}

const char *scaleModeName(ScaleMode mode) {
  return mode == ScaleMode::Static ? "static" : "dynamic";
}

float quantMax(QuantKind kind) {
  switch (kind) {
  case QuantKind::FP8E4M3:
    return 448.0f;
  case QuantKind::FP8E5M2:
    return 57344.0f;
  case QuantKind::Int8:
    return 127.0f;
  }
  return 0;
}

namespace {

/// An fp8 format with an IEEE-like encoding: `mantissaBits` stored bits,
/// exponent bias `bias`, subnormals at exponent field 0.
struct Fp8Format {
  unsigned mantissaBits;
  int bias;
  float max;
};

constexpr Fp8Format kE4M3{3, 7, 448.0f};
constexpr Fp8Format kE5M2{2, 15, 57344.0f};

/// Rounds `value >> shift` to nearest, ties to even, for any shift.
uint64_t shiftRoundEven(uint64_t value, unsigned shift) {
  if (shift == 0)
    return value;
  if (shift >= 64)
    return 0; // value < 2^24 here: far below half of 2^shift
  uint64_t kept = value >> shift;
  uint64_t rest = value & ((uint64_t(1) << shift) - 1);
  uint64_t half = uint64_t(1) << (shift - 1);
  if (rest > half || (rest == half && (kept & 1)))
    ++kept;
  return kept;
}

uint8_t encodeFp8(float y, const Fp8Format &f) {
  uint32_t bits = floatBits(y);
  uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  uint32_t magnitude = bits & 0x7fffffff;
  if (magnitude > 0x7f800000) // NaN, any payload, either sign
    return kFp8NaN;
  // Saturate first (infinities included): every value left is at most the
  // largest finite code, so rounding cannot leave the format.
  if (bitsToFloat(magnitude) > f.max)
    magnitude = floatBits(f.max);
  int exponent = static_cast<int>(magnitude >> 23);
  if (exponent == 0) // fp32 zero or subnormal: < 2^-126, rounds to +-0
    return sign;
  // magnitude = significand * 2^(exponent - 127 - 23), significand < 2^24.
  uint64_t significand = (magnitude & 0x7fffff) | 0x800000;
  int unbiased = exponent - 127;
  // The fp8 exponent the value is represented at: its own, or the smallest
  // normal exponent (the subnormal range has the same quantum).
  int minExponent = 1 - f.bias;
  int target = unbiased < minExponent ? minExponent : unbiased;
  // Quanta of 2^(target - mantissaBits) in the value.
  unsigned shift = static_cast<unsigned>(23 - static_cast<int>(f.mantissaBits) +
                                         (target - unbiased));
  uint64_t quanta = shiftRoundEven(significand, shift);
  uint64_t implicit = uint64_t(1) << f.mantissaBits;
  if (quanta >= 2 * implicit) { // rounded up into the next binade
    quanta >>= 1;
    ++target;
  }
  uint32_t field;
  if (quanta < implicit) // subnormal (only when target == minExponent)
    field = static_cast<uint32_t>(quanta);
  else
    field = (static_cast<uint32_t>(target + f.bias) << f.mantissaBits) |
            static_cast<uint32_t>(quanta - implicit);
  return static_cast<uint8_t>(sign | field);
}

float decodeFp8(uint8_t code, const Fp8Format &f, bool hasInfinity) {
  bool negative = code & 0x80;
  unsigned exponentBits = 7 - f.mantissaBits;
  uint32_t exponent = (code >> f.mantissaBits) & ((1u << exponentBits) - 1);
  uint32_t mantissa = code & ((1u << f.mantissaBits) - 1);
  uint32_t allOnes = (1u << exponentBits) - 1;
  float value;
  if (hasInfinity && exponent == allOnes) {
    value = mantissa == 0 ? INFINITY : NAN;
  } else if (!hasInfinity && exponent == allOnes &&
             mantissa == (1u << f.mantissaBits) - 1) {
    value = NAN; // e4m3fn: only S.1111.111 is NaN
  } else if (exponent == 0) {
    value = std::ldexp(static_cast<float>(mantissa),
                       1 - f.bias - static_cast<int>(f.mantissaBits));
  } else {
    value = std::ldexp(static_cast<float>(mantissa | (1u << f.mantissaBits)),
                       static_cast<int>(exponent) - f.bias -
                           static_cast<int>(f.mantissaBits));
  }
  return negative ? -value : value;
}

} // namespace

uint8_t encodeE4M3(float y) { return encodeFp8(y, kE4M3); }
uint8_t encodeE5M2(float y) { return encodeFp8(y, kE5M2); }

int8_t encodeInt8(float y) {
  if (y != y)
    return 0;
  if (y >= 127.0f)
    return 127;
  if (y <= -127.0f)
    return -127;
  // |y| < 127: floor and the fraction are exact in fp32.
  float lower = std::floor(y);
  float fraction = y - lower;
  int value = static_cast<int>(lower);
  if (fraction > 0.5f || (fraction == 0.5f && (value & 1)))
    ++value;
  return static_cast<int8_t>(value);
}

float decodeE4M3(uint8_t code) { return decodeFp8(code, kE4M3, false); }
float decodeE5M2(uint8_t code) { return decodeFp8(code, kE5M2, true); }

uint8_t encode(QuantKind kind, float y) {
  switch (kind) {
  case QuantKind::FP8E4M3:
    return encodeE4M3(y);
  case QuantKind::FP8E5M2:
    return encodeE5M2(y);
  case QuantKind::Int8:
    return static_cast<uint8_t>(encodeInt8(y));
  }
  std::abort();
}

float decode(QuantKind kind, uint8_t byte) {
  switch (kind) {
  case QuantKind::FP8E4M3:
    return decodeE4M3(byte);
  case QuantKind::FP8E5M2:
    return decodeE5M2(byte);
  case QuantKind::Int8:
    return static_cast<float>(static_cast<int8_t>(byte));
  }
  std::abort();
}

float quantStep(QuantKind kind, uint8_t byte) {
  if (kind == QuantKind::Int8)
    return 1.0f;
  const Fp8Format &f = kind == QuantKind::FP8E4M3 ? kE4M3 : kE5M2;
  uint32_t exponent = (byte & 0x7f) >> f.mantissaBits;
  // The quantum of the binade (the subnormals share the first normal one's).
  int e = exponent == 0 ? 1 : static_cast<int>(exponent);
  return std::ldexp(1.0f, e - f.bias - static_cast<int>(f.mantissaBits));
}

uint8_t quantize(QuantKind kind, float x, float scale, bool reciprocal) {
  // volatile: the fp32 operations the contract names, as written, with no
  // contraction or reassociation by the host compiler.
  volatile float y;
  if (reciprocal) {
    volatile float r = 1.0f / scale;
    y = x * r;
  } else {
    y = x / scale;
  }
  return encode(kind, y);
}

float dequantize(QuantKind kind, uint8_t byte, float scale) {
  volatile float x = decode(kind, byte) * scale;
  return x;
}

float dynamicScale(QuantKind kind, float amax) {
  if (!(amax > 0))
    return 1.0f;
  volatile float s = amax / quantMax(kind);
  return s;
}

} // namespace kvgen::conformance
