//===- QuantHarnessTest.cpp - The quantized checks catch what they must ---===//
//
// As in HarnessTest.cpp, a "kernel" is the reference run on host memory
// through the tensors the harness hands to kvrt: run faithfully, the scale,
// gather-output and roundtrip checks pass; with one planted fault each, they
// fail and say where.
//
//===----------------------------------------------------------------------===//

#include "conformance/QuantHarness.h"
#include "conformance/HostMemory.h"

#include "conformance/Float16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

using namespace kvgen::conformance;

namespace {

Description quantDesc(Layout layout, QuantKind kind, Granularity g,
                      ScaleMode mode) {
  Description desc;
  desc.name = "q";
  desc.layout = layout;
  desc.blockSize = 4;
  desc.numKvHeads = 2;
  desc.headDim = 32;
  desc.sourceDtype = DType::BF16;
  desc.cacheDtype = storageType(kind);
  desc.quant = QuantSpec{kind, g, mode, false};
  return desc;
}

TensorView viewOf(const DLTensor *t, DType dtype) {
  TensorView view;
  view.data = static_cast<char *>(t->data) + t->byte_offset;
  view.dtype = dtype;
  view.shape.assign(t->shape, t->shape + t->ndim);
  view.strides.assign(t->strides, t->strides + t->ndim);
  return view;
}

float *floats(const DLTensor *t) {
  return t ? reinterpret_cast<float *>(static_cast<char *>(t->data) +
                                       t->byte_offset)
           : nullptr;
}

ScaleArgs deviceScales(const ScaleSet &scales) {
  ScaleArgs args;
  args.keyScale = floats(scales.keyScale());
  args.valueScale = floats(scales.valueScale());
  args.keyScaleCache = floats(scales.keyScaleCache());
  args.valueScaleCache = floats(scales.valueScaleCache());
  return args;
}

/// One quantized append and its gather, on host memory, through the
/// kvrt-facing tensors.
struct QuantRun {
  HostMemoryBackend backend;
  Description desc;
  std::mt19937_64 rng{7};
  std::vector<int64_t> slots{5, -1, 9, 14, 3};
  SourceSet source;
  CacheSet caches;
  ScaleSet scales;
  OutputSet out;
  ScaleArgs device;
  std::string error;

  explicit QuantRun(Description d) : desc(std::move(d)) {
    int64_t tokens = static_cast<int64_t>(slots.size());
    EXPECT_TRUE(source.create(backend, desc, tokens, SourceStorage::Compact,
                              rng, error));
    EXPECT_TRUE(
        caches.create(backend, desc, 4, CacheStorage::Compact, rng(), error));
    EXPECT_TRUE(scales.create(backend, desc, tokens, 4, rng, error)) << error;
    EXPECT_TRUE(source.refillWith(
        [&](int64_t t, int64_t h, int64_t, bool key) {
          float s = desc.quant->dynamic()
                        ? 0.25f
                        : scales.staticScale(key, t, h,
                                             slots[t] < 0 ? 0 : slots[t] / 4);
          return quantSourceValue(desc.quant->kind, s, true, rng);
        },
        error));
    EXPECT_TRUE(out.create(backend, desc.roundtripGather(), tokens, true, rng(),
                           error));
    device = deviceScales(scales);
  }

  /// The faithful append, then the faithful gather.
  void kernels() {
    TensorView kc = viewOf(caches.keyCache(), desc.cacheDtype);
    TensorView vc =
        caches.valueCache() ? viewOf(caches.valueCache(), desc.cacheDtype) : kc;
    appendReference(desc, source.hostKey(), source.hostValue(), slots.data(),
                    kc, vc, &device);
    gatherReference(desc.roundtripGather(), kc, vc, slots.data(),
                    static_cast<int64_t>(slots.size()), &device,
                    viewOf(out.keyOut(), DType::F32),
                    viewOf(out.valueOut(), DType::F32));
  }

  /// The expected images, as the cases build them.
  void expect() {
    ScaleArgs expected = scales.expectedArgs();
    caches.expectAppend(source, slots, &expected);
    std::vector<unsigned char> &image = caches.expectedImage();
    std::vector<unsigned char> &outImage = out.expectedImage();
    gatherReference(
        desc.roundtripGather(), caches.hostView(CacheSide::Key, image.data()),
        caches.hostView(CacheSide::Value, image.data()), slots.data(),
        static_cast<int64_t>(slots.size()), &expected,
        out.view(true, outImage.data()), out.view(false, outImage.data()));
  }

  bool roundtrip(std::string &report) {
    std::vector<unsigned char> got;
    EXPECT_TRUE(out.readBack(got, report));
    return checkRoundtrip(desc, source.hostKey(), source.hostValue(), slots, 4,
                          scales.expectedArgs(), out.view(true, got.data()),
                          out.view(false, got.data()), report);
  }
};

TEST(QuantHarnessTest, FaithfulKernelsPassEveryCheck) {
  for (Layout layout : {Layout::Contiguous, Layout::PagedNHD,
                        Layout::VllmVectorized, Layout::DualStacked}) {
    for (QuantKind kind :
         {QuantKind::FP8E4M3, QuantKind::FP8E5M2, QuantKind::Int8}) {
      for (auto [g, mode] :
           {std::pair{Granularity::PerTensor, ScaleMode::Static},
            {Granularity::PerTokenHead, ScaleMode::Static},
            {Granularity::PerBlock, ScaleMode::Static},
            {Granularity::PerToken, ScaleMode::Dynamic},
            {Granularity::PerTokenHead, ScaleMode::Dynamic}}) {
        if (g == Granularity::PerBlock && layout == Layout::Contiguous)
          continue;
        QuantRun run(quantDesc(layout, kind, g, mode));
        SCOPED_TRACE(run.desc.summary());
        run.kernels();
        run.expect();
        std::string report;
        EXPECT_TRUE(run.caches.check(report)) << report;
        EXPECT_TRUE(run.scales.check(report)) << report;
        EXPECT_TRUE(run.out.check(report)) << report;
        EXPECT_TRUE(run.roundtrip(report)) << report;
      }
    }
  }
}

TEST(QuantHarnessTest, ScaleWrittenAtTheWrongSlotIsNamed) {
  QuantRun run(quantDesc(Layout::PagedNHD, QuantKind::FP8E4M3,
                         Granularity::PerTokenHead, ScaleMode::Dynamic));
  run.kernels();
  run.expect();
  // Slot 9 (block 2, pos 1) is written; also write slot 10 (pos 2).
  run.device.keyScaleCache[10 * 2 + 1] = 0.5f;
  std::string report;
  EXPECT_FALSE(run.scales.check(report));
  EXPECT_NE(report.find("key_scale_cache (block 2, pos 2, head 1)"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("should be untouched"), std::string::npos) << report;
}

TEST(QuantHarnessTest, AWrongScaleAtTheSlotIsNamed) {
  QuantRun run(quantDesc(Layout::PagedHND, QuantKind::Int8,
                         Granularity::PerToken, ScaleMode::Dynamic));
  run.kernels();
  run.expect();
  // Token 3 (slot 14) written with a wrong scale.
  run.device.valueScaleCache[14] = std::nanf("");
  std::string report;
  EXPECT_FALSE(run.scales.check(report));
  EXPECT_NE(report.find("value_scale_cache (block 3, pos 2)"),
            std::string::npos)
      << report;
}

TEST(QuantHarnessTest, StaticScalesMustComeBackUntouched) {
  QuantRun run(quantDesc(Layout::PagedNHD, QuantKind::FP8E5M2,
                         Granularity::PerHead, ScaleMode::Static));
  run.kernels();
  run.expect();
  const_cast<float *>(run.device.valueScale)[1] *= 2;
  std::string report;
  EXPECT_FALSE(run.scales.check(report));
  EXPECT_NE(report.find("value_scale[1]"), std::string::npos) << report;
}

TEST(QuantHarnessTest, GatherOutputsAreComparedElementByElement) {
  QuantRun run(quantDesc(Layout::PagedNHD, QuantKind::FP8E4M3,
                         Granularity::PerToken, ScaleMode::Static));
  run.kernels();
  run.expect();
  std::string report;
  ASSERT_TRUE(run.out.check(report)) << report;
  // A padding row (row 1) written: caught, and named.
  float *keyOut = floats(run.out.keyOut());
  int64_t rowStride = run.out.keyOut()->strides[0];
  keyOut[1 * rowStride + 32 + 3] = 0.0f;
  EXPECT_FALSE(run.out.check(report));
  EXPECT_NE(report.find("key_out[1, 1, 3]"), std::string::npos) << report;
}

TEST(QuantHarnessTest, AnyNaNMatchesANaN) {
  QuantRun run(quantDesc(Layout::PagedNHD, QuantKind::FP8E4M3,
                         Granularity::PerTensor, ScaleMode::Static));
  run.kernels();
  run.expect();
  // Find a gathered NaN (sources include NaN) and change its payload.
  float *keyOut = floats(run.out.keyOut());
  int64_t rowStride = run.out.keyOut()->strides[0];
  bool found = false;
  for (int64_t e = 0; e < 64 && !found; ++e) {
    if (std::isnan(keyOut[e])) {
      keyOut[e] = bitsToFloat(0xffc00123);
      found = true;
    }
  }
  for (int64_t e = 0; e < 64 && !found; ++e)
    found = std::isnan(keyOut[rowStride * 2 + e]) &&
            ((keyOut[rowStride * 2 + e] = bitsToFloat(0x7fc00042)), true);
  ASSERT_TRUE(found) << "no NaN among the sources";
  std::string report;
  EXPECT_TRUE(run.out.check(report)) << report;
}

TEST(QuantHarnessTest, RoundtripCatchesAValueOffByTwoSteps) {
  QuantRun run(quantDesc(Layout::PagedNHD, QuantKind::Int8,
                         Granularity::PerTokenHead, ScaleMode::Static));
  run.kernels();
  std::string report;
  ASSERT_TRUE(run.roundtrip(report)) << report;
  // Row 0 reads token 0 back; move one in-range value by two steps.
  float *keyOut = floats(run.out.keyOut());
  const float *scale = run.scales.expectedArgs().keyScale;
  for (int64_t d = 0; d < 32; ++d) {
    float v = keyOut[d];
    if (std::isfinite(v) && std::fabs(v) < 100 * scale[0]) {
      keyOut[d] = v + 2 * scale[0];
      break;
    }
  }
  EXPECT_FALSE(run.roundtrip(report));
  EXPECT_NE(report.find("within one step"), std::string::npos) << report;
}

TEST(QuantHarnessTest, SourceValuesCoverTheFormat) {
  std::mt19937_64 rng(3);
  for (QuantKind kind :
       {QuantKind::FP8E4M3, QuantKind::FP8E5M2, QuantKind::Int8}) {
    int saturating = 0, tiny = 0, nan = 0, inf = 0, past = 0, under = 0;
    for (int i = 0; i < 20000; ++i) {
      float x = quantSourceValue(kind, 0.5f, true, rng, /*outliers=*/true);
      past += std::isfinite(x) && std::fabs(x) > 0x1p60f;
      under += x != 0 && std::fabs(x) < 0x1p-60f;
      float y = x / 0.5f;
      nan += std::isnan(y);
      inf += std::isinf(y);
      saturating += std::isfinite(y) && std::fabs(y) > quantMax(kind);
      // Below the smallest normal (fp8) or below one (int8).
      float normal = kind == QuantKind::FP8E4M3   ? std::ldexp(1.0f, -6)
                     : kind == QuantKind::FP8E5M2 ? std::ldexp(1.0f, -14)
                                                  : 1.0f;
      tiny += y != 0 && std::fabs(y) < normal;
    }
    EXPECT_GT(saturating, 1000) << quantKindName(kind);
    EXPECT_GT(tiny, 100) << quantKindName(kind);
    EXPECT_GT(nan, 100) << quantKindName(kind);
    EXPECT_GT(inf, 100) << quantKindName(kind);
    EXPECT_GT(past, 100) << quantKindName(kind);
    EXPECT_GT(under, 100) << quantKindName(kind);
  }
}

TEST(QuantHarnessTest, OutliersOnlyWhenAskedFor) {
  std::mt19937_64 rng(5);
  for (int i = 0; i < 20000; ++i) {
    float x = quantSourceValue(QuantKind::FP8E4M3, 0.5f, true, rng);
    EXPECT_FALSE(std::isfinite(x) && std::fabs(x) > 0x1p60f) << x;
    EXPECT_FALSE(x != 0 && std::fabs(x) < 0x1p-60f) << x;
  }
}

} // namespace
