//===- CheckedTest.cpp - checked mode on the host path --------------------===//
//
// With checked mode on, a launch whose slots collide, leave the cache, or
// whose block table names a block past the cache is refused before anything
// runs, naming the first offending token; with it off, the same launch runs
// (the kernel does not detect duplicates: docs/CONTRACT.md).
//
//===----------------------------------------------------------------------===//

#include "Fixtures.h"

#include <cstdlib>

using namespace kvrt::test;

namespace {

class CheckedTest : public LaunchTest {
protected:
  void setSlots(std::vector<int64_t> values) {
    std::memcpy(slots.data(), values.data(), values.size() * sizeof(int64_t));
  }
  void setRequests(std::vector<int32_t> table, std::vector<int32_t> starts,
                   std::vector<int32_t> lens) {
    std::memcpy(blockTable.data(), table.data(), table.size() * 4);
    std::memcpy(queryStartLoc.data(), starts.data(), starts.size() * 4);
    std::memcpy(contextLens.data(), lens.data(), lens.size() * 4);
  }
  void check() {
    ASSERT_EQ(kvrt_bundle_set_checked(bundle.get(), 1), KVRT_SUCCESS);
  }
};

TEST_F(CheckedTest, OffByDefaultSoDuplicatesRun) {
  setSlots({0, 0, 1, 2, 3});
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(calls(), 1);
}

TEST_F(CheckedTest, DistinctSlotsRun) {
  check();
  setSlots({0, 5, -1, 11, -7});
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(calls(), 1);
}

TEST_F(CheckedTest, DuplicateSlotNamesBothTokens) {
  check();
  setSlots({4, 9, 1, 9, 2});
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"slot_mapping[3] = 9 is also used by token 1"});
}

TEST_F(CheckedTest, SlotPastTheCacheIsRefused) {
  check();
  setSlots({0, 1, 12, 3, 4}); // 3 blocks of 4 slots: 0..11
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"slot_mapping[2] = 12 is out of range", "12 slots",
                 "num_blocks 3 * block_size 4"});
}

TEST_F(CheckedTest, TurnedOffAgain) {
  check();
  ASSERT_EQ(kvrt_bundle_set_checked(bundle.get(), 0), KVRT_SUCCESS);
  setSlots({1, 1, 1, 1, 1});
  EXPECT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
}

TEST_F(CheckedTest, EnvironmentTurnsItOnAtLoad) {
  setenv("KVRT_CHECKED", "1", 1);
  kvrt_bundle *raw = nullptr;
  kvrt_status loaded = load(standardBundle(), &raw);
  unsetenv("KVRT_CHECKED");
  ASSERT_EQ(loaded, KVRT_SUCCESS) << kvrt_last_error();
  bundle.reset(raw);
  registerRecorders(raw);
  setSlots({3, 3, 0, 1, 2});
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"slot_mapping[1] = 3 is also used by token 0"});
}

TEST_F(CheckedTest, NullBundle) {
  EXPECT_EQ(kvrt_bundle_set_checked(nullptr, 1), KVRT_ERROR_INVALID_ARGUMENT);
}

TEST_F(CheckedTest, FusedDistinctSlotsRun) {
  check();
  // Request 0: tokens 0-2 at positions 0-2 of block 0; request 1: tokens 3-4
  // at positions 2-3 of block 1.
  setRequests({0, 2, 2, 1, 2, 2}, {0, 3, 5}, {0, 2});
  ASSERT_EQ(fused(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(calls(), 1);
}

TEST_F(CheckedTest, FusedDuplicateSlotIsRefused) {
  check();
  // Request 1 shares block 0: its position 2 is request 0's slot 2.
  setRequests({0, 2, 2, 0, 2, 2}, {0, 3, 5}, {0, 2});
  expectRefused(fused(), KVRT_ERROR_INVALID_ARGUMENT,
                {"token 3 (request 1, position 2) writes slot 2, also used "
                 "by token 2"});
}

TEST_F(CheckedTest, FusedBlockPastTheCacheIsRefused) {
  check();
  setRequests({0, 2, 2, 3, 2, 2}, {0, 3, 5}, {0, 2});
  expectRefused(fused(), KVRT_ERROR_INVALID_ARGUMENT,
                {"block_table[1][0] = 3 (token 3) is past the cache's "
                 "num_blocks (3)"});
}

// What the kernel drops or moves without a word, refused by name: a
// position past the block-table row, a negative context length, a negative
// or decreasing query_start_loc.
TEST_F(CheckedTest, FusedPositionPastTheRowIsRefused) {
  check();
  // Request 1 at context 11: positions 11 and 12, and 12 / 4 = column 3 of a
  // row of 3.
  setRequests({0, 2, 2, 1, 2, 2}, {0, 3, 5}, {0, 11});
  expectRefused(fused(), KVRT_ERROR_INVALID_ARGUMENT,
                {"token 4 (request 1, position 12 = context_lens[1] 11 + 1) "
                 "is past its block_table row: block 3 of "
                 "max_blocks_per_req 3"});
}

TEST_F(CheckedTest, FusedNegativeContextLensIsRefused) {
  check();
  setRequests({0, 2, 2, 1, 2, 2}, {0, 3, 5}, {0, -1});
  expectRefused(fused(), KVRT_ERROR_INVALID_ARGUMENT,
                {"context_lens[1] = -1 is negative"});
}

TEST_F(CheckedTest, FusedDecreasingQueryStartLocIsRefused) {
  check();
  setRequests({0, 2, 2, 1, 2, 2}, {0, 3, 2}, {0, 2});
  expectRefused(fused(), KVRT_ERROR_INVALID_ARGUMENT,
                {"query_start_loc[2] = 2 is below query_start_loc[1] = 3"});
}

TEST_F(CheckedTest, FusedNegativeQueryStartLocIsRefused) {
  check();
  setRequests({0, 2, 2, 1, 2, 2}, {-1, 3, 5}, {0, 2});
  expectRefused(fused(), KVRT_ERROR_INVALID_ARGUMENT,
                {"query_start_loc[0] = -1 is negative"});
}

} // namespace
