//===- ManifestTest.cpp - loading bundles: good ones and each bad field ---===//

#include "TestSupport.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <functional>
#include <unistd.h>

using namespace kvrt::test;
using ::testing::HasSubstr;

extern "C" int kvrtCHeaderLoads(const char *json, size_t size);
extern "C" const char *kvrtCStatusName(int code);

namespace {

TEST(Manifest, UsableFromC) {
  std::string text = standardBundle().dump();
  EXPECT_EQ(kvrtCHeaderLoads(text.data(), text.size()), 5);
  EXPECT_EQ(kvrtCHeaderLoads("[]", 2), -KVRT_ERROR_INVALID_BUNDLE);
}

TEST(Manifest, GoodBundleLoads) {
  kvrt_bundle *raw = nullptr;
  ASSERT_EQ(load(standardBundle(), &raw), KVRT_SUCCESS) << kvrt_last_error();
  BundlePtr bundle(raw);
  ASSERT_EQ(kvrt_bundle_num_kernels(raw), 5u);
  EXPECT_STREQ(kvrt_bundle_kernel_name(raw, 0), "kv_append");
  EXPECT_STREQ(kvrt_bundle_kernel_name(raw, 1), "kv_append_scalar");
  EXPECT_STREQ(kvrt_bundle_kernel_kind(raw, 2), "slot_mapping");
  EXPECT_STREQ(kvrt_bundle_kernel_variant(raw, 2), "scalar");
  EXPECT_STREQ(kvrt_bundle_kernel_kind(raw, 3), "fused_append");
  EXPECT_STREQ(kvrt_bundle_kernel_variant(raw, 3), "vector");
  EXPECT_EQ(kvrt_bundle_kernel_name(raw, 5), nullptr);
  EXPECT_EQ(kvrt_bundle_kernel_kind(raw, 5), nullptr);
  EXPECT_EQ(kvrt_bundle_num_kernels(nullptr), 0u);
}

TEST(Manifest, WideVariantLoadsWithItsThreshold) {
  json bundle = standardBundle();
  bundle["kernels"].push_back(wideKernelJson("kv_append", "append", 2048));
  kvrt_bundle *raw = nullptr;
  ASSERT_EQ(load(bundle, &raw), KVRT_SUCCESS) << kvrt_last_error();
  BundlePtr owner(raw);
  ASSERT_EQ(kvrt_bundle_num_kernels(raw), 6u);
  EXPECT_STREQ(kvrt_bundle_kernel_variant(raw, 5), "wide");
  json entry = json::parse(kvrt_bundle_kernel_manifest(raw, 5));
  EXPECT_EQ(entry["name"], "kv_append_wide");
  EXPECT_EQ(entry["min_tokens"], 2048);
  EXPECT_FALSE(
      json::parse(kvrt_bundle_kernel_manifest(raw, 0)).contains("min_tokens"));
  EXPECT_FALSE(entry.contains("max_tokens"));
}

TEST(Manifest, WideVariantLoadsWithItsBound) {
  json bundle = standardBundle();
  json wide = wideKernelJson("kv_append", "append", 2048);
  wide["max_tokens"] = 16384;
  bundle["kernels"].push_back(wide);
  kvrt_bundle *raw = nullptr;
  ASSERT_EQ(load(bundle, &raw), KVRT_SUCCESS) << kvrt_last_error();
  BundlePtr owner(raw);
  json entry = json::parse(kvrt_bundle_kernel_manifest(raw, 5));
  EXPECT_EQ(entry["min_tokens"], 2048);
  EXPECT_EQ(entry["max_tokens"], 16384);
}

TEST(Manifest, EveryLayoutLoads) {
  for (const char *layout : {"contiguous", "paged_nhd", "paged_hnd",
                             "vllm_vectorized", "dual_stacked"}) {
    CacheConfig config;
    config.layout = layout;
    kvrt_bundle *raw = nullptr;
    EXPECT_EQ(load(standardBundle(config), &raw), KVRT_SUCCESS)
        << layout << ": " << kvrt_last_error();
    kvrt_bundle_destroy(raw);
  }
}

TEST(Manifest, HostOnlyBundleNeedsNoTarget) {
  kvrt_bundle *raw = nullptr;
  EXPECT_EQ(load(standardBundle(CacheConfig(), /*withPtx=*/false), &raw),
            KVRT_SUCCESS)
      << kvrt_last_error();
  kvrt_bundle_destroy(raw);
}

TEST(Manifest, CubinAndSlotMappingWithoutVariant) {
  json bundle = standardBundle();
  bundle["cubin_base64"] = "f0VMRgIBAQ==\n"; // "\x7f" "ELF\2\1\1", wrapped
  bundle["kernels"][2].erase("variant");
  kvrt_bundle *raw = nullptr;
  EXPECT_EQ(load(bundle, &raw), KVRT_SUCCESS) << kvrt_last_error();
  kvrt_bundle_destroy(raw);
}

TEST(Manifest, SourceDtypeOnAGatherIsRefused) {
  CacheConfig config;
  config.gather = true;
  json bundle = standardBundle(config);
  ASSERT_EQ(bundle["kernels"][5]["name"], "kv_gather");
  bundle["kernels"][5]["source_dtype"] = "bf16";
  kvrt_bundle *raw = nullptr;
  EXPECT_EQ(load(bundle, &raw), KVRT_ERROR_INVALID_BUNDLE);
  EXPECT_THAT(kvrt_last_error(),
              HasSubstr("kernels[5] ('kv_gather').source_dtype is set, but a "
                        "gather has output_dtype"));
}

TEST(Manifest, EmbeddedHeaderWithTerminatingNul) {
  std::string text = standardBundle().dump();
  kvrt_bundle *raw = nullptr;
  // kvgen --emit=header arrays may count the NUL.
  EXPECT_EQ(kvrt_bundle_load_memory(text.c_str(), text.size() + 1, &raw),
            KVRT_SUCCESS)
      << kvrt_last_error();
  kvrt_bundle_destroy(raw);
}

TEST(Manifest, LoadFile) {
  char path[] = "/tmp/kvrt-manifest-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  std::string text = standardBundle().dump(2);
  ASSERT_EQ(write(fd, text.data(), text.size()),
            static_cast<ssize_t>(text.size()));
  close(fd);
  kvrt_bundle *raw = nullptr;
  EXPECT_EQ(kvrt_bundle_load_file(path, &raw), KVRT_SUCCESS)
      << kvrt_last_error();
  kvrt_bundle_destroy(raw);
  std::remove(path);

  EXPECT_EQ(kvrt_bundle_load_file("/nonexistent/kv.bundle.json", &raw),
            KVRT_ERROR_IO);
  EXPECT_EQ(raw, nullptr);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("/nonexistent/kv.bundle.json"));
  EXPECT_THAT(kvrt_last_error(), HasSubstr("No such file"));
}

TEST(Manifest, NullArguments) {
  kvrt_bundle *raw = nullptr;
  EXPECT_EQ(kvrt_bundle_load_memory(nullptr, 4, &raw),
            KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kvrt_bundle_load_memory("{}", 2, nullptr),
            KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kvrt_bundle_load_file(nullptr, &raw), KVRT_ERROR_INVALID_ARGUMENT);
  kvrt_bundle_destroy(nullptr); // a no-op, like free(NULL)
}

TEST(Manifest, StatusNames) {
  EXPECT_STREQ(kvrt_status_name(KVRT_SUCCESS), "KVRT_SUCCESS");
  EXPECT_STREQ(kvrt_status_name(KVRT_ERROR_NO_DRIVER), "KVRT_ERROR_NO_DRIVER");
  EXPECT_STREQ(kvrtCStatusName(99), "KVRT_ERROR_UNKNOWN");
}

//===----------------------------------------------------------------------===//
// One malformed field at a time
//===----------------------------------------------------------------------===//

struct Malformed {
  const char *label;
  std::function<void(json &)> mutate;
  /// Every fragment must appear in the message.
  std::vector<std::string> fragments;
};

// kernels[0] is kv_append (vector), [1] kv_append_scalar, [2] kv_slots,
// [3] kv_fused, [4] kv_fused_scalar.
json &kernel0(json &bundle) { return bundle["kernels"][0]; }

std::vector<Malformed> malformedCases() {
  const std::string k0 = "kernels[0] ('kv_append')";
  return {
      {"top level is an array",
       [](json &b) { b = json::array({b}); },
       {"must be a JSON object"}},
      {"format missing",
       [](json &b) { b.erase("format"); },
       {"format is missing"}},
      {"format wrong",
       [](json &b) { b["format"] = "kvgen"; },
       {"format is 'kvgen'", "kvgen-bundle"}},
      {"version 1",
       [](json &b) { b["version"] = 1; },
       {"bundle version 1 is not supported by this kvrt (it reads version "
        "4); regenerate the bundle with this kvgen"}},
      {"version 2: memref-descriptor parameters",
       [](json &b) { b["version"] = 2; },
       {"bundle version 2 is not supported by this kvrt (it reads version "
        "4); regenerate the bundle with this kvgen"}},
      {"version 3: i64 scalars",
       [](json &b) { b["version"] = 3; },
       {"bundle version 3 is not supported by this kvrt (it reads version "
        "4); regenerate the bundle with this kvgen"}},
      {"version 5",
       [](json &b) { b["version"] = 5; },
       {"bundle version 5 is not supported"}},
      {"version a string",
       [](json &b) { b["version"] = "1"; },
       {"version must be an integer"}},
      {"version a float",
       [](json &b) { b["version"] = 1.5; },
       {"version must be an integer"}},
      {"ptx empty", [](json &b) { b["ptx"] = ""; }, {"ptx is empty"}},
      {"ptx a number", [](json &b) { b["ptx"] = 7; }, {"ptx must be a string"}},
      {"cubin not base64",
       [](json &b) { b["cubin_base64"] = "@@@@"; },
       {"cubin_base64 is not valid base64"}},
      {"cubin truncated",
       [](json &b) { b["cubin_base64"] = "f0VMR"; },
       {"cubin_base64 is not valid base64"}},
      {"target missing",
       [](json &b) { b.erase("target"); },
       {"target is missing"}},
      {"target chip missing",
       [](json &b) { b["target"].erase("chip"); },
       {"target.chip is missing"}},
      {"target chip wrong",
       [](json &b) { b["target"]["chip"] = "gfx90a"; },
       {"target.chip is 'gfx90a'"}},
      {"target chip suffix",
       [](json &b) { b["target"]["chip"] = "sm_90x"; },
       {"target.chip is 'sm_90x'"}},
      {"kernels missing",
       [](json &b) { b.erase("kernels"); },
       {"kernels is missing"}},
      {"kernels empty",
       [](json &b) { b["kernels"] = json::array(); },
       {"kernels must be a non-empty array"}},
      {"kernel not an object",
       [](json &b) { b["kernels"][1] = 3; },
       {"kernels[1] must be an object"}},
      {"name missing",
       [](json &b) { kernel0(b).erase("name"); },
       {"kernels[0].name is missing"}},
      {"name not an identifier",
       [](json &b) { kernel0(b)["name"] = "kv-append"; },
       {"kernels[0].name is 'kv-append'", "PTX identifier"}},
      {"duplicate names",
       [](json &b) { b["kernels"][3]["name"] = "kv_append"; },
       {"kernels[3].name 'kv_append' repeats kernels[0].name"}},
      {"kind missing",
       [](json &b) { kernel0(b).erase("kind"); },
       {k0 + ".kind is missing"}},
      {"kind unknown",
       [](json &b) { kernel0(b)["kind"] = "copy"; },
       {k0 + ".kind is 'copy'"}},
      {"variant missing",
       [](json &b) { kernel0(b).erase("variant"); },
       {k0 + ".variant is missing"}},
      {"variant unknown",
       [](json &b) { kernel0(b)["variant"] = "narrow"; },
       {k0 + ".variant is 'narrow'", "expected vector, scalar or wide"}},
      {"wide variant without suffix",
       [](json &b) {
         kernel0(b)["variant"] = "wide";
         kernel0(b)["min_tokens"] = 64;
       },
       {k0 + ".name", "must end in '_wide'"}},
      {"wide variant without min_tokens",
       [](json &b) {
         json wide = wideKernelJson("kv_append", "append", 64);
         wide.erase("min_tokens");
         b["kernels"].push_back(wide);
       },
       {"kernels[5] ('kv_append_wide').min_tokens is missing"}},
      {"wide variant of zero min_tokens",
       [](json &b) {
         b["kernels"].push_back(wideKernelJson("kv_append", "append", 0));
       },
       {"kernels[5] ('kv_append_wide').min_tokens must be positive"}},
      {"min_tokens on a vector kernel",
       [](json &b) { kernel0(b)["min_tokens"] = 64; },
       {k0 + ".min_tokens is set, but only a wide variant has a token "
             "threshold"}},
      {"max_tokens on a vector kernel",
       [](json &b) { kernel0(b)["max_tokens"] = 64; },
       {k0 + ".max_tokens is set, but only a wide variant has a token "
             "bound"}},
      {"wide variant of max_tokens at its min_tokens",
       [](json &b) {
         json wide = wideKernelJson("kv_append", "append", 64);
         wide["max_tokens"] = 64;
         b["kernels"].push_back(wide);
       },
       {"kernels[5] ('kv_append_wide').max_tokens is 64, not above "
        "min_tokens (64): the wide variant would never be picked"}},
      {"wide variant of negative max_tokens",
       [](json &b) {
         json wide = wideKernelJson("kv_append", "append", 64);
         wide["max_tokens"] = -1;
         b["kernels"].push_back(wide);
       },
       {"kernels[5] ('kv_append_wide').max_tokens must be positive"}},
      {"wide and vector promises disagree",
       [](json &b) {
         json wide = wideKernelJson("kv_append", "append", 64);
         wide["alignment"] = 8;
         b["kernels"].push_back(wide);
       },
       {"the wide kernel 'kv_append_wide' promises alignment 8",
        "they must agree"}},
      {"two wide variants",
       [](json &b) {
         b["kernels"].push_back(wideKernelJson("kv_append", "append", 64));
         b["kernels"].push_back(wideKernelJson("kv_append", "append", 128));
       },
       {"kernels[6].name 'kv_append_wide' repeats kernels[5].name"}},
      {"scalar variant without suffix",
       [](json &b) { kernel0(b)["variant"] = "scalar"; },
       {k0 + ".name", "must end in '_scalar'"}},
      {"vector slot_mapping",
       [](json &b) { b["kernels"][2]["variant"] = "vector"; },
       {"kernels[2] ('kv_slots').variant is 'vector'"}},
      {"cache missing",
       [](json &b) { kernel0(b).erase("cache"); },
       {k0 + ".cache is missing"}},
      {"cache not an object",
       [](json &b) { kernel0(b)["cache"] = "nhd"; },
       {k0 + ".cache must be an object"}},
      {"layout unknown",
       [](json &b) { kernel0(b)["cache"]["layout"] = "paged_xyz"; },
       {k0 + ".cache.layout is 'paged_xyz'"}},
      {"block_size missing",
       [](json &b) { kernel0(b)["cache"].erase("block_size"); },
       {k0 + ".cache.block_size is missing"}},
      {"block_size zero",
       [](json &b) { kernel0(b)["cache"]["block_size"] = 0; },
       {k0 + ".cache.block_size must be positive"}},
      {"num_kv_heads zero",
       [](json &b) { kernel0(b)["cache"]["num_kv_heads"] = 0; },
       {k0 + ".cache.num_kv_heads must be positive"}},
      {"head_dim negative",
       [](json &b) { kernel0(b)["cache"]["head_dim"] = -128; },
       {k0 + ".cache.head_dim must be positive"}},
      {"head_dim huge",
       [](json &b) {
         kernel0(b)["cache"]["head_dim"] = 18446744073709551615ull;
       },
       {k0 + ".cache.head_dim is out of range"}},
      {"cache dtype unknown",
       [](json &b) { kernel0(b)["cache"]["dtype"] = "f64"; },
       {k0 + ".cache.dtype is 'f64'"}},
      {"cache dtype an index type",
       [](json &b) { kernel0(b)["cache"]["dtype"] = "i32"; },
       {k0 + ".cache.dtype is 'i32'"}},
      {"vllm x missing",
       [](json &b) { kernel0(b)["cache"]["layout"] = "vllm_vectorized"; },
       {k0 + ".cache.x is missing"}},
      {"vllm x does not divide head_dim",
       [](json &b) {
         kernel0(b)["cache"]["layout"] = "vllm_vectorized";
         kernel0(b)["cache"]["x"] = 6;
       },
       {k0 + ".cache.x must divide head_dim"}},
      {"contiguous without max_seq_len",
       [](json &b) { kernel0(b)["cache"]["layout"] = "contiguous"; },
       {k0 + ".cache.max_seq_len is missing"}},
      {"source dtype missing",
       [](json &b) { kernel0(b).erase("source_dtype"); },
       {k0 + ".source_dtype is missing"}},
      {"source dtype not a float",
       [](json &b) { kernel0(b)["source_dtype"] = "i8"; },
       {k0 + ".source_dtype is 'i8'"}},
      {"source f16 into a bf16 cache",
       [](json &b) { kernel0(b)["source_dtype"] = "f16"; },
       {k0 + ".source_dtype is f16", "f16 <-> bf16"}},
      {"alignment missing on a vector kernel",
       [](json &b) { kernel0(b).erase("alignment"); },
       {k0 + ".alignment is missing"}},
      {"alignment not a power of two",
       [](json &b) { kernel0(b)["alignment"] = 12; },
       {k0 + ".alignment must be a power of two"}},
      {"vector_elems zero",
       [](json &b) { kernel0(b)["vector_elems"] = 0; },
       {k0 + ".vector_elems must be positive"}},
      {"vector_elems does not divide head_dim",
       [](json &b) { kernel0(b)["vector_elems"] = 3; },
       {k0 + ".vector_elems (3) must divide cache.head_dim (16)"}},
      {"vector_bytes negative",
       [](json &b) { kernel0(b)["vector_bytes"] = -16; },
       {k0 + ".vector_bytes must be positive"}},
      {"launch missing",
       [](json &b) { kernel0(b).erase("launch"); },
       {k0 + ".launch is missing"}},
      {"threads_x zero",
       [](json &b) { kernel0(b)["launch"]["threads_x"] = 0; },
       {k0 + ".launch.threads_x must be positive"}},
      {"threads_x a float",
       [](json &b) { kernel0(b)["launch"]["threads_x"] = 4.0; },
       {k0 + ".launch.threads_x must be an integer"}},
      {"tokens_per_block missing",
       [](json &b) { kernel0(b)["launch"].erase("tokens_per_block"); },
       {k0 + ".launch.tokens_per_block is missing"}},
      {"chunks_per_token missing",
       [](json &b) { kernel0(b)["launch"].erase("chunks_per_token"); },
       {k0 + ".launch.chunks_per_token is missing"}},
      {"block too large",
       [](json &b) {
         kernel0(b)["launch"]["threads_x"] = 256;
         kernel0(b)["launch"]["tokens_per_block"] = 8;
       },
       {k0 + ".launch", "exceeds 1024 threads per block"}},
      {"params missing",
       [](json &b) { kernel0(b).erase("params"); },
       {k0 + ".params is missing"}},
      {"params not an array",
       [](json &b) { kernel0(b)["params"] = "key"; },
       {k0 + ".params must be an array"}},
      {"params swapped",
       [](json &b) {
         std::swap(kernel0(b)["params"][0], kernel0(b)["params"][1]);
       },
       {k0 + ".params[0] is 'value' but kvrt packs 'key' there"}},
      {"params short",
       [](json &b) { kernel0(b)["params"].erase(20); },
       {k0 + ".params has 20 entries but kvrt packs 21",
        "'value_cache_stride_dim'"}},
      {"params long",
       [](json &b) { kernel0(b)["params"].push_back("k_scale"); },
       {k0 + ".params has 22 entries but kvrt packs 21", "k_scale"}},
      {"params entry not a string",
       [](json &b) { kernel0(b)["params"][4] = 4; },
       {k0 + ".params[4] must be a string"}},
      {"params of another kind",
       [](json &b) { kernel0(b)["params"] = paramsFor("fused_append"); },
       {k0 + ".params[2] is 'block_table' but kvrt packs 'slot_mapping'"}},
      {"variants disagree on the cache",
       [](json &b) { b["kernels"][1]["cache"]["head_dim"] = 32; },
       {"kernels[1] ('kv_append_scalar') and its other variant 'kv_append'",
        "different caches"}},
      {"wide variant of another cache",
       [](json &b) {
         json wide = wideKernelJson("kv_append", "append", 64);
         wide["cache"]["head_dim"] = 32;
         b["kernels"].push_back(wide);
       },
       {"kernels[5] ('kv_append_wide') and its other variant 'kv_append'",
        "different caches"}},
      // Keys the schema (include/kvgen/ABI/Bundle.def) does not have, at
      // each level: a reader that skipped them would misread a newer
      // bundle or a misspelt one.
      {"unknown top-level key",
       [](json &b) { b["kernel"] = json::array(); },
       {"the manifest has the key 'kernel', which the bundle format does not "
        "have"}},
      {"unknown target key",
       [](json &b) { b["target"]["sm"] = 90; },
       {"target has the key 'sm'"}},
      {"unknown kernel key",
       [](json &b) { kernel0(b)["min_token"] = 64; },
       {k0 + " has the key 'min_token', which the bundle format does not "
             "have"}},
      {"unknown cache key",
       [](json &b) { kernel0(b)["cache"]["blocksize"] = 16; },
       {k0 + ".cache has the key 'blocksize'"}},
      {"unknown quant key",
       [](json &b) {
         kernel0(b)["cache"]["quant"] = {{"kind", "int8"},
                                         {"granularity", "per_tensor"},
                                         {"mode", "static"},
                                         {"scale", 1.0}};
       },
       {k0 + ".cache.quant has the key 'scale'"}},
      {"unknown launch key: the old slot_mapping form",
       [](json &b) { b["kernels"][2]["launch"]["threads"] = 128; },
       {"kernels[2] ('kv_slots').launch has the key 'threads'"}},
      {"unknown key with a NUL",
       [](json &b) { kernel0(b)[std::string("x\0y", 3)] = 1; },
       {k0 + " has the key 'x\\x00y'"}},
      // Keys of the schema where their rule does not hold.
      {"x on a layout without an X axis",
       [](json &b) { kernel0(b)["cache"]["x"] = 8; },
       {k0 + ".cache.x is set, but only a layout with an X axis has x"}},
      {"max_seq_len on a paged layout",
       [](json &b) { kernel0(b)["cache"]["max_seq_len"] = 8; },
       {k0 + ".cache.max_seq_len is set, but a paged layout has "
             "block_size"}},
      {"block_size on a contiguous cache",
       [](json &b) {
         kernel0(b)["cache"]["layout"] = "contiguous";
         kernel0(b)["cache"]["max_seq_len"] = 8;
       },
       {k0 + ".cache.block_size is set, but this layout has max_seq_len"}},
      {"output_dtype on an append",
       [](json &b) { kernel0(b)["output_dtype"] = "bf16"; },
       {k0 + ".output_dtype is set, but only a gather has output_dtype"}},
      {"variants of different kinds",
       [](json &b) {
         b["kernels"][1]["kind"] = "fused_append";
         b["kernels"][1]["params"] = paramsFor("fused_append");
       },
       {"kernels[1] ('kv_append_scalar') clashes with kernel 'kv_append'"}},
  };
}

// Names the case in gtest's output instead of dumping its bytes.
void PrintTo(const Malformed &malformed, std::ostream *out) {
  *out << malformed.label;
}

class MalformedBundle : public ::testing::TestWithParam<Malformed> {};

TEST_P(MalformedBundle, RefusedNamingTheField) {
  const Malformed &malformed = GetParam();
  json bundle = standardBundle();
  malformed.mutate(bundle);
  kvrt_bundle *raw = reinterpret_cast<kvrt_bundle *>(0x1);
  EXPECT_EQ(load(bundle, &raw), KVRT_ERROR_INVALID_BUNDLE) << malformed.label;
  EXPECT_EQ(raw, nullptr);
  for (const std::string &fragment : malformed.fragments)
    EXPECT_THAT(kvrt_last_error(), HasSubstr(fragment)) << malformed.label;
}

INSTANTIATE_TEST_SUITE_P(EachField, MalformedBundle,
                         ::testing::ValuesIn(malformedCases()),
                         [](const ::testing::TestParamInfo<Malformed> &info) {
                           std::string name;
                           for (const char *c = info.param.label; *c; ++c)
                             name +=
                                 std::isalnum(static_cast<unsigned char>(*c))
                                     ? *c
                                     : '_';
                           return name;
                         });

TEST(Manifest, NotJson) {
  kvrt_bundle *raw = nullptr;
  const char text[] = "{\"format\": \"kvgen-bundle\", ";
  EXPECT_EQ(kvrt_bundle_load_memory(text, sizeof(text) - 1, &raw),
            KVRT_ERROR_INVALID_BUNDLE);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("not valid JSON"));
  EXPECT_EQ(kvrt_bundle_load_memory("", 0, &raw), KVRT_ERROR_INVALID_BUNDLE);
}

TEST(Manifest, LastErrorIsPerThreadAndSticky) {
  kvrt_bundle *raw = nullptr;
  json bundle = standardBundle();
  bundle["version"] = 9;
  ASSERT_EQ(load(bundle, &raw), KVRT_ERROR_INVALID_BUNDLE);
  std::string message = kvrt_last_error();
  // A success leaves the last failure in place.
  ASSERT_EQ(load(standardBundle(), &raw), KVRT_SUCCESS);
  kvrt_bundle_destroy(raw);
  EXPECT_EQ(message, kvrt_last_error());
}

} // namespace
