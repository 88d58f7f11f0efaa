//===- QuantTest.cpp - The reference's quantization convention ------------===//
//
// Hand-computed codes at the edges (ties, subnormals, saturation, NaN, signed
// zeros), every one of the 256 fp8 codes decoded and encoded back, and the
// encoders against nearest-value search in double precision over random
// inputs. QuantApFloatTest.cpp adds llvm::APFloat as a second oracle where
// LLVM is in the build.
//
//===----------------------------------------------------------------------===//

#include "conformance/Quant.h"
#include "conformance/Float16.h"

#include <gtest/gtest.h>

#include <cfenv>
#include <cmath>
#include <limits>
#include <random>

using namespace kvgen::conformance;

namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

float p2(int e) { return std::ldexp(1.0f, e); }

TEST(QuantTest, E4M3HandComputedCodes) {
  EXPECT_EQ(encodeE4M3(0.0f), 0x00);
  EXPECT_EQ(encodeE4M3(-0.0f), 0x80); // the sign of a zero is kept
  EXPECT_EQ(encodeE4M3(1.0f), 0x38);  // exponent 7 (bias 7), mantissa 0
  EXPECT_EQ(encodeE4M3(-1.5f), 0xbc);
  EXPECT_EQ(encodeE4M3(448.0f), 0x7e); // the largest finite
  EXPECT_EQ(encodeE4M3(-448.0f), 0xfe);
  // 1 + 1/16 is the tie between 1 (even mantissa) and 1.125.
  EXPECT_EQ(encodeE4M3(1.0625f), 0x38);
  // 1.1875 is the tie between 1.125 (odd) and 1.25 (even).
  EXPECT_EQ(encodeE4M3(1.1875f), 0x3a);
  EXPECT_EQ(encodeE4M3(std::nextafter(1.0625f, 2.0f)), 0x39);
  // 1.9375 rounds up into the next binade: 2.0.
  EXPECT_EQ(encodeE4M3(1.9375f), 0x40);
  // Subnormals are m * 2^-9; the smallest normal is 2^-6.
  EXPECT_EQ(encodeE4M3(p2(-9)), 0x01);
  EXPECT_EQ(encodeE4M3(7 * p2(-9)), 0x07);
  EXPECT_EQ(encodeE4M3(p2(-6)), 0x08);
  EXPECT_EQ(encodeE4M3(7.5f * p2(-9)), 0x08); // tie 7 (odd) / 8: up
  EXPECT_EQ(encodeE4M3(p2(-10)), 0x00);       // tie 0 / 1: even, 0
  EXPECT_EQ(encodeE4M3(-p2(-10)), 0x80);
  EXPECT_EQ(encodeE4M3(std::nextafter(p2(-10), 1.0f)), 0x01);
  EXPECT_EQ(encodeE4M3(3 * p2(-10)), 0x02); // tie 1 (odd) / 2
  EXPECT_EQ(encodeE4M3(p2(-20)), 0x00);
  EXPECT_EQ(encodeE4M3(bitsToFloat(1)), 0x00); // an fp32 subnormal
}

TEST(QuantTest, E4M3SaturatesAndNaNIs7F) {
  // 464 is the tie between 448 and the (NaN) code above it; past 448
  // everything saturates, infinities included.
  EXPECT_EQ(encodeE4M3(464.0f), 0x7e);
  EXPECT_EQ(encodeE4M3(449.0f), 0x7e);
  EXPECT_EQ(encodeE4M3(1.0e30f), 0x7e);
  EXPECT_EQ(encodeE4M3(kInf), 0x7e);
  EXPECT_EQ(encodeE4M3(-kInf), 0xfe);
  EXPECT_EQ(encodeE4M3(-std::numeric_limits<float>::max()), 0xfe);
  EXPECT_EQ(encodeE4M3(kNaN), 0x7f);
  EXPECT_EQ(encodeE4M3(-kNaN), 0x7f); // one NaN code whatever the sign
  EXPECT_EQ(encodeE4M3(bitsToFloat(0x7f800001)), 0x7f); // signalling
}

TEST(QuantTest, E5M2HandComputedCodes) {
  EXPECT_EQ(encodeE5M2(1.0f), 0x3c); // exponent 15 (bias 15)
  EXPECT_EQ(encodeE5M2(-0.0f), 0x80);
  EXPECT_EQ(encodeE5M2(57344.0f), 0x7b);
  EXPECT_EQ(encodeE5M2(61440.0f), 0x7b); // the tie with infinity: saturates
  EXPECT_EQ(encodeE5M2(kInf), 0x7b);     // never an infinity code
  EXPECT_EQ(encodeE5M2(-kInf), 0xfb);
  EXPECT_EQ(encodeE5M2(kNaN), 0x7f);
  EXPECT_EQ(encodeE5M2(1.125f), 0x3c); // tie 1 / 1.25: even
  EXPECT_EQ(encodeE5M2(1.375f), 0x3e); // tie 1.25 (odd) / 1.5
  EXPECT_EQ(encodeE5M2(p2(-16)), 0x01);
  EXPECT_EQ(encodeE5M2(p2(-14)), 0x04);
  EXPECT_EQ(encodeE5M2(p2(-17)), 0x00);
  EXPECT_EQ(encodeE5M2(3 * p2(-17)), 0x02);
}

TEST(QuantTest, Int8RoundsEvenSaturatesAndZeroesNaN) {
  EXPECT_EQ(encodeInt8(0.5f), 0);
  EXPECT_EQ(encodeInt8(1.5f), 2);
  EXPECT_EQ(encodeInt8(2.5f), 2);
  EXPECT_EQ(encodeInt8(-2.5f), -2);
  EXPECT_EQ(encodeInt8(-3.5f), -4);
  EXPECT_EQ(encodeInt8(std::nextafter(2.5f, 3.0f)), 3);
  EXPECT_EQ(encodeInt8(126.5f), 126);
  EXPECT_EQ(encodeInt8(127.4f), 127);
  EXPECT_EQ(encodeInt8(-127.5f), -127); // -128 is never written
  EXPECT_EQ(encodeInt8(-1000.0f), -127);
  EXPECT_EQ(encodeInt8(kInf), 127);
  EXPECT_EQ(encodeInt8(-kInf), -127);
  EXPECT_EQ(encodeInt8(kNaN), 0);
  EXPECT_EQ(encodeInt8(-0.4f), 0);
}

TEST(QuantTest, EveryFp8CodeRoundTrips) {
  for (QuantKind kind : {QuantKind::FP8E4M3, QuantKind::FP8E5M2}) {
    int finite = 0;
    for (int c = 0; c < 256; ++c) {
      uint8_t code = static_cast<uint8_t>(c);
      float value = decode(kind, code);
      SCOPED_TRACE(testing::Message()
                   << quantKindName(kind) << " code 0x" << std::hex << c);
      if (std::isnan(value)) {
        EXPECT_EQ(encode(kind, value), kFp8NaN);
        continue;
      }
      if (std::isinf(value)) { // e5m2 only: saturates to the largest
        ASSERT_EQ(kind, QuantKind::FP8E5M2);
        EXPECT_EQ(encode(kind, value), value > 0 ? 0x7b : 0xfb);
        continue;
      }
      ++finite;
      EXPECT_EQ(encode(kind, value), code);
      EXPECT_LE(std::fabs(value), quantMax(kind));
    }
    // e4m3fn: 2 NaN codes; e5m2: 6 NaN codes and 2 infinities.
    EXPECT_EQ(finite, kind == QuantKind::FP8E4M3 ? 254 : 248);
  }
  EXPECT_EQ(decodeE4M3(0x7e), 448.0f);
  EXPECT_EQ(decodeE4M3(0x01), p2(-9));
  EXPECT_EQ(decodeE5M2(0x7b), 57344.0f);
  EXPECT_EQ(decodeE5M2(0x7c), kInf);
  EXPECT_TRUE(std::isnan(decodeE4M3(0xff)));
  EXPECT_FALSE(std::isnan(decodeE4M3(0x7c))); // 256: e4m3fn has no inf
}

/// The fp8 code nearest to `y` (already clamped), ties to the even code, by
/// searching every finite code in double precision.
uint8_t nearestCode(QuantKind kind, float y) {
  int best = -1;
  double bestDistance = 0;
  for (int c = 0; c < 256; ++c) {
    float v = decode(kind, static_cast<uint8_t>(c));
    if (!std::isfinite(v) || std::signbit(v) != std::signbit(y))
      continue;
    double distance = std::fabs(static_cast<double>(v) - y);
    bool better = best < 0 || distance < bestDistance ||
                  (distance == bestDistance && (c & 1) == 0 && (best & 1));
    if (better) {
      best = c;
      bestDistance = distance;
    }
  }
  return static_cast<uint8_t>(best);
}

TEST(QuantTest, Fp8MatchesNearestValueSearch) {
  std::mt19937_64 rng(11);
  for (QuantKind kind : {QuantKind::FP8E4M3, QuantKind::FP8E5M2}) {
    float max = quantMax(kind);
    for (int i = 0; i < 20000; ++i) {
      // Exponents over the whole format and a little past both ends, plus
      // exact midpoints between adjacent codes.
      float y;
      if (i % 4 == 3) {
        uint8_t c = static_cast<uint8_t>(rng() % 0x7b);
        y = (decode(kind, c) + decode(kind, c + 1)) / 2; // exact in fp32
      } else {
        int e = static_cast<int>(rng() % 40) -
                (kind == QuantKind::FP8E4M3 ? 14 : 20);
        y = std::ldexp(1.0f + static_cast<float>(rng() % 4096) / 4096, e);
      }
      if (rng() & 1)
        y = -y;
      float clamped = std::fmax(-max, std::fmin(max, y));
      SCOPED_TRACE(testing::Message() << quantKindName(kind) << " y = " << y);
      ASSERT_EQ(encode(kind, y), nearestCode(kind, clamped));
    }
  }
}

TEST(QuantTest, Int8MatchesNearbyint) {
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  std::mt19937_64 rng(12);
  for (int i = 0; i < 20000; ++i) {
    float y = static_cast<float>(static_cast<int64_t>(rng() % 600) - 300) / 2 +
              (i % 3 ? std::ldexp(static_cast<float>(rng() % 1024), -10) : 0);
    float want = std::fmax(-127.0f, std::fmin(127.0f, std::nearbyint(y)));
    ASSERT_EQ(encodeInt8(y), static_cast<int8_t>(want)) << "y = " << y;
  }
}

TEST(QuantTest, QuantizeDividesInFp32) {
  // 1 / 3 is not exact: x / 3 and x * (1 / 3) differ in fp32 for some x,
  // and the division is what the contract's default computes.
  float s = 3.0f;
  int differing = 0;
  for (int i = 1; i < 4096; ++i) {
    float x = static_cast<float>(i) * 0.37f;
    volatile float quotient = x / s;
    EXPECT_EQ(quantize(QuantKind::FP8E4M3, x, s, false), encodeE4M3(quotient));
    volatile float r = 1.0f / s;
    volatile float product = x * r;
    EXPECT_EQ(quantize(QuantKind::FP8E4M3, x, s, true), encodeE4M3(product));
    differing += quotient != product;
  }
  EXPECT_GT(differing, 0) << "the sample never separates x / s from x * r";
  // Saturation is of the quotient, not of x.
  EXPECT_EQ(quantize(QuantKind::FP8E4M3, 100.0f, 0.125f, false), 0x7e);
  EXPECT_EQ(quantize(QuantKind::Int8, -100.0f, 0.5f, false), 0x81); // -127
  EXPECT_EQ(quantize(QuantKind::Int8, kNaN, 0.5f, false), 0x00);
}

TEST(QuantTest, DynamicScaleIsAmaxOverQmax) {
  EXPECT_EQ(dynamicScale(QuantKind::FP8E4M3, 448.0f), 1.0f);
  EXPECT_EQ(dynamicScale(QuantKind::Int8, 254.0f), 2.0f);
  EXPECT_EQ(dynamicScale(QuantKind::FP8E5M2, 57344.0f * 4), 4.0f);
  EXPECT_EQ(dynamicScale(QuantKind::FP8E4M3, 0.0f), 1.0f); // zero amax
  float amax = 0;
  for (float x : {1.0f, -7.0f, kInf, kNaN, -kInf, 3.0f})
    amax = foldAmax(amax, x);
  EXPECT_EQ(amax, 7.0f); // only the finite values count
  volatile float want = 7.0f / 127.0f;
  EXPECT_EQ(dynamicScale(QuantKind::Int8, amax), want);
  // The group's largest value lands on (or next to) the largest code.
  float s = dynamicScale(QuantKind::FP8E4M3, 7.0f);
  EXPECT_EQ(quantize(QuantKind::FP8E4M3, -7.0f, s, false), 0xfe);
}

TEST(QuantTest, DequantizeAndStep) {
  EXPECT_EQ(dequantize(QuantKind::Int8, 0x81, 0.5f), -63.5f);
  EXPECT_EQ(dequantize(QuantKind::FP8E4M3, 0x7e, 2.0f), 896.0f);
  EXPECT_TRUE(std::isnan(dequantize(QuantKind::FP8E4M3, 0x7f, 1.0f)));
  EXPECT_EQ(quantStep(QuantKind::FP8E4M3, 0x38), 0.125f); // at 1.0
  EXPECT_EQ(quantStep(QuantKind::FP8E4M3, 0x01), p2(-9)); // subnormal
  EXPECT_EQ(quantStep(QuantKind::FP8E4M3, 0xfe), 32.0f);  // at -448
  EXPECT_EQ(quantStep(QuantKind::FP8E5M2, 0x3c), 0.25f);
  EXPECT_EQ(quantStep(QuantKind::Int8, 0x05), 1.0f);
}

} // namespace
