//===- HardeningTest.cpp - hostile bundles, paths and tensors -------------===//
//
// Inputs a fuzzer or a careless caller produces: each ends in a named status
// and a bounded, printable message, never a crash, a wild pointer or a load
// time that grows with the square of the bundle.
//
//===----------------------------------------------------------------------===//

#include "Fixtures.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

using namespace kvrt::test;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

kvrt_status loadText(const std::string &text) {
  kvrt_bundle *raw = nullptr;
  kvrt_status status = kvrt_bundle_load_memory(text.data(), text.size(), &raw);
  kvrt_bundle_destroy(raw);
  return status;
}

//===----------------------------------------------------------------------===//
// Bundles
//===----------------------------------------------------------------------===//

TEST(Hardening, DirectoryAsBundlePathIsAnIoError) {
  char path[] = "/tmp/kvrt-dir-XXXXXX";
  ASSERT_NE(mkdtemp(path), nullptr);
  kvrt_bundle *raw = nullptr;
  EXPECT_EQ(kvrt_bundle_load_file(path, &raw), KVRT_ERROR_IO)
      << kvrt_last_error();
  EXPECT_EQ(raw, nullptr);
  EXPECT_THAT(kvrt_last_error(), HasSubstr(path));
  EXPECT_THAT(kvrt_last_error(), HasSubstr("is a directory"));
  rmdir(path);
}

TEST(Hardening, DeeplyNestedParamsEntryIsNamedWithoutRecursion) {
  // The message used to dump() the extra entry: recursion as deep as the
  // nesting. Spliced in as text: nlohmann's parser is iterative.
  std::string text = standardBundle().dump();
  std::string nested(200000, '[');
  nested += std::string(200000, ']');
  std::string last = "\"value_cache_stride_dim\"";
  size_t params = text.find(last);
  ASSERT_NE(params, std::string::npos);
  text.insert(params + last.size(), "," + nested);
  EXPECT_EQ(loadText(text), KVRT_ERROR_INVALID_BUNDLE);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("a JSON array"));
}

TEST(Hardening, ExtraParamsEntryIsDescribed) {
  json bundle = standardBundle();
  bundle["kernels"][0]["params"].push_back({{"a", {1, 2, 3}}});
  EXPECT_EQ(loadText(bundle.dump()), KVRT_ERROR_INVALID_BUNDLE);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("first extra: a JSON object"));
}

TEST(Hardening, NulInsideAKernelNameIsEscaped) {
  json bundle = standardBundle();
  bundle["kernels"][0]["name"] = std::string("kv_append\0evil", 14);
  EXPECT_EQ(loadText(bundle.dump()), KVRT_ERROR_INVALID_BUNDLE);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("'kv_append\\x00evil'"));
}

TEST(Hardening, ControlBytesAreEscaped) {
  json bundle = standardBundle();
  bundle["kernels"][0]["kind"] = "ap\npend\x1b[31m";
  EXPECT_EQ(loadText(bundle.dump()), KVRT_ERROR_INVALID_BUNDLE);
  std::string message = kvrt_last_error();
  EXPECT_THAT(message, HasSubstr("'ap\\x0apend\\x1b[31m'"));
  for (unsigned char c : message)
    EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "byte " << int(c);
}

/// kvrt_last_error()'s documented bound (docs/BAD-INPUT.md), "[<status>
/// <file>:<line>]" included.
constexpr size_t kMaxMessageBytes = 2048;

/// The last error: bounded, one line of printable ASCII.
std::string boundedLastError() {
  std::string message = kvrt_last_error();
  EXPECT_LE(message.size(), kMaxMessageBytes);
  for (unsigned char c : message)
    EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "byte " << int(c);
  return message;
}

TEST(Hardening, MessagesAreBounded) {
  json bundle = standardBundle();
  bundle["kernels"][0]["kind"] = std::string(1 << 20, 'k');
  EXPECT_EQ(loadText(bundle.dump()), KVRT_ERROR_INVALID_BUNDLE);
  std::string message = boundedLastError();
  EXPECT_THAT(message, HasSubstr("(1048576 bytes)"));
}

/// The standard bundle's text cut inside its PTX, after `ptx` (no closing
/// quote): what a truncated download leaves.
std::string cutInsidePtx(const std::string &ptx) {
  std::string text = standardBundle().dump();
  std::string field = "\"ptx\":\"";
  size_t at = text.find(field);
  EXPECT_NE(at, std::string::npos);
  return text.substr(0, at + field.size()) + ptx;
}

// The parser's own message quoted everything it had read of the string (the
// rest of the PTX, unescaped: 2,096 bytes of message once bounded).
TEST(Hardening, JsonErrorQuotesAShortEscapedExcerpt) {
  std::string ptx =
      "// fake PTX " + std::string(3000, 'p') + " \xc3\xa9t\xc3\xa9";
  EXPECT_EQ(loadText(cutInsidePtx(ptx)), KVRT_ERROR_INVALID_BUNDLE);
  std::string message = boundedLastError();
  EXPECT_THAT(message, HasSubstr("bundle: not valid JSON"));
  EXPECT_THAT(message, HasSubstr("\\xc3\\xa9t\\xc3\\xa9'"));
  EXPECT_THAT(message, Not(HasSubstr("last read")));
  EXPECT_THAT(message, Not(HasSubstr(std::string(40, 'p'))));
  EXPECT_LT(message.size(), 400u) << message;
}

TEST(Hardening, JsonErrorEscapesAControlCharacter) {
  EXPECT_EQ(loadText(cutInsidePtx(".version 8.0\n.target sm_90\"}")),
            KVRT_ERROR_INVALID_BUNDLE);
  std::string message = boundedLastError();
  EXPECT_THAT(message, HasSubstr("control character"));
  EXPECT_THAT(message, HasSubstr(".version 8.0\\x0a'"));
}

TEST(Hardening, NonAsciiIsEscapedWithinTheBound) {
  // Each byte escapes to four: the bound holds after escaping.
  std::string ptx;
  for (int i = 0; i < 2000; ++i)
    ptx += "\xc3\xa9";
  EXPECT_EQ(loadText(cutInsidePtx(ptx)), KVRT_ERROR_INVALID_BUNDLE);
  EXPECT_THAT(boundedLastError(), HasSubstr("\\xc3\\xa9\\xc3\\xa9'"));
}

// JSON leaves a repeated key's meaning open; the parser kept the last one.
TEST(Hardening, DuplicateTopLevelKeyIsRefusedByName) {
  std::string text = standardBundle().dump();
  ASSERT_EQ(text[0], '{');
  text.insert(1, "\"version\":3,");
  EXPECT_EQ(loadText(text), KVRT_ERROR_INVALID_BUNDLE);
  EXPECT_THAT(boundedLastError(),
              HasSubstr("bundle: the manifest has the key 'version' twice"));
}

TEST(Hardening, DuplicateNestedKeyIsRefusedWithItsPath) {
  std::string text = standardBundle().dump();
  std::string cache = "\"cache\":{";
  size_t first = text.find(cache);
  size_t second = text.find(cache, first + 1);
  ASSERT_NE(second, std::string::npos);
  // kernels[1] is kv_append_scalar: its cache says paged_nhd, then paged_hnd.
  text.insert(second + cache.size(), "\"layout\":\"paged_hnd\",");
  EXPECT_EQ(loadText(text), KVRT_ERROR_INVALID_BUNDLE);
  EXPECT_THAT(boundedLastError(),
              HasSubstr("bundle: kernels[1].cache has the key 'layout' twice"));
}

TEST(Hardening, SameKeyInSiblingObjectsLoads) {
  // Every kernel has "name": keys repeat across objects, not within one.
  std::string text = standardBundle().dump();
  EXPECT_EQ(loadText(text), KVRT_SUCCESS) << kvrt_last_error();
}

TEST(Hardening, AnyBlockSizeLoads) {
  CacheConfig config;
  config.blockSize = 12;
  EXPECT_EQ(loadText(standardBundle(config).dump()), KVRT_SUCCESS)
      << kvrt_last_error();
  config.blockSize = 1;
  EXPECT_EQ(loadText(standardBundle(config).dump()), KVRT_SUCCESS)
      << kvrt_last_error();
}

struct PastLimit {
  const char *label;
  CacheConfig config;
  const char *fragment;
};

TEST(Hardening, DescriptionsPastTheContractLimitsAreRefused) {
  auto with = [](auto edit) {
    CacheConfig config;
    edit(config);
    return config;
  };
  const PastLimit cases[] = {
      {"block_size", with([](CacheConfig &c) { c.blockSize = (1 << 20) + 1; }),
       "cache.block_size is 1048577, past the limit of 1048576"},
      {"max_seq_len", with([](CacheConfig &c) {
         c.layout = "contiguous";
         c.blockSize = int64_t(1) << 62;
       }),
       "cache.max_seq_len is 4611686018427387904, past the limit of 1048576"},
      {"head_dim", with([](CacheConfig &c) { c.headDim = 1 << 17; }),
       "cache.head_dim is 131072, past the limit of 65536"},
      {"num_kv_heads", with([](CacheConfig &c) { c.heads = 100000; }),
       "cache.num_kv_heads is 100000, past the limit of 4096"},
      {"elements per token", with([](CacheConfig &c) {
         c.heads = 4096;
         c.headDim = 512;
       }),
       "num_kv_heads * head_dim is 2097152, past the limit of 1048576"},
  };
  for (const PastLimit &limit : cases) {
    EXPECT_EQ(loadText(standardBundle(limit.config).dump()),
              KVRT_ERROR_INVALID_BUNDLE)
        << limit.label;
    EXPECT_THAT(kvrt_last_error(), HasSubstr(limit.fragment)) << limit.label;
    EXPECT_THAT(kvrt_last_error(), HasSubstr("docs/CONTRACT.md"));
  }
}

/// The fastest of three loads of a bundle of `count` slot_mapping kernels.
double loadSeconds(int count) {
  std::vector<json> kernels;
  for (int i = 0; i < count; ++i)
    kernels.push_back(
        kernelJson("k" + std::to_string(i), "slot_mapping", "scalar"));
  std::string text = bundleJson(kernels).dump();
  double best = 1e9;
  for (int run = 0; run < 3; ++run) {
    auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(loadText(text), KVRT_SUCCESS) << kvrt_last_error();
    std::chrono::duration<double> elapsed =
        std::chrono::steady_clock::now() - start;
    best = std::min(best, elapsed.count());
  }
  return best;
}

TEST(Hardening, LoadTimeIsLinearInTheNumberOfKernels) {
  // 16x the kernels: about 16x the time when linear, 256x when quadratic.
  // Each size's fastest of a few loads, and a margin of 4x, so that a loaded
  // machine (or the sanitizers' allocator) does not fail a linear load; the
  // sizes are large enough that a quadratic term dominates.
  double small =
      std::min({loadSeconds(2000), loadSeconds(2000), loadSeconds(2000)});
  double large = std::min(loadSeconds(32000), loadSeconds(32000));
  EXPECT_LT(large / small, 64.0)
      << "2000 kernels: " << small << " s, 32000: " << large << " s";
}

TEST(Hardening, NewStatusNames) {
  EXPECT_STREQ(kvrt_status_name(KVRT_ERROR_INTERNAL), "KVRT_ERROR_INTERNAL");
  EXPECT_STREQ(kvrt_status_name(KVRT_ERROR_OUT_OF_MEMORY),
               "KVRT_ERROR_OUT_OF_MEMORY");
}

//===----------------------------------------------------------------------===//
// Addresses
//===----------------------------------------------------------------------===//

TEST_F(LaunchTest, ByteOffsetPastTheAddressLimitIsRefused) {
  keyCache.get()->byte_offset = uint64_t(1) << 62;
  expectRefused(
      append(), KVRT_ERROR_INVALID_ARGUMENT,
      {"key_cache: data (", "byte_offset (4611686018427387904)", "2^57"});
}

TEST_F(LaunchTest, ByteOffsetThatWrapsIsRefused) {
  // data + byte_offset wraps to just past data: a small, plausible pointer.
  uintptr_t data = reinterpret_cast<uintptr_t>(keyCache.data());
  keyCache.get()->byte_offset = ~uint64_t(0) - data + 1 + 64;
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key_cache: data (", "without wrapping 64 bits"});
}

TEST_F(LaunchTest, ExtentReachingPastTheAddressLimitIsRefused) {
  // The first element is in range, the strides reach past 2^57.
  int64_t far = int64_t(1) << 55;
  valueCache = HostTensor::strided(bf16(), {kBlocks, kBlockSize, kHeads, 1},
                                   {1, 1, 1, 1});
  valueCache.shapeRef() = {kBlocks, kBlockSize, kHeads, kHeadDim};
  valueCache.stridesRef() = {far, kHeads * kHeadDim, kHeadDim, 1};
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"value_cache: data (", "2^57"});
}

//===----------------------------------------------------------------------===//
// The ABI's 32-bit scalars and offsets (docs/KERNEL-ABI.md, "Limits")
//===----------------------------------------------------------------------===//

/// Moves `tensor` to a made-up address far above the heap: its strides
/// reach gigabytes, which from a heap address would overlap the other
/// tensors and be refused for that first. Nothing is dereferenced: the
/// launches below are refused.
static void placeFarAway(HostTensor &tensor) {
  tensor.get()->data = reinterpret_cast<void *>(uintptr_t(1) << 50);
  tensor.get()->byte_offset = 0;
}

TEST_F(LaunchTest, StridePastTheI32ScalarIsRefused) {
  // One block of V 2^31 elements from the next: every element is in range
  // of the address checks, but the stride does not fit the kernel's i32.
  valueCache = HostTensor::strided(bf16(), {kBlocks, kBlockSize, kHeads, 1},
                                   {1, 1, 1, 1});
  valueCache.shapeRef() = {kBlocks, kBlockSize, kHeads, kHeadDim};
  valueCache.stridesRef() = {int64_t(1) << 31, kHeads * kHeadDim, kHeadDim, 1};
  placeFarAway(valueCache);
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"value_cache_stride_block is 2147483648, past 2^31 - 1"});
}

TEST_F(LaunchTest, TokenSpanningPastTheI32OffsetIsRefused) {
  // Heads 2^31 elements apart: one token of K spans 2^31 + head_dim
  // elements, past what the kernels address within a token in 32 bits.
  key = HostTensor::strided(bf16(), {kTokens, kHeads, 1}, {1, 1, 1});
  key.shapeRef() = {kTokens, kHeads, kHeadDim};
  key.stridesRef() = {int64_t(1) << 32, int64_t(1) << 31, 1};
  placeFarAway(key);
  std::string span =
      std::to_string((kHeads - 1) * (int64_t(1) << 31) + kHeadDim);
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key: one token of it spans " + span +
                 " elements, past "
                 "2^31 - 1"});
}

TEST_F(LaunchTest, BlockSpanningPastTheI32OffsetIsRefused) {
  // Positions 2^30 elements apart: one block of K spans
  // (block_size - 1) * 2^30 + heads * head_dim elements.
  keyCache = HostTensor::strided(bf16(), {kBlocks, kBlockSize, kHeads, 1},
                                 {1, 1, 1, 1});
  keyCache.shapeRef() = {kBlocks, kBlockSize, kHeads, kHeadDim};
  keyCache.stridesRef() = {int64_t(1) << 32, int64_t(1) << 30, kHeadDim, 1};
  placeFarAway(keyCache);
  std::string span =
      std::to_string((kBlockSize - 1) * (int64_t(1) << 30) + kHeads * kHeadDim);
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key_cache: one block of it spans " + span +
                 " elements, past 2^31 - 1"});
}

TEST_F(LaunchTest, SlotMappingByteOffsetIsChecked) {
  slots.get()->byte_offset = uint64_t(1) << 60;
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"slot_mapping: data (", "2^57"});
}

} // namespace
