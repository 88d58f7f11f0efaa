//===- CopyBlocksTest.cpp - kvrt_copy_blocks on host memory, and refusals -===//
//
// Every refusal leaves the destination as it was: the test fills it with a
// poison byte and compares it whole after each refused call.
//
//===----------------------------------------------------------------------===//

#include "kvrt/kvrt.h"
#include "kvrt/test/TensorArg.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

using kvrt::test::TensorArg;
using ::testing::HasSubstr;

namespace {

constexpr DLDevice kCpu{kDLCPU, 0};
constexpr DLDataType kF32{kDLFloat, 32, 1};
constexpr DLDataType kI64{kDLInt, 64, 1};
constexpr int64_t kBlocks = 6, kBlockElems = 2 * 3 * 4; // [6, 2, 3, 4] f32
constexpr int64_t kBlockBytes = kBlockElems * 4;

struct CopyBlocksTest : ::testing::Test {
  std::vector<float> srcData = std::vector<float>(kBlocks * kBlockElems);
  std::vector<float> dstData = std::vector<float>(kBlocks * kBlockElems);
  std::vector<int64_t> pairs;
  TensorArg src, dst, mapping;

  void SetUp() override {
    std::iota(srcData.begin(), srcData.end(), 1.0f);
    std::memset(dstData.data(), 0x5a, dstData.size() * sizeof(float));
    src = TensorArg(srcData.data(), 0, kCpu, kF32, {kBlocks, 2, 3, 4}, {});
    dst = TensorArg(dstData.data(), 0, kCpu, kF32, {kBlocks, 2, 3, 4}, {});
    setPairs({{0, 3}, {5, 1}, {2, 2}});
  }
  void setPairs(std::vector<std::pair<int64_t, int64_t>> list) {
    pairs.clear();
    for (auto [s, d] : list)
      pairs.insert(pairs.end(), {s, d});
    mapping =
        TensorArg(pairs.data(), 0, kCpu, kI64, {int64_t(list.size()), 2}, {});
  }
  kvrt_status copy(int64_t blockBytes = kBlockBytes) {
    kvrt_copy_blocks_args args = KVRT_ARGS_INIT(kvrt_copy_blocks_args);
    args.src = src.get();
    args.dst = dst.get();
    args.block_bytes = blockBytes;
    args.block_mapping = mapping.get();
    return kvrt_copy_blocks(&args, nullptr);
  }
  /// Refused with `message`, and dst untouched.
  void expectRefused(const std::string &message,
                     int64_t blockBytes = kBlockBytes) {
    std::vector<float> before = dstData;
    EXPECT_EQ(copy(blockBytes), KVRT_ERROR_INVALID_ARGUMENT);
    EXPECT_THAT(kvrt_last_error(), HasSubstr(message));
    EXPECT_EQ(std::memcmp(before.data(), dstData.data(),
                          before.size() * sizeof(float)),
              0)
        << "a refused copy wrote dst";
  }
  bool blockEquals(int64_t dstBlock, int64_t srcBlock) const {
    return std::memcmp(&dstData[dstBlock * kBlockElems],
                       &srcData[srcBlock * kBlockElems], kBlockBytes) == 0;
  }
};

TEST_F(CopyBlocksTest, CopiesTheMappedBlocksAndNothingElse) {
  ASSERT_EQ(copy(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_TRUE(blockEquals(3, 0));
  EXPECT_TRUE(blockEquals(1, 5));
  EXPECT_TRUE(blockEquals(2, 2));
  std::vector<float> poison(kBlockElems);
  std::memset(poison.data(), 0x5a, kBlockBytes);
  for (int64_t block : {0, 4, 5})
    EXPECT_EQ(
        std::memcmp(&dstData[block * kBlockElems], poison.data(), kBlockBytes),
        0)
        << "block " << block << " was not in the mapping";
}

TEST_F(CopyBlocksTest, TakesPermutedBlocksLaidOutAlikeAndFloat8OverUint8) {
  // [6, 3, 2, 4] views of [6, 2, 3, 4] memory (vLLM's HND caches).
  src = TensorArg(srcData.data(), 0, kCpu, kF32, {kBlocks, 3, 2, 4},
                  {kBlockElems, 4, 12, 1});
  dst = TensorArg(dstData.data(), 0, kCpu, kF32, {kBlocks, 3, 2, 4},
                  {kBlockElems, 4, 12, 1});
  ASSERT_EQ(copy(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_TRUE(blockEquals(1, 5));
  // An fp8 cache kept as uint8 and a float8_e4m3fn view of another.
  src = TensorArg(srcData.data(), 0, kCpu, {kDLUInt, 8, 1}, {kBlocks, 96}, {});
  dst = TensorArg(dstData.data(), 0, kCpu, {10, 8, 1}, {kBlocks, 96}, {});
  setPairs({{4, 0}});
  ASSERT_EQ(copy(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_TRUE(blockEquals(0, 4));
}

TEST_F(CopyBlocksTest, AnEmptyMappingCopiesNothing) {
  setPairs({});
  std::vector<float> before = dstData;
  ASSERT_EQ(copy(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(before, dstData);
}

TEST_F(CopyBlocksTest, RefusesBadArgs) {
  EXPECT_EQ(kvrt_copy_blocks(nullptr, nullptr), KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("struct_size"));
  kvrt_copy_blocks_args args = {};
  args.src = src.get();
  EXPECT_EQ(kvrt_copy_blocks(&args, nullptr), KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("KVRT_ARGS_INIT"));
  src = TensorArg();
  expectRefused("src: NULL; a cache is blocks along dimension 0");
}

TEST_F(CopyBlocksTest, RefusesCachesThatAreNotBlocks) {
  dst.get()->device = DLDevice{kDLVulkan, 0};
  expectRefused("dst: f32 on device type 7:0; a cache is blocks along "
                "dimension 0 of whole-byte scalars, on cpu, cuda_host or cuda");
  SetUp();
  // A block with a gap: [6, 2, 3, 4] whose dimension 1 steps 16 elements.
  dst = TensorArg(dstData.data(), 0, kCpu, kF32, {3, 2, 3, 4},
                  {2 * kBlockElems, 16, 4, 1});
  expectRefused("dst: a block (dimensions 1..) is not contiguous");
  // Blocks that leave a gap between them (K of a [6, 2, ...] K/V tensor).
  dst = TensorArg(dstData.data(), 0, kCpu, kF32, {3, 2, 3, 4},
                  {2 * kBlockElems, 12, 4, 1});
  expectRefused("dst: dimension 0 has stride 48 but a block holds 24");
  // Blocks as the innermost dimension.
  src = TensorArg(srcData.data(), 0, kCpu, kF32, {4, kBlocks}, {1, 4});
  expectRefused("src: a block (dimensions 1..) is not contiguous: a stride "
                "of 4 where 1 would close the gap");
  SetUp();
  src.get()->dtype = DLDataType{kDLFloat, 4, 1};
  expectRefused("src: f4 on cpu:0; a cache is blocks");
  SetUp();
  src.get()->data = nullptr;
  expectRefused("src: its 6 blocks reach past 2^57 or from NULL");
}

TEST_F(CopyBlocksTest, RefusesBlocksOfAnotherLayoutOrSize) {
  dst.get()->dtype = DLDataType{kDLInt, 32, 1};
  expectRefused("dst: its blocks (i32) are not laid out as src's (f32)");
  SetUp();
  dst = TensorArg(dstData.data(), 0, kCpu, kF32, {kBlocks, 3, 2, 4}, {});
  expectRefused("are not laid out as src's");
  SetUp();
  expectRefused("block_bytes is 48 but a block of src and dst is 96 bytes", 48);
}

TEST_F(CopyBlocksTest, RefusesABadMapping) {
  mapping.get()->dtype = DLDataType{kDLInt, 32, 1};
  expectRefused("block_mapping: must be a contiguous int64 [n, 2]");
  SetUp();
  mapping.get()->device = DLDevice{kDLCUDA, 0};
  expectRefused("block_mapping: must be a contiguous int64 [n, 2]");
  SetUp();
  mapping = TensorArg(pairs.data(), 0, kCpu, kI64, {2, 2}, {1, 2});
  expectRefused("block_mapping: must be a contiguous int64 [n, 2]");
  SetUp();
  mapping = TensorArg(pairs.data(), 0, kCpu, kI64, {2, 3}, {});
  expectRefused("block_mapping: must be a contiguous int64 [n, 2]");
}

TEST_F(CopyBlocksTest, RefusesPairsOutOfRangeOrWritingABlockTwice) {
  // The good pairs first: nothing of them may be copied either.
  setPairs({{0, 1}, {1, 2}, {6, 0}});
  expectRefused("block_mapping: pair 2 names src block 6, outside [0, 6)");
  setPairs({{0, 1}, {1, -1}});
  expectRefused("block_mapping: pair 1 names dst block -1, outside [0, 6)");
  setPairs({{0, 4}, {1, 2}, {3, 4}});
  expectRefused("block_mapping: dst block 4 is written by two pairs");
}

TEST_F(CopyBlocksTest, RefusesOverlappingCachesAndTwoGpus) {
  // dst: blocks 1..5 of src's own memory.
  dst = TensorArg(srcData.data(), kBlockBytes, kCpu, kF32, {5, 2, 3, 4}, {});
  setPairs({{0, 1}});
  std::vector<float> before = srcData;
  EXPECT_EQ(copy(), KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("dst: shares bytes with src"));
  EXPECT_EQ(before, srcData);
  SetUp();
  // Refused before any driver is asked (there is none here).
  src.get()->device = DLDevice{kDLCUDA, 0};
  dst.get()->device = DLDevice{kDLCUDA, 1};
  expectRefused("dst: on cuda:1 but src on cuda:0");
}

} // namespace
