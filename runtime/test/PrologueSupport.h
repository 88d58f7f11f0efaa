//===- PrologueSupport.h - descriptions with a fused prologue, for tests -===//
//
// The manifest entries of descriptions with #kv.prologue<...>: their
// "prologue" object and their parameter list, spelled out from
// docs/KERNEL-ABI.md as TestSupport.h spells the others.
//
//===----------------------------------------------------------------------===//

#ifndef KVRT_TEST_PROLOGUESUPPORT_H
#define KVRT_TEST_PROLOGUESUPPORT_H

#include "Fixtures.h"

namespace kvrt::test {

constexpr int64_t kMaxPosition = 32;
constexpr int64_t kRotaryDim = 8;

/// Which parts a test description's prologue has.
struct Parts {
  bool q = true;
  bool norm = true;
  bool rope = true;
  /// q_quant = fp8_e4m3 and cos_sin = f32 (FlashInfer's fused op).
  bool fp8Q = false;
};

/// The parameter list of docs/KERNEL-ABI.md with a prologue: its buffers
/// after the scales, its scalars at the end.
inline std::vector<std::string> prologueParams(const std::string &kind,
                                               Parts parts) {
  std::vector<std::string> plain = paramsFor(kind);
  std::vector<std::string> params;
  for (const std::string &name : plain) {
    if (name == "num_tokens") {
      if (parts.q)
        params.insert(params.end(), {"query", "q_out"});
      if (parts.rope) {
        if (kind == "append" || kind == "paged_kv_append")
          params.push_back("rope_positions");
        params.push_back("cos_sin_cache");
      }
      if (parts.norm)
        params.push_back("k_norm_weight");
      if (parts.norm && parts.q)
        params.push_back("q_norm_weight");
      if (parts.norm)
        params.push_back("epsilon");
      if (parts.fp8Q)
        params.push_back("q_scale");
    }
    params.push_back(name);
  }
  if (parts.rope)
    params.push_back("max_position");
  if (parts.q)
    params.insert(params.end(), {"query_stride_token", "query_stride_head",
                                 "query_stride_dim", "q_out_stride_token",
                                 "q_out_stride_head", "q_out_stride_dim"});
  return params;
}

inline json prologueJson(Parts parts, const std::string &rope = "gptj") {
  json prologue = json::object();
  if (parts.q)
    prologue["q_heads"] = kQueryHeads;
  if (parts.norm)
    prologue["norm"] = "rms";
  if (parts.rope) {
    prologue["rope"] = rope;
    prologue["rotary_dim"] = kRotaryDim;
  }
  if (parts.fp8Q) {
    prologue["q_quant"] = "fp8_e4m3";
    prologue["cos_sin"] = "f32";
  }
  return prologue;
}

/// Both variants of a description of `kind` with a prologue of `parts`.
inline std::vector<json> describePrologue(const std::string &name,
                                          const std::string &kind, Parts parts,
                                          const std::string &rope = "gptj") {
  std::vector<json> kernels = describe(name, kind);
  for (json &kernel : kernels) {
    kernel["prologue"] = prologueJson(parts, rope);
    kernel["params"] = prologueParams(kind, parts);
  }
  return kernels;
}

} // namespace kvrt::test

#endif // KVRT_TEST_PROLOGUESUPPORT_H
