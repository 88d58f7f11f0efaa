//===- FastDivisionTest.cpp - the quantizing division's identity ----------===//
//
// kv-to-loops divides a 16-bit float source by a static scale as
//   y = RN(1 / s); q0 = RN(x * y); r = fma(-q0, s, x); q = fma(r, y, q0)
// with q0's sign ORed into q (lib/Conversion/KVToLoops/Quantize.cpp,
// emitDivide), taking IEEE division for |s| outside [2^-60, 2^60], a bf16 x
// past 2^60, or an infinite or NaN x. The claim is that q then has the bits of
// IEEE x / s wherever |x| is at least 2^-60, and below that, where the window
// does not look, the same sign and a magnitude that every storage type rounds
// to zero. These tests check it for every significand a bf16 value can have
// against every significand of an f32 scale, and every f16 significand
// against every 7th (the exponents only scale all the steps by powers of two
// while everything stays normal), at the window's edges, for the zeros, and
// for every bf16 below 2^-60 against scales across the window; and that the
// identity is not free: without the correction step the quotient is wrong
// somewhere. The generated code runs the same steps through the host suite
// and the GPU suite, whose quantized cases compare every byte with IEEE
// division.
//
//===----------------------------------------------------------------------===//

#include "llvm/ADT/bit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

namespace {

float fromBits(uint32_t bits) { return llvm::bit_cast<float>(bits); }
uint32_t toBits(float f) { return llvm::bit_cast<uint32_t>(f); }

/// emitDivide's fast path, step by step (each step one IEEE operation).
float fastDivide(float x, float s, bool correct = true) {
  float y = 1.0f / s;
  float q0 = x * y;
  if (!correct)
    return q0;
  float r = std::fmaf(-q0, s, x);
  float q = std::fmaf(r, y, q0);
  return fromBits(toBits(q) | (toBits(q0) & 0x80000000u));
}

/// How many of the `sourceBits`-bit significands in [1, 2), divided by
/// every `scaleStep`th f32 significand in [1, 2), differ from IEEE division;
/// `correct` = false leaves out the fma correction.
int64_t countDifferences(int sourceBits, bool correct = true,
                         uint32_t scaleStep = 1) {
  int64_t differ = 0;
  for (uint32_t sm = 0; sm < (1u << 23); sm += scaleStep) {
    float s = fromBits(0x3F800000u | sm);
    for (uint32_t xm = 0; xm < (1u << sourceBits); ++xm) {
      float x = fromBits(0x3F800000u | (xm << (23 - sourceBits)));
      float want = x / s;
      if (toBits(fastDivide(x, s, correct)) != toBits(want))
        ++differ;
    }
  }
  return differ;
}

TEST(FastDivisionTest, EveryBf16SignificandByEveryScaleSignificand) {
  EXPECT_EQ(countDifferences(/*sourceBits=*/7), 0);
}

TEST(FastDivisionTest, EveryF16SignificandByEvery7thScaleSignificand) {
  // All 2^23 scale significands take 8 times as long as bf16's sweep (a
  // sweep of all of them found no difference either; docs/dev/TUNING.md):
  // the test runs under the sanitizers too.
  EXPECT_EQ(countDifferences(/*sourceBits=*/10, /*correct=*/true,
                             /*scaleStep=*/7),
            0);
}

TEST(FastDivisionTest, WithoutTheCorrectionSomeQuotientsAreWrong) {
  // RN(x * RN(1 / s)) alone is not IEEE division: the fma step is needed.
  EXPECT_GT(countDifferences(/*sourceBits=*/7, /*correct=*/false,
                             /*scaleStep=*/97),
            0);
}

TEST(FastDivisionTest, WindowEdges) {
  // |x| and |s| at the window's ends, 2^-60 and 2^60, and past the top up
  // to just under 2^61, in every combination: quotients from 2^-121 to
  // 2^121 and their residuals stay normal.
  const float edges[] = {0x1p-60f, 0x1.8p-60f, 0x1p60f, 0x1.fep60f,
                         0x1.fffffep60f};
  for (float s : edges)
    for (float sign : {1.0f, -1.0f})
      for (uint32_t xm = 0; xm < (1u << 10); ++xm)
        for (float xe : {0x1p-60f, 0x1p60f}) {
          float x = sign * fromBits(0x3F800000u | (xm << 13)) * xe;
          volatile float want = x / s;
          ASSERT_EQ(toBits(fastDivide(x, s)), toBits(want))
              << "x = " << std::hexfloat << x << ", s = " << s;
          volatile float negWant = x / -s;
          ASSERT_EQ(toBits(fastDivide(x, -s)), toBits(negWant))
              << "x = " << std::hexfloat << x << ", s = " << -s;
        }
}

TEST(FastDivisionTest, ZerosKeepTheirSign) {
  for (float s : {0x1p-60f, 0.0123f, 1.0f, 448.0f, -3.5f}) {
    for (float x : {0.0f, -0.0f}) {
      volatile float want = x / s;
      EXPECT_EQ(toBits(fastDivide(x, s)), toBits(want))
          << "x = " << x << ", s = " << s;
    }
    // The correction without the sign fix would lose the sign of -0 / s
    // for s > 0.
    if (s > 0) {
      float y = 1.0f / s;
      volatile float q0 = -0.0f * y;
      volatile float r = std::fmaf(-q0, s, -0.0f);
      EXPECT_NE(toBits(std::fmaf(r, y, q0)), toBits(-0.0f / s));
    }
  }
}

TEST(FastDivisionTest, TinySourcesQuantizeAlike) {
  // Every nonzero bf16 below 2^-60, of either sign, by scales of 32
  // significands at every exponent of the window, of either sign. Where the
  // bits differ from IEEE division both quotients are below 2^-48 and of
  // the same sign: fp8's smallest subnormal is 2^-16 and int8 rounds to
  // integers, so both round to the same zero.
  int64_t differ = 0;
  for (uint32_t mag = 1; mag < 0x2180; ++mag)
    for (uint32_t sign : {0u, 0x8000u}) {
      float x = fromBits((mag | sign) << 16);
      for (int e = -60; e <= 60; ++e)
        for (uint32_t sm = 0; sm < (1u << 23); sm += 1u << 18)
          for (float ss : {1.0f, -1.0f}) {
            float s = ss * std::ldexp(fromBits(0x3F800000u | sm), e);
            volatile float want = x / s;
            float got = fastDivide(x, s);
            if (toBits(got) == toBits(want))
              continue;
            ++differ;
            ASSERT_LE(std::fabs(want), 0x1p-48f)
                << "x = " << std::hexfloat << x << ", s = " << s;
            ASSERT_LE(std::fabs(got), 0x1p-48f)
                << "x = " << std::hexfloat << x << ", s = " << s;
            ASSERT_EQ(std::signbit(got), std::signbit(want))
                << "x = " << std::hexfloat << x << ", s = " << s;
          }
    }
  // The window's lower end is not free either: below it the bits do
  // differ.
  EXPECT_GT(differ, 0);
}

} // namespace
