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

/// An i32 constant of `type`'s shape.
static Value i32Const(ImplicitLocOpBuilder &b, Type type, uint32_t v) {
  return constLike(b, type, b.getI32IntegerAttr(static_cast<int32_t>(v)));
}

// The window of the fast division. The scale: |s| in [2^-60, 2^60]. The
// bits of |s| minus those of 2^-60 are, as an unsigned number, at most those
// of 2^60 minus those of 2^-60 exactly inside it: a NaN or an infinity lands
// above, anything below 2^-60 (a zero included) wraps around past it.
constexpr uint32_t kWindowLow = 0x21800000;  // 2^-60
constexpr uint32_t kWindowHigh = 0x5D800000; // 2^60
// The source: |x| at most 2^60 for bf16, finite for f16 (whose values are
// all inside [2^-24, 65504] or zero). No lower bound: see emitDivide.
constexpr uint16_t kBf16High = 0x5D80; // 2^60
constexpr uint16_t kF16High = 0x7BFF;  // 65504

/// Whether every element of the 16-bit float `src` is inside the source's
/// window: one unsigned max over the magnitudes' bits, then one compare.
/// On the GPU a vector's magnitudes are masked and compared two lanes to a
/// 32-bit register (and.b32, max.u16x2).
static Value sourceInWindow(ImplicitLocOpBuilder &b, Value src) {
  Type type = src.getType();
  Type i16 = b.getI16Type();
  Value bits = arith::BitcastOp::create(b, withElement(type, i16), src);
  Value mag = arith::AndIOp::create(
      b, bits, constLike(b, type, b.getIntegerAttr(i16, 0x7FFF)));
  if (isa<VectorType>(type))
    mag = vector::ReductionOp::create(b, vector::CombiningKind::MAXUI, mag);
  uint16_t high = getElementTypeOrSelf(type).isBF16() ? kBf16High : kF16High;
  return arith::CmpIOp::create(b, arith::CmpIPredicate::ule, mag,
                               constLike(b, i16, b.getIntegerAttr(i16, high)));
}

/// Whether the f32 scale `s` is inside [2^-60, 2^60] in magnitude.
static Value scaleInWindow(ImplicitLocOpBuilder &b, Value s) {
  Type i32 = b.getI32Type();
  Value bits = arith::BitcastOp::create(b, i32, s);
  Value mag = arith::AndIOp::create(b, bits, i32Const(b, i32, 0x7FFFFFFF));
  Value offset = arith::SubIOp::create(b, mag, i32Const(b, i32, kWindowLow));
  return arith::CmpIOp::create(b, arith::CmpIPredicate::ule, offset,
                               i32Const(b, i32, kWindowHigh - kWindowLow));
}

Value kvgen::emitDivide(ImplicitLocOpBuilder &b, Value src, Value scale) {
  // y = RN(1 / s), once per scale; q0 = RN(x * y) is within an ulp of x / s,
  // the residual x - s * q0 is exact in an fma, and q0 + residual * y
  // rounds to RN(x / s) (Markstein). That holds while the quotient and the
  // residual stay normal, which |x| in [2^-60, 2^60] and |s| in the window
  // guarantee. For x of 11 significant bits or fewer the identity is
  // checked for every pair of significands (FastDivisionTest).
  //
  // A nonzero bf16 x below 2^-60 is not tested for: there the quotient is
  // below 2^-48 whenever it differs from IEEE division's, never of the other
  // sign, and both round to the same zero of the storage type (fp8's
  // smallest subnormal is 2^-16, int8's rounding step 1; FastDivisionTest,
  // TinySourcesQuantizeAlike). Testing for them would cost four operations
  // an element, where the window's upper end costs under one.
  //
  // A zero x gives q0 = +-0 of the quotient's sign, which the correction
  // would turn into +0; the sign of q0 is ORed into the result, which
  // changes nothing else: q0 and the corrected quotient share their sign
  // (one and, one or: a single lop3 on the GPU).
  Type type = src.getType();
  Type f32 = withElement(type, b.getF32Type());
  Type i32 = withElement(type, b.getI32Type());
  Value x = arith::ExtFOp::create(b, f32, src);
  Value ok =
      arith::AndIOp::create(b, sourceInWindow(b, src), scaleInWindow(b, scale));
  Value s = splat(b, scale, f32);
  auto ifOp = scf::IfOp::create(b, f32, ok, /*withElseRegion=*/true);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  {
    Value y = splat(
        b, arith::DivFOp::create(b, f32Const(b, b.getF32Type(), 1.0f), scale),
        f32);
    Value q0 = arith::MulFOp::create(b, x, y);
    Value residual = LLVM::FMAOp::create(b, arith::NegFOp::create(b, q0), s, x);
    Value q1 = LLVM::FMAOp::create(b, residual, y, q0);
    Value sign = arith::AndIOp::create(b, arith::BitcastOp::create(b, i32, q0),
                                       i32Const(b, i32, 0x80000000));
    Value q =
        arith::OrIOp::create(b, arith::BitcastOp::create(b, i32, q1), sign);
    scf::YieldOp::create(b, Value(arith::BitcastOp::create(b, f32, q)));
  }
  // Anything else (a NaN, an infinity, a bf16 past 2^60, a scale far from
  // 1) takes IEEE division itself, the whole chunk at once.
  b.setInsertionPointToStart(ifOp.elseBlock());
  scf::YieldOp::create(b, Value(arith::DivFOp::create(b, x, s)));
  return ifOp.getResult(0);
}

/// The quotient `y` (f32) saturated and rounded to the storage type.
static Value emitRounding(ImplicitLocOpBuilder &b, Value y, kv::QuantAttr quant,
                          Type storage) {
  Type type = y.getType();
  Type target = withElement(type, storage);
  // fp8: the rounding saturates by itself (cvt.rn.satfinite on the GPU, the
  // same bytes from integer ops on the host: kv-expand-fp8-casts), so a
  // clamp before it would change no byte and cost two ops an element.
  if (quant.getKind() != kv::QuantKind::Int8)
    return arith::TruncFOp::create(b, target, y);
  float qmax = abi::quantMax(quant.getKind());
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

Value kvgen::emitQuantize(ImplicitLocOpBuilder &b, Value x, Value scale,
                          kv::QuantAttr quant, Type storage,
                          bool fastDivision) {
  // The fast division tests the 16-bit source's bits; any other division
  // takes x extended (exactly) to f32.
  if (fastDivision && !quant.getReciprocal())
    return emitRounding(b, emitDivide(b, x, scale), quant, storage);
  x = emitFloatCast(b, x, b.getF32Type());
  Value s = splat(b, scale, x.getType());
  Value y = quant.getReciprocal() ? Value(arith::MulFOp::create(b, x, s))
                                  : Value(arith::DivFOp::create(b, x, s));
  return emitRounding(b, y, quant, storage);
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
  Value s = arith::DivFOp::create(
      b, amax, f32Const(b, f32, abi::quantMax(quant.getKind())));
  Value positive = arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, amax,
                                         f32Const(b, f32, 0));
  return arith::SelectOp::create(b, positive, s, f32Const(b, f32, 1));
}

std::pair<Value, Value> kvgen::emitNvfp4LaunchScales(ImplicitLocOpBuilder &b,
                                                     Value k) {
  Value one = f32Const(b, b.getF32Type(), 1.0f);
  Value g = arith::DivFOp::create(b, one, k);
  return {g, arith::DivFOp::create(b, one, g)};
}

namespace {
/// One candidate scale of an NVFP4 group: its e4m3 byte and the factor its
/// elements are multiplied by before the e2m1 rounding.
struct Nvfp4Candidate {
  Value scale;  // f8E4M3FN
  Value factor; // f32
};
} // namespace

/// The candidate for divisor `d` (docs/CONTRACT.md, "NVFP4", step 3): every
/// step one rounded f32 operation, in the contract's order; `1 / d` is the
/// correctly rounded constant (vLLM's rcp.approx of it may differ).
static Nvfp4Candidate emitNvfp4Candidate(ImplicitLocOpBuilder &b, Value amax,
                                         Value g, Value invG, float d) {
  Type f32 = b.getF32Type();
  Value c = f32Const(b, f32, 1.0f / d);
  Value sf = arith::MulFOp::create(b, g, arith::MulFOp::create(b, amax, c));
  Value scale = arith::TruncFOp::create(b, b.getType<Float8E4M3FNType>(), sf);
  Value s = arith::ExtFOp::create(b, f32, scale);
  Value zero = f32Const(b, f32, 0.0f);
  Value nonzero = arith::CmpFOp::create(b, arith::CmpFPredicate::UNE, s, zero);
  Value factor = arith::DivFOp::create(b, f32Const(b, f32, 1.0f),
                                       arith::MulFOp::create(b, s, invG));
  return {scale, arith::SelectOp::create(b, nonzero, factor, zero)};
}

/// The group's elements by the candidate's factor, rounded to e2m1.
static Value emitNvfp4Elements(ImplicitLocOpBuilder &b, Value x, Value factor) {
  auto type = cast<VectorType>(x.getType());
  Value scaled = arith::MulFOp::create(b, x, splat(b, factor, type));
  return arith::TruncFOp::create(
      b, VectorType::get(type.getShape(), b.getType<Float4E2M1FNType>()),
      scaled);
}

/// The reconstruction error of a candidate (step 5): per pair of elements
/// (2j, 2j + 1) in order, dx^2 + dy^2 with dx = q * e - x, added to the
/// running sum; each operation rounded, none fused.
static Value emitNvfp4Error(ImplicitLocOpBuilder &b, Value x, Value q,
                            Value factor) {
  Type f32 = b.getF32Type();
  Value zero = f32Const(b, f32, 0.0f);
  Value nonzero =
      arith::CmpFOp::create(b, arith::CmpFPredicate::UNE, factor, zero);
  Value e = arith::SelectOp::create(
      b, nonzero, arith::DivFOp::create(b, f32Const(b, f32, 1.0f), factor),
      zero);
  auto type = cast<VectorType>(x.getType());
  Value qf = arith::ExtFOp::create(b, type, q);
  // With a zero factor every q is 0 and e is 0: dx = -x, the contract's
  // sum of x^2 (a square is the same for -x).
  Value d = arith::SubFOp::create(
      b, arith::MulFOp::create(b, qf, splat(b, e, type)), x);
  Value sq = arith::MulFOp::create(b, d, d);
  Value err = zero;
  for (int64_t i = 0; i + 1 < type.getNumElements(); i += 2) {
    Value pair = arith::AddFOp::create(b, vector::ExtractOp::create(b, sq, i),
                                       vector::ExtractOp::create(b, sq, i + 1));
    err = arith::AddFOp::create(b, err, pair);
  }
  return err;
}

std::pair<Value, Value> kvgen::emitNvfp4Group(ImplicitLocOpBuilder &b, Value x,
                                              Value g, Value invG,
                                              bool fourOverSix) {
  Value amax = emitAbsMaxFinite(b, x, f32Const(b, b.getF32Type(), 0.0f));
  Nvfp4Candidate six = emitNvfp4Candidate(b, amax, g, invG, 6.0f);
  Value q6 = emitNvfp4Elements(b, x, six.factor);
  if (!fourOverSix)
    return {six.scale, q6};
  Nvfp4Candidate four = emitNvfp4Candidate(b, amax, g, invG, 4.0f);
  Value q4 = emitNvfp4Elements(b, x, four.factor);
  // err4 < err6, false for a NaN error: the default keeps the group.
  Value useFour = arith::CmpFOp::create(b, arith::CmpFPredicate::OLT,
                                        emitNvfp4Error(b, x, q4, four.factor),
                                        emitNvfp4Error(b, x, q6, six.factor));
  return {arith::SelectOp::create(b, useFour, four.scale, six.scale),
          arith::SelectOp::create(b, useFour, q4, q6)};
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
