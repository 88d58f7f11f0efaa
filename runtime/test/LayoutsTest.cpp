//===- LayoutsTest.cpp - the layout vocabulary and what it implies --------===//
//
// Each layout is one line of include/kvgen/ABI/Layouts.def: its axes. These
// tests state, in their own spelling, the shapes docs/KERNEL-ABI.md gives
// each layout and the traits the compiler and kvrt derive from the axes, so
// that a wrong line of Layouts.def (or a wrong derivation) fails here.
//
//===----------------------------------------------------------------------===//

#include "Validation.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace kvrt::impl;

namespace {

struct Expected {
  const char *name;
  /// docs/KERNEL-ABI.md's shapes, for block_size (max_seq_len) 16, 4 heads,
  /// head_dim 64 and x 8 of bf16; -1 where the caller binds it.
  std::vector<int64_t> key, value;
  const char *keyText, *valueText;
  bool paged, stacked, hasX, valueChunkContiguous, tokenMajor;
};

const std::vector<Expected> &expectations() {
  static const std::vector<Expected> all = {
      {"contiguous",
       {-1, 4, 16, 64},
       {-1, 4, 16, 64},
       "[batch, num_kv_heads, max_seq_len, head_dim] (contiguous)",
       "[batch, num_kv_heads, max_seq_len, head_dim] (contiguous)",
       /*paged=*/false,
       /*stacked=*/false,
       /*hasX=*/false,
       /*valueChunkContiguous=*/true,
       /*tokenMajor=*/false},
      {"paged_nhd",
       {-1, 16, 4, 64},
       {-1, 16, 4, 64},
       "[num_blocks, block_size, num_kv_heads, head_dim] (paged_nhd)",
       "[num_blocks, block_size, num_kv_heads, head_dim] (paged_nhd)",
       true,
       false,
       false,
       true,
       true},
      {"paged_hnd",
       {-1, 4, 16, 64},
       {-1, 4, 16, 64},
       "[num_blocks, num_kv_heads, block_size, head_dim] (paged_hnd)",
       "[num_blocks, num_kv_heads, block_size, head_dim] (paged_hnd)",
       true,
       false,
       false,
       true,
       false},
      {"vllm_vectorized",
       {-1, 4, 8, 16, 8},
       {-1, 4, 64, 16},
       "[num_blocks, num_kv_heads, head_dim/x, block_size, x] "
       "(vllm_vectorized key cache)",
       "[num_blocks, num_kv_heads, head_dim, block_size] (vllm_vectorized "
       "value cache)",
       true,
       false,
       true,
       false,
       false},
      {"dual_stacked",
       {-1, 2, 4, 16, 64},
       {-1, 2, 4, 16, 64},
       "[num_blocks, 2, num_kv_heads, block_size, head_dim] (dual_stacked)",
       "[num_blocks, 2, num_kv_heads, block_size, head_dim] (dual_stacked)",
       true,
       true,
       false,
       true,
       false},
  };
  return all;
}

KernelDescription describe(kvgen::abi::Layout layout) {
  KernelDescription kernel;
  kernel.name = "k";
  kernel.kind = KernelKind::Append;
  kernel.cache.layout = layout;
  kernel.cache.blockSize = 16;
  kernel.cache.numKvHeads = 4;
  kernel.cache.headDim = 64;
  kernel.cache.x = kvgen::abi::layoutInfo(layout).hasX() ? 8 : 0;
  return kernel;
}

std::vector<int64_t> dims(const TensorSpec &spec) {
  return std::vector<int64_t>(spec.dims, spec.dims + spec.rank);
}

TEST(Layouts, EveryLayoutIsExpected) {
  ASSERT_EQ(kvgen::abi::kNumLayouts, expectations().size());
  for (size_t i = 0; i < kvgen::abi::kNumLayouts; ++i)
    EXPECT_STREQ(kvgen::abi::layoutName(static_cast<kvgen::abi::Layout>(i)),
                 expectations()[i].name);
}

TEST(Layouts, AxesGiveTheDocumentedShapes) {
  for (const Expected &e : expectations()) {
    SCOPED_TRACE(e.name);
    kvgen::abi::Layout layout;
    ASSERT_TRUE(kvgen::abi::parseLayout(e.name, &layout));
    OperationSpecs specs = makeSpecs(describe(layout));
    EXPECT_EQ(dims(specs[kvgen::abi::Param::KeyCache]), e.key);
    EXPECT_EQ(dims(specs[kvgen::abi::Param::ValueCache]), e.value);
    EXPECT_STREQ(specs[kvgen::abi::Param::KeyCache].shapeText, e.keyText);
    EXPECT_STREQ(specs[kvgen::abi::Param::ValueCache].shapeText, e.valueText);
  }
}

TEST(Layouts, AxesGiveTheTraits) {
  for (const Expected &e : expectations()) {
    SCOPED_TRACE(e.name);
    kvgen::abi::Layout layout;
    ASSERT_TRUE(kvgen::abi::parseLayout(e.name, &layout));
    const kvgen::abi::LayoutInfo &info = kvgen::abi::layoutInfo(layout);
    EXPECT_EQ(info.id, layout);
    EXPECT_EQ(info.paged(), e.paged);
    EXPECT_EQ(info.stacked(), e.stacked);
    EXPECT_EQ(info.hasX(), e.hasX);
    EXPECT_TRUE(info.chunkContiguous(/*isValue=*/false));
    EXPECT_EQ(info.chunkContiguous(/*isValue=*/true), e.valueChunkContiguous);
    EXPECT_EQ(info.tokenMajor(), e.tokenMajor);
    EXPECT_STREQ(info.blocksName(), e.paged ? "num_blocks" : "batch");
    EXPECT_STREQ(info.tokensName(), e.paged ? "block_size" : "max_seq_len");
  }
}

TEST(Layouts, UnknownNamesAreRefused) {
  kvgen::abi::Layout layout = kvgen::abi::Layout{};
  for (const char *name : {"", "bogus", "PagedNHD", "paged_nhd ", "nhd"})
    EXPECT_FALSE(kvgen::abi::parseLayout(name, &layout)) << name;
}

TEST(Layouts, MalformedAxesAreRefused) {
  using kvgen::abi::Axis;
  kvgen::abi::LayoutInfo good = kvgen::abi::layoutInfo(kvgen::abi::Layout{});
  EXPECT_TRUE(kvgen::abi::isWellFormed(good));
  kvgen::abi::LayoutInfo noHead = good;
  noHead.value =
      kvgen::abi::layout_axes::list(Axis::Batch, Axis::Pos, Axis::Dim);
  EXPECT_FALSE(kvgen::abi::isWellFormed(noHead));
  kvgen::abi::LayoutInfo xNotInnermost = good;
  xNotInnermost.key = kvgen::abi::layout_axes::list(
      Axis::Batch, Axis::Head, Axis::X, Axis::Pos, Axis::DimOverX);
  EXPECT_FALSE(kvgen::abi::isWellFormed(xNotInnermost));
  kvgen::abi::LayoutInfo mixedBlocks = good;
  mixedBlocks.key = kvgen::abi::layout_axes::list(Axis::Block, Axis::Head,
                                                  Axis::Pos, Axis::Dim);
  EXPECT_FALSE(kvgen::abi::isWellFormed(mixedBlocks));
}

} // namespace
