//===- Fixtures.h - valid launches, for tests to break one rule at a time -===//

#ifndef KVRT_TEST_FIXTURES_H
#define KVRT_TEST_FIXTURES_H

#include "TestSupport.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvrt::test {

// The standard description: paged_nhd, block 4, 2 heads, head_dim 16, bf16.
constexpr int64_t kTokens = 5;
constexpr int64_t kHeads = 2;
constexpr int64_t kHeadDim = 16;
constexpr int64_t kBlockSize = 4;
constexpr int64_t kBlocks = 3;
// K and V are views into a fused QKV projection with 4 query heads.
constexpr int64_t kQueryHeads = 4;
constexpr int64_t kQkvRow = (kQueryHeads + 2 * kHeads) * kHeadDim;
constexpr int64_t kRequests = 2;
constexpr int64_t kMaxBlocksPerReq = 3;

/// A fused QKV projection's output [num_tokens, (Hq + 2 H) * D], and K and V
/// as views of it (strided, as a serving stack passes them).
inline void makeRows(HostTensor *qkv, HostTensor *key, HostTensor *value) {
  *qkv = HostTensor::compact(bf16(), {kTokens, kQkvRow});
  *key = qkv->view(bf16(), {kTokens, kHeads, kHeadDim}, {kQkvRow, kHeadDim, 1},
                   kQueryHeads * kHeadDim * 2);
  *value =
      qkv->view(bf16(), {kTokens, kHeads, kHeadDim}, {kQkvRow, kHeadDim, 1},
                (kQueryHeads + kHeads) * kHeadDim * 2);
}

class LaunchTest : public ::testing::Test {
protected:
  virtual CacheConfig config() { return CacheConfig(); }

  void SetUp() override {
    recorded() = Recorded();
    kvrt_bundle *raw = nullptr;
    ASSERT_EQ(load(standardBundle(config()), &raw), KVRT_SUCCESS)
        << kvrt_last_error();
    bundle.reset(raw);
    registerRecorders(raw);

    makeRows(&qkv, &key, &value);
    slots = HostTensor::compact(i64(), {kTokens});
    makeCaches();
    blockTable = HostTensor::compact(i32(), {kRequests, kMaxBlocksPerReq});
    queryStartLoc = HostTensor::compact(i32(), {kRequests + 1});
    contextLens = HostTensor::compact(i32(), {kRequests});
  }

  virtual void makeCaches() {
    keyCache =
        HostTensor::compact(bf16(), {kBlocks, kBlockSize, kHeads, kHeadDim});
    valueCache =
        HostTensor::compact(bf16(), {kBlocks, kBlockSize, kHeads, kHeadDim});
  }

  kvrt_append_args appendArgs(kvrt_variant variant = KVRT_VARIANT_AUTO) {
    return {sizeof(kvrt_append_args),
            nullptr,
            key.get(),
            value.get(),
            slots.get(),
            keyCache.get(),
            cacheValue(),
            variant};
  }
  kvrt_slot_mapping_args slotArgs() {
    return {sizeof(kvrt_slot_mapping_args),
            nullptr,
            blockTable.get(),
            queryStartLoc.get(),
            contextLens.get(),
            slots.get()};
  }
  kvrt_fused_append_args fusedArgs(kvrt_variant variant = KVRT_VARIANT_AUTO) {
    return {sizeof(kvrt_fused_append_args),
            nullptr,
            key.get(),
            value.get(),
            blockTable.get(),
            queryStartLoc.get(),
            contextLens.get(),
            keyCache.get(),
            cacheValue(),
            variant};
  }
  virtual DLTensor *cacheValue() { return valueCache.get(); }

  /// Loads the standard bundle again, with its gather description
  /// ("kv_gather"), and registers its host kernels.
  void loadWithGather() {
    CacheConfig withGather = config();
    withGather.gather = true;
    kvrt_bundle *raw = nullptr;
    ASSERT_EQ(load(standardBundle(withGather), &raw), KVRT_SUCCESS)
        << kvrt_last_error();
    bundle.reset(raw);
    registerRecorders(raw);
  }
  /// A gather of the caches' rows at `slots` into `keyOut` and `valueOut`.
  kvrt_gather_args gatherArgs(HostTensor &keyOut, HostTensor &valueOut) {
    kvrt_gather_args args = KVRT_ARGS_INIT(kvrt_gather_args);
    args.key_cache = keyCache.get();
    args.value_cache = valueCache.get();
    args.slot_mapping = slots.get();
    args.key_out = keyOut.get();
    args.value_out = valueOut.get();
    return args;
  }

  kvrt_status append(kvrt_variant variant = KVRT_VARIANT_AUTO) {
    kvrt_append_args args = appendArgs(variant);
    return kvrt_append(bundle.get(), &args, nullptr);
  }
  kvrt_status slotMapping() {
    kvrt_slot_mapping_args args = slotArgs();
    return kvrt_build_slot_mapping(bundle.get(), &args, nullptr);
  }
  kvrt_status fused(kvrt_variant variant = KVRT_VARIANT_AUTO) {
    kvrt_fused_append_args args = fusedArgs(variant);
    return kvrt_fused_append(bundle.get(), &args, nullptr);
  }

  /// Every tensor of every launch on `device`.
  void moveAllTo(DLDevice device) {
    for (HostTensor *tensor : {&key, &value, &slots, &keyCache, &valueCache,
                               &blockTable, &queryStartLoc, &contextLens})
      tensor->get()->device = device;
  }

  int calls() const {
    return recorded().vectorCalls + recorded().scalarCalls +
           recorded().wideCalls;
  }

  /// The refusal code, every fragment in the message, and nothing run.
  void expectRefused(kvrt_status status, kvrt_status code,
                     const std::vector<std::string> &fragments) {
    EXPECT_EQ(status, code) << kvrt_last_error();
    for (const std::string &fragment : fragments)
      EXPECT_THAT(kvrt_last_error(), ::testing::HasSubstr(fragment));
    EXPECT_EQ(calls(), 0) << "a refused launch ran a kernel";
  }

  BundlePtr bundle;
  HostTensor qkv, key, value, slots, keyCache, valueCache;
  HostTensor blockTable, queryStartLoc, contextLens;
};

/// A test of a bundle of its own, whose caches have shapes the standard
/// one's have not (K and V of two head sizes, no V): the bundle loaded with
/// its host kernels recording, and a refusal checked with nothing run.
class OwnBundleTest : public ::testing::Test {
protected:
  void loadRecording(const json &description) {
    recorded() = Recorded();
    kvrt_bundle *raw = nullptr;
    ASSERT_EQ(load(description, &raw), KVRT_SUCCESS) << kvrt_last_error();
    bundle.reset(raw);
    registerRecorders(raw);
  }

  /// INVALID_ARGUMENT, `message` in kvrt's message, and no kernel run.
  void expectRefused(kvrt_status status, const std::string &message) {
    EXPECT_EQ(status, KVRT_ERROR_INVALID_ARGUMENT);
    EXPECT_THAT(kvrt_last_error(), ::testing::HasSubstr(message));
    EXPECT_EQ(recorded().vectorCalls + recorded().scalarCalls, 0);
  }

  BundlePtr bundle;
};

class DualStackedTest : public LaunchTest {
protected:
  CacheConfig config() override {
    CacheConfig config;
    config.layout = "dual_stacked";
    return config;
  }
  void makeCaches() override {
    keyCache =
        HostTensor::compact(bf16(), {kBlocks, 2, kHeads, kBlockSize, kHeadDim});
    valueCache = HostTensor::compact(bf16(), {1});
  }
  DLTensor *cacheValue() override {
    return passValueCache ? valueCache.get() : nullptr;
  }
  bool passValueCache = false;
};

class VllmTest : public LaunchTest {
protected:
  static constexpr int64_t kX = 8;
  CacheConfig config() override {
    CacheConfig config;
    config.layout = "vllm_vectorized";
    config.x = kX;
    return config;
  }
  void makeCaches() override {
    keyCache = HostTensor::compact(
        bf16(), {kBlocks, kHeads, kHeadDim / kX, kBlockSize, kX});
    valueCache =
        HostTensor::compact(bf16(), {kBlocks, kHeads, kHeadDim, kBlockSize});
  }
};

} // namespace kvrt::test

#endif // KVRT_TEST_FIXTURES_H
