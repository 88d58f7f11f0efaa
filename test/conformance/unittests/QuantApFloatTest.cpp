//===- QuantApFloatTest.cpp - fp8 encodings against llvm::APFloat ---------===//
//
// llvm::APFloat's Float8E4M3FN and Float8E5M2 are an implementation of the
// formats that shares nothing with the reference (which is written from the
// formats' definitions). Both are asked for the same conversions: every fp32
// bit pattern class (zeros, fp32 subnormals, every fp8 binade and its
// neighbourhood, exact ties, values past the largest code), after the
// contract's clamp; APFloat rounds to nearest even. Built where LLVM is.
//
//===----------------------------------------------------------------------===//

#include "conformance/Float16.h"
#include "conformance/Quant.h"

#include "llvm/ADT/APFloat.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace kvgen::conformance;

namespace {

/// The code APFloat gives for `y` clamped to the format's range.
uint8_t apfloatCode(QuantKind kind, float y) {
  const llvm::fltSemantics &semantics = kind == QuantKind::FP8E4M3
                                            ? llvm::APFloat::Float8E4M3FN()
                                            : llvm::APFloat::Float8E5M2();
  float max = quantMax(kind);
  float clamped = std::fmax(-max, std::fmin(max, y));
  llvm::APFloat value(clamped);
  bool losesInfo = false;
  value.convert(semantics, llvm::APFloat::rmNearestTiesToEven, &losesInfo);
  return static_cast<uint8_t>(value.bitcastToAPInt().getZExtValue());
}

TEST(QuantApFloatTest, EveryCodeAndMidpoint) {
  for (QuantKind kind : {QuantKind::FP8E4M3, QuantKind::FP8E5M2}) {
    for (int c = 0; c < 256; ++c) {
      float v = decode(kind, static_cast<uint8_t>(c));
      if (!std::isfinite(v))
        continue;
      EXPECT_EQ(encode(kind, v), apfloatCode(kind, v))
          << quantKindName(kind) << " code " << c;
      // The midpoint to the next code of the same sign, and its fp32
      // neighbours: the ties and the values that must not tie.
      float next = decode(kind, static_cast<uint8_t>(c + 1));
      if ((c & 0x7f) == 0x7f || !std::isfinite(next))
        continue;
      float mid = (v + next) / 2;
      for (float y :
           {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 2 * mid)})
        EXPECT_EQ(encode(kind, y), apfloatCode(kind, y))
            << quantKindName(kind) << " y = " << y;
    }
  }
}

TEST(QuantApFloatTest, RandomFloats) {
  std::mt19937_64 rng(13);
  for (QuantKind kind : {QuantKind::FP8E4M3, QuantKind::FP8E5M2}) {
    for (int i = 0; i < 200000; ++i) {
      uint32_t bits = static_cast<uint32_t>(rng());
      // Half of them near the fp8 range (fp32 exponents 2^-24 .. 2^20).
      if (i & 1)
        bits = (bits & 0x807fffff) |
               (static_cast<uint32_t>(127 - 24 + rng() % 45) << 23);
      float y = bitsToFloat(bits);
      if (std::isnan(y))
        continue;
      ASSERT_EQ(encode(kind, y), apfloatCode(kind, y))
          << quantKindName(kind) << " bits 0x" << std::hex << bits;
    }
  }
}

} // namespace
