//===- LatentTest.cpp - K-only and MLA latent launches, and their refusals ===//

#include "Fixtures.h"

using namespace kvrt::test;
using ::testing::HasSubstr;

namespace {

/// docs/KERNEL-ABI.md's lists, spelled out: a K-only append and an MLA
/// latent append.
std::vector<std::string> kOnlyAppendParams(bool quantized) {
  std::vector<std::string> names = {"key", "slot_mapping", "key_cache"};
  if (quantized)
    names.push_back("key_scale");
  for (const char *name :
       {"num_tokens", "num_blocks", "key_stride_token", "key_stride_head",
        "key_stride_dim", "key_cache_stride_block", "key_cache_stride_head",
        "key_cache_stride_pos", "key_cache_stride_dim"})
    names.push_back(name);
  return names;
}
std::vector<std::string> mlaParams(bool quantized) {
  std::vector<std::string> names = {"kv_c", "k_pe", "slot_mapping",
                                    "key_cache"};
  if (quantized)
    names.push_back("key_scale");
  for (const char *name :
       {"num_tokens", "num_blocks", "kv_c_stride_token", "kv_c_stride_dim",
        "k_pe_stride_token", "k_pe_stride_dim", "key_cache_stride_block",
        "key_cache_stride_pos", "key_cache_stride_dim"})
    names.push_back(name);
  return names;
}

/// A gather of either: the cache, the slots and key_out, no V.
std::vector<std::string> noValueGatherParams(bool quantized) {
  std::vector<std::string> names = {"key_cache", "slot_mapping", "key_out"};
  if (quantized)
    names.push_back("key_scale");
  for (const char *name : {"num_tokens", "num_blocks", "key_out_stride_token",
                           "key_out_stride_head", "key_out_stride_dim",
                           "key_cache_stride_block", "key_cache_stride_head",
                           "key_cache_stride_pos", "key_cache_stride_dim"})
    names.push_back(name);
  return names;
}

constexpr int64_t kRank = 16, kRope = 8;

/// An append (K-only) and an mla_append description, both variants each.
json latentBundle(bool quantized = false, bool wrongParams = false) {
  CacheConfig config;
  if (quantized) {
    config.dtype = "f8e4m3";
    config.quant = "fp8_e4m3";
  }
  std::vector<json> kernels;
  for (json kernel : describe("kv_konly", "append", config)) {
    kernel["cache"]["k_only"] = true;
    kernel["params"] =
        wrongParams ? json(paramsFor("append", quantized ? "static" : ""))
                    : json(kOnlyAppendParams(quantized));
    kernels.push_back(kernel);
  }
  CacheConfig mla = config;
  mla.heads = 1;
  mla.headDim = kRank + kRope;
  for (json kernel : describe("kv_mla", "mla_append", mla)) {
    kernel["cache"]["latent"] = {{"kv_lora_rank", kRank}, {"rope_dim", kRope}};
    kernel["params"] = mlaParams(quantized);
    kernels.push_back(kernel);
  }
  // Gathers of both caches (after the appends: tests index the kernels).
  for (json kernel : describe("kv_konly_gather", "gather", config)) {
    kernel["cache"]["k_only"] = true;
    kernel["params"] = noValueGatherParams(quantized);
    kernels.push_back(kernel);
  }
  for (json kernel : describe("kv_mla_gather", "gather", mla)) {
    kernel["cache"]["latent"] = {{"kv_lora_rank", kRank}, {"rope_dim", kRope}};
    kernel["params"] = noValueGatherParams(quantized);
    kernels.push_back(kernel);
  }
  return bundleJson(kernels);
}

class LatentTest : public OwnBundleTest {
protected:
  void SetUp() override {
    loadRecording(latentBundle());
    key = HostTensor::compact(bf16(), {kTokens, kHeads, kHeadDim});
    other = HostTensor::compact(bf16(), {kTokens, kHeads, kHeadDim});
    slots = HostTensor::compact(i64(), {kTokens});
    keyCache =
        HostTensor::compact(bf16(), {kBlocks, kBlockSize, kHeads, kHeadDim});
    otherCache =
        HostTensor::compact(bf16(), {kBlocks, kBlockSize, kHeads, kHeadDim});
    // kv_c and k_pe as vLLM slices them: one row of kv_lora_rank + rope_dim.
    latent = HostTensor::compact(bf16(), {kTokens, kRank + kRope});
    kvC = latent.view(bf16(), {kTokens, kRank}, {kRank + kRope, 1}, 0);
    kPe = latent.view(bf16(), {kTokens, kRope}, {kRank + kRope, 1}, kRank * 2);
    latentCache =
        HostTensor::compact(bf16(), {kBlocks, kBlockSize, kRank + kRope});
  }

  kvrt_append_args kOnlyArgs() {
    kvrt_append_args args = KVRT_ARGS_INIT(kvrt_append_args);
    args.kernel = "kv_konly";
    args.key = key.get();
    args.slot_mapping = slots.get();
    args.key_cache = keyCache.get();
    return args;
  }
  kvrt_mla_append_args mlaArgs() {
    kvrt_mla_append_args args = KVRT_ARGS_INIT(kvrt_mla_append_args);
    args.kernel = "kv_mla";
    args.kv_c = kvC.get();
    args.k_pe = kPe.get();
    args.slot_mapping = slots.get();
    args.key_cache = latentCache.get();
    return args;
  }
  kvrt_gather_args kOnlyGatherArgs(HostTensor &keyOut) {
    kvrt_gather_args args = KVRT_ARGS_INIT(kvrt_gather_args);
    args.kernel = "kv_konly_gather";
    args.key_cache = keyCache.get();
    args.slot_mapping = slots.get();
    args.key_out = keyOut.get();
    return args;
  }
  kvrt_gather_args mlaGatherArgs(HostTensor &keyOut) {
    kvrt_gather_args args = KVRT_ARGS_INIT(kvrt_gather_args);
    args.kernel = "kv_mla_gather";
    args.key_cache = latentCache.get();
    args.slot_mapping = slots.get();
    args.key_out = keyOut.get();
    return args;
  }
  static HostTensor kOnlyOut() {
    return HostTensor::compact(bf16(), {kTokens, kHeads, kHeadDim});
  }
  static HostTensor latentOut() {
    return HostTensor::compact(bf16(), {kTokens, 1, kRank + kRope});
  }
  HostTensor key, other, slots, keyCache, otherCache, latent, kvC, kPe,
      latentCache;
};

TEST_F(LatentTest, KOnlyAppendLaunchesWithoutV) {
  kvrt_append_args args = kOnlyArgs();
  ASSERT_EQ(kvrt_append(bundle.get(), &args, nullptr), KVRT_SUCCESS)
      << kvrt_last_error();
  EXPECT_EQ(recorded().vectorCalls, 1);
  // Three buffers of one pointer each, then 2 sizes, 3 key and 4 cache
  // strides.
  EXPECT_EQ(recorded().params.size(), 3u + 9);
}

TEST_F(LatentTest, ValueGivenToKOnlyKernelIsRefusedByName) {
  kvrt_append_args args = kOnlyArgs();
  args.value = other.get();
  expectRefused(kvrt_append(bundle.get(), &args, nullptr),
                "value: must be NULL: the kernel 'kv_konly' has a K-only "
                "cache");
}

TEST_F(LatentTest, ValueCacheGivenToKOnlyKernelIsRefusedByName) {
  kvrt_append_args args = kOnlyArgs();
  args.value_cache = otherCache.get();
  expectRefused(kvrt_append(bundle.get(), &args, nullptr),
                "value_cache: must be NULL");
}

TEST_F(LatentTest, MlaAppendPacksBothParts) {
  kvrt_mla_append_args args = mlaArgs();
  ASSERT_EQ(kvrt_mla_append(bundle.get(), &args, nullptr), KVRT_SUCCESS)
      << kvrt_last_error();
  EXPECT_EQ(recorded().vectorCalls, 1);
  const std::vector<int64_t> &p = recorded().params;
  ASSERT_EQ(p.size(), 4u + 9);
  // kv_c and k_pe point at their first elements, both inside one row.
  EXPECT_EQ(p[0], reinterpret_cast<intptr_t>(latent.data()));
  EXPECT_EQ(p[1], reinterpret_cast<intptr_t>(latent.data() + kRank * 2));
  // After 4 pointers: num_tokens, num_blocks, kv_c and k_pe strides, the
  // cache's block, pos and dim strides.
  EXPECT_EQ(p[4], kTokens);
  EXPECT_EQ(p[5], kBlocks);
  EXPECT_EQ(p[6], kRank + kRope);
  EXPECT_EQ(p[7], 1);
  EXPECT_EQ(p[8], kRank + kRope);
  EXPECT_EQ(p[10], kBlockSize * (kRank + kRope));
  EXPECT_EQ(p[11], kRank + kRope);
  EXPECT_EQ(p[12], 1);
}

TEST_F(LatentTest, MissingKPeIsRefusedByName) {
  kvrt_mla_append_args args = mlaArgs();
  args.k_pe = nullptr;
  expectRefused(kvrt_mla_append(bundle.get(), &args, nullptr), "k_pe");
}

TEST_F(LatentTest, WrongPartWidthIsRefusedByName) {
  kvrt_mla_append_args args = mlaArgs();
  HostTensor narrow =
      latent.view(bf16(), {kTokens, kRank - 1}, {kRank + kRope, 1}, 0);
  args.kv_c = narrow.get();
  expectRefused(kvrt_mla_append(bundle.get(), &args, nullptr), "kv_c");
  args = mlaArgs();
  HostTensor wide = HostTensor::compact(bf16(), {kTokens, kRope * 2});
  args.k_pe = wide.get();
  expectRefused(kvrt_mla_append(bundle.get(), &args, nullptr), "k_pe");
}

TEST_F(LatentTest, FourDimensionalLatentCacheIsRefused) {
  kvrt_mla_append_args args = mlaArgs();
  HostTensor cache4 =
      HostTensor::compact(bf16(), {kBlocks, kBlockSize, 1, kRank + kRope});
  args.key_cache = cache4.get();
  expectRefused(kvrt_mla_append(bundle.get(), &args, nullptr), "key_cache");
}

TEST_F(LatentTest, ScaleGivenToUnquantizedMlaIsRefused) {
  kvrt_mla_append_args args = mlaArgs();
  HostTensor scale = HostTensor::compact(f32(), {1});
  args.key_scale = scale.get();
  expectRefused(kvrt_mla_append(bundle.get(), &args, nullptr),
                "key_scale: must be NULL");
}

TEST_F(LatentTest, KindMismatchNamesTheKind) {
  // kvrt_append cannot launch the mla_append description.
  kvrt_append_args args = kOnlyArgs();
  args.kernel = "kv_mla";
  EXPECT_NE(kvrt_append(bundle.get(), &args, nullptr), KVRT_SUCCESS);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("kv_mla"));
}

// key_out is the only output: nothing stands in for value_out in the overlap
// checks (a copy of key_out there once made every such gather overlap
// itself).
TEST_F(LatentTest, KOnlyGatherLaunchesWithoutV) {
  HostTensor out = kOnlyOut();
  kvrt_gather_args args = kOnlyGatherArgs(out);
  ASSERT_EQ(kvrt_gather(bundle.get(), &args, nullptr), KVRT_SUCCESS)
      << kvrt_last_error();
  EXPECT_EQ(recorded().vectorCalls, 1);
  // Three buffers, then 2 sizes, 3 output and 4 cache strides.
  const std::vector<int64_t> &p = recorded().params;
  ASSERT_EQ(p.size(), 3u + 9);
  EXPECT_EQ(p[0], reinterpret_cast<intptr_t>(keyCache.data()));
  EXPECT_EQ(p[2], reinterpret_cast<intptr_t>(out.data()));
  EXPECT_EQ(p[3], kTokens);
  EXPECT_EQ(p[5], kHeads * kHeadDim);
}

TEST_F(LatentTest, LatentGatherLaunches) {
  HostTensor out = latentOut();
  kvrt_gather_args args = mlaGatherArgs(out);
  ASSERT_EQ(kvrt_gather(bundle.get(), &args, nullptr), KVRT_SUCCESS)
      << kvrt_last_error();
  EXPECT_EQ(recorded().vectorCalls, 1);
  const std::vector<int64_t> &p = recorded().params;
  ASSERT_EQ(p.size(), 3u + 9);
  EXPECT_EQ(p[0], reinterpret_cast<intptr_t>(latentCache.data()));
  EXPECT_EQ(p[2], reinterpret_cast<intptr_t>(out.data()));
  // The one head: a head stride of 0 in the cache.
  EXPECT_EQ(p[5], kRank + kRope);
  EXPECT_EQ(p[8], kBlockSize * (kRank + kRope));
  EXPECT_EQ(p[9], 0);
}

// The same launch at new addresses moves the remembered plan (PlanCache's
// rebase), which checks the written key_out against the other tensors
// again, and against nothing standing in for value_out.
TEST_F(LatentTest, NoValueGathersMoveToNewOutputs) {
  for (bool latentCase : {false, true}) {
    SCOPED_TRACE(latentCase ? "latent" : "K-only");
    HostTensor first = latentCase ? latentOut() : kOnlyOut();
    HostTensor second = latentCase ? latentOut() : kOnlyOut();
    for (HostTensor *out : {&first, &second, &first}) {
      kvrt_gather_args args =
          latentCase ? mlaGatherArgs(*out) : kOnlyGatherArgs(*out);
      ASSERT_EQ(kvrt_gather(bundle.get(), &args, nullptr), KVRT_SUCCESS)
          << kvrt_last_error();
      EXPECT_EQ(recorded().params[2], reinterpret_cast<intptr_t>(out->data()));
    }
  }
}

TEST_F(LatentTest, NoValueGatherStillRefusesAnOverlappingOutput) {
  HostTensor out = kOnlyOut();
  kvrt_gather_args args = kOnlyGatherArgs(out);
  ASSERT_EQ(kvrt_gather(bundle.get(), &args, nullptr), KVRT_SUCCESS)
      << kvrt_last_error();
  // key_out over the cache's first rows: refused when planned anew, and when
  // the remembered plan would move to it.
  HostTensor overCache = keyCache.view(bf16(), {kTokens, kHeads, kHeadDim},
                                       {kHeads * kHeadDim, kHeadDim, 1}, 0);
  recorded() = Recorded();
  args = kOnlyGatherArgs(overCache);
  expectRefused(kvrt_gather(bundle.get(), &args, nullptr), "key_out");
  EXPECT_THAT(kvrt_last_error(), HasSubstr("key_cache"));
}

TEST_F(LatentTest, ValueOutGivenToNoValueGatherIsRefusedByName) {
  HostTensor out = kOnlyOut(), other = kOnlyOut();
  kvrt_gather_args args = kOnlyGatherArgs(out);
  args.value_out = other.get();
  expectRefused(kvrt_gather(bundle.get(), &args, nullptr),
                "value_out: must be NULL: the kernel 'kv_konly_gather' has a "
                "K-only cache");
  HostTensor latentOutput = latentOut(), latentOther = latentOut();
  args = mlaGatherArgs(latentOutput);
  args.value_out = latentOther.get();
  expectRefused(kvrt_gather(bundle.get(), &args, nullptr),
                "value_out: must be NULL: the kernel 'kv_mla_gather' has a "
                "latent (MLA) cache");
}

TEST(LatentManifest, KOnlyKernelListingVIsRefused) {
  kvrt_bundle *raw = nullptr;
  EXPECT_EQ(load(latentBundle(false, /*wrongParams=*/true), &raw),
            KVRT_ERROR_INVALID_BUNDLE);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("params"));
}

TEST(LatentManifest, QuantizedKOnlyTakesKeyScaleOnly) {
  kvrt_bundle *raw = nullptr;
  ASSERT_EQ(load(latentBundle(/*quantized=*/true), &raw), KVRT_SUCCESS)
      << kvrt_last_error();
  BundlePtr bundle(raw);
  EXPECT_THAT(kvrt_bundle_kernel_manifest(raw, 0),
              HasSubstr("\"k_only\":true"));
  EXPECT_THAT(kvrt_bundle_kernel_manifest(raw, 2),
              HasSubstr("\"latent\":{\"kv_lora_rank\":16,\"rope_dim\":8}"));
}

} // namespace

namespace {

/// An entry of `kind` and `cache` alone in a bundle: the load's message, or
/// "" if it loads.
std::string loadOne(json kernel) {
  kvrt_bundle *raw = nullptr;
  kvrt_status status = load(bundleJson({kernel}), &raw);
  BundlePtr bundle(raw);
  return status == KVRT_SUCCESS ? "" : kvrt_last_error();
}

// A kind's entry trait (KernelKinds.def) decides which caches it may write:
// a latent kind only a latent cache, any other appending kind none.
TEST(LatentManifest, OnlyALatentKindWritesALatentCache) {
  CacheConfig mla;
  mla.heads = 1;
  mla.headDim = kRank + kRope;
  json latent = describe("kv_mla", "mla_append", mla)[0];
  latent["cache"]["latent"] = {{"kv_lora_rank", kRank}, {"rope_dim", kRope}};
  latent["params"] = mlaParams(false);
  ASSERT_EQ(loadOne(latent), "");

  json withoutLatent = latent;
  withoutLatent["cache"].erase("latent");
  EXPECT_THAT(loadOne(withoutLatent),
              HasSubstr(".kind: kind mla_append needs a latent cache"));

  json append = latent;
  append["kind"] = "append";
  append["params"] = kOnlyAppendParams(false);
  EXPECT_THAT(loadOne(append),
              HasSubstr(".kind: kind append cannot write a latent cache"));
}

} // namespace
