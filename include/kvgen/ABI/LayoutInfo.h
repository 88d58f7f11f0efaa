//===- LayoutInfo.h - what a cache layout's axes imply ----------*- C++ -*-===//
//
// A layout is the axes of its cache tensors (Layouts.def). Every rule that
// differs between layouts is a trait derived here from those axes, so that
// the compiler, kvrt and kvbench ask about traits (paged, stacked, x, ...)
// and never about a layout by name. Included by ABI.h.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_ABI_LAYOUTINFO_H
#define KVGEN_ABI_LAYOUTINFO_H

#include "kvgen/ABI/ABI.h"

#include <string>

namespace kvgen::abi {

/// One dimension of a cache tensor; Layouts.def says what each means.
enum class Axis : uint8_t { Block, Batch, Side, Head, Pos, Dim, DimOverX, X };

/// The most dimensions a cache tensor has.
inline constexpr int kMaxCacheRank = 5;

/// The axes of one cache tensor, outermost first.
struct CacheAxes {
  Axis axes[kMaxCacheRank] = {};
  int rank = 0;

  constexpr Axis operator[](int i) const { return axes[i]; }
  /// The position of `axis`, or -1.
  constexpr int find(Axis axis) const {
    for (int i = 0; i < rank; ++i)
      if (axes[i] == axis)
        return i;
    return -1;
  }
  constexpr bool has(Axis axis) const { return find(axis) >= 0; }
  constexpr bool operator==(const CacheAxes &other) const {
    if (rank != other.rank)
      return false;
    for (int i = 0; i < rank; ++i)
      if (axes[i] != other.axes[i])
        return false;
    return true;
  }
  /// The axes without Side: what a stacked cache's K or V view has.
  constexpr CacheAxes view() const {
    CacheAxes out;
    for (int i = 0; i < rank; ++i)
      if (axes[i] != Axis::Side)
        out.axes[out.rank++] = axes[i];
    return out;
  }
  // Where the four cache strides of a kernel (docs/KERNEL-ABI.md: block,
  // head, pos, dim) are read; on a view for a stacked cache.
  constexpr int blockAxis() const {
    return has(Axis::Block) ? find(Axis::Block) : find(Axis::Batch);
  }
  constexpr int headAxis() const { return find(Axis::Head); }
  constexpr int posAxis() const { return find(Axis::Pos); }
  /// Dim, or DimOverX: then the element d is at (d / x) * dim + d % x.
  constexpr int dimAxis() const {
    return has(Axis::Dim) ? find(Axis::Dim) : find(Axis::DimOverX);
  }
};

/// A layout and the traits its axes imply.
struct LayoutInfo {
  Layout id;
  const char *name;
  CacheAxes key, value;

  constexpr const CacheAxes &axes(bool isValue) const {
    return isValue ? value : key;
  }
  /// Blocks of block_size slots (slot_mapping, block tables); otherwise one
  /// row of max_seq_len slots per request (a Batch axis).
  constexpr bool paged() const { return key.has(Axis::Block); }
  /// K and V in one tensor, at index 0 and 1 of its Side axis: the caller
  /// passes key_cache only.
  constexpr bool stacked() const { return key.has(Axis::Side); }
  /// Whether a side splits head_dim into groups of x elements (16 bytes of
  /// the cache dtype).
  constexpr bool hasX(bool isValue) const { return axes(isValue).has(Axis::X); }
  /// Whether the description states x: some side has an X axis.
  constexpr bool hasX() const { return hasX(false) || hasX(true); }
  /// Whether consecutive head_dim elements are adjacent on a side (its
  /// innermost axis is Dim or X): a vector then moves a chunk whole.
  constexpr bool chunkContiguous(bool isValue) const {
    const CacheAxes &a = axes(isValue);
    return a[a.rank - 1] == Axis::Dim || a[a.rank - 1] == Axis::X;
  }
  /// Whether both sides move chunks whole (no side takes element stores).
  constexpr bool chunkContiguous() const {
    return chunkContiguous(false) && chunkContiguous(true);
  }
  /// Whether each slot's [num_kv_heads, head_dim] is one contiguous row of
  /// a paged tensor of its own (the axes end in Pos, Head, Dim): the form
  /// an MLA latent cache [num_blocks, block_size, entry] takes.
  constexpr bool tokenMajor() const {
    for (const CacheAxes *a : {&key, &value})
      if (a->rank < 3 || (*a)[a->rank - 3] != Axis::Pos ||
          (*a)[a->rank - 2] != Axis::Head || (*a)[a->rank - 1] != Axis::Dim)
        return false;
    return paged() && !stacked();
  }
  /// What the description, the bundle and the messages call the first
  /// axis's extent and the slots of a block.
  constexpr const char *blocksName() const {
    return paged() ? "num_blocks" : "batch";
  }
  constexpr const char *tokensName() const {
    return paged() ? "block_size" : "max_seq_len";
  }
};

/// The layout of a description that names none (kvgen's --layout, kvbench
/// without a bundle, the Python package's describe): vLLM's flash layout.
inline constexpr Layout kDefaultLayout = Layout::PagedNHD;

/// The extent's name of `axis` in a layout that is `paged` or not, as
/// shapes and messages print it.
constexpr const char *axisName(Axis axis, bool paged) {
  switch (axis) {
  case Axis::Block:
    return "num_blocks";
  case Axis::Batch:
    return "batch";
  case Axis::Side:
    return "K/V index";
  case Axis::Head:
    return "num_kv_heads";
  case Axis::Pos:
    return paged ? "block_size" : "max_seq_len";
  case Axis::Dim:
    return "head_dim";
  case Axis::DimOverX:
    return "head_dim/x";
  case Axis::X:
    return "x";
  }
  return "?";
}

/// The extent of `axis` in a cache of these sizes; `blocks` may be -1 (the
/// caller binds it).
constexpr int64_t axisExtent(Axis axis, int64_t blocks, int64_t numKvHeads,
                             int64_t tokensPerBlock, int64_t headDim,
                             int64_t x) {
  switch (axis) {
  case Axis::Block:
  case Axis::Batch:
    return blocks;
  case Axis::Side:
    return 2;
  case Axis::Head:
    return numKvHeads;
  case Axis::Pos:
    return tokensPerBlock;
  case Axis::Dim:
    return headDim;
  case Axis::DimOverX:
    return x ? headDim / x : 0;
  case Axis::X:
    return x;
  }
  return 0;
}

/// The table of Layouts.def. Its axis names are spelled bare there, so they
/// are declared in a namespace of their own.
namespace layout_axes {
inline constexpr Axis Block = Axis::Block, Batch = Axis::Batch,
                      Side = Axis::Side, Head = Axis::Head, Pos = Axis::Pos,
                      Dim = Axis::Dim, DimOverX = Axis::DimOverX, X = Axis::X;
template <typename... Axes> constexpr CacheAxes list(Axes... axes) {
  static_assert(sizeof...(Axes) <= kMaxCacheRank, "too many cache axes");
  CacheAxes out;
  ((out.axes[out.rank++] = axes), ...);
  return out;
}
inline constexpr LayoutInfo kTable[] = {
#define KVGEN_ABI_LAYOUT(Id, Name, KeyAxes, ValueAxes)                         \
  {Layout::Id, Name, list KeyAxes, list ValueAxes},
#include "kvgen/ABI/Layouts.def"
};
} // namespace layout_axes

inline constexpr size_t kNumLayouts =
    sizeof(layout_axes::kTable) / sizeof(layout_axes::kTable[0]);

constexpr const LayoutInfo &layoutInfo(Layout layout) {
  return layout_axes::kTable[static_cast<size_t>(layout)];
}

/// Whether a layout's axes make sense: the same kind of first axis, heads,
/// slots and Side on both sides; head_dim whole or split with x innermost.
constexpr bool isWellFormed(const LayoutInfo &info) {
  if (info.key.blockAxis() != 0 || info.value.blockAxis() != 0 ||
      info.key.has(Axis::Block) != info.value.has(Axis::Block) ||
      info.key.has(Axis::Side) != info.value.has(Axis::Side))
    return false;
  for (const CacheAxes *a : {&info.key, &info.value}) {
    if (a->find(Axis::Side) > 1 || a->headAxis() < 0 || a->posAxis() < 0 ||
        a->dimAxis() < 0)
      return false;
    bool split = a->has(Axis::DimOverX);
    if (split == a->has(Axis::Dim) || split != a->has(Axis::X) ||
        (split && a->find(Axis::X) != a->rank - 1))
      return false;
  }
  return true;
}

static_assert(
    [] {
      for (size_t i = 0; i < kNumLayouts; ++i)
        if (static_cast<size_t>(layout_axes::kTable[i].id) != i ||
            !isWellFormed(layout_axes::kTable[i]))
          return false;
      return true;
    }(),
    "Layouts.def: a layout's axes are malformed (see isWellFormed)");

/// The names of the layouts that `pred(const LayoutInfo &)` holds for,
/// "a", "a or b", ...: what a message offers instead.
template <typename Pred> std::string layoutNamesWhere(Pred &&pred) {
  std::string out;
  for (const LayoutInfo &info : layout_axes::kTable) {
    if (!pred(info))
      continue;
    if (!out.empty())
      out += " or ";
    out += info.name;
  }
  return out;
}

} // namespace kvgen::abi

#endif // KVGEN_ABI_LAYOUTINFO_H
