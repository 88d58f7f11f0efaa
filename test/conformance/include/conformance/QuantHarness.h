//===- QuantHarness.h - Scales, gather outputs, the roundtrip ---*- C++ -*-===//
//
// The pieces the quantized and gather cases add to Harness.h: the scale
// tensors of a launch (static inputs that must come back untouched, or
// dynamic scale caches that an append writes only at the slots it writes),
// the outputs of a gather (poisoned, strided, compared element by element),
// source values placed relative to their scales, and the roundtrip check.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_CONFORMANCE_QUANTHARNESS_H
#define KVGEN_CONFORMANCE_QUANTHARNESS_H

#include "conformance/Harness.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace kvgen::conformance {

/// The scales of one quantized launch: one poisoned device buffer with
/// guards around K's and V's scale tensor (static) or scale cache (dynamic),
/// and the host image it must hold.
class ScaleSet {
public:
  /// `rows`: the tokens of an append, the slots of a gather. Static scales
  /// get random positive values (half of them powers of two, so exact
  /// rounding ties reach the conversion); scale caches stay poison.
  bool create(Backend &backend, const Description &desc, int64_t rows,
              int64_t numBlocks, std::mt19937_64 &rng, std::string &error);
  /// Gives the scale caches random valid scales (a gather of a cache that no
  /// append wrote reads them).
  bool fillScaleCaches(std::mt19937_64 &rng, std::string &error);

  const DLTensor *keyScale() const { return keyScaleArg.get(); }
  const DLTensor *valueScale() const { return valueScaleArg.get(); }
  const DLTensor *keyScaleCache() const { return keyCacheArg.get(); }
  const DLTensor *valueScaleCache() const { return valueCacheArg.get(); }

  /// The scales in the expected image (the reference of an append writes
  /// its dynamic scales there).
  ScaleArgs expectedArgs() { return argsIn(expected); }
  /// The scales in `image`, a copy of the device buffer (readBack()).
  ScaleArgs argsIn(std::vector<unsigned char> &image) const;
  bool readBack(std::vector<unsigned char> &image, std::string &error);

  /// The static scale of (row, head, block) of K or V; 0 if dynamic.
  float staticScale(bool key, int64_t row, int64_t head, int64_t block) const;

  /// Compares every byte (guards, both tensors, the gaps) with the expected
  /// image: static scales unchanged, scale caches written at the expected
  /// slots with the expected values and nowhere else.
  bool check(std::string &report, int maxShown = 5);
  size_t storageBytes() const { return expected.size(); }

private:
  std::string describeFloat(size_t byte) const;

  Backend *backend = nullptr;
  Description desc;
  bool dynamic = false;
  int64_t rows = 0, blocks = 0;
  std::vector<int64_t> shape;
  size_t keyOffset = 0, valueOffset = 0, elements = 0; // bytes, bytes, count
  std::vector<unsigned char> poison, expected;
  DeviceBuffer device;
  TensorArg keyScaleArg, valueScaleArg, keyCacheArg, valueCacheArg;
};

/// The K and V outputs of a gather: [rows, H, D] of the output dtype, each a
/// view whose token stride has a few elements of padding (with `padded`),
/// in one poisoned buffer with guards.
class OutputSet {
public:
  bool create(Backend &backend, const Description &desc, int64_t rows,
              bool padded, uint64_t poisonSeed, std::string &error);
  const DLTensor *keyOut() const { return keyArg.get(); }
  const DLTensor *valueOut() const { return valueArg.get(); }
  /// K's or V's output inside `base`, an image of the buffer.
  TensorView view(bool key, unsigned char *base) const;
  std::vector<unsigned char> &expectedImage() { return expected; }
  bool readBack(std::vector<unsigned char> &image, std::string &error);
  /// Every element compared with the expected image, bit for bit, except
  /// that a NaN matches any NaN (payloads are not part of the contract).
  bool check(std::string &report, int maxShown = 5);
  size_t storageBytes() const { return expected.size(); }

private:
  Backend *backend = nullptr;
  Description desc;
  int64_t rows = 0, rowStride = 0;
  size_t guardBytes = 256, valueOffset = 0; // bytes
  std::vector<unsigned char> poison, expected;
  DeviceBuffer device;
  TensorArg keyArg, valueArg;
};

/// An fp32 source value for an element whose scale is `scale`: mostly
/// across the format's whole range (subnormals included), with a share of
/// exact codes and midpoints between codes (rounding ties when `scale` is a
/// power of two), values past saturation, zeros of both signs and, with
/// `specials`, infinities and NaN. With `outliers`, also finite values past
/// 2^60 and nonzero ones under 2^-60, whatever the scale: either side of
/// the fast division's window (lib/Conversion/KVToLoops/Quantize.cpp). Only for
/// a static scale: in a dynamic group one of them would set the scale.
float quantSourceValue(QuantKind kind, float scale, bool specials,
                       std::mt19937_64 &rng, bool outliers = false);

/// The roundtrip of a quantized append through a gather to f32: for each
/// row i with a written slot and each element, the gathered value x' of the
/// source value x must be NaN if x is NaN (fp8) or 0 (int8); +-qmax * s if
/// |x / s| saturates; else within one quantization step of the stored code,
/// times s, of x. `gathered` are the gather's outputs read back; `scales`
/// the scales that were used (the written scale caches, for dynamic).
bool checkRoundtrip(const Description &desc, const TensorView &key,
                    const TensorView &value, const std::vector<int64_t> &slots,
                    int64_t numBlocks, const ScaleArgs &scales,
                    const TensorView &keyGathered,
                    const TensorView &valueGathered, std::string &report,
                    int maxShown = 5);

} // namespace kvgen::conformance

#endif // KVGEN_CONFORMANCE_QUANTHARNESS_H
