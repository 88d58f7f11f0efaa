//===- Quantize.cpp - the quantization convention as arith ops ------------===//
//
// q = saturate(x / s): the division is IEEE fp32 (arith.divf), the clamp
// uses arith.minimumf/maximumf so that a NaN survives it (fp8 stores it as
// NaN, int8 as 0), and the rounding to the storage type is round to nearest
// even. The fp8 rounding itself is an arith.truncf to the fp8 type, which
// kv-expand-fp8-casts turns into cvt.rn.satfinite on the GPU and into
// integer ops on the host: both give the same bytes.
//
//===----------------------------------------------------------------------===//

#include "Quantize.h"

#include "kvgen/ABI/ABI.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/TypeUtilities.h"

using namespace mlir;
using namespace kvgen;

/// `type` with its element type replaced (scalar or vector).
static Type withElement(Type type, Type element) {
  if (auto vt = dyn_cast<VectorType>(type))
    return VectorType::get(vt.getShape(), element);
  return element;
}

/// A constant f32 of `type`'s shape.
static Value f32Const(ImplicitLocOpBuilder &b, Type type, float v) {
  Type f32 = withElement(type, b.getF32Type());
  TypedAttr attr = b.getF32FloatAttr(v);
  if (auto vt = dyn_cast<VectorType>(f32))
    attr = DenseElementsAttr::get(vt, attr);
  return arith::ConstantOp::create(b, f32, attr);
}

/// A scalar broadcast to `like`'s shape.
static Value splat(ImplicitLocOpBuilder &b, Value scalar, Type like) {
  if (auto vt = dyn_cast<VectorType>(like))
    return vector::BroadcastOp::create(
        b, VectorType::get(vt.getShape(), scalar.getType()), scalar);
  return scalar;
}

static float quantMax(kv::QuantAttr quant) {
  switch (quant.getKind()) {
  case kv::QuantKind::FP8E4M3:
    return abi::quantMax(abi::QuantKind::FP8E4M3);
  case kv::QuantKind::FP8E5M2:
    return abi::quantMax(abi::QuantKind::FP8E5M2);
  case kv::QuantKind::Int8:
  case kv::QuantKind::Int4:
    break;
  }
  return abi::quantMax(abi::QuantKind::Int8);
}

Value kvgen::emitQuantize(ImplicitLocOpBuilder &b, Value x, Value scale,
                          kv::QuantAttr quant, Type storage) {
  Type type = x.getType();
  Value s = splat(b, scale, type);
  Value y = quant.getReciprocal() ? Value(arith::MulFOp::create(b, x, s))
                                  : Value(arith::DivFOp::create(b, x, s));
  float qmax = quantMax(quant);
  // minimumf/maximumf propagate NaN; infinities saturate to +-qmax.
  Value clamped = arith::MinimumFOp::create(
      b, arith::MaximumFOp::create(b, y, f32Const(b, type, -qmax)),
      f32Const(b, type, qmax));
  Type target = withElement(type, storage);
  if (quant.getKind() != kv::QuantKind::Int8)
    return arith::TruncFOp::create(b, target, clamped);

  // int8: a NaN writes 0; then round to nearest even. Adding and removing
  // 1.5 * 2^23 rounds any |v| <= 2^22 to an integer in the current rounding
  // mode (nearest even) on every IEEE target, with no libm call.
  Value isNaN =
      arith::CmpFOp::create(b, arith::CmpFPredicate::UNO, clamped, clamped);
  Value v = arith::SelectOp::create(b, isNaN, f32Const(b, type, 0), clamped);
  Value magic = f32Const(b, type, 12582912.0f);
  Value rounded =
      arith::SubFOp::create(b, arith::AddFOp::create(b, v, magic), magic);
  return arith::FPToSIOp::create(b, target, rounded);
}

Value kvgen::emitDequantize(ImplicitLocOpBuilder &b, Value q, Value scale,
                            kv::QuantAttr quant) {
  Type f32 = withElement(q.getType(), b.getF32Type());
  Value x = quant.getKind() == kv::QuantKind::Int8
                ? Value(arith::SIToFPOp::create(b, f32, q))
                : Value(arith::ExtFOp::create(b, f32, q));
  return arith::MulFOp::create(b, x, splat(b, scale, f32));
}

Value kvgen::emitAbsMaxFinite(ImplicitLocOpBuilder &b, Value x, Value acc) {
  Type type = x.getType();
  Value neg = arith::NegFOp::create(b, x);
  Value abs = arith::MaximumFOp::create(b, x, neg);
  // |x| < inf is false for infinities and NaN: they do not count.
  Value finite = arith::CmpFOp::create(
      b, arith::CmpFPredicate::OLT, abs,
      f32Const(b, type, std::numeric_limits<float>::infinity()));
  Value a = arith::SelectOp::create(b, finite, abs, f32Const(b, type, 0));
  // Nothing here is NaN, so maximumf (max.NaN.f32 on the GPU) is maxnum;
  // the GPU lowering would call libdevice for a scalar maxnumf.
  if (isa<VectorType>(type))
    a = vector::ReductionOp::create(b, vector::CombiningKind::MAXIMUMF, a);
  return arith::MaximumFOp::create(b, a, acc);
}

Value kvgen::emitDynamicScale(ImplicitLocOpBuilder &b, Value amax,
                              kv::QuantAttr quant) {
  Type f32 = b.getF32Type();
  Value s = arith::DivFOp::create(b, amax, f32Const(b, f32, quantMax(quant)));
  Value positive = arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, amax,
                                         f32Const(b, f32, 0));
  return arith::SelectOp::create(b, positive, s, f32Const(b, f32, 1));
}

Value kvgen::emitFloatCast(ImplicitLocOpBuilder &b, Value v, Type to) {
  Type from = getElementTypeOrSelf(v.getType());
  if (from == to)
    return v;
  Type target = withElement(v.getType(), to);
  if (from.getIntOrFloatBitWidth() > to.getIntOrFloatBitWidth())
    return arith::TruncFOp::create(b, target, v);
  return arith::ExtFOp::create(b, target, v);
}
