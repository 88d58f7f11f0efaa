//===- Float16Test.cpp - The reference's fp16/bf16 conversions ------------===//
//
// Hand-computed edge values first (ties, subnormals, overflow), then a
// comparison with independent oracles: the compiler's _Float16 (soft-float
// RNE in libgcc / compiler-rt) and, for bf16, nearest-value selection in
// double precision.
//
//===----------------------------------------------------------------------===//

#include "conformance/Float16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using namespace kvgen::conformance;

namespace {

float fromBits(uint32_t bits) { return bitsToFloat(bits); }

TEST(Float16Test, HalfToFloatEdgeValues) {
  EXPECT_EQ(floatBits(halfToFloat(0x0000)), 0x00000000u);
  EXPECT_EQ(floatBits(halfToFloat(0x8000)), 0x80000000u); // -0 keeps its sign
  EXPECT_EQ(halfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(halfToFloat(0xc000), -2.0f);
  EXPECT_EQ(halfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(halfToFloat(0x0400), std::ldexp(1.0f, -14)); // smallest normal
  EXPECT_EQ(halfToFloat(0x0001), std::ldexp(1.0f, -24)); // smallest subnormal
  EXPECT_EQ(halfToFloat(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(halfToFloat(0x8201), -std::ldexp(513.0f, -24));
  EXPECT_EQ(halfToFloat(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(halfToFloat(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(halfToFloat(0x7e00)));
  EXPECT_TRUE(std::isnan(halfToFloat(0x7c01))); // signalling payload
}

TEST(Float16Test, FloatToHalfRoundsToNearestEven) {
  // 1 + 2^-11 is half an ulp above 1: the tie goes to the even mantissa (1).
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3 * 2^-11 lies between 0x3c01 (odd) and 0x3c02 (even).
  EXPECT_EQ(floatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  // Just above a tie rounds up, just below rounds down.
  EXPECT_EQ(floatToHalf(fromBits(0x3f801001)), 0x3c01);
  EXPECT_EQ(floatToHalf(fromBits(0x3f800fff)), 0x3c00);
  EXPECT_EQ(floatToHalf(-1.0f - std::ldexp(1.0f, -11)), 0xbc00);
  // Rounding that carries into the exponent: 2 - 2^-12 -> 2.
  EXPECT_EQ(floatToHalf(2.0f - std::ldexp(1.0f, -12)), 0x4000);
}

TEST(Float16Test, FloatToHalfOverflowsToInfinity) {
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(fromBits(0x477fefff)), 0x7bff); // just under 65520
  // 65520 is the tie between 65504 (odd mantissa) and 2^16: infinity.
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(floatToHalf(-65520.0f), 0xfc00);
  EXPECT_EQ(floatToHalf(1.0e6f), 0x7c00);
  EXPECT_EQ(floatToHalf(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(floatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(floatToHalf(-std::numeric_limits<float>::infinity()), 0xfc00);
}

TEST(Float16Test, FloatToHalfSubnormals) {
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -24)), 0x0001);
  // 2^-25 is the tie between 0 and the smallest subnormal: 0 (even).
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(floatToHalf(-std::ldexp(1.0f, -25)), 0x8000);
  EXPECT_EQ(floatToHalf(fromBits(0x33000001)), 0x0001); // just above 2^-25
  // 3 * 2^-25 lies between 0x0001 (odd) and 0x0002 (even).
  EXPECT_EQ(floatToHalf(3 * std::ldexp(1.0f, -25)), 0x0002);
  // 1023.5 * 2^-24: the largest subnormal or the smallest normal (even).
  EXPECT_EQ(floatToHalf(std::ldexp(2047.0f, -25)), 0x0400);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -26)), 0x0000);
  // fp32 subnormals are far below the half range; the sign survives.
  EXPECT_EQ(floatToHalf(fromBits(0x00000001)), 0x0000);
  EXPECT_EQ(floatToHalf(fromBits(0x80400000)), 0x8000);
}

TEST(Float16Test, FloatToHalfKeepsNaN) {
  uint16_t h = floatToHalf(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(h & 0x7c00, 0x7c00);
  EXPECT_NE(h & 0x03ff, 0);
  // A payload only in the low bits would truncate to infinity; it must not.
  EXPECT_NE(floatToHalf(fromBits(0x7f800001)) & 0x3ff, 0);
}

TEST(Float16Test, BFloat16EdgeValues) {
  EXPECT_EQ(bfloat16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(floatBits(bfloat16ToFloat(0x8001)), 0x80010000u); // subnormal
  EXPECT_EQ(floatToBfloat16(1.0f), 0x3f80);
  // Ties: 1 + 2^-8 -> 1 (even); 1 + 3 * 2^-8 -> 1 + 2^-6 (even).
  EXPECT_EQ(floatToBfloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(floatToBfloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(floatToBfloat16(fromBits(0x3f808001)), 0x3f81);
  EXPECT_EQ(floatToBfloat16(fromBits(0x3f807fff)), 0x3f80);
  // Carry into the exponent.
  EXPECT_EQ(floatToBfloat16(fromBits(0x3fffffff)), 0x4000);
  // The largest bf16, and the tie above it, which rounds to infinity.
  EXPECT_EQ(floatToBfloat16(fromBits(0x7f7f7fff)), 0x7f7f);
  EXPECT_EQ(floatToBfloat16(fromBits(0x7f7f8000)), 0x7f80);
  EXPECT_EQ(floatToBfloat16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(floatToBfloat16(-std::numeric_limits<float>::max()), 0xff80);
  // Subnormals round like everything else: 0x00008000 is a tie to 0.
  EXPECT_EQ(floatToBfloat16(fromBits(0x00008000)), 0x0000);
  EXPECT_EQ(floatToBfloat16(fromBits(0x00018000)), 0x0002);
  EXPECT_EQ(floatToBfloat16(fromBits(0x80008001)), 0x8001);
  uint16_t nan = floatToBfloat16(fromBits(0x7f800001));
  EXPECT_EQ(nan & 0x7f80, 0x7f80);
  EXPECT_NE(nan & 0x7f, 0); // still a NaN, not infinity
}

#if defined(__FLT16_MAX__)
// _Float16 is the compiler's (soft-float or F16C) IEEE binary16 conversion:
// an oracle written by someone else.
TEST(Float16Test, HalfToFloatMatchesCompilerForAllHalves) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    _Float16 value;
    uint16_t bits = static_cast<uint16_t>(h);
    std::memcpy(&value, &bits, 2);
    float want = static_cast<float>(value);
    float got = halfToFloat(bits);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
      continue;
    }
    ASSERT_EQ(floatBits(got), floatBits(want)) << std::hex << h;
  }
}

TEST(Float16Test, FloatToHalfMatchesCompiler) {
  std::mt19937_64 rng(1234);
  auto check = [](uint32_t bits) {
    float f = bitsToFloat(bits);
    _Float16 value = static_cast<_Float16>(f);
    uint16_t want;
    std::memcpy(&want, &value, 2);
    uint16_t got = floatToHalf(f);
    if (std::isnan(f))
      return (got & 0x7c00) == 0x7c00 && (got & 0x3ff) != 0;
    return got == want;
  };
  // A stride through all of binary32, then dense coverage of the exponents
  // that matter for halves (subnormal to overflow) with random mantissas,
  // then every rounding-tie pattern's neighbourhood.
  for (uint64_t bits = 0; bits <= 0xffffffffull; bits += 4093)
    ASSERT_TRUE(check(static_cast<uint32_t>(bits))) << std::hex << bits;
  for (int i = 0; i < 2000000; ++i) {
    uint32_t exponent = 100 + static_cast<uint32_t>(rng() % 45);
    uint32_t bits = (static_cast<uint32_t>(rng() & 1) << 31) |
                    (exponent << 23) |
                    (static_cast<uint32_t>(rng()) & 0x7fffff);
    ASSERT_TRUE(check(bits)) << std::hex << bits;
    uint32_t tie = (bits & ~0x1fffu) | 0x1000;
    ASSERT_TRUE(check(tie)) << std::hex << tie;
    ASSERT_TRUE(check(tie + 1)) << std::hex << tie + 1;
    ASSERT_TRUE(check(tie - 1)) << std::hex << tie - 1;
  }
}
#endif

/// Nearest bf16 by comparing distances in double (exact for these values),
/// ties to the even mantissa: an oracle that shares no code with the
/// bit-twiddling version.
uint16_t nearestBfloat16(float f) {
  uint32_t bits = floatBits(f);
  uint32_t sign = bits & 0x80000000u;
  uint32_t magnitude = bits & 0x7fffffffu;
  uint32_t below = magnitude & 0xffff0000u;
  double x = static_cast<double>(bitsToFloat(magnitude));
  double lo = static_cast<double>(bitsToFloat(below));
  // The candidate above; past the largest finite bf16 it is 2^128, which
  // stands for infinity in the rounding decision.
  double hi = below == 0x7f7f0000u
                  ? std::ldexp(1.0, 128)
                  : static_cast<double>(bitsToFloat(below + 0x10000u));
  uint32_t pick;
  if (x - lo < hi - x)
    pick = below;
  else if (x - lo > hi - x)
    pick = below + 0x10000u;
  else
    pick = ((below >> 16) & 1) ? below + 0x10000u : below;
  return static_cast<uint16_t>((sign | pick) >> 16);
}

TEST(Float16Test, FloatToBfloat16MatchesNearestValue) {
  std::mt19937_64 rng(99);
  auto check = [](uint32_t bits) {
    if (((bits >> 23) & 0xff) == 0xff)
      return true; // NaN/inf are covered by the edge-value test
    return floatToBfloat16(bitsToFloat(bits)) ==
           nearestBfloat16(bitsToFloat(bits));
  };
  for (uint64_t bits = 0; bits <= 0xffffffffull; bits += 4093)
    ASSERT_TRUE(check(static_cast<uint32_t>(bits))) << std::hex << bits;
  for (int i = 0; i < 2000000; ++i) {
    uint32_t bits = static_cast<uint32_t>(rng());
    ASSERT_TRUE(check(bits)) << std::hex << bits;
    uint32_t tie = (bits & 0xffff0000u) | 0x8000u;
    ASSERT_TRUE(check(tie)) << std::hex << tie;
    ASSERT_TRUE(check(tie + 1)) << std::hex << tie + 1;
    ASSERT_TRUE(check(tie - 1)) << std::hex << tie - 1;
  }
}

TEST(Float16Test, WideningThenNarrowingIsIdentity) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    uint16_t bits = static_cast<uint16_t>(h);
    bool halfNaN = (bits & 0x7c00) == 0x7c00 && (bits & 0x3ff) != 0;
    bool bfNaN = (bits & 0x7f80) == 0x7f80 && (bits & 0x7f) != 0;
    if (!halfNaN) {
      ASSERT_EQ(floatToHalf(halfToFloat(bits)), bits) << std::hex << h;
    }
    if (!bfNaN) {
      ASSERT_EQ(floatToBfloat16(bfloat16ToFloat(bits)), bits) << std::hex << h;
    }
  }
}

} // namespace
