//===- Quant.h - The quantization convention, element by element -*- C++
//-*-===//
//
// The reference of docs/CONTRACT.md "Quantization", written from the
// contract's words and nothing else: the fp8 encodings are built bit by bit
// from the formats' definitions (not from the compiler's APFloat, the CUDA
// headers or the lowering), int8 rounds with an explicit tie rule, and a
// scale is exactly the fp32 operation the contract names. The unit tests
// compare the encoders with independent implementations (llvm::APFloat,
// nearest-value search in double).
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_CONFORMANCE_QUANT_H
#define KVGEN_CONFORMANCE_QUANT_H

#include <cstdint>

namespace kvgen::conformance {

/// What a quantized cache stores (the dialect's `#kv.quant` kind).
enum class QuantKind { FP8E4M3, FP8E5M2, Int8 };
/// What one scale covers.
enum class Granularity { PerTensor, PerToken, PerHead, PerTokenHead, PerBlock };
/// Given by the caller, or computed by the kernel (and written beside the
/// cache).
enum class ScaleMode { Static, Dynamic };

/// The dialect's spellings: fp8_e4m3, per_token_head, dynamic, ...
const char *quantKindName(QuantKind kind);
const char *granularityName(Granularity granularity);
const char *scaleModeName(ScaleMode mode);

/// The largest magnitude the kind stores: 448, 57344, 127.
float quantMax(QuantKind kind);

//===----------------------------------------------------------------------===//
// Element encodings
//===----------------------------------------------------------------------===//

/// The one NaN code the kernels write for fp8 (either format).
constexpr uint8_t kFp8NaN = 0x7f;

/// `y` as fp8 e4m3fn (bias 7, 3 mantissa bits, no infinities, NaN
/// S.1111.111): clamped to [-448, 448], rounded to nearest even (subnormals
/// m * 2^-9 included), the sign of a zero kept, NaN -> 0x7F.
uint8_t encodeE4M3(float y);
/// `y` as fp8 e5m2 (bias 15, 2 mantissa bits): clamped to [-57344, 57344]
/// (so never an infinity), rounded to nearest even (subnormals m * 2^-16),
/// NaN -> 0x7F.
uint8_t encodeE5M2(float y);
/// int8, symmetric: clamp(roundeven(y), -127, 127); NaN -> 0.
int8_t encodeInt8(float y);

/// The exact value of a code (NaN codes give a NaN; e5m2's 0x7C / 0xFC give
/// +-infinity, which the encoder never writes).
float decodeE4M3(uint8_t code);
float decodeE5M2(uint8_t code);

/// The stored byte of `y` (already divided by its scale) for `kind`.
uint8_t encode(QuantKind kind, float y);
/// The value of a stored byte (int8 read as a signed byte).
float decode(QuantKind kind, uint8_t byte);

/// Distance from the representable magnitude at `byte` to the next larger
/// one of the format (for int8: 1): one quantization step at that value,
/// before scaling. The roundtrip check allows that much times the scale.
float quantStep(QuantKind kind, uint8_t byte);

//===----------------------------------------------------------------------===//
// The convention
//===----------------------------------------------------------------------===//

/// q = saturate(x / scale): the division in IEEE fp32, or with `reciprocal`
/// the multiplication by r = 1 / scale (fp32) that such a description opts
/// into.
uint8_t quantize(QuantKind kind, float x, float scale, bool reciprocal);

/// x = float(q) * scale in fp32 (the caller narrows to the output dtype).
float dequantize(QuantKind kind, uint8_t byte, float scale);

/// A dynamic scale from the largest finite magnitude of a group:
/// amax / qmax (fp32 division) if amax > 0, else 1.
float dynamicScale(QuantKind kind, float amax);

/// Folds one value into a running amax (NaN and infinities ignored).
inline float foldAmax(float amax, float x) {
  float a = x < 0 ? -x : x;
  bool finite = a == a && a <= 3.40282347e+38f;
  return finite && a > amax ? a : amax;
}

} // namespace kvgen::conformance

#endif // KVGEN_CONFORMANCE_QUANT_H
