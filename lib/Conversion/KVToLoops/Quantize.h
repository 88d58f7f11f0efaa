//===- Quantize.h - the quantization convention as arith ops ----*- C++ -*-===//
//
// The value-level half of a quantized kernel (docs/CONTRACT.md,
// "Quantization"), shared by the append and the gather builders of
// kv-to-loops. Every function takes and returns a scalar or a vector of
// elements; scales are f32 scalars.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_LIB_CONVERSION_QUANTIZE_H
#define KVGEN_LIB_CONVERSION_QUANTIZE_H

#include "kvgen/Dialect/KV/IR/KVDialect.h"

#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace kvgen {

/// `x` divided by the scale (or multiplied by `1 / scale` for a reciprocal
/// description: pass the reciprocal then), saturated and rounded to the
/// quantized kind's storage type. `x` is f32, or a 16-bit float that is
/// extended exactly. `fastDivision` (x bf16 or f16): the division is
/// emitDivide's, else arith.divf.
mlir::Value emitQuantize(mlir::ImplicitLocOpBuilder &b, mlir::Value x,
                         mlir::Value scale, kv::QuantAttr quant,
                         mlir::Type storage, bool fastDivision);

/// `src` (bf16 or f16, scalar or vector) extended to f32 and divided by the
/// f32 scalar `scale`: one reciprocal per scale and three fused operations
/// and a sign fix an element, IEEE division itself outside the window where
/// the identity is tested (an scf.if over the whole vector). The quotient
/// has IEEE division's bits wherever either is at least 2^-48 in magnitude,
/// and otherwise its sign: the same bytes once rounded to fp8 or int8.
mlir::Value emitDivide(mlir::ImplicitLocOpBuilder &b, mlir::Value src,
                       mlir::Value scale);

/// `float(q) * scale` in f32.
mlir::Value emitDequantize(mlir::ImplicitLocOpBuilder &b, mlir::Value q,
                           mlir::Value scale, kv::QuantAttr quant);

/// max |x| over the finite elements of `x` (f32), combined with `acc`.
mlir::Value emitAbsMaxFinite(mlir::ImplicitLocOpBuilder &b, mlir::Value x,
                             mlir::Value acc);

/// The dynamic scale of a group: amax / qmax, or 1 if amax is 0.
mlir::Value emitDynamicScale(mlir::ImplicitLocOpBuilder &b, mlir::Value amax,
                             kv::QuantAttr quant);

/// NVFP4's per-launch scales from the static per-tensor scale `k` (f32):
/// the encode scale `g = 1 / k` and `1 / g` (docs/CONTRACT.md, "NVFP4",
/// step 1 and step 3's inner reciprocal), each an IEEE division.
std::pair<mlir::Value, mlir::Value>
emitNvfp4LaunchScales(mlir::ImplicitLocOpBuilder &b, mlir::Value k);

/// One NVFP4 group (docs/CONTRACT.md, "NVFP4"): `x` its elements as an f32
/// vector (16 of them), `g` and `invG` emitNvfp4LaunchScales'. Returns the
/// group's scale (an f8E4M3FN scalar) and its elements (a vector of
/// f4E2M1FN), by the default rule (divisor 6) or, with `fourOverSix`, the
/// divisor of 6 and 4 whose reconstruction error is smaller.
std::pair<mlir::Value, mlir::Value>
emitNvfp4Group(mlir::ImplicitLocOpBuilder &b, mlir::Value x, mlir::Value g,
               mlir::Value invG, bool fourOverSix);

/// A float cast between f32 and a 16-bit type, or between f32 and itself:
/// `extf` up, round to nearest even down. Scalar or vector.
mlir::Value emitFloatCast(mlir::ImplicitLocOpBuilder &b, mlir::Value v,
                          mlir::Type to);

} // namespace kvgen

#endif // KVGEN_LIB_CONVERSION_QUANTIZE_H
