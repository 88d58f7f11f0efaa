//===- InlineScalesTest.cpp - latent entries with inline scales -----------===//
//
// A latent cache whose entry stores its group scales (the bundle's
// "latent.inline_scales", DeepSeek V3.2's fp8_ds_mla): kvrt takes the cache
// as [num_blocks, block_size, entry_bytes] bytes, passes no scale, and
// refuses a manifest whose entry does not add up.
//
//===----------------------------------------------------------------------===//

#include "Fixtures.h"

using namespace kvrt::test;
using ::testing::HasSubstr;

namespace {

constexpr int64_t kRank = 32, kRope = 8, kGroup = 16;
/// 32 fp8 values, 2 f32 scales, 8 bf16 RoPE values.
constexpr int64_t kEntry = kRank + kRank / kGroup * 4 + kRope * 2;

std::vector<std::string> mlaParams() {
  return {"kv_c",
          "k_pe",
          "slot_mapping",
          "key_cache",
          "num_tokens",
          "num_blocks",
          "kv_c_stride_token",
          "kv_c_stride_dim",
          "k_pe_stride_token",
          "k_pe_stride_dim",
          "key_cache_stride_block",
          "key_cache_stride_pos",
          "key_cache_stride_dim"};
}

/// The mla_append of an inline-scales cache; `edit` changes each kernel's
/// JSON before the bundle is made.
json inlineScalesBundle(int64_t rope = kRope,
                        const std::function<void(json &)> &edit = nullptr) {
  CacheConfig config;
  config.dtype = "f8e4m3";
  config.quant = "fp8_e4m3";
  config.granularity = "per_token";
  config.mode = "dynamic";
  config.heads = 1;
  config.headDim = kRank + rope;
  std::vector<json> kernels;
  for (json kernel : describe("kv_ds", "mla_append", config)) {
    kernel["cache"]["latent"] = {
        {"kv_lora_rank", kRank},
        {"rope_dim", rope},
        {"inline_scales",
         {{"group_size", kGroup},
          {"rope_dtype", "bf16"},
          {"entry_bytes", kRank + kRank / kGroup * 4 + rope * 2}}}};
    kernel["params"] = mlaParams();
    if (edit)
      edit(kernel);
    kernels.push_back(kernel);
  }
  return bundleJson(kernels);
}

std::string loadError(const json &manifest) {
  kvrt_bundle *raw = nullptr;
  kvrt_status status = load(manifest, &raw);
  kvrt_bundle_destroy(raw);
  EXPECT_EQ(status, KVRT_ERROR_INVALID_BUNDLE);
  return kvrt_last_error();
}

class InlineScalesTest : public ::testing::Test {
protected:
  void SetUp() override {
    recorded() = Recorded();
    kvrt_bundle *raw = nullptr;
    ASSERT_EQ(load(inlineScalesBundle(), &raw), KVRT_SUCCESS)
        << kvrt_last_error();
    bundle.reset(raw);
    registerRecorders(raw);
    kvC = HostTensor::compact(bf16(), {kTokens, kRank});
    kPe = HostTensor::compact(bf16(), {kTokens, kRope});
    slots = HostTensor::compact(i64(), {kTokens});
    cache = HostTensor::compact(u8(), {kBlocks, kBlockSize, kEntry});
  }
  kvrt_mla_append_args args() {
    kvrt_mla_append_args a = KVRT_ARGS_INIT(kvrt_mla_append_args);
    a.kernel = "kv_ds";
    a.kv_c = kvC.get();
    a.k_pe = kPe.get();
    a.slot_mapping = slots.get();
    a.key_cache = cache.get();
    return a;
  }

  BundlePtr bundle;
  HostTensor kvC, kPe, slots, cache;
};

TEST_F(InlineScalesTest, TheCacheIsTheEntrysBytesAndNoScaleIsPassed) {
  kvrt_mla_append_args a = args();
  ASSERT_EQ(kvrt_mla_append(bundle.get(), &a, nullptr), KVRT_SUCCESS)
      << kvrt_last_error();
  EXPECT_EQ(recorded().vectorCalls, 1);
  const std::vector<int64_t> &p = recorded().params;
  // Four buffers, no scale; the cache's pos stride is the entry's bytes.
  ASSERT_EQ(p.size(), 4u + 9);
  EXPECT_EQ(p[11], kEntry);
}

TEST_F(InlineScalesTest, ACacheOfTheValuesAloneIsRefused) {
  HostTensor values =
      HostTensor::compact(u8(), {kBlocks, kBlockSize, kRank + kRope});
  kvrt_mla_append_args a = args();
  a.key_cache = values.get();
  EXPECT_EQ(kvrt_mla_append(bundle.get(), &a, nullptr),
            KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("entry_bytes"));
  EXPECT_EQ(recorded().vectorCalls + recorded().scalarCalls, 0);
}

TEST(InlineScalesManifestTest, AnEntryThatDoesNotAddUpIsRefused) {
  EXPECT_THAT(loadError(inlineScalesBundle(
                  kRope,
                  [](json &k) {
                    k["cache"]["latent"]["inline_scales"]["entry_bytes"] =
                        kEntry + 4;
                  })),
              HasSubstr("an entry with inline scales is a 1-byte cache with "
                        "dynamic per_token quant and 56 bytes"));
}

TEST(InlineScalesManifestTest, StaticScalesAreRefused) {
  EXPECT_THAT(
      loadError(inlineScalesBundle(
          kRope, [](json &k) { k["cache"]["quant"]["mode"] = "static"; })),
      HasSubstr("an entry with inline scales"));
}

TEST(InlineScalesManifestTest, AGroupThatDoesNotDivideTheLatentIsRefused) {
  EXPECT_THAT(loadError(inlineScalesBundle(
                  kRope,
                  [](json &k) {
                    k["cache"]["latent"]["inline_scales"]["group_size"] = 12;
                  })),
              HasSubstr("group_size 12 must divide kv_lora_rank 32"));
}

TEST(InlineScalesManifestTest, NoRopeOnlyWithInlineScales) {
  // The nope rows: the latent and its scales, k_pe of no columns.
  kvrt_bundle *raw = nullptr;
  ASSERT_EQ(load(inlineScalesBundle(0), &raw), KVRT_SUCCESS)
      << kvrt_last_error();
  kvrt_bundle_destroy(raw);
  EXPECT_THAT(
      loadError(inlineScalesBundle(
          0, [](json &k) { k["cache"]["latent"].erase("inline_scales"); })),
      HasSubstr("must be positive (0 only with inline_scales)"));
}

} // namespace
