//===- Quantize.cpp - the quantization convention as arith ops ------------===//
//
// q = saturate(x / s): the division gives IEEE fp32's bits (arith.divf, or
// for a 16-bit source emitDivide's reciprocal and fmas) and the rounding to
// the storage type is round to nearest even. The fp8 rounding
// is an arith.truncf to the fp8 type, which kv-expand-fp8-casts turns into
// cvt.rn.satfinite on the GPU and into integer ops on the host: both give
// the same bytes, saturating past the largest finite value and keeping a
// NaN. int8 clamps first, with arith.minimumf/maximumf so that a NaN
// survives the clamp, and then writes it as 0.
//
//===----------------------------------------------------------------------===//

#include "Quantize.h"

#include "kvgen/ABI/ABI.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
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

/// A constant of `type`'s shape (scalar or vector) and `attr`'s element.
static Value constLike(ImplicitLocOpBuilder &b, Type type, TypedAttr attr) {
  Type t = withElement(type, attr.getType());
  if (auto vt = dyn_cast<VectorType>(t))
    attr = DenseElementsAttr::get(vt, attr);
  return arith::ConstantOp::create(b, t, attr);
}

/// A constant f32 of `type`'s shape.
static Value f32Const(ImplicitLocOpBuilder &b, Type type, float v) {
  return constLike(b, type, b.getF32FloatAttr(v));
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

/// An i32 constant of `type`'s shape.
static Value i32Const(ImplicitLocOpBuilder &b, Type type, uint32_t v) {
  return constLike(b, type, b.getI32IntegerAttr(static_cast<int32_t>(v)));
}

// The window of the fast division: |x| and |s| in [2^-60, 2^60]. The bits
// of |v| minus those of 2^-60 are, as an unsigned number, at most those of
// 2^60 minus those of 2^-60 exactly inside it: a NaN or an infinity lands
// above, anything below 2^-60 (a zero included) wraps around past it.
constexpr uint32_t kWindowLow = 0x21800000;  // 2^-60
constexpr uint32_t kWindowHigh = 0x5D800000; // 2^60

/// |v|'s bits minus the window's low end (see above).
static Value windowOffset(ImplicitLocOpBuilder &b, Value v) {
  Type type = v.getType();
  Value bits =
      arith::BitcastOp::create(b, withElement(type, b.getI32Type()), v);
  Value mag = arith::AndIOp::create(b, bits, i32Const(b, type, 0x7FFFFFFF));
  return arith::SubIOp::create(b, mag, i32Const(b, type, kWindowLow));
}

Value kvgen::emitDivide(ImplicitLocOpBuilder &b, Value x, Value scale) {
  // y = RN(1 / s), once per scale; q0 = RN(x * y) is within an ulp of x / s,
  // the residual x - s * q0 is exact in an fma, and q0 + residual * y
  // rounds to RN(x / s) (Markstein). That holds while the quotient and the
  // residual stay normal, which |x| and |s| in [2^-60, 2^60] guarantee, and
  // for a zero x, where q0 itself is the quotient (the correction would
  // turn -0 into +0). For x of 11 significant bits or fewer the identity is
  // checked for every pair of significands (FastDivisionTest).
  Type type = x.getType();
  Value isZero = arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ, x,
                                       f32Const(b, type, 0.0f));
  // One unsigned max over the elements (a zero counts as inside), then one
  // compare: no per-element predicate reduction.
  Value offset = arith::SelectOp::create(b, isZero, i32Const(b, type, 0),
                                         windowOffset(b, x));
  if (isa<VectorType>(type))
    offset =
        vector::ReductionOp::create(b, vector::CombiningKind::MAXUI, offset);
  offset = arith::MaxUIOp::create(b, offset, windowOffset(b, scale));
  Value ok = arith::CmpIOp::create(
      b, arith::CmpIPredicate::ule, offset,
      i32Const(b, b.getF32Type(), kWindowHigh - kWindowLow));
  auto ifOp = scf::IfOp::create(b, type, ok, /*withElseRegion=*/true);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  {
    Value s = splat(b, scale, type);
    Value y = splat(
        b, arith::DivFOp::create(b, f32Const(b, b.getF32Type(), 1.0f), scale),
        type);
    Value q0 = arith::MulFOp::create(b, x, y);
    Value residual = LLVM::FMAOp::create(b, arith::NegFOp::create(b, q0), s, x);
    Value q1 = LLVM::FMAOp::create(b, residual, y, q0);
    scf::YieldOp::create(b, Value(arith::SelectOp::create(b, isZero, q0, q1)));
  }
  // Anything else (a NaN, an infinity, a subnormal, a scale far from 1)
  // takes IEEE division itself, the whole chunk at once.
  b.setInsertionPointToStart(ifOp.elseBlock());
  scf::YieldOp::create(
      b, Value(arith::DivFOp::create(b, x, splat(b, scale, type))));
  return ifOp.getResult(0);
}

Value kvgen::emitQuantize(ImplicitLocOpBuilder &b, Value x, Value scale,
                          kv::QuantAttr quant, Type storage,
                          bool fastDivision) {
  Type type = x.getType();
  Value y;
  if (fastDivision && !quant.getReciprocal()) {
    y = emitDivide(b, x, scale);
  } else {
    Value s = splat(b, scale, type);
    y = quant.getReciprocal() ? Value(arith::MulFOp::create(b, x, s))
                              : Value(arith::DivFOp::create(b, x, s));
  }
  Type target = withElement(type, storage);
  // fp8: the rounding saturates by itself (cvt.rn.satfinite on the GPU, the
  // same bytes from integer ops on the host: kv-expand-fp8-casts), so a
  // clamp before it would change no byte and cost two ops an element.
  if (quant.getKind() != kv::QuantKind::Int8)
    return arith::TruncFOp::create(b, target, y);
  float qmax = quantMax(quant);
  // minimumf/maximumf propagate NaN; infinities saturate to +-qmax.
  Value clamped = arith::MinimumFOp::create(
      b, arith::MaximumFOp::create(b, y, f32Const(b, type, -qmax)),
      f32Const(b, type, qmax));

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
