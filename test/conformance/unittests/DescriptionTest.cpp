//===- DescriptionTest.cpp - kv IR text and the matrix's coverage ---------===//

#include "conformance/Description.h"
#include "conformance/Conformance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <tuple>

using namespace kvgen::conformance;

namespace {

Description make(Kind kind, Layout layout, int64_t blockSize, DType source,
                 DType cache) {
  Description desc;
  desc.name = "kv_op";
  desc.kind = kind;
  desc.layout = layout;
  desc.blockSize = blockSize;
  desc.sourceDtype = source;
  desc.cacheDtype = cache;
  return desc;
}

TEST(DescriptionTest, AppendText) {
  EXPECT_EQ(make(Kind::Append, Layout::PagedNHD, 16, DType::BF16, DType::BF16)
                .toMlir(),
            "kv.append @kv_op : !kv.cache<layout = paged_nhd, block_size = 16, "
            "num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16");
}

TEST(DescriptionTest, FusedAppendText) {
  EXPECT_EQ(
      make(Kind::FusedAppend, Layout::VllmVectorized, 32, DType::F32,
           DType::F16)
          .toMlir(),
      "kv.fused_append @kv_op : !kv.cache<layout = vllm_vectorized, "
      "block_size = 32, num_kv_heads = 8, head_dim = 128, dtype = f16> from "
      "f32");
}

TEST(DescriptionTest, SlotMappingTextHasNoSourceType) {
  EXPECT_EQ(
      make(Kind::SlotMapping, Layout::DualStacked, 64, DType::F32, DType::BF16)
          .toMlir(),
      "kv.slot_mapping @kv_op : !kv.cache<layout = dual_stacked, "
      "block_size = 64, num_kv_heads = 8, head_dim = 128, dtype = bf16>");
}

TEST(DescriptionTest, ContiguousUsesMaxSeqLen) {
  Description desc =
      make(Kind::Append, Layout::Contiguous, 256, DType::F16, DType::F16);
  desc.headDim = 64;
  EXPECT_EQ(desc.toMlir(),
            "kv.append @kv_op : !kv.cache<layout = contiguous, max_seq_len = "
            "256, num_kv_heads = 8, head_dim = 64, dtype = f16> from f16");
}

TEST(DescriptionTest, KernelNamesIncludeScalarVariant) {
  Description append =
      make(Kind::Append, Layout::PagedNHD, 16, DType::BF16, DType::BF16);
  EXPECT_EQ(append.kernelNames(),
            (std::vector<std::string>{"kv_op", "kv_op_scalar"}));
  Description slots =
      make(Kind::SlotMapping, Layout::PagedNHD, 16, DType::BF16, DType::BF16);
  EXPECT_EQ(slots.kernelNames(), (std::vector<std::string>{"kv_op"}));
}

TEST(DescriptionTest, ModuleHoldsEveryOpOnce) {
  std::vector<Description> matrix = conformanceMatrix();
  std::string text = toMlirModule(matrix);
  EXPECT_EQ(text.rfind("module {\n", 0), 0u);
  EXPECT_EQ(text.substr(text.size() - 2), "}\n");
  for (const Description &desc : matrix) {
    std::string op = desc.toMlir() + "\n";
    size_t at = text.find(op);
    ASSERT_NE(at, std::string::npos) << desc.name;
    EXPECT_EQ(text.find(op, at + 1), std::string::npos) << desc.name;
  }
}

TEST(DescriptionTest, MatrixIsAFewHundredUniqueValidSymbols) {
  std::vector<Description> matrix = conformanceMatrix();
  EXPECT_GE(matrix.size(), 200u);
  EXPECT_LE(matrix.size(), 500u);
  std::set<std::string> names;
  for (const Description &desc : matrix) {
    EXPECT_TRUE(names.insert(desc.name).second) << "duplicate " << desc.name;
    ASSERT_FALSE(desc.name.empty());
    EXPECT_TRUE(std::isalpha(static_cast<unsigned char>(desc.name[0])));
    for (char c : desc.name)
      EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '_')
          << desc.name;
  }
}

TEST(DescriptionTest, MatrixCoversEveryAxisPerLayout) {
  std::vector<Description> matrix = conformanceMatrix();
  const Layout layouts[] = {Layout::Contiguous, Layout::PagedNHD,
                            Layout::PagedHND, Layout::VllmVectorized,
                            Layout::DualStacked};
  const std::pair<DType, DType> pairs[] = {
      {DType::F32, DType::F32},   {DType::F16, DType::F16},
      {DType::BF16, DType::BF16}, {DType::F32, DType::BF16},
      {DType::BF16, DType::F32},  {DType::F32, DType::F16}};
  for (Layout layout : layouts) {
    std::set<std::pair<DType, DType>> seenPairs;
    std::set<int64_t> heads, dims, sizes;
    std::set<std::tuple<int64_t, int64_t, int64_t>> triples;
    for (const Description &d : matrix) {
      if (d.layout != layout || d.kind != Kind::Append ||
          d.name.rfind("gpu_", 0) == 0)
        continue;
      seenPairs.insert({d.sourceDtype, d.cacheDtype});
      heads.insert(d.numKvHeads);
      dims.insert(d.headDim);
      sizes.insert(d.blockSize);
      triples.insert({d.numKvHeads, d.headDim, d.blockSize});
    }
    for (auto pair : pairs)
      EXPECT_TRUE(seenPairs.count(pair))
          << layoutName(layout) << " " << dtypeName(pair.first) << " -> "
          << dtypeName(pair.second);
    EXPECT_EQ(heads, (std::set<int64_t>{1, 3, 8})) << layoutName(layout);
    EXPECT_EQ(dims, (std::set<int64_t>{64, 128, 256})) << layoutName(layout);
    if (layout == Layout::Contiguous)
      EXPECT_EQ(sizes.size(), 3u);
    else
      EXPECT_EQ(sizes, (std::set<int64_t>{16, 32, 64})) << layoutName(layout);
    // Every (heads, head_dim, block size) combination appears for some
    // dtype pair.
    EXPECT_EQ(triples.size(), 27u) << layoutName(layout);
  }
}

TEST(DescriptionTest, MatrixHasSlotMappingAndFusedForPagedLayouts) {
  std::vector<Description> matrix = conformanceMatrix();
  for (Layout layout : {Layout::PagedNHD, Layout::PagedHND,
                        Layout::VllmVectorized, Layout::DualStacked}) {
    std::set<int64_t> slotSizes, fusedSizes;
    for (const Description &d : matrix) {
      if (d.layout != layout)
        continue;
      if (d.kind == Kind::SlotMapping)
        slotSizes.insert(d.blockSize);
      if (d.kind == Kind::FusedAppend)
        fusedSizes.insert(d.blockSize);
    }
    EXPECT_EQ(slotSizes, (std::set<int64_t>{16, 32, 64})) << layoutName(layout);
    EXPECT_EQ(fusedSizes, (std::set<int64_t>{16, 32, 64}))
        << layoutName(layout);
  }
  for (const Description &d : matrix)
    EXPECT_FALSE(d.kind != Kind::Append && d.layout == Layout::Contiguous)
        << d.name << ": the dialect's block-table ops are for paged caches";
}

TEST(DescriptionTest, MatrixHasNoSixteenBitToSixteenBitCasts) {
  for (const Description &d : conformanceMatrix())
    EXPECT_FALSE(d.sourceDtype != d.cacheDtype && d.sourceDtype != DType::F32 &&
                 d.cacheDtype != DType::F32)
        << d.name;
}

TEST(DescriptionTest, MatrixHasTheGpuOnlyDescriptions) {
  std::vector<Description> matrix = conformanceMatrix();
  for (const char *name :
       {"gpu_append_paged_nhd", "gpu_append_vllm_vectorized",
        "gpu_append_contiguous", "gpu_fused_append_paged_nhd"})
    EXPECT_TRUE(findDescription(matrix, name).has_value()) << name;
  EXPECT_FALSE(findDescription(matrix, "no_such_kernel").has_value());
}

TEST(DescriptionTest, ReducedMatrixIsACoveringSubset) {
  std::vector<Description> full = conformanceMatrix();
  std::vector<Description> reduced = reducedMatrix();
  EXPECT_LT(reduced.size(), full.size() / 4);
  std::set<std::tuple<Kind, Layout>> kinds;
  std::set<std::pair<DType, DType>> pairs;
  std::set<int64_t> heads, dims, sizes;
  for (const Description &d : reduced) {
    std::optional<Description> same = findDescription(full, d.name);
    ASSERT_TRUE(same.has_value()) << d.name;
    EXPECT_EQ(same->toMlir(), d.toMlir());
    kinds.insert({d.kind, d.layout});
    pairs.insert({d.sourceDtype, d.cacheDtype});
    heads.insert(d.numKvHeads);
    dims.insert(d.headDim);
    if (d.layout != Layout::Contiguous)
      sizes.insert(d.blockSize);
  }
  EXPECT_EQ(kinds.size(), 5u + 4u + 4u); // appends, fused, slot mapping
  EXPECT_EQ(pairs.size(), 7u);
  EXPECT_EQ(heads, (std::set<int64_t>{1, 3, 8}));
  EXPECT_EQ(dims, (std::set<int64_t>{64, 128, 256}));
  EXPECT_EQ(sizes, (std::set<int64_t>{16, 32, 64}));
}

TEST(DescriptionTest, CaseListsPerKind) {
  Description append =
      make(Kind::Append, Layout::PagedNHD, 16, DType::BF16, DType::BF16);
  std::vector<std::string> names = caseNames(append);
  for (const char *name :
       {"decode/auto", "decode/scalar", "prefill/auto", "mixed/scalar",
        "padding/auto", "out_of_range/scalar", "fused_qkv/vector",
        "fused_qkv_odd_stride/scalar", "fused_qkv_odd_stride/auto",
        "fused_qkv_odd_stride/vector_refused", "permuted_source/auto",
        "strided_cache/auto", "twice_equals_once/auto", "empty/auto"})
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  EXPECT_EQ(caseNames(make(Kind::SlotMapping, Layout::PagedNHD, 16, DType::BF16,
                           DType::BF16)),
            (std::vector<std::string>{"decode", "prefill", "padding_overflow",
                                      "strided_table", "empty"}));
  EXPECT_FALSE(caseNames(make(Kind::FusedAppend, Layout::PagedHND, 16,
                              DType::BF16, DType::BF16))
                   .empty());
}

} // namespace
