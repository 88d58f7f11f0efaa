//===- Float16.h - Bit-exact fp16/bf16 <-> fp32 conversions -----*- C++ -*-===//
//
// The reference's own conversions. They are written out bit by bit, not taken
// from the compiler or the CUDA headers, so that the reference does not share
// a rounding bug with the kernels it checks. Widening is exact; narrowing
// rounds to nearest, ties to even, overflows to infinity and keeps
// subnormals, as IEEE 754 (and MLIR's arith.truncf) says.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_CONFORMANCE_FLOAT16_H
#define KVGEN_CONFORMANCE_FLOAT16_H

#include <cstdint>

namespace kvgen::conformance {

/// The bits of `f`, and the float of `bits`.
uint32_t floatBits(float f);
float bitsToFloat(uint32_t bits);

/// IEEE binary16 -> binary32, exact (subnormals, infinities, NaN payloads).
float halfToFloat(uint16_t h);
/// binary32 -> binary16, round to nearest even; NaN stays a (quiet) NaN.
uint16_t floatToHalf(float f);

/// bfloat16 -> binary32, exact.
float bfloat16ToFloat(uint16_t b);
/// binary32 -> bfloat16, round to nearest even; NaN stays a (quiet) NaN.
uint16_t floatToBfloat16(float f);

} // namespace kvgen::conformance

#endif // KVGEN_CONFORMANCE_FLOAT16_H
