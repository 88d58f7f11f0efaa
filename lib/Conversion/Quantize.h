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

/// `x` (f32) divided by the scale (or multiplied by `1 / scale` for a
/// reciprocal description: pass the reciprocal then), saturated and rounded
/// to the quantized kind's storage type. `fastDivision`: the division is
/// emitDivide's (for x converted from 16-bit floats), else arith.divf.
mlir::Value emitQuantize(mlir::ImplicitLocOpBuilder &b, mlir::Value x,
                         mlir::Value scale, kv::QuantAttr quant,
                         mlir::Type storage, bool fastDivision);

/// x / scale (f32, a scalar scale), the same bits as IEEE division: one
/// reciprocal per scale and three fused operations an element, IEEE
/// division itself where that identity is not proven (an scf.if over the
/// whole vector). Proven for x of at most 11 significant bits: use it for
/// values converted from bf16 or f16.
mlir::Value emitDivide(mlir::ImplicitLocOpBuilder &b, mlir::Value x,
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

/// A float cast between f32 and a 16-bit type, or between f32 and itself:
/// `extf` up, round to nearest even down. Scalar or vector.
mlir::Value emitFloatCast(mlir::ImplicitLocOpBuilder &b, mlir::Value v,
                          mlir::Type to);

} // namespace kvgen

#endif // KVGEN_LIB_CONVERSION_QUANTIZE_H
