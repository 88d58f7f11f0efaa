//===- Float16.cpp - Bit-exact fp16/bf16 <-> fp32 conversions -------------===//

#include "conformance/Float16.h"

#include <cstring>

namespace kvgen::conformance {

uint32_t floatBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

float bitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

/// Rounds `value >> shift` to nearest, ties to even. `shift` is in [1, 31].
static uint32_t shiftRightRoundEven(uint32_t value, unsigned shift) {
  uint32_t kept = value >> shift;
  uint32_t rest = value & ((1u << shift) - 1);
  uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (kept & 1)))
    ++kept;
  return kept;
}

float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  if (exponent == 0x1f) // Infinity or NaN: the payload moves up unchanged.
    return bitsToFloat(sign | 0x7f800000 | (mantissa << 13));
  if (exponent != 0)
    return bitsToFloat(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
  if (mantissa == 0)
    return bitsToFloat(sign);
  // Subnormal: mantissa * 2^-24. Normalize so the leading one becomes the
  // implicit bit of a binary32 normal number.
  int32_t floatExponent = 127 - 15 + 1;
  while ((mantissa & 0x400) == 0) {
    mantissa <<= 1;
    --floatExponent;
  }
  mantissa &= 0x3ff;
  return bitsToFloat(sign | (static_cast<uint32_t>(floatExponent) << 23) |
                     (mantissa << 13));
}

uint16_t floatToHalf(float f) {
  uint32_t bits = floatBits(f);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  uint32_t magnitude = bits & 0x7fffffff;
  uint32_t exponent = magnitude >> 23;
  uint32_t mantissa = magnitude & 0x7fffff;

  if (magnitude > 0x7f800000) // NaN: keep the top payload bits, force quiet.
    return sign | 0x7e00 | static_cast<uint16_t>(mantissa >> 13);
  // 65520 is halfway between 65504 (the largest half, odd mantissa) and
  // 2^16; ties go to the even neighbour, i.e. to infinity.
  if (magnitude >= 0x477ff000)
    return sign | 0x7c00;
  if (exponent >= 127 - 14) {
    // Normal half. Rounding may carry into the exponent, which is right.
    uint32_t half = ((exponent - (127 - 15)) << 10) | (mantissa >> 13);
    uint32_t rest = mantissa & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (half & 1)))
      ++half;
    return sign | static_cast<uint16_t>(half);
  }
  if (exponent == 0) // binary32 zero or subnormal: far below 2^-25.
    return sign;
  // Subnormal half: value / 2^-24 = (mantissa | 2^23) * 2^(exponent - 126).
  unsigned shift = 126 - exponent; // >= 14 here
  if (shift > 24)                  // value < 2^-25: rounds to zero
    return sign;
  return sign |
         static_cast<uint16_t>(shiftRightRoundEven(mantissa | 0x800000, shift));
}

float bfloat16ToFloat(uint16_t b) {
  return bitsToFloat(static_cast<uint32_t>(b) << 16);
}

uint16_t floatToBfloat16(float f) {
  uint32_t bits = floatBits(f);
  if ((bits & 0x7fffffff) > 0x7f800000) // NaN: truncate the payload, quiet.
    return static_cast<uint16_t>((bits >> 16) | 0x0040);
  // Same exponent range as binary32: rounding the low 16 bits away is the
  // whole conversion, subnormals and overflow to infinity included.
  uint32_t rest = bits & 0xffff;
  uint32_t kept = bits >> 16;
  if (rest > 0x8000 || (rest == 0x8000 && (kept & 1)))
    ++kept;
  return static_cast<uint16_t>(kept);
}

} // namespace kvgen::conformance
