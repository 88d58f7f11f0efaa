//===- QuantTest.cpp - quantized caches, scales and gather ----------------===//
//
// Bundle version 2: cache.quant in the manifest, the scale tensors and scale
// caches validated by name (shape per granularity, fp32, the cache's device,
// compact) and packed in the ABI's order, fp8 caches as uint8 or DLPack
// float8, int8 caches, and kvrt_gather. Every refusal of issue 11's "Bad
// input" names the tensor and the rule, and nothing runs.
//
//===----------------------------------------------------------------------===//

#include "Fixtures.h"

#include <cctype>
#include <functional>

using namespace kvrt::test;
using ::testing::HasSubstr;

namespace {

/// A quantized description (fp8 e4m3 per_tensor static unless a test says
/// otherwise) with an append, a fused append and a gather.
class QuantTest : public LaunchTest {
protected:
  CacheConfig config() override {
    CacheConfig config;
    config.dtype = "f8e4m3";
    config.quant = "fp8_e4m3";
    config.granularity = granularity;
    config.mode = mode;
    config.gather = true;
    return config;
  }
  void makeCaches() override {
    keyCache =
        HostTensor::compact(cacheType, {kBlocks, kBlockSize, kHeads, kHeadDim});
    valueCache =
        HostTensor::compact(cacheType, {kBlocks, kBlockSize, kHeads, kHeadDim});
  }
  void SetUp() override {
    LaunchTest::SetUp();
    makeScales();
    keyOut = HostTensor::compact(bf16(), {kTokens, kHeads, kHeadDim});
    valueOut = HostTensor::compact(bf16(), {kTokens, kHeads, kHeadDim});
  }
  virtual void makeScales() {
    keyScale = HostTensor::compact(f32(), {1});
    valueScale = HostTensor::compact(f32(), {1});
  }
  /// Reloads with `granularity` and `mode` changed.
  void reconfigure(const std::string &newGranularity,
                   const std::string &newMode) {
    granularity = newGranularity;
    mode = newMode;
    SetUp();
  }

  kvrt_append_args quantAppendArgs() {
    kvrt_append_args args = appendArgs();
    if (mode == "static") {
      args.key_scale = keyScale.get();
      args.value_scale = valueScale.get();
    } else {
      args.key_scale_cache = keyScale.get();
      args.value_scale_cache = valueScale.get();
    }
    return args;
  }
  kvrt_status quantAppend() {
    kvrt_append_args args = quantAppendArgs();
    return kvrt_append(bundle.get(), &args, nullptr);
  }
  kvrt_gather_args gatherArgs() {
    kvrt_gather_args args = LaunchTest::gatherArgs(keyOut, valueOut);
    if (mode == "static") {
      args.key_scale = keyScale.get();
      args.value_scale = valueScale.get();
    } else {
      args.key_scale_cache = keyScale.get();
      args.value_scale_cache = valueScale.get();
    }
    return args;
  }
  kvrt_status gather(const kvrt_gather_args &args) {
    return kvrt_gather(bundle.get(), &args, nullptr);
  }

  std::string granularity = "per_tensor";
  std::string mode = "static";
  DLDataType cacheType = u8();
  HostTensor keyScale, valueScale, keyOut, valueOut;
};

//===----------------------------------------------------------------------===//
// The manifest
//===----------------------------------------------------------------------===//

TEST_F(QuantTest, KernelManifestIsCompactJson) {
  size_t count = kvrt_bundle_num_kernels(bundle.get());
  ASSERT_EQ(count, 7u);
  EXPECT_STREQ(kvrt_bundle_kernel_kind(bundle.get(), 5), "gather");
  const char *text = kvrt_bundle_kernel_manifest(bundle.get(), 0);
  ASSERT_NE(text, nullptr);
  EXPECT_EQ(std::string(text).find('\n'), std::string::npos);
  json entry = json::parse(text);
  EXPECT_EQ(entry["name"], "kv_append");
  EXPECT_EQ(entry["cache"]["quant"]["kind"], "fp8_e4m3");
  EXPECT_EQ(entry["cache"]["quant"]["granularity"], "per_tensor");
  EXPECT_EQ(entry["cache"]["quant"]["mode"], "static");
  EXPECT_EQ(entry["params"], json(paramsFor("append", "static")));
  json gatherEntry = json::parse(kvrt_bundle_kernel_manifest(bundle.get(), 5));
  EXPECT_EQ(gatherEntry["output_dtype"], "bf16");
  EXPECT_EQ(kvrt_bundle_kernel_manifest(bundle.get(), count), nullptr);
  EXPECT_EQ(kvrt_bundle_kernel_manifest(nullptr, 0), nullptr);
}

struct BadQuant {
  const char *label;
  std::function<void(json &)> mutate;
  std::string fragment;
};

TEST(QuantManifest, MalformedQuantizationIsRefused) {
  CacheConfig config;
  config.dtype = "f8e4m3";
  config.quant = "fp8_e4m3";
  const std::string k0 = "kernels[0] ('kv_append').cache.";
  auto cache = [](json &b) -> json & { return b["kernels"][0]["cache"]; };
  const BadQuant cases[] = {
      {"unknown kind", [&](json &b) { cache(b)["quant"]["kind"] = "int4"; },
       k0 + "quant.kind is 'int4'; expected fp8_e4m3, fp8_e5m2, int8 or nvfp4"},
      {"unknown granularity",
       [&](json &b) { cache(b)["quant"]["granularity"] = "per_row"; },
       k0 + "quant.granularity is 'per_row'"},
      {"unknown mode", [&](json &b) { cache(b)["quant"]["mode"] = "lazy"; },
       k0 + "quant.mode is 'lazy'"},
      {"reciprocal not a bool",
       [&](json &b) { cache(b)["quant"]["reciprocal"] = 1; },
       k0 + "quant.reciprocal must be true or false"},
      {"cache dtype of another kind",
       [&](json &b) { cache(b)["dtype"] = "i8"; },
       k0 + "dtype is i8 but fp8_e4m3 stores f8e4m3"},
      {"dynamic per_head",
       [&](json &b) {
         cache(b)["quant"]["granularity"] = "per_head";
         cache(b)["quant"]["mode"] = "dynamic";
       },
       "dynamic per_head scales are not supported"},
      {"per_block on a contiguous cache",
       [&](json &b) {
         cache(b)["layout"] = "contiguous";
         cache(b).erase("block_size");
         cache(b)["max_seq_len"] = 8;
         cache(b)["quant"]["granularity"] = "per_block";
       },
       "per_block scales need a paged layout"},
      {"unquantized parameter list",
       [&](json &b) { b["kernels"][0]["params"] = paramsFor("append"); },
       "params[5] is 'num_tokens' but kvrt packs 'key_scale' there"},
      {"quant not an object", [&](json &b) { cache(b)["quant"] = "fp8"; },
       k0 + "quant must be an object"},
      {"gather without output_dtype",
       [&](json &b) { b["kernels"][5].erase("output_dtype"); },
       "kernels[5] ('kv_gather').output_dtype is missing"},
  };
  config.gather = true;
  for (const BadQuant &bad : cases) {
    json bundle = standardBundle(config);
    bad.mutate(bundle);
    kvrt_bundle *raw = nullptr;
    EXPECT_EQ(load(bundle, &raw), KVRT_ERROR_INVALID_BUNDLE) << bad.label;
    EXPECT_THAT(kvrt_last_error(), HasSubstr(bad.fragment)) << bad.label;
    kvrt_bundle_destroy(raw);
  }
}

TEST(QuantManifest, EveryKindGranularityAndModeLoads) {
  struct Combination {
    const char *kind, *dtype, *granularity, *mode;
  };
  for (Combination c : std::initializer_list<Combination>{
           {"fp8_e4m3", "f8e4m3", "per_tensor", "static"},
           {"fp8_e5m2", "f8e5m2", "per_head", "static"},
           {"int8", "i8", "per_token", "static"},
           {"int8", "i8", "per_token_head", "dynamic"},
           {"fp8_e4m3", "f8e4m3", "per_block", "static"},
           {"fp8_e4m3", "f8e4m3", "per_token", "dynamic"}}) {
    CacheConfig config;
    config.quant = c.kind;
    config.dtype = c.dtype;
    config.granularity = c.granularity;
    config.mode = c.mode;
    config.gather = true;
    kvrt_bundle *raw = nullptr;
    EXPECT_EQ(load(standardBundle(config), &raw), KVRT_SUCCESS)
        << c.kind << " " << c.granularity << " " << c.mode << ": "
        << kvrt_last_error();
    kvrt_bundle_destroy(raw);
  }
}

//===----------------------------------------------------------------------===//
// Static scales
//===----------------------------------------------------------------------===//

TEST_F(QuantTest, ScalesArePackedInAbiOrder) {
  ASSERT_EQ(quantAppend(), KVRT_SUCCESS) << kvrt_last_error();
  ASSERT_EQ(calls(), 1);
  // Buffers: key, value, slot_mapping, key_cache, value_cache, key_scale,
  // value_scale; each one pointer.
  const std::vector<int64_t> &params = recorded().params;
  EXPECT_EQ(params[5], reinterpret_cast<intptr_t>(keyScale.data()));
  EXPECT_EQ(params[6], reinterpret_cast<intptr_t>(valueScale.data()));
  EXPECT_EQ(params[7], kTokens) << "num_tokens after the buffers";
  EXPECT_EQ(params[8], kBlocks);
}

TEST_F(QuantTest, Float8CodeAndUint8CachesAreAccepted) {
  ASSERT_EQ(quantAppend(), KVRT_SUCCESS) << kvrt_last_error();
  keyCache.get()->dtype = f8e4m3();
  valueCache.get()->dtype = f8e4m3();
  EXPECT_EQ(quantAppend(), KVRT_SUCCESS) << kvrt_last_error();
}

TEST_F(QuantTest, CacheOfTheWrongElementSizeIsRefused) {
  keyCache =
      HostTensor::compact(bf16(), {kBlocks, kBlockSize, kHeads, kHeadDim});
  expectRefused(quantAppend(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key_cache: dtype is bf16 but the kernel 'kv_append' was "
                 "generated for f8e4m3"});
}

TEST_F(QuantTest, Float8OfTheOtherFormatIsRefused) {
  keyCache.get()->dtype = f8e5m2();
  expectRefused(quantAppend(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key_cache: dtype is f8e5m2", "f8e4m3"});
}

TEST_F(QuantTest, MissingScaleIsRefused) {
  kvrt_append_args args = quantAppendArgs();
  args.value_scale = nullptr;
  expectRefused(kvrt_append(bundle.get(), &args, nullptr),
                KVRT_ERROR_INVALID_ARGUMENT,
                {"value_scale: tensor is NULL but the kernel 'kv_append' is "
                 "quantized (fp8_e4m3, per_tensor, static) and takes it",
                 "[1] (f32, per_tensor)"});
}

TEST_F(QuantTest, UnquantizedArgumentsAreRefused) {
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key_scale: tensor is NULL but the kernel 'kv_append' is "
                 "quantized"});
}

TEST_F(QuantTest, ScaleOfTheWrongShapeIsRefused) {
  keyScale = HostTensor::compact(f32(), {2});
  expectRefused(quantAppend(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key_scale: shape[0] (1) is 2 but the kernel 'kv_append' was "
                 "generated for 1"});
}

TEST_F(QuantTest, ScaleOfTheWrongDTypeIsRefused) {
  valueScale = HostTensor::compact(f16(), {1});
  expectRefused(quantAppend(), KVRT_ERROR_INVALID_ARGUMENT,
                {"value_scale: dtype is f16 but the kernel 'kv_append' was "
                 "generated for f32"});
}

TEST_F(QuantTest, ScaleOnAnotherDeviceIsRefused) {
  keyScale.get()->device = {kDLCPU, 1};
  expectRefused(quantAppend(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key_scale: on cpu:1 but the cache is on cpu:0; a scale "
                 "lives on the cache's device"});
}

TEST_F(QuantTest, ScaleCacheForAStaticDescriptionIsRefused) {
  kvrt_append_args args = quantAppendArgs();
  args.key_scale_cache = keyScale.get();
  expectRefused(kvrt_append(bundle.get(), &args, nullptr),
                KVRT_ERROR_INVALID_ARGUMENT,
                {"key_scale_cache: must be NULL: the kernel 'kv_append' "
                 "(fp8_e4m3, per_tensor, static) takes key_scale and "
                 "value_scale"});
}

TEST_F(QuantTest, PerTokenScalesFollowNumTokens) {
  reconfigure("per_token", "static");
  keyScale = HostTensor::compact(f32(), {kTokens});
  valueScale = HostTensor::compact(f32(), {kTokens});
  ASSERT_EQ(quantAppend(), KVRT_SUCCESS) << kvrt_last_error();
  valueScale = HostTensor::compact(f32(), {kTokens + 1});
  recorded() = Recorded();
  expectRefused(quantAppend(), KVRT_ERROR_INVALID_ARGUMENT,
                {"value_scale: shape[0] (num_tokens) is 6 but key has 5"});
}

TEST_F(QuantTest, NonContiguousScaleIsRefused) {
  reconfigure("per_token_head", "static");
  keyScale = HostTensor::strided(f32(), {kTokens, kHeads}, {1, kTokens});
  valueScale = HostTensor::compact(f32(), {kTokens, kHeads});
  expectRefused(
      quantAppend(), KVRT_ERROR_INVALID_ARGUMENT,
      {"key_scale: stride[1] (num_kv_heads) is 5 but must be 1", "contiguous"});
}

TEST_F(QuantTest, PerBlockScalesFollowTheCache) {
  reconfigure("per_block", "static");
  keyScale = HostTensor::compact(f32(), {kBlocks, kHeads});
  valueScale = HostTensor::compact(f32(), {kBlocks, kHeads});
  ASSERT_EQ(quantAppend(), KVRT_SUCCESS) << kvrt_last_error();
  keyScale = HostTensor::compact(f32(), {kBlocks - 1, kHeads});
  recorded() = Recorded();
  expectRefused(quantAppend(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key_scale: shape[0] (num_blocks) is 2 but key_cache has 3"});
}

//===----------------------------------------------------------------------===//
// Dynamic scales: scale caches
//===----------------------------------------------------------------------===//

class DynamicQuantTest : public QuantTest {
protected:
  void SetUp() override {
    granularity = "per_token_head";
    mode = "dynamic";
    cacheType = i8();
    QuantTest::SetUp();
  }
  CacheConfig config() override {
    CacheConfig config = QuantTest::config();
    config.quant = "int8";
    config.dtype = "i8";
    return config;
  }
  void makeScales() override {
    keyScale = HostTensor::compact(f32(), {kBlocks, kBlockSize, kHeads});
    valueScale = HostTensor::compact(f32(), {kBlocks, kBlockSize, kHeads});
  }
};

TEST_F(DynamicQuantTest, ScaleCachesArePacked) {
  ASSERT_EQ(quantAppend(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(recorded().params[5], reinterpret_cast<intptr_t>(keyScale.data()));
}

TEST_F(DynamicQuantTest, MissingScaleCacheIsRefused) {
  kvrt_append_args args = quantAppendArgs();
  args.key_scale_cache = nullptr;
  expectRefused(kvrt_append(bundle.get(), &args, nullptr),
                KVRT_ERROR_INVALID_ARGUMENT,
                {"key_scale_cache: tensor is NULL but the kernel 'kv_append' "
                 "is quantized (int8, per_token_head, dynamic)",
                 "[num_blocks, block_size, num_kv_heads] (f32, scale cache)"});
}

TEST_F(DynamicQuantTest, StaticScaleForADynamicDescriptionIsRefused) {
  kvrt_append_args args = quantAppendArgs();
  args.key_scale = keyScale.get();
  expectRefused(kvrt_append(bundle.get(), &args, nullptr),
                KVRT_ERROR_INVALID_ARGUMENT,
                {"key_scale: must be NULL", "takes key_scale_cache and "
                                            "value_scale_cache"});
}

TEST_F(DynamicQuantTest, ScaleCacheOfTheWrongBlockSizeIsRefused) {
  valueScale = HostTensor::compact(f32(), {kBlocks, kBlockSize * 2, kHeads});
  expectRefused(quantAppend(), KVRT_ERROR_INVALID_ARGUMENT,
                {"value_scale_cache: shape[1] (block_size) is 8 but the "
                 "kernel 'kv_append' was generated for 4"});
}

TEST_F(DynamicQuantTest, ScaleCacheOfOtherBlocksIsRefused) {
  keyScale = HostTensor::compact(f32(), {kBlocks + 1, kBlockSize, kHeads});
  expectRefused(quantAppend(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key_scale_cache: shape[0] (num_blocks) is 4 but key_cache "
                 "has 3"});
}

TEST_F(DynamicQuantTest, ScaleCacheAliasingTheCacheIsRefused) {
  keyScale = keyCache.view(f32(), {kBlocks, kBlockSize, kHeads},
                           {kBlockSize * kHeads, kHeads, 1}, 0);
  expectRefused(quantAppend(), KVRT_ERROR_INVALID_ARGUMENT,
                {"overlaps", "must not alias"});
}

TEST_F(DynamicQuantTest, Uint8IsNotAnInt8Cache) {
  keyCache.get()->dtype = u8();
  expectRefused(quantAppend(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key_cache: dtype is u8 but the kernel 'kv_append' was "
                 "generated for i8"});
}

TEST_F(DynamicQuantTest, FusedAppendTakesTheScaleCaches) {
  kvrt_fused_append_args args = fusedArgs();
  args.key_scale_cache = keyScale.get();
  args.value_scale_cache = valueScale.get();
  ASSERT_EQ(kvrt_fused_append(bundle.get(), &args, nullptr), KVRT_SUCCESS)
      << kvrt_last_error();
  // key, value, block_table, query_start_loc, context_lens, key_cache,
  // value_cache, key_scale_cache, value_scale_cache.
  EXPECT_EQ(recorded().params[7], reinterpret_cast<intptr_t>(keyScale.data()));
  EXPECT_EQ(recorded().params[9], kTokens);
}

//===----------------------------------------------------------------------===//
// Gather
//===----------------------------------------------------------------------===//

TEST_F(QuantTest, GatherRuns) {
  ASSERT_EQ(gather(gatherArgs()), KVRT_SUCCESS) << kvrt_last_error();
  ASSERT_EQ(calls(), 1);
  // key_cache, value_cache, slot_mapping, key_out, value_out, key_scale,
  // value_scale; then num_tokens, num_blocks, the output strides.
  const std::vector<int64_t> &params = recorded().params;
  EXPECT_EQ(params[3], reinterpret_cast<intptr_t>(keyOut.data()));
  EXPECT_EQ(params[5], reinterpret_cast<intptr_t>(keyScale.data()));
  EXPECT_EQ(params[7], kTokens);
  EXPECT_EQ(params[8], kBlocks);
  EXPECT_EQ(params[9], kHeads * kHeadDim) << "key_out_stride_token";
}

TEST_F(QuantTest, GatherOutputOfTheWrongDTypeIsRefused) {
  keyOut = HostTensor::compact(f32(), {kTokens, kHeads, kHeadDim});
  kvrt_gather_args args = gatherArgs();
  expectRefused(gather(args), KVRT_ERROR_INVALID_ARGUMENT,
                {"key_out: dtype is f32 but the kernel 'kv_gather' was "
                 "generated for bf16"});
}

TEST_F(QuantTest, GatherOutputRowsFollowTheSlots) {
  valueOut = HostTensor::compact(bf16(), {kTokens - 1, kHeads, kHeadDim});
  expectRefused(gather(gatherArgs()), KVRT_ERROR_INVALID_ARGUMENT,
                {"value_out: shape[0] (num_tokens) is 4 but slot_mapping has "
                 "5"});
}

TEST_F(QuantTest, GatherOutputAliasingTheCacheIsRefused) {
  keyOut = keyCache.view(bf16(), {kTokens, kHeads, kHeadDim / 2},
                         {kHeads * kHeadDim / 2, kHeadDim / 2, 1}, 0);
  keyOut.shapeRef()[2] = kHeadDim;
  kvrt_gather_args args = gatherArgs();
  expectRefused(gather(args), KVRT_ERROR_INVALID_ARGUMENT,
                {"key_out: overlaps key_cache"});
}

TEST_F(QuantTest, GatherWithoutScalesIsRefused) {
  kvrt_gather_args args = gatherArgs();
  args.key_scale = nullptr;
  expectRefused(gather(args), KVRT_ERROR_INVALID_ARGUMENT,
                {"key_scale: tensor is NULL but the kernel 'kv_gather' is "
                 "quantized"});
}

TEST_F(LaunchTest, ScaleForAnUnquantizedDescriptionIsRefused) {
  HostTensor scale = HostTensor::compact(f32(), {1});
  kvrt_append_args args = appendArgs();
  args.value_scale = scale.get();
  expectRefused(kvrt_append(bundle.get(), &args, nullptr),
                KVRT_ERROR_INVALID_ARGUMENT,
                {"value_scale: must be NULL: the kernel 'kv_append' is not "
                 "quantized"});
}

TEST_F(LaunchTest, UnquantizedGatherRuns) {
  loadWithGather();
  HostTensor keyOut = HostTensor::compact(bf16(), {kTokens, kHeads, kHeadDim});
  HostTensor valueOut =
      HostTensor::compact(bf16(), {kTokens, kHeads, kHeadDim});
  kvrt_gather_args args = gatherArgs(keyOut, valueOut);
  ASSERT_EQ(kvrt_gather(bundle.get(), &args, nullptr), KVRT_SUCCESS)
      << kvrt_last_error();
  EXPECT_EQ(calls(), 1);
}

} // namespace
