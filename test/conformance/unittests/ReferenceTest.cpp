//===- ReferenceTest.cpp - The reference against hand-computed values -----===//
//
// Every expected offset here is a number worked out by hand for a tiny cache
// (3 blocks of 4 positions, 2 heads, head_dim 8), not a formula, so the
// reference's index math is checked against something it does not share.
//
//===----------------------------------------------------------------------===//

#include "conformance/Reference.h"
#include "conformance/Float16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

using namespace kvgen::conformance;

namespace {

constexpr uint32_t kPoison = 0xdeadbeef;

Description tiny(Layout layout, DType source = DType::F32,
                 DType cache = DType::F32) {
  Description desc;
  desc.name = "tiny";
  desc.layout = layout;
  desc.blockSize = 4;
  desc.numKvHeads = 2;
  desc.headDim = 8;
  desc.sourceDtype = source;
  desc.cacheDtype = cache;
  return desc;
}

/// K/V [tokens, 2, 8] of f32 with value 1000 * which + 100 * t + 10 * h + d
/// (+ 1), so every written element says where it came from.
struct Rows {
  std::vector<float> key, value;
  TensorView keyView, valueView;
  explicit Rows(int64_t tokens) : key(tokens * 16), value(tokens * 16) {
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t d = 0; d < 8; ++d) {
          key[t * 16 + h * 8 + d] = 100.0f * t + 10.0f * h + d + 1;
          value[t * 16 + h * 8 + d] = 1000.0f + 100.0f * t + 10.0f * h + d + 1;
        }
    keyView = TensorView::compact(key.data(), DType::F32, {tokens, 2, 8});
    valueView = TensorView::compact(value.data(), DType::F32, {tokens, 2, 8});
  }
};

struct Caches {
  std::vector<uint32_t> key, value;
  TensorView keyView, valueView;
  Caches(const Description &desc, int64_t numBlocks) {
    std::vector<int64_t> keyShape = cacheShape(desc, CacheSide::Key, numBlocks);
    std::vector<int64_t> valueShape =
        cacheShape(desc, CacheSide::Value, numBlocks);
    int64_t keyCount = 1, valueCount = 1;
    for (int64_t s : keyShape)
      keyCount *= s;
    for (int64_t s : valueShape)
      valueCount *= s;
    key.assign(keyCount, kPoison);
    value.assign(valueCount, kPoison);
    keyView = TensorView::compact(key.data(), DType::F32, keyShape);
    valueView = TensorView::compact(value.data(), DType::F32, valueShape);
  }
};

/// Checks that `cache` holds exactly `written` (offset -> value) and poison
/// everywhere else.
void expectExactly(const std::vector<uint32_t> &cache,
                   const std::map<int64_t, float> &written, const char *what) {
  for (size_t i = 0; i < cache.size(); ++i) {
    auto it = written.find(static_cast<int64_t>(i));
    if (it == written.end())
      ASSERT_EQ(cache[i], kPoison)
          << what << " element " << i << " was written";
    else
      ASSERT_EQ(bitsToFloat(cache[i]), it->second) << what << " element " << i;
  }
}

// Token 0 goes to slot 6 (block 1, pos 2), token 1 to slot 11 (block 2,
// pos 3). For each layout the expected flat offsets of (block, head, pos, d)
// are spelled out per element below.
const int64_t kSlots[] = {6, 11};

TEST(ReferenceTest, ContiguousOffsets) {
  // [batch 3, H 2, max_seq_len 4, D 8]: (b, h, p, d) at 64b + 32h + 8p + d.
  Description desc = tiny(Layout::Contiguous);
  Rows rows(2);
  Caches caches(desc, 3);
  appendReference(desc, rows.keyView, rows.valueView, kSlots, caches.keyView,
                  caches.valueView);
  std::map<int64_t, float> key, value;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t d = 0; d < 8; ++d) {
      key[64 + 32 * h + 16 + d] = 10.0f * h + d + 1;        // b1 p2
      key[128 + 32 * h + 24 + d] = 100 + 10.0f * h + d + 1; // b2 p3
      value[64 + 32 * h + 16 + d] = 1000 + 10.0f * h + d + 1;
      value[128 + 32 * h + 24 + d] = 1100 + 10.0f * h + d + 1;
    }
  expectExactly(caches.key, key, "key");
  expectExactly(caches.value, value, "value");
}

TEST(ReferenceTest, PagedNhdOffsets) {
  // [nb 3, bs 4, H 2, D 8]: (b, p, h, d) at 64b + 16p + 8h + d.
  Description desc = tiny(Layout::PagedNHD);
  Rows rows(2);
  Caches caches(desc, 3);
  appendReference(desc, rows.keyView, rows.valueView, kSlots, caches.keyView,
                  caches.valueView);
  std::map<int64_t, float> key, value;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t d = 0; d < 8; ++d) {
      key[64 + 32 + 8 * h + d] = 10.0f * h + d + 1;
      key[128 + 48 + 8 * h + d] = 100 + 10.0f * h + d + 1;
      value[64 + 32 + 8 * h + d] = 1000 + 10.0f * h + d + 1;
      value[128 + 48 + 8 * h + d] = 1100 + 10.0f * h + d + 1;
    }
  expectExactly(caches.key, key, "key");
  expectExactly(caches.value, value, "value");
}

TEST(ReferenceTest, PagedHndOffsets) {
  // [nb 3, H 2, bs 4, D 8]: (b, h, p, d) at 64b + 32h + 8p + d.
  Description desc = tiny(Layout::PagedHND);
  Rows rows(2);
  Caches caches(desc, 3);
  appendReference(desc, rows.keyView, rows.valueView, kSlots, caches.keyView,
                  caches.valueView);
  std::map<int64_t, float> key, value;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t d = 0; d < 8; ++d) {
      key[64 + 32 * h + 16 + d] = 10.0f * h + d + 1;
      key[128 + 32 * h + 24 + d] = 100 + 10.0f * h + d + 1;
      value[64 + 32 * h + 16 + d] = 1000 + 10.0f * h + d + 1;
      value[128 + 32 * h + 24 + d] = 1100 + 10.0f * h + d + 1;
    }
  expectExactly(caches.key, key, "key");
  expectExactly(caches.value, value, "value");
}

TEST(ReferenceTest, VllmVectorizedOffsets) {
  // f32: x = 4. Key [nb 3, H 2, D/x 2, bs 4, x 4]: (b, h, d / 4, p, d % 4) at
  // 64b + 32h + 16(d / 4) + 4p + d % 4. Value [nb 3, H 2, D 8, bs 4]:
  // (b, h, d, p) at 64b + 32h + 4d + p.
  Description desc = tiny(Layout::VllmVectorized);
  ASSERT_EQ(desc.x(), 4);
  Rows rows(2);
  Caches caches(desc, 3);
  appendReference(desc, rows.keyView, rows.valueView, kSlots, caches.keyView,
                  caches.valueView);
  std::map<int64_t, float> key, value;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t d = 0; d < 8; ++d) {
      key[64 + 32 * h + 16 * (d / 4) + 8 + d % 4] = 10.0f * h + d + 1;
      key[128 + 32 * h + 16 * (d / 4) + 12 + d % 4] = 100 + 10.0f * h + d + 1;
      value[64 + 32 * h + 4 * d + 2] = 1000 + 10.0f * h + d + 1;
      value[128 + 32 * h + 4 * d + 3] = 1100 + 10.0f * h + d + 1;
    }
  expectExactly(caches.key, key, "key");
  expectExactly(caches.value, value, "value");
}

TEST(ReferenceTest, VllmVectorizedXFollowsCacheDtype) {
  EXPECT_EQ(tiny(Layout::VllmVectorized, DType::F32, DType::F32).x(), 4);
  EXPECT_EQ(tiny(Layout::VllmVectorized, DType::F32, DType::BF16).x(), 8);
  EXPECT_EQ(tiny(Layout::VllmVectorized, DType::F16, DType::F16).x(), 8);
  Description desc = tiny(Layout::VllmVectorized, DType::F16, DType::F16);
  EXPECT_EQ(cacheShape(desc, CacheSide::Key, 3),
            (std::vector<int64_t>{3, 2, 1, 4, 8}));
  EXPECT_EQ(cacheShape(desc, CacheSide::Value, 3),
            (std::vector<int64_t>{3, 2, 8, 4}));
}

TEST(ReferenceTest, DualStackedOffsets) {
  // [nb 3, 2, H 2, bs 4, D 8]: K (b, 0, h, p, d) at 128b + 32h + 8p + d and
  // V at the same + 64.
  Description desc = tiny(Layout::DualStacked);
  Rows rows(2);
  Caches caches(desc, 3);
  appendReference(desc, rows.keyView, rows.valueView, kSlots, caches.keyView,
                  TensorView());
  std::map<int64_t, float> kv;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t d = 0; d < 8; ++d) {
      kv[128 + 32 * h + 16 + d] = 10.0f * h + d + 1;
      kv[256 + 32 * h + 24 + d] = 100 + 10.0f * h + d + 1;
      kv[128 + 64 + 32 * h + 16 + d] = 1000 + 10.0f * h + d + 1;
      kv[256 + 64 + 32 * h + 24 + d] = 1100 + 10.0f * h + d + 1;
    }
  expectExactly(caches.key, kv, "kv");
}

TEST(ReferenceTest, NegativeAndOutOfRangeSlotsWriteNothing) {
  for (Layout layout : {Layout::Contiguous, Layout::PagedNHD, Layout::PagedHND,
                        Layout::VllmVectorized, Layout::DualStacked}) {
    Description desc = tiny(layout);
    Rows rows(5);
    Caches caches(desc, 3);
    // 12 is block 3 of 3 blocks: the first slot past the end.
    const int64_t slots[] = {-1, -4, 12, 15, int64_t(1) << 40};
    appendReference(desc, rows.keyView, rows.valueView, slots, caches.keyView,
                    caches.valueView);
    expectExactly(caches.key, {}, layoutName(layout));
    expectExactly(caches.value, {}, layoutName(layout));
  }
}

TEST(ReferenceTest, ReadsStridedSources) {
  // K stored [H, T, D]: (t, h, d) of the view sits at h * 16 + t * 8 + d.
  Description desc = tiny(Layout::PagedNHD);
  std::vector<float> stored(32);
  for (int i = 0; i < 32; ++i)
    stored[i] = static_cast<float>(i + 1);
  TensorView key{stored.data(), DType::F32, {2, 2, 8}, {8, 16, 1}};
  Caches caches(desc, 3);
  const int64_t slots[] = {1, -1}; // token 0 only, block 0 pos 1
  appendReference(desc, key, key, slots, caches.keyView, caches.valueView);
  std::map<int64_t, float> want;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t d = 0; d < 8; ++d)
      want[16 + 8 * h + d] = static_cast<float>(h * 16 + d + 1);
  expectExactly(caches.key, want, "key");
}

TEST(ReferenceTest, CastsNarrowWithRoundToNearestEven) {
  Description desc = tiny(Layout::PagedNHD, DType::F32, DType::BF16);
  // Two ties (to even, one down, one up) and a value that overflows.
  std::vector<float> key(16, 1.0f);
  key[0] = 1.0f + std::ldexp(1.0f, -8);
  key[1] = 1.0f + 3 * std::ldexp(1.0f, -8);
  key[2] = std::numeric_limits<float>::max();
  TensorView view = TensorView::compact(key.data(), DType::F32, {1, 2, 8});
  std::vector<uint16_t> cache(3 * 4 * 2 * 8, 0xaaaa);
  TensorView cacheView =
      TensorView::compact(cache.data(), DType::BF16, {3, 4, 2, 8});
  const int64_t slots[] = {0};
  appendReference(desc, view, view, slots, cacheView, cacheView);
  EXPECT_EQ(cache[0], 0x3f80);
  EXPECT_EQ(cache[1], 0x3f82);
  EXPECT_EQ(cache[2], 0x7f80);
  EXPECT_EQ(cache[3], 0x3f80);
  EXPECT_EQ(cache[16], 0xaaaa);
}

TEST(ReferenceTest, CastsWidenExactly) {
  Description desc = tiny(Layout::PagedNHD, DType::F16, DType::F32);
  std::vector<uint16_t> key(16, 0x3c00);
  key[0] = 0x0001; // smallest subnormal half
  key[1] = 0xfbff; // -65504
  TensorView view = TensorView::compact(key.data(), DType::F16, {1, 2, 8});
  std::vector<uint32_t> cache(3 * 4 * 2 * 8, kPoison);
  TensorView cacheView =
      TensorView::compact(cache.data(), DType::F32, {3, 4, 2, 8});
  const int64_t slots[] = {0};
  appendReference(desc, view, view, slots, cacheView, cacheView);
  EXPECT_EQ(bitsToFloat(cache[0]), std::ldexp(1.0f, -24));
  EXPECT_EQ(bitsToFloat(cache[1]), -65504.0f);
  EXPECT_EQ(bitsToFloat(cache[2]), 1.0f);
}

TEST(ReferenceTest, SameDtypeIsABitCopy) {
  // A bf16 -> bf16 append moves bits; even a NaN payload survives.
  EXPECT_EQ(convertElement(0x7f81, DType::BF16, DType::BF16), 0x7f81u);
  EXPECT_EQ(convertElement(0x7c01, DType::F16, DType::F16), 0x7c01u);
  EXPECT_EQ(convertElement(0x00000001, DType::F32, DType::F32), 1u);
}

TEST(ReferenceTest, CacheCoordInvertsCacheIndex) {
  for (Layout layout : {Layout::Contiguous, Layout::PagedNHD, Layout::PagedHND,
                        Layout::VllmVectorized, Layout::DualStacked}) {
    Description desc = tiny(layout);
    for (CacheSide side : {CacheSide::Key, CacheSide::Value}) {
      Index index = cacheIndex(desc, side, 2, 1, 3, 6);
      CacheCoord c = cacheCoord(desc, side, index);
      EXPECT_EQ(c.side, side) << layoutName(layout);
      EXPECT_EQ(c.block, 2) << layoutName(layout);
      EXPECT_EQ(c.head, 1) << layoutName(layout);
      EXPECT_EQ(c.pos, 3) << layoutName(layout);
      EXPECT_EQ(c.d, 6) << layoutName(layout);
    }
  }
}

//===----------------------------------------------------------------------===//
// Slot mapping
//===----------------------------------------------------------------------===//

struct Batch {
  std::vector<int32_t> table, starts, lens;
  int64_t stride, maxBlocks;
  SlotMappingInputs inputs() const {
    SlotMappingInputs in;
    in.blockTable = table.data();
    in.blockTableStride = stride;
    in.maxBlocksPerReq = maxBlocks;
    in.queryStartLoc = starts.data();
    in.contextLens = lens.data();
    in.numReqs = static_cast<int64_t>(lens.size());
    return in;
  }
};

TEST(ReferenceTest, SlotMappingDecodeIsPreIncrement) {
  // Block size 16, one row [7, 3] per request. The new token goes at
  // position context_len: 0 -> block 7 pos 0; 15 -> block 7 pos 15; 16 opens
  // the second block: block 3 pos 0; 31 -> block 3 pos 15.
  Batch b{{7, 3, 7, 3, 7, 3, 7, 3}, {0, 1, 2, 3, 4}, {0, 15, 16, 31}, 2, 2};
  EXPECT_EQ(slotMappingReference(16, b.inputs(), 4),
            (std::vector<int64_t>{112, 127, 48, 63}));
}

TEST(ReferenceTest, SlotMappingPrefillCrossesBlocks) {
  // Request 0: 3 new tokens after 14 cached ones (positions 14, 15, 16);
  // request 1: a fresh 2-token prompt in block 5.
  Batch b{{7, 3, 5, 9}, {0, 3, 5}, {14, 0}, 2, 2};
  EXPECT_EQ(slotMappingReference(16, b.inputs(), 5),
            (std::vector<int64_t>{126, 127, 48, 80, 81}));
}

TEST(ReferenceTest, SlotMappingPaddingAndOverflowGiveMinusOne) {
  // Request 0 runs past its 2-entry row (positions 31, 32); request 1 hits a
  // negative entry; tokens 4 and 5 are padding past query_start_loc[2] = 4.
  Batch b{{7, 3, -1, 4}, {0, 2, 4}, {31, 0}, 2, 2};
  EXPECT_EQ(slotMappingReference(16, b.inputs(), 6),
            (std::vector<int64_t>{63, -1, -1, -1, -1, -1}));
}

TEST(ReferenceTest, SlotMappingHonoursRowStride) {
  // Rows 3 entries apart, 2 of them used: request 1's row starts at index 3.
  Batch b{{7, 3, 99, 5, 6, 99}, {0, 1, 2}, {0, 17}, 3, 2};
  EXPECT_EQ(slotMappingReference(16, b.inputs(), 2),
            (std::vector<int64_t>{112, 97}));
}

} // namespace
