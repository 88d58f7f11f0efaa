//===- PrologueMlaTest.cpp - an MLA kernel's RoPE prologue in the manifest ===//
//
// The manifest entry of mla_append with a prologue (docs/KERNEL-ABI.md): its
// parameter list, read back; the rules of docs/CONTRACT.md ("The MLA appends'
// prologue") that the compiler's verifier keeps, each refused by name
// (runtime/src/ManifestPrologueMLA.cpp).
//
//===----------------------------------------------------------------------===//

#include "Fixtures.h"

using namespace kvrt::test;
using ::testing::HasSubstr;

namespace {

constexpr int64_t kRank = 16, kRope = 8, kQHeads = 4;

/// docs/KERNEL-ABI.md's list for mla_append with rope and q_heads.
std::vector<std::string> mlaRopeParams() {
  return {"kv_c",
          "k_pe",
          "slot_mapping",
          "key_cache",
          "query",
          "q_out",
          "k_pe_out",
          "rope_positions",
          "cos_sin_cache",
          "num_tokens",
          "num_blocks",
          "kv_c_stride_token",
          "kv_c_stride_dim",
          "k_pe_stride_token",
          "k_pe_stride_dim",
          "key_cache_stride_block",
          "key_cache_stride_pos",
          "key_cache_stride_dim",
          "max_position",
          "query_stride_token",
          "query_stride_head",
          "query_stride_dim",
          "q_out_stride_token",
          "q_out_stride_head",
          "q_out_stride_dim",
          "k_pe_out_stride_token",
          "k_pe_out_stride_dim"};
}

json mlaRopeBundle() {
  CacheConfig mla;
  mla.heads = 1;
  mla.headDim = kRank + kRope;
  std::vector<json> kernels;
  for (json kernel : describe("kv_mla_rope", "mla_append", mla)) {
    kernel["cache"]["latent"] = {{"kv_lora_rank", kRank}, {"rope_dim", kRope}};
    kernel["prologue"] = {
        {"q_heads", kQHeads}, {"rope", "neox"}, {"rotary_dim", kRope}};
    kernel["params"] = mlaRopeParams();
    kernels.push_back(kernel);
  }
  return bundleJson(kernels);
}

/// The bundle with its vector kernel changed by `mutate`: refused as
/// INVALID_BUNDLE with `fragment`.
template <typename Fn>
void expectBundleRefused(Fn &&mutate, const std::string &fragment) {
  json bundle = mlaRopeBundle();
  mutate(bundle["kernels"][0]);
  kvrt_bundle *raw = nullptr;
  EXPECT_EQ(load(bundle, &raw), KVRT_ERROR_INVALID_BUNDLE) << fragment;
  EXPECT_THAT(kvrt_last_error(), HasSubstr(fragment));
  kvrt_bundle_destroy(raw);
}

TEST(PrologueMlaManifest, ReadsThePrologueBack) {
  kvrt_bundle *raw = nullptr;
  ASSERT_EQ(load(mlaRopeBundle(), &raw), KVRT_SUCCESS) << kvrt_last_error();
  BundlePtr bundle(raw);
  json entry = json::parse(kvrt_bundle_kernel_manifest(raw, 0));
  EXPECT_EQ(entry["prologue"]["rotary_dim"], kRope);
  EXPECT_EQ(entry["params"], mlaRopeParams());
}

TEST(PrologueMlaManifest, RefusesWhatTheVerifierRefuses) {
  expectBundleRefused([](json &k) { k["prologue"]["rotary_dim"] = 4; },
                      "prologue.rotary_dim is 4; an MLA prologue rotates "
                      "the whole of k_pe: rope_dim (8)");
  expectBundleRefused([](json &k) { k["prologue"]["norm"] = "rms"; },
                      "a latent cache's prologue has no norm");
  expectBundleRefused([](json &k) { k["prologue"]["q_heads"] = 1 << 20; },
                      "q_heads * rope_dim must be at most");
  expectBundleRefused([](json &k) { k["prologue"]["q_quant"] = "fp8_e4m3"; },
                      "q_quant and cos_sin on an MLA prologue are not "
                      "supported");
  expectBundleRefused([](json &k) { k["prologue"]["cos_sin"] = "f32"; },
                      "q_quant and cos_sin on an MLA prologue are not "
                      "supported");
  // The parameter list follows the parts: without k_pe_out it is not
  // kvrt's.
  expectBundleRefused(
      [](json &k) {
        std::vector<std::string> params = mlaRopeParams();
        params.erase(params.begin() + 6);
        k["params"] = params;
      },
      "but kvrt packs");
}

} // namespace
