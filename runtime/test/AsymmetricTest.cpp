//===- AsymmetricTest.cpp - K and V of different head sizes ---------------===//
//
// A cache whose V head size differs from K's (the manifest's v_head_dim):
// K and V as views of one packed layer buffer launch; V and value_cache of
// the wrong head size, views that overlap, and manifests that break the
// v_head_dim rules are refused by name.

#include "Fixtures.h"

using namespace kvrt::test;
using ::testing::HasSubstr;

namespace {

constexpr int64_t kKeyDim = 16, kValueDim = 8, kPacked = kKeyDim + kValueDim;

json asymmetricBundle(CacheConfig config = CacheConfig(),
                      int64_t valueDim = kValueDim) {
  config.headDim = kKeyDim;
  std::vector<json> kernels;
  for (json kernel : describe("kv_asym", "append", config)) {
    kernel["cache"]["v_head_dim"] = valueDim;
    kernels.push_back(kernel);
  }
  return bundleJson(kernels);
}

class AsymmetricTest : public OwnBundleTest {
protected:
  void SetUp() override {
    loadRecording(asymmetricBundle());
    key = HostTensor::compact(bf16(), {kTokens, kHeads, kKeyDim});
    value = HostTensor::compact(bf16(), {kTokens, kHeads, kValueDim});
    slots = HostTensor::compact(i64(), {kTokens});
    // One layer buffer [nb, bs, H, D + Dv]: K its first D elements of each
    // head, V the next Dv.
    packed =
        HostTensor::compact(bf16(), {kBlocks, kBlockSize, kHeads, kPacked});
    keyCache = packedView(kKeyDim, 0);
    valueCache = packedView(kValueDim, kKeyDim);
  }

  HostTensor packedView(int64_t dim, int64_t offset) const {
    return packed.view(
        bf16(), {kBlocks, kBlockSize, kHeads, dim},
        {kBlockSize * kHeads * kPacked, kHeads * kPacked, kPacked, 1},
        static_cast<uint64_t>(offset * 2));
  }
  kvrt_append_args args() {
    kvrt_append_args a = KVRT_ARGS_INIT(kvrt_append_args);
    a.kernel = "kv_asym";
    a.key = key.get();
    a.value = value.get();
    a.slot_mapping = slots.get();
    a.key_cache = keyCache.get();
    a.value_cache = valueCache.get();
    return a;
  }
  HostTensor key, value, slots, packed, keyCache, valueCache;
};

TEST_F(AsymmetricTest, PackedViewsLaunch) {
  kvrt_append_args a = args();
  ASSERT_EQ(kvrt_append(bundle.get(), &a, nullptr), KVRT_SUCCESS)
      << kvrt_last_error();
  EXPECT_EQ(recorded().vectorCalls, 1);
}

TEST_F(AsymmetricTest, ValueOfKeyHeadSizeIsRefusedByName) {
  HostTensor wide = HostTensor::compact(bf16(), {kTokens, kHeads, kKeyDim});
  kvrt_append_args a = args();
  a.value = wide.get();
  expectRefused(kvrt_append(bundle.get(), &a, nullptr),
                "value: shape[2] (v_head_dim) is 16 but");
  EXPECT_THAT(kvrt_last_error(),
              HasSubstr("[num_tokens, num_kv_heads, v_head_dim]"));
}

TEST_F(AsymmetricTest, ValueCacheOfKeyHeadSizeIsRefusedByName) {
  HostTensor wide =
      HostTensor::compact(bf16(), {kBlocks, kBlockSize, kHeads, kKeyDim});
  kvrt_append_args a = args();
  a.value_cache = wide.get();
  expectRefused(kvrt_append(bundle.get(), &a, nullptr),
                "value_cache: shape[3] (v_head_dim) is 16 but");
}

TEST_F(AsymmetricTest, KeyOfValueHeadSizeIsRefusedByName) {
  kvrt_append_args a = args();
  a.key = value.get();
  expectRefused(kvrt_append(bundle.get(), &a, nullptr),
                "key: shape[2] (head_dim) is 8 but");
}

TEST_F(AsymmetricTest, OverlappingPackedViewsAreRefused) {
  // V starting inside K's part of each row.
  HostTensor overlapping = packedView(kValueDim, kKeyDim - 2);
  kvrt_append_args a = args();
  a.value_cache = overlapping.get();
  expectRefused(kvrt_append(bundle.get(), &a, nullptr), "overlaps");
}

kvrt_status loadBundle(const json &bundle) {
  kvrt_bundle *raw = nullptr;
  kvrt_status status = load(bundle, &raw);
  BundlePtr owned(raw);
  return status;
}

TEST(AsymmetricManifest, ValueHeadDimOfHeadDimIsRefused) {
  EXPECT_EQ(loadBundle(asymmetricBundle(CacheConfig(), kKeyDim)),
            KVRT_ERROR_INVALID_BUNDLE);
  EXPECT_THAT(kvrt_last_error(),
              HasSubstr("cache.v_head_dim is head_dim (16)"));
}

TEST(AsymmetricManifest, StackedAndVectorizedLayoutsAreRefused) {
  for (const char *layout : {"vllm_vectorized", "dual_stacked"}) {
    CacheConfig config;
    config.layout = layout;
    EXPECT_EQ(loadBundle(asymmetricBundle(config)), KVRT_ERROR_INVALID_BUNDLE)
        << layout;
    EXPECT_THAT(kvrt_last_error(),
                HasSubstr(std::string("the ") + layout +
                          " layout has one head size for K and V"));
  }
}

TEST(AsymmetricManifest, KOnlyCacheIsRefused) {
  json bundle = asymmetricBundle();
  for (json &kernel : bundle["kernels"])
    kernel["cache"]["k_only"] = true;
  EXPECT_EQ(loadBundle(bundle), KVRT_ERROR_INVALID_BUNDLE);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("a cache without V has no V head"));
}

TEST(AsymmetricManifest, VectorMustDivideValueHeadDim) {
  EXPECT_EQ(loadBundle(asymmetricBundle(CacheConfig(), 12)),
            KVRT_ERROR_INVALID_BUNDLE);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("must divide cache.v_head_dim"));
}

} // namespace
