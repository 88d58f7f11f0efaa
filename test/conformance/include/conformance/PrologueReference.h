//===- PrologueReference.h - the fused prologue's reference -----*- C++ -*-===//
//
// The fused prologue (#kv.prologue<...>, docs/dev/PROLOGUE.md) in plain C++,
// written from docs/CONTRACT.md ("The fused prologue"), not from the
// lowering: RMSNorm then RoPE of one head, in fp32, in the documented order.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_CONFORMANCE_PROLOGUEREFERENCE_H
#define KVGEN_CONFORMANCE_PROLOGUEREFERENCE_H

#include <cstdint>
#include <string>
#include <vector>

namespace kvgen::conformance {

enum class Rope { None, Neox, Gptj };

/// `#kv.prologue<...>`'s parameters.
struct PrologueSpec {
  int64_t qHeads = 0;
  bool norm = false;
  Rope rope = Rope::None;
  int64_t rotaryDim = 0;
  /// q_quant = fp8_e4m3: q_out is fp8 e4m3, Q / q_scale (with qHeads).
  bool qQuant = false;
  /// cos_sin = f32: the cos/sin cache is f32 (with rope).
  bool f32CosSin = false;
  /// The attribute's text, `#kv.prologue<...>`.
  std::string attr() const;
};

/// How a kernel splits a head for the norm's sum (the plan's): `lanes`
/// lanes of units of chunks of `vec` elements; lane l takes units l,
/// l + lanes, ... A unit is a chunk, except under NeoX RoPE: with
/// P = rotary_dim / 2 / vec, unit u < P is the pair of chunks (u, u + P) and
/// unit u >= P is chunk u + P. The sum of squares adds, in order, each
/// lane's elements (its units in turn, a unit's chunks in turn, each element
/// by element) from 0, then the lanes' sums in lane order from 0.
struct HeadSplit {
  int64_t lanes = 1;
  int64_t vec = 1;
};

/// One head through the prologue: `x` (head_dim values, as fp32) normalized
/// with `weight` (head_dim, as fp32; unused without norm) and `epsilon`,
/// then rotated with the token's row `cosSin` of the cos/sin cache
/// (rotary_dim values, cos then sin; unused without rope). Returns fp32.
std::vector<float> prologueHead(const PrologueSpec &spec, HeadSplit split,
                                const std::vector<float> &x,
                                const std::vector<float> &weight, float epsilon,
                                const float *cosSin);

} // namespace kvgen::conformance

#endif // KVGEN_CONFORMANCE_PROLOGUEREFERENCE_H
