//===- HarnessTest.cpp - The checks catch what they are meant to catch ----===//
//
// A "kernel" here is the reference run on host memory through the DLTensors
// the harness would hand to kvrt. Run faithfully, every check must pass
// (which also proves those DLTensors describe the memory the expected image
// describes); with one planted fault, the check must fail and say where.
//
//===----------------------------------------------------------------------===//

#include "conformance/Harness.h"
#include "conformance/HostMemory.h"

#include "conformance/Float16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

using namespace kvgen::conformance;

namespace {

TensorView viewOf(const DLTensor *t, DType dtype) {
  TensorView view;
  view.data = static_cast<char *>(t->data) + t->byte_offset;
  view.dtype = dtype;
  view.shape.assign(t->shape, t->shape + t->ndim);
  view.strides.assign(t->strides, t->strides + t->ndim);
  return view;
}

/// The faithful kernel: the reference, through the kvrt-facing tensors.
void fakeKernel(const Description &desc, const SourceSet &source,
                const CacheSet &caches, const std::vector<int64_t> &slots) {
  TensorView keyCache = viewOf(caches.keyCache(), desc.cacheDtype);
  TensorView valueCache = caches.valueCache()
                              ? viewOf(caches.valueCache(), desc.cacheDtype)
                              : keyCache;
  appendReference(desc, viewOf(source.key(), desc.sourceDtype),
                  viewOf(source.value(), desc.sourceDtype), slots.data(),
                  keyCache, valueCache);
}

Description makeDesc(Layout layout, DType source, DType cache) {
  Description desc;
  desc.name = "harness";
  desc.layout = layout;
  desc.blockSize = 16;
  desc.numKvHeads = 3;
  desc.headDim = 64;
  desc.sourceDtype = source;
  desc.cacheDtype = cache;
  return desc;
}

const Layout kLayouts[] = {Layout::Contiguous, Layout::PagedNHD,
                           Layout::PagedHND, Layout::VllmVectorized,
                           Layout::DualStacked};

TEST(HarnessTest, FaithfulKernelPassesForEveryLayoutAndStorage) {
  HostMemoryBackend backend;
  std::mt19937_64 rng(7);
  for (Layout layout : kLayouts) {
    for (CacheStorage storage :
         {CacheStorage::Compact, CacheStorage::BlockStrided}) {
      for (SourceStorage source :
           {SourceStorage::Compact, SourceStorage::FusedQkv,
            SourceStorage::FusedQkvOddStride, SourceStorage::Permuted}) {
        Description desc = makeDesc(layout, DType::F32, DType::BF16);
        std::vector<int64_t> slots = {5, 17, -1, 3 * 16 + 15, 40 * 16};
        SourceSet k;
        CacheSet c;
        std::string error;
        ASSERT_TRUE(k.create(backend, desc, 5, source, rng, error)) << error;
        ASSERT_TRUE(c.create(backend, desc, 4, storage, 11, error)) << error;
        fakeKernel(desc, k, c, slots);
        c.expectAppend(k, slots);
        std::string report;
        EXPECT_TRUE(c.check(report))
            << layoutName(layout) << " " << sourceStorageName(source) << ": "
            << report;
      }
    }
  }
}

TEST(HarnessTest, CheckNamesAnUnwrittenToken) {
  HostMemoryBackend backend;
  std::mt19937_64 rng(8);
  Description desc = makeDesc(Layout::PagedHND, DType::BF16, DType::BF16);
  SourceSet k;
  CacheSet c;
  std::string error;
  ASSERT_TRUE(k.create(backend, desc, 2, SourceStorage::Compact, rng, error));
  ASSERT_TRUE(c.create(backend, desc, 4, CacheStorage::Compact, 1, error));
  // The kernel forgets token 1 (slot 2 * 16 + 9: block 2, pos 9).
  fakeKernel(desc, k, c, {5, -1});
  c.expectAppend(k, {5, 2 * 16 + 9});
  std::string report;
  EXPECT_FALSE(c.check(report));
  EXPECT_NE(report.find("key cache (block 2, head 0, pos 9, d 0)"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("not written"), std::string::npos) << report;
}

TEST(HarnessTest, CheckNamesAWriteToTheWrongPosition) {
  HostMemoryBackend backend;
  std::mt19937_64 rng(9);
  Description desc = makeDesc(Layout::VllmVectorized, DType::F16, DType::F16);
  SourceSet k;
  CacheSet c;
  std::string error;
  ASSERT_TRUE(k.create(backend, desc, 1, SourceStorage::Compact, rng, error));
  ASSERT_TRUE(c.create(backend, desc, 4, CacheStorage::Compact, 2, error));
  fakeKernel(desc, k, c, {16 + 4}); // an off-by-one kernel: pos 4, not 3
  c.expectAppend(k, {16 + 3});
  std::string report;
  EXPECT_FALSE(c.check(report));
  EXPECT_NE(report.find("should be untouched"), std::string::npos) << report;
  EXPECT_NE(report.find("(block 1, head 0, pos 3, d 0)"), std::string::npos)
      << report;
}

TEST(HarnessTest, CheckCatchesWritesIntoTheGuards) {
  HostMemoryBackend backend;
  Description desc = makeDesc(Layout::PagedNHD, DType::F32, DType::F32);
  CacheSet c;
  std::string error;
  ASSERT_TRUE(c.create(backend, desc, 4, CacheStorage::Compact, 3, error));
  // One element just past the value cache: a block index of num_blocks that
  // was not refused.
  const DLTensor *value = c.valueCache();
  char *end = static_cast<char *>(value->data) + value->byte_offset +
              4 * 16 * 3 * 64 * 4;
  end[0] ^= 0x5a;
  std::string report;
  EXPECT_FALSE(c.check(report));
  EXPECT_NE(report.find("guard, 0 bytes after the caches"), std::string::npos)
      << report;

  CacheSet before;
  ASSERT_TRUE(before.create(backend, desc, 4, CacheStorage::Compact, 4, error));
  const DLTensor *key = before.keyCache();
  (static_cast<char *>(key->data) + key->byte_offset)[-1] ^= 1;
  EXPECT_FALSE(before.check(report));
  EXPECT_NE(report.find("guard, 1 bytes before the caches"), std::string::npos)
      << report;
}

TEST(HarnessTest, ResetRestoresPoison) {
  HostMemoryBackend backend;
  std::mt19937_64 rng(10);
  Description desc = makeDesc(Layout::DualStacked, DType::BF16, DType::F32);
  SourceSet k;
  CacheSet c;
  std::string error;
  ASSERT_TRUE(k.create(backend, desc, 1, SourceStorage::Compact, rng, error));
  ASSERT_TRUE(c.create(backend, desc, 4, CacheStorage::Compact, 5, error));
  EXPECT_EQ(c.valueCache(), nullptr); // kvrt takes NULL for dual_stacked
  fakeKernel(desc, k, c, {7});
  std::string report;
  EXPECT_FALSE(c.check(report)); // written, but nothing expected
  EXPECT_NE(report.find("key cache (block 0, head 0, pos 7, d 0)"),
            std::string::npos)
      << report;
  ASSERT_TRUE(c.reset(error));
  EXPECT_TRUE(c.check(report)) << report;
}

TEST(HarnessTest, SourceTensorsDescribeTheHostViews) {
  HostMemoryBackend backend;
  std::mt19937_64 rng(11);
  Description desc = makeDesc(Layout::PagedNHD, DType::F16, DType::F32);
  for (SourceStorage storage :
       {SourceStorage::Compact, SourceStorage::FusedQkv,
        SourceStorage::FusedQkvOddStride, SourceStorage::Permuted,
        SourceStorage::KvInterleavedTruncated}) {
    SourceSet k;
    std::string error;
    ASSERT_TRUE(k.create(backend, desc, 6, storage, rng, error, 4)) << error;
    TensorView hostKey = k.hostKey(), hostValue = k.hostValue();
    TensorView devKey = viewOf(k.key(), DType::F16);
    TensorView devValue = viewOf(k.value(), DType::F16);
    // KvInterleavedTruncated stores only 4 of the 6 rows.
    int64_t rows = storage == SourceStorage::KvInterleavedTruncated ? 4 : 6;
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t h = 0; h < 3; ++h)
        for (int64_t d = 0; d < 64; ++d) {
          Index i;
          i.rank = 3;
          i.values = {t, h, d};
          ASSERT_EQ(loadBits(devKey.elementPointer(i), DType::F16),
                    loadBits(hostKey.elementPointer(i), DType::F16));
          ASSERT_EQ(loadBits(devValue.elementPointer(i), DType::F16),
                    loadBits(hostValue.elementPointer(i), DType::F16));
          ASSERT_NE(hostKey.elementPointer(i), hostValue.elementPointer(i));
        }
    // What the vector variant needs: 16-byte multiples (8 halves) for every
    // stride but the dim stride, which is 1. Only these two break it (the
    // permuted V has a dim stride of H).
    bool vectorFriendly = storage != SourceStorage::FusedQkvOddStride &&
                          storage != SourceStorage::Permuted;
    auto fits = [](const DLTensor *t) {
      return t->strides[0] % 8 == 0 && t->strides[1] % 8 == 0 &&
             t->strides[2] == 1;
    };
    EXPECT_EQ(fits(k.key()) && fits(k.value()), vectorFriendly)
        << sourceStorageName(storage);
  }
}

TEST(HarnessTest, PaddingRowsPastTheFenceAreNotMemory) {
  HostMemoryBackend backend;
  std::mt19937_64 rng(14);
  Description desc = makeDesc(Layout::PagedNHD, DType::BF16, DType::BF16);
  SourceSet k;
  std::string error;
  ASSERT_TRUE(k.create(backend, desc, 12, SourceStorage::KvInterleavedTruncated,
                       rng, error, 7))
      << error;
  ASSERT_TRUE(k.rowsFenced());
  TensorView key = viewOf(k.key(), DType::BF16);
  TensorView value = viewOf(k.value(), DType::BF16);
  Index last;
  last.rank = 3;
  last.values = {6, 2, 63};
  // The last stored row is memory; the first padding row is not: a kernel
  // that reads it dies instead of silently reading a neighbour.
  (void)*static_cast<volatile uint16_t *>(value.elementPointer(last));
  Index padding;
  padding.rank = 3;
  padding.values = {7, 0, 0};
  EXPECT_DEATH(
      (void)*static_cast<volatile uint16_t *>(key.elementPointer(padding)), "");
  // The faithful kernel reads no padding row, so it runs to the end.
  CacheSet c;
  ASSERT_TRUE(c.create(backend, desc, 4, CacheStorage::Compact, 6, error));
  std::vector<int64_t> slots = {1, 2, 3, 4, 5, 6, 7, -1, -1, -1, -1, -1};
  fakeKernel(desc, k, c, slots);
  c.expectAppend(k, slots);
  std::string report;
  EXPECT_TRUE(c.check(report)) << report;
}

TEST(HarnessTest, UnfencedBackendsBackEveryRow) {
  // A Backend without fenced memory gets every row allocated, so no tensor
  // reaches past its allocation into a neighbour (which kvrt would refuse as
  // aliasing, and rightly).
  class Plain : public HostMemoryBackend {
  public:
    void *allocate(size_t bytes) override {
      void *pointer = HostMemoryBackend::allocate(bytes);
      sizes[pointer] = bytes;
      return pointer;
    }
    void *allocateFenced(size_t) override { return nullptr; }
    std::map<void *, size_t> sizes;
  } backend;
  std::mt19937_64 rng(15);
  Description desc = makeDesc(Layout::PagedNHD, DType::F32, DType::F32);
  SourceSet k;
  std::string error;
  ASSERT_TRUE(k.create(backend, desc, 12, SourceStorage::KvInterleavedTruncated,
                       rng, error, 7))
      << error;
  EXPECT_FALSE(k.rowsFenced());
  for (const DLTensor *t : {k.key(), k.value()}) {
    char *first = static_cast<char *>(t->data) + t->byte_offset;
    int64_t last = 0;
    for (int i = 0; i < t->ndim; ++i)
      last += (t->shape[i] - 1) * t->strides[i];
    char *end = first + (last + 1) * 4;
    bool inside = false;
    for (auto [base, bytes] : backend.sizes)
      inside |= first >= static_cast<char *>(base) &&
                end <= static_cast<char *>(base) + bytes;
    EXPECT_TRUE(inside) << "a K/V tensor reaches past its allocation";
  }
}

TEST(HarnessTest, SourceValuesAreNeverZeroNaNOrInfinite) {
  std::mt19937_64 rng(12);
  for (DType source : {DType::F32, DType::F16, DType::BF16}) {
    std::vector<unsigned char> bytes(20000 * dtypeBytes(source));
    fillSourceValues(bytes.data(), 20000, source,
                     source == DType::F32 ? DType::BF16 : DType::F32, rng);
    for (size_t i = 0; i < 20000; ++i) {
      uint32_t bits = loadBits(&bytes[i * dtypeBytes(source)], source);
      float value = source == DType::F32   ? bitsToFloat(bits)
                    : source == DType::F16 ? halfToFloat(bits)
                                           : bfloat16ToFloat(bits);
      ASSERT_TRUE(std::isfinite(value)) << dtypeName(source) << " " << bits;
      ASSERT_NE(value, 0.0f) << dtypeName(source);
    }
  }
}

TEST(HarnessTest, Fp32SourcesProbeTheRounding) {
  std::mt19937_64 rng(13);
  std::vector<uint32_t> values(40000);
  fillSourceValues(values.data(), values.size(), DType::F32, DType::F16, rng);
  int ties = 0, overflows = 0, subnormals = 0;
  for (uint32_t bits : values) {
    float f = bitsToFloat(bits);
    ties += (bits & 0x1fff) == 0x1000 && std::fabs(f) >= std::ldexp(1.0f, -14);
    overflows += std::fabs(f) >= 65520.0f;
    subnormals += std::fabs(f) < std::ldexp(1.0f, -14);
  }
  EXPECT_GT(ties, 1000);
  EXPECT_GT(overflows, 500);
  EXPECT_GT(subnormals, 1000);

  fillSourceValues(values.data(), values.size(), DType::F32, DType::BF16, rng);
  ties = overflows = 0;
  for (uint32_t bits : values) {
    ties += (bits & 0xffff) == 0x8000;
    overflows += floatToBfloat16(bitsToFloat(bits)) == 0x7f80 ||
                 floatToBfloat16(bitsToFloat(bits)) == 0xff80;
  }
  EXPECT_GT(ties, 1000);
  EXPECT_GT(overflows, 100);
}

TEST(HarnessTest, PoisonDependsOnPositionAndSeed) {
  std::vector<unsigned char> a(4096), b(4096);
  fillPoison(a.data(), a.size(), 1);
  fillPoison(b.data(), b.size(), 2);
  EXPECT_NE(a, b);
  EXPECT_NE(std::memcmp(a.data(), a.data() + 8, 8), 0);
  int zeros = 0;
  for (unsigned char byte : a)
    zeros += byte == 0;
  EXPECT_LT(zeros, 64); // random bytes, not a zero fill
}

} // namespace
