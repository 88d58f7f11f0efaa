//===- KVExpandFP8Casts.cpp - fp8 casts the targets can run ---------------===//
//
// kv-to-loops writes the fp8 rounding of a quantized append as arith.truncf
// f32 -> f8 (any f32: both expansions saturate and keep a NaN) and the
// gather's decoding as arith.extf f8 -> f32. Neither lowers to LLVM as it is.
// This pass expands them:
//
//  - truncf: on a GPU with fp8 conversions (`nvvm=true`, sm_89 and later)
//    into cvt.rn.satfinite.{e4m3,e5m2}x2.f32 (nvvm.convert.f32x2.to.f8x2),
//    two elements per instruction; on the host and on older GPUs (sm_75 to
//    sm_87, which have no such cvt) into integer ops that give the same
//    bytes: round to nearest even,
//    subnormals included, values past the largest finite saturate, the sign
//    of a zero is kept, and a NaN becomes 0x7F;
//  - extf: on both targets into integer ops (exact: every fp8 value is an
//    f32 value), an fp8 NaN reading back as NaN.
//
// The same for NVFP4's element, e2m1 (f4E2M1FN: 0, 0.5, 1, 1.5, 2, 3, 4, 6
// and their negatives; docs/CONTRACT.md, "NVFP4"): truncf f32 -> f4E2M1FN
// rounds to nearest even, saturates to +-6 (infinities included), keeps the
// sign of a zero and writes a NaN as +0, with cvt.rn.satfinite.e2m1x2.f32
// (nvvm.convert.f32x2.to.f4x2) where the chip has it (sm_100 and later with
// the arch- or family-specific features: sm_100a, sm_120f, ...; the plain
// sm_100 target has no such cvt) and integer ops everywhere else, sm_90
// included; extf f4E2M1FN -> f32 is integer ops on both targets. The cvt
// gets a NaN replaced by +0 first, so that its bytes never depend on what
// the instruction does with one.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/bit.h"

namespace kvgen {
#define GEN_PASS_DEF_KVEXPANDFP8CASTS
#include "kvgen/Transforms/Passes.h.inc"
} // namespace kvgen

using namespace mlir;
using namespace kvgen;

namespace {

/// The parameters of one fp8 format.
struct FP8Format {
  int bias;
  int mantissa;
  uint32_t maxCode; // the largest finite magnitude's code
  bool fn;          // e4m3fn: no infinities, 0x7F is the only NaN magnitude
};

std::optional<FP8Format> getFormat(Type type) {
  if (isa<Float8E4M3FNType>(type))
    return FP8Format{7, 3, 0x7E, true};
  if (isa<Float8E5M2Type>(type))
    return FP8Format{15, 2, 0x7B, false};
  return std::nullopt;
}

Type withElement(Type type, Type element) {
  if (auto vt = dyn_cast<VectorType>(type))
    return VectorType::get(vt.getShape(), element);
  return element;
}

/// Builds integer and float constants of one shape (scalar or vector).
struct Builder {
  ImplicitLocOpBuilder &b;
  Type shape;
  Value c(Type elt, TypedAttr attr) {
    Type type = withElement(shape, elt);
    if (auto vt = dyn_cast<VectorType>(type))
      attr = DenseElementsAttr::get(vt, attr);
    return arith::ConstantOp::create(b, type, attr);
  }
  Value u32(uint32_t v) {
    return c(b.getI32Type(), b.getI32IntegerAttr(static_cast<int32_t>(v)));
  }
  Value f32(float v) { return c(b.getF32Type(), b.getF32FloatAttr(v)); }
  Type i32() { return withElement(shape, b.getI32Type()); }
  Type f32Type() { return withElement(shape, b.getF32Type()); }
  Value cmp(arith::CmpIPredicate p, Value x, Value y) {
    return arith::CmpIOp::create(b, p, x, y);
  }
  Value sel(Value cond, Value x, Value y) {
    return arith::SelectOp::create(b, cond, x, y);
  }
};

/// f32 -> fp8 code in integer ops (the float_to_half "fast3" construction,
/// for a 3- or 2-bit mantissa).
Value softwareTruncate(ImplicitLocOpBuilder &b, Value x, Type fp8,
                       const FP8Format &f) {
  Builder c{b, x.getType()};
  int shift = 23 - f.mantissa;
  Value bits = arith::BitcastOp::create(b, c.i32(), x);
  Value sign = arith::AndIOp::create(
      b, arith::ShRUIOp::create(b, bits, c.u32(24)), c.u32(0x80));
  Value abs = arith::AndIOp::create(b, bits, c.u32(0x7FFFFFFF));

  // Below the smallest normal: adding a power of two whose ulp is the
  // smallest fp8 subnormal makes the FPU round to nearest even for us.
  uint32_t magicBits = uint32_t((127 - f.bias) + shift + 1) << 23;
  Value magic = arith::BitcastOp::create(b, c.f32Type(), c.u32(magicBits));
  Value sum = arith::AddFOp::create(
      b, arith::BitcastOp::create(b, c.f32Type(), abs), magic);
  Value subnormal = arith::SubIOp::create(
      b, arith::BitcastOp::create(b, c.i32(), sum), c.u32(magicBits));

  // Normal: rebias the exponent and round the dropped mantissa bits to
  // nearest even; a carry moves into the exponent by itself.
  Value odd = arith::AndIOp::create(
      b, arith::ShRUIOp::create(b, abs, c.u32(shift)), c.u32(1));
  uint32_t rebias = uint32_t(f.bias - 127) << 23;
  Value rounded = arith::AddIOp::create(
      b, arith::AddIOp::create(b, abs, c.u32(rebias + (1u << (shift - 1)) - 1)),
      odd);
  Value normal = arith::ShRUIOp::create(b, rounded, c.u32(shift));

  uint32_t minNormal = uint32_t(127 + 1 - f.bias) << 23;
  Value code = c.sel(c.cmp(arith::CmpIPredicate::ult, abs, c.u32(minNormal)),
                     subnormal, normal);
  code = arith::MinUIOp::create(b, code, c.u32(f.maxCode));
  code = arith::OrIOp::create(b, code, sign);
  Value isNaN = c.cmp(arith::CmpIPredicate::ugt, abs, c.u32(0x7F800000));
  code = c.sel(isNaN, c.u32(0x7F), code);
  Value byte =
      arith::TruncIOp::create(b, withElement(x.getType(), b.getI8Type()), code);
  return arith::BitcastOp::create(b, withElement(x.getType(), fp8), byte);
}

/// The f32 elements of `x` (a scalar or a vector) as scalars, with a 0
/// appended to an odd count: the cvt instructions take them in pairs.
SmallVector<Value> pairableScalars(ImplicitLocOpBuilder &b, Value x) {
  SmallVector<Value> elems;
  if (auto vt = dyn_cast<VectorType>(x.getType()))
    for (int64_t i = 0; i < vt.getNumElements(); ++i)
      elems.push_back(vector::ExtractOp::create(b, x, i));
  else
    elems.push_back(x);
  if (elems.size() % 2)
    elems.push_back(arith::ConstantOp::create(b, b.getF32FloatAttr(0.0f)));
  return elems;
}

/// f32 -> fp8 with cvt.rn.satfinite, two elements per instruction. Each
/// pair stays one i16 and an even vector is put together from them, so the
/// bytes of a chunk travel as halfwords into its store: built from single
/// bytes, LLVM reassembled them with byte shifts and permutes.
Value nvvmTruncate(ImplicitLocOpBuilder &b, Value x, Type fp8) {
  auto vt = dyn_cast<VectorType>(x.getType());
  SmallVector<Value> elems = pairableScalars(b, x);
  // The i16 holds the first operand in its upper byte: passing the pair as
  // (odd, even) puts element 2k in the low byte, which is the first in
  // memory (as <2 x i8>, element 0).
  bool asHalves = vt && vt.getNumElements() % 2 == 0;
  Type i8 = b.getI8Type();
  Type pairType =
      asHalves ? Type(b.getI16Type()) : Type(VectorType::get({2}, i8));
  SmallVector<Value> pairs;
  for (size_t i = 0; i < elems.size(); i += 2)
    pairs.push_back(NVVM::ConvertF32x2ToF8x2Op::create(
        b, pairType, elems[i + 1], elems[i], NVVM::FPRoundingMode::RN,
        NVVM::SaturationMode::SATFINITE, /*relu=*/false, fp8));
  if (asHalves) {
    Value halves = vector::FromElementsOp::create(
        b, VectorType::get({vt.getNumElements() / 2}, b.getI16Type()), pairs);
    Value bytes = vector::BitCastOp::create(
        b, VectorType::get(vt.getShape(), i8), halves);
    return arith::BitcastOp::create(b, VectorType::get(vt.getShape(), fp8),
                                    bytes);
  }
  SmallVector<Value> bytes;
  for (Value pair : pairs) {
    bytes.push_back(vector::ExtractOp::create(b, pair, 0));
    bytes.push_back(vector::ExtractOp::create(b, pair, 1));
  }
  if (!vt)
    return arith::BitcastOp::create(b, fp8, bytes.front());
  bytes.resize(vt.getNumElements());
  Value packed = vector::FromElementsOp::create(
      b, VectorType::get(vt.getShape(), i8), bytes);
  return arith::BitcastOp::create(b, VectorType::get(vt.getShape(), fp8),
                                  packed);
}

/// fp8 -> f32, exactly.
Value softwareExtend(ImplicitLocOpBuilder &b, Value q, const FP8Format &f) {
  Type shape = q.getType();
  Builder c{b, shape};
  Value byte =
      arith::BitcastOp::create(b, withElement(shape, b.getI8Type()), q);
  Value code = arith::ExtUIOp::create(b, c.i32(), byte);
  Value sign = arith::ShLIOp::create(
      b, arith::AndIOp::create(b, code, c.u32(0x80)), c.u32(24));
  Value mag = arith::AndIOp::create(b, code, c.u32(0x7F));
  Value e = arith::ShRUIOp::create(b, mag, c.u32(f.mantissa));
  Value m = arith::AndIOp::create(b, mag, c.u32((1u << f.mantissa) - 1));
  Value normal = arith::OrIOp::create(
      b,
      arith::ShLIOp::create(
          b, arith::AddIOp::create(b, e, c.u32(uint32_t(127 - f.bias))),
          c.u32(23)),
      arith::ShLIOp::create(b, m, c.u32(23 - f.mantissa)));
  // A subnormal is m * 2^(1 - bias - mantissa): exact in f32.
  Value sub =
      arith::MulFOp::create(b, arith::UIToFPOp::create(b, c.f32Type(), m),
                            c.f32(std::ldexp(1.0f, 1 - f.bias - f.mantissa)));
  Value bits = c.sel(c.cmp(arith::CmpIPredicate::eq, e, c.u32(0)),
                     arith::BitcastOp::create(b, c.i32(), sub), normal);
  if (f.fn) {
    bits = c.sel(c.cmp(arith::CmpIPredicate::eq, mag, c.u32(0x7F)),
                 c.u32(0x7FC00000), bits);
  } else {
    Value special = c.sel(c.cmp(arith::CmpIPredicate::eq, m, c.u32(0)),
                          c.u32(0x7F800000), c.u32(0x7FC00000));
    bits = c.sel(c.cmp(arith::CmpIPredicate::eq, e, c.u32(31)), special, bits);
  }
  return arith::BitcastOp::create(b, c.f32Type(),
                                  arith::OrIOp::create(b, bits, sign));
}

/// f32 -> e2m1 code (the low 4 bits of an i8) in integer ops. The seven
/// midpoints between the magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 are f32
/// values; comparing |x|'s bits with theirs (f32 order is integer order for
/// non-negative values) counts the magnitudes below x. A tie goes to the
/// even code: past 0.25, 1.25, 2.5 and 5 only above the midpoint (codes 0,
/// 2, 4, 6 below), past 0.75, 1.75 and 3.5 from the midpoint on (codes 2, 4,
/// 6 above). Everything past 5 (infinities too) is code 7, 6.0: satfinite.
Value softwareTruncateE2M1(ImplicitLocOpBuilder &b, Value x, Type f4) {
  Builder c{b, x.getType()};
  Value bits = arith::BitcastOp::create(b, c.i32(), x);
  Value abs = arith::AndIOp::create(b, bits, c.u32(0x7FFFFFFF));
  struct Midpoint {
    float value;
    bool tieUp;
  };
  static constexpr Midpoint kMidpoints[] = {
      {0.25f, false}, {0.75f, true}, {1.25f, false}, {1.75f, true},
      {2.5f, false},  {3.5f, true},  {5.0f, false}};
  Value code = c.u32(0);
  for (Midpoint m : kMidpoints) {
    Value past =
        c.cmp(m.tieUp ? arith::CmpIPredicate::uge : arith::CmpIPredicate::ugt,
              abs, c.u32(llvm::bit_cast<uint32_t>(m.value)));
    code = arith::AddIOp::create(b, code,
                                 arith::ExtUIOp::create(b, c.i32(), past));
  }
  Value sign = arith::AndIOp::create(
      b, arith::ShRUIOp::create(b, bits, c.u32(28)), c.u32(0x8));
  code = arith::OrIOp::create(b, code, sign);
  Value isNaN = c.cmp(arith::CmpIPredicate::ugt, abs, c.u32(0x7F800000));
  code = c.sel(isNaN, c.u32(0), code);
  Value nibble =
      arith::TruncIOp::create(b, withElement(x.getType(), b.getI4Type()), code);
  return arith::BitcastOp::create(b, withElement(x.getType(), f4), nibble);
}

/// f32 -> e2m1 with cvt.rn.satfinite.e2m1x2.f32, two elements a byte
/// (element 2k in the low nibble, as the cache stores them). A NaN is made
/// +0 first: the contract's NaN rule, whatever the cvt does with one.
Value nvvmTruncateE2M1(ImplicitLocOpBuilder &b, Value x, Type f4) {
  Builder c{b, x.getType()};
  Value isNaN = arith::CmpFOp::create(b, arith::CmpFPredicate::UNO, x, x);
  x = c.sel(isNaN, c.f32(0.0f), x);
  auto vt = dyn_cast<VectorType>(x.getType());
  int64_t n = vt ? vt.getNumElements() : 1;
  SmallVector<Value> elems = pairableScalars(b, x);
  // Each byte's two nibbles become two scalar codes: a vector of i4 built
  // from the bytes would reach the NVPTX back end as a bitcast it takes
  // apart through a stack slot, where these fold back into the bytes when a
  // store packs them again.
  Type i4 = b.getIntegerType(4);
  Value four = arith::ConstantOp::create(b, b.getI8IntegerAttr(4));
  SmallVector<Value> codes;
  for (size_t i = 0; i < elems.size(); i += 2) {
    Value byte = NVVM::ConvertF32x2ToF4x2Op::create(
        b, b.getI8Type(), elems[i + 1], elems[i], /*relu=*/false, f4);
    codes.push_back(
        arith::BitcastOp::create(b, f4, arith::TruncIOp::create(b, i4, byte)));
    codes.push_back(arith::BitcastOp::create(
        b, f4,
        arith::TruncIOp::create(b, i4, arith::ShRUIOp::create(b, byte, four))));
  }
  codes.resize(n);
  if (!vt)
    return codes.front();
  return vector::FromElementsOp::create(b, VectorType::get(vt.getShape(), f4),
                                        codes);
}

/// e2m1 -> f32, exactly: code m of magnitude 0.5 * m below 2, else
/// 2^(e - 1) * (1 + mantissa / 2) for m = 2e + mantissa.
Value softwareExtendE2M1(ImplicitLocOpBuilder &b, Value q) {
  Type shape = q.getType();
  Builder c{b, shape};
  Value nibble =
      arith::BitcastOp::create(b, withElement(shape, b.getI4Type()), q);
  Value code = arith::ExtUIOp::create(b, c.i32(), nibble);
  Value sign = arith::ShLIOp::create(
      b, arith::AndIOp::create(b, code, c.u32(0x8)), c.u32(28));
  Value mag = arith::AndIOp::create(b, code, c.u32(0x7));
  Value e = arith::ShRUIOp::create(b, mag, c.u32(1));
  Value m = arith::AndIOp::create(b, mag, c.u32(1));
  Value normal = arith::OrIOp::create(
      b,
      arith::ShLIOp::create(b, arith::AddIOp::create(b, e, c.u32(126)),
                            c.u32(23)),
      arith::ShLIOp::create(b, m, c.u32(22)));
  // Codes 0 and 1: 0 and 0.5.
  Value sub = c.sel(c.cmp(arith::CmpIPredicate::eq, mag, c.u32(0)), c.u32(0),
                    c.u32(0x3F000000));
  Value bits = c.sel(c.cmp(arith::CmpIPredicate::eq, e, c.u32(0)), sub, normal);
  return arith::BitcastOp::create(b, c.f32Type(),
                                  arith::OrIOp::create(b, bits, sign));
}

/// Whether the GPU that `op` is compiled for has cvt to e2m1x2: sm_100 and
/// later with the arch-specific (`a`) or family-specific (`f`) features. A
/// module with no NVVM target, or a plain sm_100, has not: the back end
/// cannot select the cvt there.
bool hasE2M1Conversions(Operation *op) {
  auto targets = op->getAttrOfType<ArrayAttr>("targets");
  if (!targets)
    return false;
  for (Attribute attr : targets) {
    auto nvvm = dyn_cast<NVVM::NVVMTargetAttr>(attr);
    if (!nvvm)
      continue;
    StringRef chip = nvvm.getChip();
    unsigned number = 0;
    if (!chip.consume_front("sm_"))
      return false;
    StringRef digits = chip.take_while(llvm::isDigit);
    if (digits.getAsInteger(10, number))
      return false;
    StringRef suffix = chip.drop_front(digits.size());
    return number >= 100 && (suffix == "a" || suffix == "f");
  }
  return false;
}

/// Whether the GPU that `op` is compiled for (the NVVM target attached to
/// its gpu.module) has cvt to e4m3x2/e5m2x2: sm_89 and later. A module with
/// no NVVM target yet is taken to have it, as before targets were attached.
bool hasFP8Conversions(Operation *op) {
  auto targets = op->getAttrOfType<ArrayAttr>("targets");
  if (!targets)
    return true;
  for (Attribute attr : targets) {
    auto nvvm = dyn_cast<NVVM::NVVMTargetAttr>(attr);
    if (!nvvm)
      continue;
    StringRef chip = nvvm.getChip();
    unsigned number = 0;
    if (chip.consume_front("sm_") &&
        !chip.take_while(llvm::isDigit).getAsInteger(10, number))
      return number >= 89;
  }
  return true;
}

struct KVExpandFP8CastsPass
    : public kvgen::impl::KVExpandFP8CastsBase<KVExpandFP8CastsPass> {
  using Base::Base;
  void runOnOperation() override {
    bool hardware = nvvm && hasFP8Conversions(getOperation());
    bool hardwareE2M1 = nvvm && hasE2M1Conversions(getOperation());
    SmallVector<Operation *> casts;
    getOperation()->walk([&](Operation *op) {
      if (isa<arith::TruncFOp, arith::ExtFOp>(op))
        casts.push_back(op);
    });
    for (Operation *op : casts) {
      Value in = op->getOperand(0);
      Type inElt = getElementTypeOrSelf(in.getType());
      Type outElt = getElementTypeOrSelf(op->getResult(0).getType());
      bool e2m1 = isa<Float4E2M1FNType>(inElt) || isa<Float4E2M1FNType>(outElt);
      if (!getFormat(inElt) && !getFormat(outElt) && !e2m1)
        continue;
      // The expansions build scalars or 1-d vectors (and cvt's pairs split
      // a 1-d vector); anything else would come out as broken IR.
      auto vector = dyn_cast<VectorType>(in.getType());
      if (!in.getType().isIntOrFloat() &&
          !(vector && vector.getRank() == 1 && !vector.isScalable())) {
        op->emitOpError("kvgen expands fp8 casts of scalars and fixed 1-d "
                        "vectors only, got ")
            << in.getType();
        return signalPassFailure();
      }
      ImplicitLocOpBuilder b(op->getLoc(), op);
      Value result;
      if (e2m1) {
        bool trunc = isa<arith::TruncFOp>(op);
        if (!(trunc ? inElt : outElt).isF32()) {
          op->emitOpError(trunc ? "kvgen rounds only f32 to e2m1"
                                : "kvgen extends e2m1 only to f32");
          return signalPassFailure();
        }
        if (!trunc)
          result = softwareExtendE2M1(b, in);
        else if (hardwareE2M1)
          result = nvvmTruncateE2M1(b, in, outElt);
        else
          result = softwareTruncateE2M1(b, in, outElt);
      } else if (isa<arith::TruncFOp>(op)) {
        std::optional<FP8Format> f = getFormat(outElt);
        if (!f)
          continue;
        if (!inElt.isF32()) {
          op->emitOpError("kvgen rounds only f32 to fp8");
          return signalPassFailure();
        }
        result = hardware ? nvvmTruncate(b, in, outElt)
                          : softwareTruncate(b, in, outElt, *f);
      } else {
        std::optional<FP8Format> f = getFormat(inElt);
        if (!f)
          continue;
        if (!outElt.isF32()) {
          op->emitOpError("kvgen extends fp8 only to f32");
          return signalPassFailure();
        }
        result = softwareExtend(b, in, *f);
      }
      op->getResult(0).replaceAllUsesWith(result);
      op->erase();
    }
  }
};

} // namespace
