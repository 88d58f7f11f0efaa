//===- Description.cpp - Cache descriptions and the conformance matrix ----===//

#include "conformance/Description.h"
#include "conformance/InlineScalesCases.h"
#include "conformance/Nvfp4Cases.h"

#include <algorithm>
#include <iomanip>
#include <map>
#include <numeric>
#include <sstream>
#include <tuple>

namespace kvgen::conformance {

size_t dtypeBytes(DType type) {
  switch (type) {
  case DType::F32:
    return 4;
  case DType::F16:
  case DType::BF16:
    return 2;
  case DType::F8E4M3:
  case DType::F8E5M2:
  case DType::I8:
    return 1;
  }
  return 0;
}

const char *dtypeName(DType type) {
  switch (type) {
  case DType::F32:
    return "f32";
  case DType::F16:
    return "f16";
  case DType::BF16:
    return "bf16";
  case DType::F8E4M3:
    return "f8E4M3FN";
  case DType::F8E5M2:
    return "f8E5M2";
  case DType::I8:
    return "i8";
  }
  return "?";
}

DLDataType toDLDataType(DType type) {
  switch (type) {
  case DType::F32:
    return DLDataType{kDLFloat, 32, 1};
  case DType::F16:
    return DLDataType{kDLFloat, 16, 1};
  case DType::BF16:
    return DLDataType{kDLBfloat, 16, 1};
  case DType::F8E4M3:
  case DType::F8E5M2:
    return DLDataType{kDLUInt, 8, 1};
  case DType::I8:
    return DLDataType{kDLInt, 8, 1};
  }
  return DLDataType{kDLFloat, 32, 1};
}

DLDataType float8DLDataType(DType type) {
  return DLDataType{static_cast<uint8_t>(type == DType::F8E5M2 ? 12 : 10), 8,
                    1};
}

bool isQuantizedStorage(DType type) {
  return type == DType::F8E4M3 || type == DType::F8E5M2 || type == DType::I8;
}

DType storageType(QuantKind kind) {
  switch (kind) {
  case QuantKind::FP8E4M3:
    return DType::F8E4M3;
  case QuantKind::FP8E5M2:
    return DType::F8E5M2;
  case QuantKind::Int8:
    return DType::I8;
  }
  return DType::I8;
}

std::string QuantSpec::attr() const {
  std::string text = std::string("#kv.quant<kind = ") + quantKindName(kind) +
                     ", granularity = " + granularityName(granularity) +
                     ", mode = " + scaleModeName(mode);
  if (reciprocal)
    text += ", reciprocal = true";
  return text + ">";
}

std::string QuantSpec::tag() const {
  return std::string(quantKindName(kind)) + "_" + granularityName(granularity) +
         "_" + scaleModeName(mode) + (reciprocal ? "_rcp" : "");
}

const char *layoutName(Layout layout) {
  switch (layout) {
  case Layout::Contiguous:
    return "contiguous";
  case Layout::PagedNHD:
    return "paged_nhd";
  case Layout::PagedHND:
    return "paged_hnd";
  case Layout::VllmVectorized:
    return "vllm_vectorized";
  case Layout::DualStacked:
    return "dual_stacked";
  }
  return "?";
}

bool isPaged(Layout layout) { return layout != Layout::Contiguous; }

const char *kindName(Kind kind) {
  switch (kind) {
  case Kind::Append:
    return "append";
  case Kind::SlotMapping:
    return "slot_mapping";
  case Kind::FusedAppend:
    return "fused_append";
  case Kind::Gather:
    return "gather";
  case Kind::MlaAppend:
    return "mla_append";
  case Kind::MlaFusedAppend:
    return "mla_fused_append";
  case Kind::PagedKvAppend:
    return "paged_kv_append";
  case Kind::FusedGather:
    return "fused_gather";
  }
  return "?";
}

std::string Description::cacheType() const {
  std::ostringstream os;
  os << "!kv.cache<layout = " << layoutName(layout) << ", "
     << (layout == Layout::Contiguous ? "max_seq_len" : "block_size") << " = "
     << blockSize << ", num_kv_heads = " << numKvHeads
     << ", head_dim = " << headDim;
  if (vHeadDim)
    os << ", v_head_dim = " << vHeadDim;
  os << ", dtype = " << dtypeName(cacheDtype);
  if (quant)
    os << ", quant = " << quant->attr();
  if (nvfp4) // Nvfp4Cases.cpp
    os << ", quant = #kv.quant<kind = nvfp4, granularity = per_tensor, mode = "
          "static>, nvfp4 = #kv.nvfp4<k_scales = "
       << (nvfp4KSwizzled ? "swizzled" : "linear")
       << ", v_scales = " << (nvfp4VSwizzled ? "swizzled" : "linear")
       << ", search = " << (nvfp4FourOverSix ? "four_over_six" : "divisor_six")
       << ">";
  if (kOnly && !latent())
    os << ", k_only = true";
  if (latent()) {
    os << ", latent = #kv.latent<kv_lora_rank = " << kvLoraRank
       << ", rope_dim = " << ropeDim;
    if (inlineGroup) { // InlineScalesCases.cpp
      os << ", scales = #kv.inline_scales<group_size = " << inlineGroup
         << ", rope_dtype = " << dtypeName(sourceDtype);
      if (inlineMinScale > 0) {
        // A float literal needs its '.': scientific notation has one.
        std::ostringstream scale;
        scale << std::scientific << std::setprecision(9) << inlineMinScale;
        os << ", min_scale = " << scale.str() << " : f32";
      }
      os << ", power_of_two = " << (inlinePowerOfTwo ? "true" : "false") << ">";
    }
    os << ">";
  }
  os << ">";
  return os.str();
}

std::string Description::toMlir() const {
  std::string op =
      std::string("kv.") + kindName(kind) + " @" + name + " : " + cacheType();
  if (readsRows())
    return op + " to " + dtypeName(outputDtype);
  if (kind != Kind::SlotMapping)
    op += std::string(" from ") + dtypeName(sourceDtype);
  if (hasRoundtripGather())
    op += "\n  kv.gather @" + gatherKernelName() + " : " + cacheType() +
          " to f32";
  if (hasSlotMappingCompanion())
    op +=
        "\n  kv.slot_mapping @" + slotMappingKernelName() + " : " + cacheType();
  return op;
}

bool Description::hasWideKernel() const {
  if (kind != Kind::Append && kind != Kind::FusedAppend &&
      kind != Kind::PagedKvAppend)
    return false;
  // An NVFP4 iteration is a group of 16 values in one thread: no wide kernel.
  if (nvfp4)
    return false;
  // A dynamic scale of a 16-bit source: the vector kernel takes the fast
  // division, the wide one keeps IEEE division.
  if (quant && quant->dynamic() && !quant->reciprocal &&
      (sourceDtype == DType::BF16 || sourceDtype == DType::F16))
    return true;
  // planKernels' chunk: 16 bytes of the wider dtype, halved until it divides
  // head_dim.
  int64_t widest = static_cast<int64_t>(
      std::max(dtypeBytes(sourceDtype), dtypeBytes(cacheDtype)));
  int64_t vec = 16 / widest;
  // Where V's head size differs, the chunk divides both and the loop walks
  // the longer head.
  int64_t part = std::gcd(headDim, valueHeadDim());
  while (part % vec != 0)
    vec /= 2;
  int64_t chunksPerToken = numKvHeads * std::max(headDim, valueHeadDim()) / vec;
  // A dynamic scale's iteration is its group: the token's chunks, or its
  // head's. Only a group of one chunk leaves room for a second one.
  int64_t chunksPerGroup = 1;
  if (quant && quant->dynamic())
    chunksPerGroup = quant->granularity == Granularity::PerToken
                         ? chunksPerToken
                         : headDim / vec;
  return chunksPerGroup == 1 && chunksPerToken % 2 == 0;
}

std::vector<std::string> Description::kernelNames() const {
  if (kind == Kind::SlotMapping)
    return {name};
  std::vector<std::string> names = {name, scalarKernelName()};
  if (hasWideKernel())
    names.push_back(wideKernelName());
  if (hasRoundtripGather()) {
    names.push_back(gatherKernelName());
    names.push_back(gatherKernelName() + "_scalar");
  }
  if (hasSlotMappingCompanion())
    names.push_back(slotMappingKernelName());
  return names;
}

std::string Description::summary() const {
  std::ostringstream os;
  os << name << " (" << kindName(kind) << ", " << layoutName(layout) << ", "
     << (layout == Layout::Contiguous ? "max_seq_len " : "block_size ")
     << blockSize << ", " << numKvHeads << " kv heads, head_dim " << headDim
     << ", ";
  if (vHeadDim)
    os << "v_head_dim " << vHeadDim << ", ";
  if (readsRows())
    os << dtypeName(cacheDtype) << " -> " << dtypeName(outputDtype);
  else
    os << dtypeName(sourceDtype) << " -> " << dtypeName(cacheDtype);
  if (quant)
    os << ", " << quant->tag();
  os << ")";
  return os.str();
}

std::string toMlirModule(const std::vector<Description> &descriptions) {
  std::string text = "module {\n";
  for (const Description &desc : descriptions)
    text += "  " + desc.toMlir() + "\n";
  text += "}\n";
  return text;
}

namespace {

struct DTypePair {
  DType source;
  DType cache;
};

// Same-type copies, the casts serving stacks use (fp32 activations into a
// 16-bit cache, a 16-bit model into an fp32 cache). f16 <-> bf16 is refused
// by the dialect, so it is not here.
const DTypePair kAppendPairs[] = {
    {DType::F32, DType::F32},   {DType::F16, DType::F16},
    {DType::BF16, DType::BF16}, {DType::F32, DType::BF16},
    {DType::BF16, DType::F32},  {DType::F32, DType::F16},
    {DType::F16, DType::F32},
};

const DTypePair kFusedPairs[] = {
    {DType::BF16, DType::BF16},
    {DType::F16, DType::F16},
    {DType::F32, DType::BF16},
    {DType::F32, DType::F32},
};

// 8 kv heads is GQA (32 query heads in the fused-QKV cases), 1 is MQA, 3 is an
// odd count that no power-of-two shortcut survives.
const int64_t kHeads[] = {8, 1, 3};
const int64_t kHeadDims[] = {64, 128, 256};
const int64_t kBlockSizes[] = {16, 32, 64};
// Contiguous caches have no blocks; max_seq_len plays the block size's part.
const int64_t kMaxSeqLens[] = {64, 128, 256};

const Layout kLayouts[] = {Layout::Contiguous, Layout::PagedNHD,
                           Layout::PagedHND, Layout::VllmVectorized,
                           Layout::DualStacked};
const Layout kPagedLayouts[] = {Layout::PagedNHD, Layout::PagedHND,
                                Layout::VllmVectorized, Layout::DualStacked};

std::string makeName(Kind kind, Layout layout, int64_t blockSize, int64_t heads,
                     int64_t headDim, DType source, DType cache) {
  std::ostringstream os;
  os << kindName(kind) << "_" << layoutName(layout)
     << (layout == Layout::Contiguous ? "_msl" : "_bs") << blockSize << "_h"
     << heads << "_d" << headDim << "_" << dtypeName(cache);
  if (kind != Kind::SlotMapping)
    os << "_from_" << dtypeName(source);
  return os.str();
}

Description make(Kind kind, Layout layout, int64_t blockSize, int64_t heads,
                 int64_t headDim, DType source, DType cache,
                 std::string name = "");

/// A quantized description: the cache stores `quant`'s type. Gathers read
/// into `other` (their output dtype); the others append from it.
Description makeQuant(Kind kind, Layout layout, int64_t blockSize,
                      int64_t heads, int64_t headDim, DType other,
                      QuantSpec quant) {
  Description desc = make(kind, layout, blockSize, heads, headDim, other,
                          storageType(quant.kind), "-");
  desc.quant = quant;
  if (kind == Kind::Gather) {
    desc.outputDtype = other;
    desc.sourceDtype = DType::F32;
  }
  std::ostringstream os;
  os << kindName(kind) << "_" << layoutName(layout)
     << (layout == Layout::Contiguous ? "_msl" : "_bs") << blockSize << "_h"
     << heads << "_d" << headDim << "_" << quant.tag()
     << (kind == Kind::Gather ? "_to_" : "_from_") << dtypeName(other);
  desc.name = os.str();
  return desc;
}

/// A gather of an unquantized cache.
Description makeGather(Layout layout, int64_t blockSize, int64_t heads,
                       int64_t headDim, DType cache, DType output) {
  Description desc = make(Kind::Gather, layout, blockSize, heads, headDim,
                          DType::F32, cache, "-");
  desc.outputDtype = output;
  std::ostringstream os;
  os << "gather_" << layoutName(layout)
     << (layout == Layout::Contiguous ? "_msl" : "_bs") << blockSize << "_h"
     << heads << "_d" << headDim << "_" << dtypeName(cache) << "_to_"
     << dtypeName(output);
  desc.name = os.str();
  return desc;
}

/// Every quantization the verifier accepts on `layout`: each kind with each
/// granularity statically (per_block on paged layouts only), and per_token
/// and per_token_head dynamically.
std::vector<QuantSpec> validQuants(Layout layout) {
  std::vector<QuantSpec> out;
  for (QuantKind kind :
       {QuantKind::FP8E4M3, QuantKind::FP8E5M2, QuantKind::Int8}) {
    for (Granularity g :
         {Granularity::PerTensor, Granularity::PerToken, Granularity::PerHead,
          Granularity::PerTokenHead, Granularity::PerBlock}) {
      if (g == Granularity::PerBlock && !isPaged(layout))
        continue;
      out.push_back({kind, g, ScaleMode::Static, false});
    }
    for (Granularity g : {Granularity::PerToken, Granularity::PerTokenHead})
      out.push_back({kind, g, ScaleMode::Dynamic, false});
  }
  return out;
}

Description make(Kind kind, Layout layout, int64_t blockSize, int64_t heads,
                 int64_t headDim, DType source, DType cache, std::string name) {
  Description desc;
  desc.kind = kind;
  desc.layout = layout;
  desc.blockSize = blockSize;
  desc.numKvHeads = heads;
  desc.headDim = headDim;
  desc.sourceDtype = source;
  desc.cacheDtype = cache;
  desc.name = name.empty() ? makeName(kind, layout, blockSize, heads, headDim,
                                      source, cache)
                           : std::move(name);
  return desc;
}

} // namespace

std::vector<Description> conformanceMatrix() {
  std::vector<Description> matrix;

  // Appends: for each layout and dtype pair, the 9 rows of an orthogonal
  // array over (heads, head_dim, block size), so every pair of values of two
  // of those axes meets once. The offset p + l rotates which block size goes
  // with which (heads, head_dim), so across the dtype pairs every triple
  // appears too.
  for (size_t l = 0; l < std::size(kLayouts); ++l) {
    Layout layout = kLayouts[l];
    const int64_t *sizes =
        layout == Layout::Contiguous ? kMaxSeqLens : kBlockSizes;
    for (size_t p = 0; p < std::size(kAppendPairs); ++p) {
      for (size_t i = 0; i < 3; ++i) {
        for (size_t j = 0; j < 3; ++j) {
          size_t k = (i + j + p + l) % 3;
          matrix.push_back(make(Kind::Append, layout, sizes[k], kHeads[i],
                                kHeadDims[j], kAppendPairs[p].source,
                                kAppendPairs[p].cache));
        }
      }
    }
  }

  // Fused appends: three (heads, head_dim, block size) rows per paged layout
  // and dtype pair, each value of each axis once.
  for (size_t l = 0; l < std::size(kPagedLayouts); ++l) {
    for (size_t p = 0; p < std::size(kFusedPairs); ++p) {
      for (size_t i = 0; i < 3; ++i) {
        matrix.push_back(make(Kind::FusedAppend, kPagedLayouts[l],
                              kBlockSizes[(i + 2 * p + l) % 3], kHeads[i],
                              kHeadDims[(i + p) % 3], kFusedPairs[p].source,
                              kFusedPairs[p].cache));
      }
    }
  }

  // FlashInfer's page table (paged_kv_append): one description per paged
  // layout, each with a dtype pair, block size and shape of its own (block
  // size 3 for the division that is not a shift), and two quantized ones
  // (a static and a dynamic scale). Its slot rule is the same on every
  // layout; the rest of the kernel is the fused append's, which the rows
  // above cover.
  matrix.push_back(make(Kind::PagedKvAppend, Layout::PagedNHD, 16, 8, 128,
                        DType::BF16, DType::BF16));
  matrix.push_back(make(Kind::PagedKvAppend, Layout::PagedHND, 3, 3, 64,
                        DType::F16, DType::F16));
  matrix.push_back(make(Kind::PagedKvAppend, Layout::VllmVectorized, 32, 1, 256,
                        DType::F32, DType::BF16));
  matrix.push_back(make(Kind::PagedKvAppend, Layout::DualStacked, 64, 2, 64,
                        DType::F32, DType::F32));
  matrix.push_back(makeQuant(
      Kind::PagedKvAppend, Layout::PagedNHD, 16, 8, 128, DType::BF16,
      {QuantKind::FP8E4M3, Granularity::PerTensor, ScaleMode::Static, false}));
  matrix.push_back(makeQuant(
      Kind::PagedKvAppend, Layout::PagedHND, 32, 2, 64, DType::F16,
      {QuantKind::Int8, Granularity::PerTokenHead, ScaleMode::Dynamic, false}));

  // The slot-mapping builder only knows the block size; the cache type is
  // there because the op carries one.
  for (Layout layout : kPagedLayouts)
    for (int64_t blockSize : kBlockSizes)
      matrix.push_back(make(Kind::SlotMapping, layout, blockSize, 8, 128,
                            DType::BF16, DType::BF16));

  // Any block size: the sizes hybrid attention/Mamba models use (528, 672),
  // one that is a multiple of 16 but not a power of two (48), odd ones (1, 3)
  // and a power of two beside them, on every paged layout, for the append,
  // the fused append and the slot-mapping builder. Big blocks get a small
  // row so a case's caches stay a few MB.
  const int64_t kAnyBlockSizes[] = {1, 3, 16, 48, 528, 672};
  for (size_t l = 0; l < std::size(kPagedLayouts); ++l) {
    for (size_t b = 0; b < std::size(kAnyBlockSizes); ++b) {
      int64_t bs = kAnyBlockSizes[b];
      if (bs == 16)
        continue; // the rows above have it
      int64_t heads = bs > 64 ? 2 : kHeads[(l + b) % 3];
      int64_t dim = bs > 64 ? 64 : kHeadDims[(l + 2 * b) % 3];
      const DTypePair &pair = kFusedPairs[(l + b) % std::size(kFusedPairs)];
      matrix.push_back(make(Kind::Append, kPagedLayouts[l], bs, heads, dim,
                            pair.source, pair.cache));
      matrix.push_back(make(Kind::FusedAppend, kPagedLayouts[l], bs, heads, dim,
                            pair.source, pair.cache));
      if (l == 0)
        matrix.push_back(make(Kind::SlotMapping, kPagedLayouts[l], bs, 8, 128,
                              DType::BF16, DType::BF16));
    }
  }
  // max_seq_len of the contiguous layout: any value was always allowed.
  for (int64_t msl : {7, 100, 1000})
    matrix.push_back(make(Kind::Append, Layout::Contiguous, msl, 3, 64,
                          DType::BF16, DType::BF16));

  // Quantized caches: every valid (layout, kind, granularity, mode), as an
  // append and (paged layouts) a fused append, each with its gather for the
  // roundtrip. Geometry and source dtype rotate so each value meets each
  // quantization.
  const struct {
    int64_t heads, dim;
  } kQuantShapes[] = {{8, 128}, {1, 64}, {3, 256}, {2, 80}};
  const DType kQuantSources[] = {DType::BF16, DType::F16, DType::F32};
  size_t q = 0;
  for (Layout layout : kLayouts) {
    const int64_t *sizes =
        layout == Layout::Contiguous ? kMaxSeqLens : kBlockSizes;
    for (const QuantSpec &quant : validQuants(layout)) {
      auto shape = kQuantShapes[q % std::size(kQuantShapes)];
      int64_t bs = sizes[(q / 2) % 3];
      DType source = kQuantSources[q % 3];
      matrix.push_back(makeQuant(Kind::Append, layout, bs, shape.heads,
                                 shape.dim, source, quant));
      if (isPaged(layout)) {
        auto fshape = kQuantShapes[(q + 1) % std::size(kQuantShapes)];
        matrix.push_back(makeQuant(
            Kind::FusedAppend, layout, sizes[(q / 2 + 1) % 3], fshape.heads,
            fshape.dim, kQuantSources[(q + 1) % 3], quant));
      }
      ++q;
    }
  }
  // The opt-in reciprocal, and quantized caches with block sizes that are
  // not powers of two.
  for (QuantKind kind :
       {QuantKind::FP8E4M3, QuantKind::FP8E5M2, QuantKind::Int8}) {
    matrix.push_back(
        makeQuant(Kind::Append, Layout::PagedNHD, 16, 8, 128, DType::BF16,
                  {kind, Granularity::PerTensor, ScaleMode::Static, true}));
    matrix.push_back(
        makeQuant(Kind::Append, Layout::PagedHND, 32, 3, 64, DType::F32,
                  {kind, Granularity::PerTokenHead, ScaleMode::Dynamic, true}));
  }
  matrix.push_back(makeQuant(
      Kind::Append, Layout::PagedNHD, 48, 3, 64, DType::BF16,
      {QuantKind::FP8E4M3, Granularity::PerBlock, ScaleMode::Static, false}));
  matrix.push_back(makeQuant(
      Kind::FusedAppend, Layout::VllmVectorized, 528, 2, 64, DType::BF16,
      {QuantKind::Int8, Granularity::PerTokenHead, ScaleMode::Dynamic, false}));
  matrix.push_back(makeQuant(
      Kind::Append, Layout::DualStacked, 3, 1, 64, DType::F16,
      {QuantKind::FP8E5M2, Granularity::PerToken, ScaleMode::Dynamic, false}));

  // Gathers on their own, of caches holding arbitrary bytes: every layout
  // from a plain cache, and each kind x granularity x mode into each output
  // dtype in turn.
  const DType kOutputs[] = {DType::F32, DType::BF16, DType::F16};
  const DTypePair kGatherPairs[] = {{DType::BF16, DType::F32},
                                    {DType::F16, DType::F16},
                                    {DType::F32, DType::F32},
                                    {DType::BF16, DType::BF16},
                                    {DType::F32, DType::BF16}};
  for (size_t l = 0; l < std::size(kLayouts); ++l) {
    const int64_t *sizes =
        kLayouts[l] == Layout::Contiguous ? kMaxSeqLens : kBlockSizes;
    matrix.push_back(makeGather(kLayouts[l], sizes[l % 3], kHeads[l % 3],
                                kHeadDims[(l + 1) % 3], kGatherPairs[l].source,
                                kGatherPairs[l].cache));
  }
  size_t g = 0;
  for (const QuantSpec &quant : validQuants(Layout::PagedNHD)) {
    Layout layout = kPagedLayouts[g % std::size(kPagedLayouts)];
    auto shape = kQuantShapes[(g + 2) % std::size(kQuantShapes)];
    matrix.push_back(makeQuant(Kind::Gather, layout, kBlockSizes[g % 3],
                               shape.heads, shape.dim, kOutputs[g % 3], quant));
    ++g;
  }

  // The GPU-only tests (CUDA graphs, caches past 2^32 elements) look these up
  // by name; they are the common serving shape (bf16, block 16, 8 x 128).
  matrix.push_back(make(Kind::Append, Layout::PagedNHD, 16, 8, 128, DType::BF16,
                        DType::BF16, "gpu_append_paged_nhd"));
  matrix.push_back(make(Kind::Append, Layout::VllmVectorized, 16, 8, 128,
                        DType::BF16, DType::BF16,
                        "gpu_append_vllm_vectorized"));
  matrix.push_back(make(Kind::Append, Layout::Contiguous, 512, 8, 128,
                        DType::BF16, DType::BF16, "gpu_append_contiguous"));
  matrix.push_back(make(Kind::FusedAppend, Layout::PagedNHD, 16, 8, 128,
                        DType::BF16, DType::BF16,
                        "gpu_fused_append_paged_nhd"));
  // The 2-GPU head-shard test's per-rank kernel: half of the 8 heads above.
  matrix.push_back(make(Kind::Append, Layout::PagedNHD, 16, 4, 128, DType::BF16,
                        DType::BF16, "gpu_append_paged_nhd_h4"));
  // The bit-exactness test against PyTorch's float8 conversion.
  Description fp8 = makeQuant(
      Kind::Append, Layout::PagedNHD, 16, 8, 128, DType::BF16,
      {QuantKind::FP8E4M3, Granularity::PerTensor, ScaleMode::Static, false});
  fp8.name = "gpu_append_paged_nhd_fp8_e4m3";
  matrix.push_back(fp8);
  for (Description &desc : latentMatrix())
    matrix.push_back(std::move(desc));
  for (Description &desc : asymmetricMatrix())
    matrix.push_back(std::move(desc));
  for (Description &desc : inlineScalesMatrix())
    matrix.push_back(std::move(desc));
  for (Description &desc : nvfp4Matrix())
    matrix.push_back(std::move(desc));
  return matrix;
}

std::vector<Description> reducedMatrix() {
  // One description per (kind, layout, dtype pair), and for quantized caches
  // per (kind, quantization kind, mode), taking a different member
  // of each group in turn so that block sizes, head counts, head dims and
  // granularities all still appear.
  std::vector<Description> matrix = conformanceMatrix();
  using Key = std::tuple<Kind, Layout, DType, DType, int>;
  std::map<Key, std::vector<size_t>> groups;
  std::vector<Key> order;
  for (size_t i = 0; i < matrix.size(); ++i) {
    const Description &desc = matrix[i];
    if (desc.name.rfind("gpu_", 0) == 0)
      continue;
    // Quantized: the layout rotates within the group instead (the
    // sanitizer runs have minutes, not hours). K and V of two head sizes
    // form groups of their own, which leave the others' picks as they were.
    int form = (desc.kOnly ? 3 : 0) + (desc.vHeadDim ? 6 : 0);
    Key key =
        desc.quant
            ? std::make_tuple(desc.kind, Layout::PagedNHD, DType::F32,
                              desc.cacheDtype,
                              static_cast<int>(desc.quant->mode) + 1 + form)
            : std::make_tuple(desc.kind, desc.layout, desc.sourceDtype,
                              desc.cacheDtype, form);
    auto &members = groups[key];
    if (members.empty())
      order.push_back(key);
    members.push_back(i);
  }
  std::vector<Description> reduced;
  for (size_t g = 0; g < order.size(); ++g) {
    const std::vector<size_t> &members = groups[order[g]];
    reduced.push_back(matrix[members[(g * 4) % members.size()]]);
  }
  return reduced;
}

std::optional<Description>
findDescription(const std::vector<Description> &matrix, std::string_view name) {
  for (const Description &desc : matrix)
    if (desc.name == name)
      return desc;
  return std::nullopt;
}

} // namespace kvgen::conformance
