//===- PrologueReference.cpp - the fused prologue in plain C++ ------------===//
//
// docs/CONTRACT.md, "The fused prologue", step by step in fp32. Built with
// -ffp-contract=off (CMakeLists.txt): a fused multiply-add would round once
// where the contract rounds twice.
//
//===----------------------------------------------------------------------===//

#include "conformance/PrologueReference.h"

#include <cmath>
#include <string>

using namespace kvgen::conformance;

std::string PrologueSpec::attr() const {
  std::string out = "#kv.prologue<";
  std::string sep;
  auto add = [&](const std::string &part) {
    out += sep + part;
    sep = ", ";
  };
  if (qHeads > 0)
    add("q_heads = " + std::to_string(qHeads));
  if (norm)
    add("norm = rms");
  if (rope != Rope::None) {
    add(rope == Rope::Neox ? "rope = neox" : "rope = gptj");
    add("rotary_dim = " + std::to_string(rotaryDim));
  }
  if (qQuant)
    add("q_quant = fp8_e4m3");
  if (f32CosSin)
    add("cos_sin = f32");
  return out + ">";
}

std::vector<float> kvgen::conformance::prologueHead(
    const PrologueSpec &spec, HeadSplit split, const std::vector<float> &x,
    const std::vector<float> &weight, float epsilon, const float *cosSin) {
  const int64_t headDim = static_cast<int64_t>(x.size());
  std::vector<float> y = x;
  if (spec.norm) {
    // Each lane's sum over its own units' elements, then the lanes' in
    // order. A unit is a chunk; for NeoX, each chunk c of the rotary part's
    // first half makes a unit with chunk c + R / 2 / vec (c's elements,
    // then its partner's), and the chunks past R follow, one a unit.
    const int64_t chunks = headDim / split.vec;
    const int64_t pairs =
        spec.rope == Rope::Neox ? spec.rotaryDim / 2 / split.vec : 0;
    const int64_t units = chunks - pairs;
    float total = 0.0f;
    for (int64_t lane = 0; lane < split.lanes; ++lane) {
      float sum = 0.0f;
      auto addChunk = [&](int64_t c) {
        for (int64_t e = 0; e < split.vec; ++e) {
          float v = x[c * split.vec + e];
          float square = v * v;
          sum = sum + square;
        }
      };
      for (int64_t u = lane; u < units; u += split.lanes) {
        if (u < pairs) {
          addChunk(u);
          addChunk(u + pairs);
        } else {
          addChunk(u + pairs);
        }
      }
      total = total + sum;
    }
    float mean = total / static_cast<float>(headDim);
    float factor = 1.0f / std::sqrt(mean + epsilon);
    for (int64_t d = 0; d < headDim; ++d) {
      float scaled = y[d] * factor;
      y[d] = scaled * weight[d];
    }
  }
  if (spec.rope == Rope::None)
    return y;
  const int64_t half = spec.rotaryDim / 2;
  std::vector<float> out = y;
  for (int64_t i = 0; i < half; ++i) {
    const float c = cosSin[i];
    const float s = cosSin[half + i];
    // NeoX pairs i with i + rotary_dim / 2; GPT-J 2i with 2i + 1.
    int64_t a = spec.rope == Rope::Neox ? i : 2 * i;
    int64_t b = spec.rope == Rope::Neox ? i + half : 2 * i + 1;
    float x1c = y[a] * c, x2s = y[b] * s;
    float x2c = y[b] * c, x1s = y[a] * s;
    out[a] = x1c - x2s;
    out[b] = x2c + x1s;
  }
  return out;
}
