//===- LatentMatrix.cpp - the K-only and MLA latent descriptions ----------===//
//
// Caches without V: K-only caches on every layout that has a K side (an
// indexer's keys), and DeepSeek-style MLA latent caches whose entry is
// kv_c followed by k_pe. The latent sizes include DeepSeek-V3's (512, 64),
// a smaller (128, 32) and a latent that is not a power of two (448 + 64),
// at block sizes 1, 16, 64 and 528. Gathers read both kinds of cache back:
// K-only caches on four layouts (one int8, one fp8 per_token), latent caches
// unquantized and fp8.
//
//===----------------------------------------------------------------------===//

#include "conformance/Description.h"

#include <sstream>

namespace kvgen::conformance {

namespace {

Description kOnlyAppend(Kind kind, Layout layout, int64_t blockSize,
                        int64_t heads, int64_t headDim, DType source,
                        DType cache, std::optional<QuantSpec> quant = {}) {
  Description d;
  d.kind = kind;
  d.layout = layout;
  d.blockSize = blockSize;
  d.numKvHeads = heads;
  d.headDim = headDim;
  d.sourceDtype = source;
  d.cacheDtype = cache;
  d.quant = quant;
  d.kOnly = true;
  std::ostringstream os;
  os << "konly_" << kindName(kind) << "_" << layoutName(layout)
     << (layout == Layout::Contiguous ? "_msl" : "_bs") << blockSize << "_h"
     << heads << "_d" << headDim << "_" << dtypeName(cache) << "_from_"
     << dtypeName(source);
  if (quant)
    os << "_" << quant->tag();
  d.name = os.str();
  return d;
}

Description mla(int64_t blockSize, int64_t kvLoraRank, int64_t ropeDim,
                DType source, DType cache, std::optional<QuantSpec> quant = {},
                Kind kind = Kind::MlaAppend) {
  Description d;
  d.kind = kind;
  d.layout = Layout::PagedNHD;
  d.blockSize = blockSize;
  d.numKvHeads = 1;
  d.headDim = kvLoraRank + ropeDim;
  d.kvLoraRank = kvLoraRank;
  d.ropeDim = ropeDim;
  d.sourceDtype = source;
  d.cacheDtype = cache;
  d.quant = quant;
  d.kOnly = true;
  std::ostringstream os;
  os << kindName(kind) << "_bs" << blockSize << "_" << kvLoraRank << "_"
     << ropeDim << "_" << dtypeName(cache) << "_from_" << dtypeName(source);
  if (quant)
    os << "_" << quant->tag();
  d.name = os.str();
  return d;
}

/// A gather of a K-only or latent description: its cache, read back into
/// `output`.
Description gatherOf(Description cache, DType output) {
  Description d = std::move(cache);
  d.kind = Kind::Gather;
  d.sourceDtype = DType::F32;
  d.outputDtype = output;
  std::ostringstream os;
  if (d.latent())
    os << "mla_gather_bs" << d.blockSize << "_" << d.kvLoraRank << "_"
       << d.ropeDim;
  else
    os << "konly_gather_" << layoutName(d.layout)
       << (d.layout == Layout::Contiguous ? "_msl" : "_bs") << d.blockSize
       << "_h" << d.numKvHeads << "_d" << d.headDim;
  os << "_" << (d.quant ? d.quant->tag() : std::string(dtypeName(d.cacheDtype)))
     << "_to_" << dtypeName(output);
  d.name = os.str();
  return d;
}

/// gatherOf through the block table (kind fused_gather): vLLM's MLA
/// gathers.
Description fusedGatherOf(Description cache, DType output) {
  Description d = gatherOf(std::move(cache), output);
  d.kind = Kind::FusedGather;
  d.name = "fused_" + d.name;
  return d;
}

} // namespace

std::vector<Description> latentMatrix() {
  const QuantSpec fp8 = {QuantKind::FP8E4M3, Granularity::PerTensor,
                         ScaleMode::Static, false};
  const QuantSpec int8 = {QuantKind::Int8, Granularity::PerHead,
                          ScaleMode::Static, false};
  std::vector<Description> m;
  m.push_back(kOnlyAppend(Kind::Append, Layout::PagedNHD, 16, 8, 128,
                          DType::BF16, DType::BF16));
  m.push_back(kOnlyAppend(Kind::Append, Layout::PagedHND, 48, 3, 64, DType::F32,
                          DType::F16));
  m.push_back(kOnlyAppend(Kind::Append, Layout::VllmVectorized, 16, 1, 128,
                          DType::BF16, DType::BF16));
  m.push_back(kOnlyAppend(Kind::Append, Layout::Contiguous, 100, 2, 64,
                          DType::F32, DType::F32));
  m.push_back(kOnlyAppend(Kind::Append, Layout::PagedNHD, 528, 1, 128,
                          DType::F16, DType::F16));
  m.push_back(kOnlyAppend(Kind::Append, Layout::PagedNHD, 16, 4, 128,
                          DType::BF16, DType::F8E4M3, fp8));
  m.push_back(kOnlyAppend(Kind::Append, Layout::PagedHND, 16, 2, 64, DType::F32,
                          DType::I8, int8));
  m.push_back(kOnlyAppend(Kind::FusedAppend, Layout::PagedNHD, 16, 8, 128,
                          DType::BF16, DType::BF16));
  m.push_back(kOnlyAppend(Kind::FusedAppend, Layout::PagedHND, 3, 2, 64,
                          DType::F32, DType::BF16));

  m.push_back(mla(16, 512, 64, DType::BF16, DType::BF16));
  m.push_back(mla(64, 512, 64, DType::F16, DType::F16));
  m.push_back(mla(16, 128, 32, DType::F32, DType::BF16));
  m.push_back(mla(1, 128, 32, DType::F32, DType::F32));
  m.push_back(mla(528, 448, 64, DType::BF16, DType::BF16));
  m.push_back(mla(16, 512, 64, DType::BF16, DType::F8E4M3, fp8));
  m.push_back(mla(16, 448, 64, DType::F32, DType::F8E4M3, fp8));
  m.push_back(mla(32, 128, 32, DType::BF16, DType::F8E5M2,
                  QuantSpec{QuantKind::FP8E5M2, Granularity::PerToken,
                            ScaleMode::Static, false}));
  // The fused MLA append: slots from the block table, one launch.
  auto fused = [&](int64_t bs, int64_t rank, int64_t rope, DType source,
                   DType cache, std::optional<QuantSpec> quant = {}) {
    m.push_back(
        mla(bs, rank, rope, source, cache, quant, Kind::MlaFusedAppend));
  };
  fused(16, 512, 64, DType::BF16, DType::BF16);
  fused(3, 128, 32, DType::F32, DType::BF16);
  fused(528, 448, 64, DType::F16, DType::F16);
  fused(16, 512, 64, DType::BF16, DType::F8E4M3, fp8);

  // Gathers: the caches above read back (the source dtype is unused).
  m.push_back(gatherOf(kOnlyAppend(Kind::Append, Layout::PagedNHD, 16, 8, 128,
                                   DType::F32, DType::BF16),
                       DType::F32));
  m.push_back(gatherOf(kOnlyAppend(Kind::Append, Layout::PagedHND, 48, 3, 64,
                                   DType::F32, DType::F16),
                       DType::F16));
  m.push_back(gatherOf(kOnlyAppend(Kind::Append, Layout::VllmVectorized, 16, 1,
                                   128, DType::F32, DType::BF16),
                       DType::BF16));
  m.push_back(gatherOf(kOnlyAppend(Kind::Append, Layout::Contiguous, 100, 2, 64,
                                   DType::F32, DType::F32),
                       DType::BF16));
  m.push_back(gatherOf(kOnlyAppend(Kind::Append, Layout::PagedHND, 16, 2, 64,
                                   DType::F32, DType::I8, int8),
                       DType::F32));
  m.push_back(
      gatherOf(kOnlyAppend(Kind::Append, Layout::PagedNHD, 16, 4, 128,
                           DType::F32, DType::F8E4M3,
                           QuantSpec{QuantKind::FP8E4M3, Granularity::PerToken,
                                     ScaleMode::Static, false}),
               DType::BF16));
  m.push_back(gatherOf(mla(16, 512, 64, DType::F32, DType::BF16), DType::F32));
  m.push_back(
      gatherOf(mla(16, 448, 64, DType::F32, DType::F8E4M3, fp8), DType::BF16));
  // Gathers through the block table: vLLM's cp_gather_cache (a copy) and
  // gather_and_maybe_dequant_cache (fp8), of latent and K-only caches.
  m.push_back(
      fusedGatherOf(mla(16, 512, 64, DType::F32, DType::BF16), DType::BF16));
  m.push_back(
      fusedGatherOf(mla(64, 512, 64, DType::F32, DType::F32), DType::F32));
  m.push_back(fusedGatherOf(mla(16, 512, 64, DType::F32, DType::F8E4M3, fp8),
                            DType::F32));
  m.push_back(fusedGatherOf(kOnlyAppend(Kind::Append, Layout::PagedNHD, 16, 1,
                                        576, DType::F32, DType::F16),
                            DType::F16));
  m.push_back(fusedGatherOf(kOnlyAppend(Kind::Append, Layout::PagedHND, 3, 2,
                                        64, DType::F32, DType::BF16),
                            DType::F32));
  return m;
}

} // namespace kvgen::conformance
