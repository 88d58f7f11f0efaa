//===- QuantReferenceTest.cpp - The quantized append and gather reference -===//
//
// A tiny paged NHD cache (3 blocks of 2 positions, 2 heads, head_dim 4) of
// bytes, with values chosen so that every expected code is worked out by hand:
// which scale each granularity picks, where a dynamic scale lands in the
// scale cache (and that nothing else there is touched), padding tokens, and
// the gather's dequantization by row.
//
//===----------------------------------------------------------------------===//

#include "conformance/Float16.h"
#include "conformance/Reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

using namespace kvgen::conformance;

namespace {

constexpr uint8_t kPoison = 0xa5;
constexpr float kScalePoison = -999.0f;

Description tinyQuant(QuantKind kind, Granularity g, ScaleMode mode) {
  Description desc;
  desc.name = "tiny";
  desc.layout = Layout::PagedNHD;
  desc.blockSize = 2;
  desc.numKvHeads = 2;
  desc.headDim = 4;
  desc.sourceDtype = DType::F32;
  desc.cacheDtype = storageType(kind);
  desc.quant = QuantSpec{kind, g, mode, false};
  return desc;
}

/// [2 tokens, 2 heads, 4] of f32, K and V.
struct Source {
  std::vector<float> key, value;
  TensorView keyView, valueView;
  Source(std::vector<float> k, std::vector<float> v)
      : key(std::move(k)), value(std::move(v)) {
    int64_t tokens = static_cast<int64_t>(key.size() / 8);
    keyView = TensorView::compact(key.data(), DType::F32, {tokens, 2, 4});
    valueView = TensorView::compact(value.data(), DType::F32, {tokens, 2, 4});
  }
};

/// The caches [3, 2, 2, 4] of bytes, poisoned; (block, pos, head, d) at
/// 16 * block + 8 * pos + 4 * head + d.
struct ByteCaches {
  std::vector<uint8_t> key = std::vector<uint8_t>(48, kPoison);
  std::vector<uint8_t> value = std::vector<uint8_t>(48, kPoison);
  TensorView view(std::vector<uint8_t> &bytes, DType type) {
    return TensorView::compact(bytes.data(), type, {3, 2, 2, 4});
  }
};

TEST(QuantReferenceTest, StaticPerHeadPicksTheHeadsScale) {
  Description desc =
      tinyQuant(QuantKind::Int8, Granularity::PerHead, ScaleMode::Static);
  // Token 0 -> slot 3 (block 1, pos 1); token 1 is padding.
  Source src({1, 2, 3, 4, 10, -20, 30, 2000, 9, 9, 9, 9, 9, 9, 9, 9},
             {0.5f, 1.5f, 2.5f, -2.5f, 0, 0, 0, 0, 9, 9, 9, 9, 9, 9, 9, 9});
  const int64_t slots[] = {3, -1};
  float keyScale[] = {0.5f, 10.0f}, valueScale[] = {1.0f, 4.0f};
  ScaleArgs scales;
  scales.keyScale = keyScale;
  scales.valueScale = valueScale;
  ByteCaches c;
  appendReference(desc, src.keyView, src.valueView, slots,
                  c.view(c.key, DType::I8), c.view(c.value, DType::I8),
                  &scales);
  // Head 0: x / 0.5; head 1: x / 10 (2000 / 10 saturates to 127).
  const int8_t key[] = {2, 4, 6, 8, 1, -2, 3, 127};
  // Value head 0 / 1: 0.5 -> 0 and 1.5 -> 2 and 2.5 -> 2, -2.5 -> -2 (even).
  const int8_t value[] = {0, 2, 2, -2, 0, 0, 0, 0};
  for (int i = 0; i < 48; ++i) {
    bool written = i >= 24 && i < 32;
    EXPECT_EQ(c.key[i], written ? static_cast<uint8_t>(key[i - 24]) : kPoison)
        << i;
    EXPECT_EQ(c.value[i],
              written ? static_cast<uint8_t>(value[i - 24]) : kPoison)
        << i;
  }
}

TEST(QuantReferenceTest, StaticPerTokenHeadAndPerBlockIndexing) {
  Description desc = tinyQuant(QuantKind::FP8E4M3, Granularity::PerTokenHead,
                               ScaleMode::Static);
  EXPECT_EQ(staticScaleShape(desc, 5, 3), (std::vector<int64_t>{5, 2}));
  EXPECT_EQ(staticScaleIndex(desc, 3, 1, 2), 7);
  desc.quant->granularity = Granularity::PerBlock;
  EXPECT_EQ(staticScaleShape(desc, 5, 3), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(staticScaleIndex(desc, 3, 1, 2), 5);
  desc.quant->granularity = Granularity::PerToken;
  EXPECT_EQ(staticScaleShape(desc, 5, 3), (std::vector<int64_t>{5}));
  EXPECT_EQ(staticScaleIndex(desc, 3, 1, 2), 3);
  desc.quant->granularity = Granularity::PerTensor;
  EXPECT_EQ(staticScaleShape(desc, 5, 3), (std::vector<int64_t>{1}));
  EXPECT_EQ(staticScaleIndex(desc, 3, 1, 2), 0);
}

TEST(QuantReferenceTest, PerBlockUsesTheSlotsBlock) {
  Description desc =
      tinyQuant(QuantKind::FP8E4M3, Granularity::PerBlock, ScaleMode::Static);
  // Token 0 -> slot 4 (block 2), token 1 -> slot 1 (block 0).
  Source src(std::vector<float>(16, 1.0f), std::vector<float>(16, 1.0f));
  const int64_t slots[] = {4, 1};
  // [3 blocks, 2 heads]: block 2 uses 0.25 / 0.5, block 0 uses 1 / 2.
  float keyScale[] = {1, 2, 100, 100, 0.25f, 0.5f};
  ScaleArgs scales;
  scales.keyScale = keyScale;
  scales.valueScale = keyScale;
  ByteCaches c;
  appendReference(desc, src.keyView, src.valueView, slots,
                  c.view(c.key, DType::F8E4M3), c.view(c.value, DType::F8E4M3),
                  &scales);
  EXPECT_EQ(c.key[32], 0x48); // 1 / 0.25 = 4: exponent 9, mantissa 0
  EXPECT_EQ(c.key[36], 0x40); // 1 / 0.5 = 2
  EXPECT_EQ(c.key[8], 0x38);  // 1 / 1
  EXPECT_EQ(c.key[12], 0x30); // 1 / 2 = 0.5
  EXPECT_EQ(c.key[0], kPoison);
}

TEST(QuantReferenceTest, DynamicPerTokenHeadWritesTheScaleAtTheSlot) {
  Description desc = tinyQuant(QuantKind::FP8E4M3, Granularity::PerTokenHead,
                               ScaleMode::Dynamic);
  EXPECT_EQ(scaleCacheShape(desc, 3), (std::vector<int64_t>{3, 2, 2}));
  // Token 0 -> slot 5 (block 2, pos 1). Head 0's amax is 896 (NaN and inf
  // do not count): scale 2; head 1 is all zero: scale 1. Token 1 is padding
  // and writes no scale.
  Source src({896, -448, NAN, INFINITY, 0, 0, 0, -0.0f, 1, 1, 1, 1, 1, 1, 1, 1},
             {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  const int64_t slots[] = {5, -3};
  std::vector<float> keyScales(12, kScalePoison), valueScales(12, kScalePoison);
  ScaleArgs scales;
  scales.keyScaleCache = keyScales.data();
  scales.valueScaleCache = valueScales.data();
  ByteCaches c;
  appendReference(desc, src.keyView, src.valueView, slots,
                  c.view(c.key, DType::F8E4M3), c.view(c.value, DType::F8E4M3),
                  &scales);
  // (block 2, pos 1, head h) is element 10 + h.
  for (int i = 0; i < 12; ++i) {
    float wantKey = i == 10 ? 2.0f : i == 11 ? 1.0f : kScalePoison;
    float wantValue = i == 10 || i == 11 ? 1.0f / 448 : kScalePoison;
    EXPECT_EQ(keyScales[i], wantKey) << i;
    EXPECT_EQ(valueScales[i], wantValue) << i;
  }
  // 896 / 2 = 448 -> 0x7e; -224 -> 0xf6; NaN -> 0x7f; inf -> 448 (0x7e);
  // zeros keep their sign.
  const uint8_t key[] = {0x7e, 0xf6, 0x7f, 0x7e, 0x00, 0x00, 0x00, 0x80};
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(c.key[40 + i], key[i]) << i;
  EXPECT_EQ(c.value[40], 0x7e); // 1 / (1 / 448) = 448
}

TEST(QuantReferenceTest, DynamicPerTokenSharesOneScale) {
  Description desc =
      tinyQuant(QuantKind::Int8, Granularity::PerToken, ScaleMode::Dynamic);
  EXPECT_EQ(scaleCacheShape(desc, 3), (std::vector<int64_t>{3, 2}));
  Source src({254, 1, 1, 1, -127, 1, 1, 1}, {0, 0, 0, 0, 0, 0, 0, 0});
  const int64_t slots[] = {2}; // block 1, pos 0
  std::vector<float> keyScales(6, kScalePoison), valueScales(6, kScalePoison);
  ScaleArgs scales;
  scales.keyScaleCache = keyScales.data();
  scales.valueScaleCache = valueScales.data();
  ByteCaches c;
  appendReference(desc, src.keyView, src.valueView, slots,
                  c.view(c.key, DType::I8), c.view(c.value, DType::I8),
                  &scales);
  EXPECT_EQ(keyScales[2], 2.0f);   // amax 254 over both heads
  EXPECT_EQ(valueScales[2], 1.0f); // all zero
  EXPECT_EQ(c.key[16], 127);
  EXPECT_EQ(static_cast<int8_t>(c.key[20]), -64); // -63.5 -> -64 (even)
  EXPECT_EQ(c.key[17], 0);                        // 0.5 -> 0
  for (int i : {0, 1, 3, 4, 5})
    EXPECT_EQ(keyScales[i], kScalePoison) << i;
}

TEST(QuantReferenceTest, GatherDequantizesByRow) {
  Description desc =
      tinyQuant(QuantKind::Int8, Granularity::PerToken, ScaleMode::Static);
  desc.kind = Kind::Gather;
  desc.outputDtype = DType::BF16;
  ByteCaches c;
  for (int i = 0; i < 48; ++i) {
    c.key[i] = static_cast<uint8_t>(i);
    c.value[i] = static_cast<uint8_t>(-i);
  }
  // Row 0 reads slot 5 (block 2, pos 1), row 1 is padding, row 2 reads
  // slot 9 (block 4: past the cache), row 3 reads slot 0.
  const int64_t slots[] = {5, -1, 9, 0};
  float keyScale[] = {0.5f, 7, 7, 3.0f}, valueScale[] = {2, 7, 7, 1};
  ScaleArgs scales;
  scales.keyScale = keyScale;
  scales.valueScale = valueScale;
  std::vector<uint16_t> keyOut(32, 0xdead), valueOut(32, 0xdead);
  gatherReference(desc, c.view(c.key, DType::I8), c.view(c.value, DType::I8),
                  slots, 4, &scales,
                  TensorView::compact(keyOut.data(), DType::BF16, {4, 2, 4}),
                  TensorView::compact(valueOut.data(), DType::BF16, {4, 2, 4}));
  for (int e = 0; e < 8; ++e) {
    // Row 0: key bytes 40 + e times 0.5; value -(40 + e) times 2.
    EXPECT_EQ(bfloat16ToFloat(keyOut[e]), (40 + e) * 0.5f) << e;
    EXPECT_EQ(bfloat16ToFloat(valueOut[e]), -(40 + e) * 2.0f) << e;
    EXPECT_EQ(keyOut[8 + e], 0xdead);
    EXPECT_EQ(keyOut[16 + e], 0xdead);
    EXPECT_EQ(bfloat16ToFloat(keyOut[24 + e]), e * 3.0f) << e;
  }
  // 43 * 0.5 = 21.5 is exact in bf16; 47 * 3 = 141 too. A rounding case:
  // 127 * 3 = 381 is 0x43be8000 in fp32, a bf16 tie that rounds to even.
  EXPECT_EQ(floatToBfloat16(381.0f), 0x43be);
}

TEST(QuantReferenceTest, GatherOfFp8NaNIsNaN) {
  Description desc =
      tinyQuant(QuantKind::FP8E5M2, Granularity::PerTensor, ScaleMode::Static);
  desc.kind = Kind::Gather;
  ByteCaches c;
  c.key[0] = 0x7f;
  c.key[1] = 0x3c; // 1.0
  const int64_t slots[] = {0};
  float scale[] = {4.0f};
  ScaleArgs scales;
  scales.keyScale = scale;
  scales.valueScale = scale;
  std::vector<float> keyOut(8), valueOut(8);
  gatherReference(desc, c.view(c.key, DType::F8E5M2),
                  c.view(c.value, DType::F8E5M2), slots, 1, &scales,
                  TensorView::compact(keyOut.data(), DType::F32, {1, 2, 4}),
                  TensorView::compact(valueOut.data(), DType::F32, {1, 2, 4}));
  EXPECT_TRUE(std::isnan(keyOut[0]));
  EXPECT_EQ(keyOut[1], 4.0f);
}

} // namespace
