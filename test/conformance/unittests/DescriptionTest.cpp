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

TEST(DescriptionTest, KernelNamesIncludeScalarAndWideVariants) {
  Description append =
      make(Kind::Append, Layout::PagedNHD, 16, DType::BF16, DType::BF16);
  EXPECT_EQ(append.wideKernelName(), "kv_op_wide");
  EXPECT_EQ(append.kernelNames(),
            (std::vector<std::string>{"kv_op", "kv_op_scalar", "kv_op_wide"}));
  Description slots =
      make(Kind::SlotMapping, Layout::PagedNHD, 16, DType::BF16, DType::BF16);
  EXPECT_EQ(slots.kernelNames(), (std::vector<std::string>{"kv_op"}));
  // No wide kernel: only the two variants.
  Description gather =
      make(Kind::Gather, Layout::PagedNHD, 16, DType::F32, DType::BF16);
  EXPECT_EQ(gather.kernelNames(),
            (std::vector<std::string>{"kv_op", "kv_op_scalar"}));
  // A static scale's append has a wide kernel, and its roundtrip gather
  // comes after it.
  Description fp8 =
      make(Kind::Append, Layout::PagedNHD, 16, DType::BF16, DType::F8E4M3);
  fp8.quant = QuantSpec{QuantKind::FP8E4M3, Granularity::PerTensor,
                        ScaleMode::Static, false};
  EXPECT_EQ(fp8.kernelNames(),
            (std::vector<std::string>{"kv_op", "kv_op_scalar", "kv_op_wide",
                                      "kv_op_gather", "kv_op_gather_scalar"}));
  // A dynamic scale's of a 32-bit source has none.
  fp8.quant->mode = ScaleMode::Dynamic;
  fp8.quant->granularity = Granularity::PerTokenHead;
  fp8.sourceDtype = DType::F32;
  EXPECT_EQ(fp8.kernelNames(),
            (std::vector<std::string>{"kv_op", "kv_op_scalar", "kv_op_gather",
                                      "kv_op_gather_scalar"}));
}

// The cases below follow the kernel plan's rule (wideMinTokens in
// lib/Plan/KernelPlan.cpp); the suites check each bundle against it.
TEST(DescriptionTest, HasWideKernelFollowsThePlan) {
  // The serving shape: 8 x 128 bf16 is 128 chunks of 8 a token.
  Description append =
      make(Kind::Append, Layout::PagedNHD, 16, DType::BF16, DType::BF16);
  EXPECT_TRUE(append.hasWideKernel());
  EXPECT_TRUE(
      make(Kind::FusedAppend, Layout::PagedNHD, 16, DType::BF16, DType::BF16)
          .hasWideKernel());
  // A K-only cache is appended by kv.append too.
  Description kOnly = append;
  kOnly.kOnly = true;
  EXPECT_TRUE(kOnly.hasWideKernel());
  // A static scale keeps one chunk an iteration.
  Description quant = append;
  quant.cacheDtype = DType::I8;
  quant.quant = QuantSpec{QuantKind::Int8, Granularity::PerTokenHead,
                          ScaleMode::Static, false};
  EXPECT_TRUE(quant.hasWideKernel());
  // A dynamic scale of a 16-bit source: the wide kernel keeps IEEE
  // division, whatever the group.
  quant.quant->mode = ScaleMode::Dynamic;
  EXPECT_TRUE(quant.hasWideKernel());
  quant.quant->granularity = Granularity::PerToken;
  EXPECT_TRUE(quant.hasWideKernel());
  // With a reciprocal scale, or from f32, nothing splits, and the
  // iteration is the group (here a token: 256 chunks of 4).
  quant.quant->reciprocal = true;
  EXPECT_FALSE(quant.hasWideKernel());
  quant.quant->reciprocal = false;
  quant.sourceDtype = DType::F32;
  EXPECT_FALSE(quant.hasWideKernel());
  // Gathers, slot mappings and latent appends have none.
  EXPECT_FALSE(make(Kind::Gather, Layout::PagedNHD, 16, DType::F32, DType::BF16)
                   .hasWideKernel());
  EXPECT_FALSE(
      make(Kind::SlotMapping, Layout::PagedNHD, 16, DType::BF16, DType::BF16)
          .hasWideKernel());
  Description mla =
      make(Kind::MlaAppend, Layout::PagedNHD, 16, DType::BF16, DType::BF16);
  mla.numKvHeads = 1;
  mla.kvLoraRank = 512;
  mla.ropeDim = 64;
  mla.headDim = 576;
  mla.kOnly = true;
  EXPECT_FALSE(mla.hasWideKernel());
  mla.kind = Kind::MlaFusedAppend;
  EXPECT_FALSE(mla.hasWideKernel());
  // An odd number of chunks a token: 1 x 24 bf16 is 3 chunks of 8.
  Description odd = append;
  odd.numKvHeads = 1;
  odd.headDim = 24;
  EXPECT_FALSE(odd.hasWideKernel());
  // The chunk follows the wider dtype: 3 x 24 from f32 is 18 chunks of 4.
  odd.numKvHeads = 3;
  odd.sourceDtype = DType::F32;
  EXPECT_TRUE(odd.hasWideKernel());
}

TEST(DescriptionTest, WideCasesExactlyWhereThereIsAWideKernel) {
  int withWide = 0, withoutWide = 0;
  std::set<std::tuple<Kind, bool, bool>> covered; // kind, K-only, quantized
  for (const Description &d : conformanceMatrix()) {
    std::vector<std::string> names = caseNames(d);
    bool wideCase = std::any_of(names.begin(), names.end(), [](auto &name) {
      return name.find("/wide") != std::string::npos;
    });
    EXPECT_EQ(wideCase, d.hasWideKernel()) << d.name;
    if (d.hasWideKernel()) {
      ++withWide;
      covered.insert({d.kind, d.kOnly, d.quant.has_value()});
    } else if (d.kind == Kind::Append || d.kind == Kind::FusedAppend) {
      ++withoutWide;
    }
  }
  EXPECT_GT(withWide, 100);
  EXPECT_GT(withoutWide, 10);
  // Plain and fused appends, of K/V and K-only caches, unquantized and
  // statically quantized.
  for (auto key : {std::tuple(Kind::Append, false, false),
                   std::tuple(Kind::Append, false, true),
                   std::tuple(Kind::Append, true, false),
                   std::tuple(Kind::Append, true, true),
                   std::tuple(Kind::FusedAppend, false, false),
                   std::tuple(Kind::FusedAppend, false, true),
                   std::tuple(Kind::FusedAppend, true, false)})
    EXPECT_TRUE(covered.count(key))
        << kindName(std::get<0>(key)) << " k_only " << std::get<1>(key)
        << " quant " << std::get<2>(key);
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
  EXPECT_LE(matrix.size(), 800u);
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
      // The rows over the dtype pairs; the block-size sweep and the
      // quantized rows have their own tests.
      bool baseSize =
          layout == Layout::Contiguous
              ? d.blockSize == 64 || d.blockSize == 128 || d.blockSize == 256
              : d.blockSize == 16 || d.blockSize == 32 || d.blockSize == 64;
      // K and V of two head sizes have their own rows (AsymmetricCases).
      if (d.layout != layout || d.kind != Kind::Append || d.quant || d.nvfp4 ||
          d.vHeadDim || !baseSize || d.name.rfind("gpu_", 0) == 0)
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
    if (layout == Layout::PagedNHD)
      for (int64_t size : {16, 32, 64})
        EXPECT_TRUE(slotSizes.count(size)) << layoutName(layout) << " " << size;
    for (int64_t size : {16, 32, 64})
      EXPECT_TRUE(fusedSizes.count(size)) << layoutName(layout) << " " << size;
  }
  for (const Description &d : matrix)
    EXPECT_FALSE((d.kind == Kind::SlotMapping || d.kind == Kind::FusedAppend) &&
                 d.layout == Layout::Contiguous)
        << d.name << ": the dialect's block-table ops are for paged caches";
}

TEST(DescriptionTest, MatrixHasAnyBlockSizeOnEveryPagedLayout) {
  std::vector<Description> matrix = conformanceMatrix();
  const std::set<int64_t> wanted = {1, 3, 16, 48, 528, 672};
  std::set<int64_t> slotSizes;
  for (Layout layout : {Layout::PagedNHD, Layout::PagedHND,
                        Layout::VllmVectorized, Layout::DualStacked}) {
    std::set<int64_t> appendSizes, fusedSizes;
    for (const Description &d : matrix) {
      if (d.layout != layout || d.quant)
        continue;
      if (d.kind == Kind::Append)
        appendSizes.insert(d.blockSize);
      if (d.kind == Kind::FusedAppend)
        fusedSizes.insert(d.blockSize);
      if (d.kind == Kind::SlotMapping)
        slotSizes.insert(d.blockSize);
    }
    for (int64_t size : wanted) {
      EXPECT_TRUE(appendSizes.count(size)) << layoutName(layout) << " " << size;
      EXPECT_TRUE(fusedSizes.count(size)) << layoutName(layout) << " " << size;
    }
  }
  for (int64_t size : wanted)
    EXPECT_TRUE(slotSizes.count(size)) << "slot_mapping " << size;
  std::set<int64_t> contiguousNotPowerOfTwo;
  for (const Description &d : matrix)
    if (d.layout == Layout::Contiguous && (d.blockSize & (d.blockSize - 1)))
      contiguousNotPowerOfTwo.insert(d.blockSize);
  EXPECT_GE(contiguousNotPowerOfTwo.size(), 2u);
}

TEST(DescriptionTest, MatrixHasEveryValidQuantization) {
  std::vector<Description> matrix = conformanceMatrix();
  for (Layout layout : {Layout::Contiguous, Layout::PagedNHD, Layout::PagedHND,
                        Layout::VllmVectorized, Layout::DualStacked}) {
    for (Kind kind : {Kind::Append, Kind::FusedAppend}) {
      if (kind == Kind::FusedAppend && layout == Layout::Contiguous)
        continue;
      std::set<std::tuple<QuantKind, Granularity, ScaleMode>> seen;
      for (const Description &d : matrix)
        if (d.layout == layout && d.kind == kind && d.quant &&
            !d.quant->reciprocal)
          seen.insert({d.quant->kind, d.quant->granularity, d.quant->mode});
      for (QuantKind q :
           {QuantKind::FP8E4M3, QuantKind::FP8E5M2, QuantKind::Int8}) {
        for (Granularity g : {Granularity::PerTensor, Granularity::PerToken,
                              Granularity::PerHead, Granularity::PerTokenHead,
                              Granularity::PerBlock}) {
          for (ScaleMode m : {ScaleMode::Static, ScaleMode::Dynamic}) {
            bool valid =
                (m == ScaleMode::Static || g == Granularity::PerToken ||
                 g == Granularity::PerTokenHead) &&
                !(g == Granularity::PerBlock && layout == Layout::Contiguous);
            EXPECT_EQ(seen.count({q, g, m}) == 1, valid)
                << layoutName(layout) << " " << kindName(kind) << " "
                << quantKindName(q) << " " << granularityName(g) << " "
                << scaleModeName(m);
          }
        }
      }
    }
  }
  // Each quantized append of a K/V cache carries the gather of its
  // roundtrip (K-only caches have their own cases); its cache dtype is the
  // quantization's storage type.
  for (const Description &d : matrix) {
    if (!d.quant)
      continue;
    EXPECT_EQ(d.cacheDtype, storageType(d.quant->kind)) << d.name;
    if (!d.kOnly && (d.kind == Kind::Append || d.kind == Kind::FusedAppend)) {
      EXPECT_NE(d.toMlir().find("kv.gather @" + d.gatherKernelName() + " : " +
                                d.cacheType() + " to f32"),
                std::string::npos)
          << d.name;
      EXPECT_EQ(d.kernelNames().back(), d.gatherKernelName() + "_scalar");
    }
  }
}

TEST(DescriptionTest, QuantizedCacheTypeSpellsTheAttribute) {
  Description d =
      make(Kind::Append, Layout::PagedNHD, 16, DType::BF16, DType::F8E4M3);
  d.quant = QuantSpec{QuantKind::FP8E4M3, Granularity::PerTokenHead,
                      ScaleMode::Dynamic, true};
  EXPECT_EQ(d.cacheType(),
            "!kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, "
            "head_dim = 128, dtype = f8E4M3FN, quant = #kv.quant<kind = "
            "fp8_e4m3, granularity = per_token_head, mode = dynamic, "
            "reciprocal = true>>");
  EXPECT_EQ(toDLDataType(DType::F8E5M2).code, kDLUInt);
  EXPECT_EQ(float8DLDataType(DType::F8E4M3).code, 10);
  EXPECT_EQ(float8DLDataType(DType::F8E5M2).code, 12);
  EXPECT_EQ(toDLDataType(DType::I8).code, kDLInt);
}

TEST(DescriptionTest, MatrixHasNoSixteenBitToSixteenBitCasts) {
  for (const Description &d : conformanceMatrix())
    EXPECT_FALSE(!d.quant && !d.nvfp4 && d.kind != Kind::Gather &&
                 d.sourceDtype != d.cacheDtype && d.sourceDtype != DType::F32 &&
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
  std::set<std::tuple<Kind, QuantKind, ScaleMode>> quants;
  std::set<int64_t> heads, dims, sizes;
  for (const Description &d : reduced) {
    std::optional<Description> same = findDescription(full, d.name);
    ASSERT_TRUE(same.has_value()) << d.name;
    EXPECT_EQ(same->toMlir(), d.toMlir());
    kinds.insert({d.kind, d.layout});
    if (d.quant)
      quants.insert({d.kind, d.quant->kind, d.quant->mode});
    else if (d.kind != Kind::Gather && !d.nvfp4)
      pairs.insert({d.sourceDtype, d.cacheDtype});
    heads.insert(d.numKvHeads);
    dims.insert(d.headDim);
    if (d.layout != Layout::Contiguous)
      sizes.insert(d.blockSize);
  }
  // appends, fused, slot mapping, gathers, mla_append, mla_fused_append,
  // paged_kv_append, fused_gather (its latent and K-only caches)
  EXPECT_EQ(kinds.size(), 5u + 4u + 4u + 5u + 1u + 1u + 4u + 2u);
  EXPECT_EQ(pairs.size(), 7u);
  // (append, fused) x 3 kinds x 2 modes, the gathers' 3 x 2, the two fp8
  // kinds of the MLA append and the fused MLA append's fp8 e4m3, and
  // paged_kv_append's fp8 e4m3 static and int8 dynamic, fused_gather's fp8
  // e4m3 static, and the MLA appends with inline scales (dynamic fp8 e4m3,
  // fp8 e5m2, int8).
  EXPECT_EQ(quants.size(), 3u * 3u * 2u + 2u + 1u + 2u + 1u + 3u);
  for (int64_t h : {1, 3, 8})
    EXPECT_TRUE(heads.count(h)) << h;
  for (int64_t d : {64, 128, 256})
    EXPECT_TRUE(dims.count(d)) << d;
  for (int64_t size : {16, 32, 64})
    EXPECT_TRUE(sizes.count(size)) << size;
}

TEST(DescriptionTest, CaseListsPerKind) {
  Description append =
      make(Kind::Append, Layout::PagedNHD, 16, DType::BF16, DType::BF16);
  std::vector<std::string> names = caseNames(append);
  for (const char *name : {"decode/auto",
                           "decode/scalar",
                           "prefill/auto",
                           "mixed/scalar",
                           "padding/auto",
                           "out_of_range/scalar",
                           "fused_qkv/vector",
                           "fused_qkv_odd_stride/scalar",
                           "fused_qkv_odd_stride/auto",
                           "fused_qkv_odd_stride/vector_refused",
                           "permuted_source/auto",
                           "strided_cache/auto",
                           "twice_equals_once/auto",
                           "empty/auto",
                           "decode/wide",
                           "prefill/wide",
                           "mixed/wide",
                           "padding/wide",
                           "out_of_range/wide",
                           "fused_qkv/wide",
                           "fused_qkv_odd_stride/wide_refused"})
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  // Without a wide kernel (a dynamic scale of an f32 source), no case
  // forces one.
  Description dynamic = append;
  dynamic.sourceDtype = DType::F32;
  dynamic.cacheDtype = DType::I8;
  dynamic.quant = QuantSpec{QuantKind::Int8, Granularity::PerTokenHead,
                            ScaleMode::Dynamic, false};
  for (const std::string &name : caseNames(dynamic))
    EXPECT_EQ(name.find("wide"), std::string::npos) << name;
  std::vector<std::string> fused = caseNames(
      make(Kind::FusedAppend, Layout::PagedHND, 16, DType::BF16, DType::BF16));
  for (const char *name : {"decode/wide", "prefill/wide",
                           "padding_overflow/wide", "fused_qkv/wide"})
    EXPECT_NE(std::find(fused.begin(), fused.end(), name), fused.end()) << name;
  Description kOnly = append;
  kOnly.kOnly = true;
  std::vector<std::string> kOnlyNames = caseNames(kOnly);
  for (const char *name : {"decode/wide", "prefill/wide", "shared_rows/wide",
                           "shared_rows_odd/wide_refused"})
    EXPECT_NE(std::find(kOnlyNames.begin(), kOnlyNames.end(), name),
              kOnlyNames.end())
        << name;
  EXPECT_EQ(caseNames(make(Kind::SlotMapping, Layout::PagedNHD, 16, DType::BF16,
                           DType::BF16)),
            (std::vector<std::string>{"decode", "prefill", "padding_overflow",
                                      "strided_table", "empty"}));
  EXPECT_FALSE(caseNames(make(Kind::FusedAppend, Layout::PagedHND, 16,
                              DType::BF16, DType::BF16))
                   .empty());
  // FlashInfer's page table: every hostile index, plain and in checked mode.
  std::vector<std::string> paged = caseNames(make(
      Kind::PagedKvAppend, Layout::PagedNHD, 16, DType::BF16, DType::BF16));
  for (const char *name :
       {"decode/auto", "prefill/scalar", "decode/wide", "fused_qkv/vector",
        "hostile_position_minus_one/auto",
        "hostile_position_past_last_page/auto",
        "hostile_position_int32_max/auto", "hostile_batch_minus_one/auto",
        "hostile_batch_is_batch_size/auto", "hostile_indptr_past_indices/auto",
        "hostile_indptr_negative/auto", "hostile_negative_page/auto",
        "hostile_page_past_num_blocks/auto", "checked_position_minus_one/auto",
        "checked_batch_is_batch_size/auto", "checked_page_past_num_blocks/auto",
        "checked_valid/auto", "checked_duplicate/auto"})
    EXPECT_NE(std::find(paged.begin(), paged.end(), name), paged.end()) << name;
}

} // namespace
