//===- Description.cpp - Cache descriptions and the conformance matrix ----===//

#include "conformance/Description.h"

#include <map>
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
  }
  return DLDataType{kDLFloat, 32, 1};
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
  }
  return "?";
}

std::string Description::cacheType() const {
  std::ostringstream os;
  os << "!kv.cache<layout = " << layoutName(layout) << ", "
     << (layout == Layout::Contiguous ? "max_seq_len" : "block_size") << " = "
     << blockSize << ", num_kv_heads = " << numKvHeads
     << ", head_dim = " << headDim << ", dtype = " << dtypeName(cacheDtype)
     << ">";
  return os.str();
}

std::string Description::toMlir() const {
  std::string op =
      std::string("kv.") + kindName(kind) + " @" + name + " : " + cacheType();
  if (kind != Kind::SlotMapping)
    op += std::string(" from ") + dtypeName(sourceDtype);
  return op;
}

std::vector<std::string> Description::kernelNames() const {
  if (kind == Kind::SlotMapping)
    return {name};
  return {name, scalarKernelName()};
}

std::string Description::summary() const {
  std::ostringstream os;
  os << name << " (" << kindName(kind) << ", " << layoutName(layout) << ", "
     << (layout == Layout::Contiguous ? "max_seq_len " : "block_size ")
     << blockSize << ", " << numKvHeads << " kv heads, head_dim " << headDim
     << ", " << dtypeName(sourceDtype) << " -> " << dtypeName(cacheDtype)
     << ")";
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
                 std::string name = "") {
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

  // The slot-mapping builder only knows the block size; the cache type is
  // there because the op carries one.
  for (Layout layout : kPagedLayouts)
    for (int64_t blockSize : kBlockSizes)
      matrix.push_back(make(Kind::SlotMapping, layout, blockSize, 8, 128,
                            DType::BF16, DType::BF16));

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
  return matrix;
}

std::vector<Description> reducedMatrix() {
  // One description per (kind, layout, dtype pair), taking a different member
  // of each group in turn so that block sizes, head counts and head dims all
  // still appear.
  std::vector<Description> matrix = conformanceMatrix();
  std::map<std::tuple<Kind, Layout, DType, DType>, std::vector<size_t>> groups;
  std::vector<std::tuple<Kind, Layout, DType, DType>> order;
  for (size_t i = 0; i < matrix.size(); ++i) {
    const Description &desc = matrix[i];
    if (desc.name.rfind("gpu_", 0) == 0)
      continue;
    auto key = std::make_tuple(desc.kind, desc.layout, desc.sourceDtype,
                               desc.cacheDtype);
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
