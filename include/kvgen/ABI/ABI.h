//===- ABI.h - the kernel ABI's vocabulary, defined once --------*- C++ -*-===//
//
// The names and parameter lists that the compiler writes into a bundle and
// kvrt reads back: layouts, dtypes, kernel kinds, quantization, and the
// parameters of each kernel kind (the .def files beside this header). The
// compiler, kvrt and kvbench all use it; it depends on nothing but the C++17
// standard library, so kvrt builds without MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_ABI_ABI_H
#define KVGEN_ABI_ABI_H

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kvgen::abi {

/// The bundle format version this vocabulary describes. Version 2 added
/// quantization (cache.quant, scale parameters) and the gather kind; version
/// 3 passes each buffer as one pointer instead of a five-parameter memref
/// descriptor; version 4 passes the scalars as i32 instead of i64. The
/// manifest lists the same names, but a kernel of one version launched with
/// another's parameters would read them from the wrong slots, so kvrt
/// refuses other versions instead of guessing.
inline constexpr int kBundleVersion = 4;

enum class Layout {
#define KVGEN_ABI_LAYOUT(Id, Name, KeyAxes, ValueAxes) Id,
#include "kvgen/ABI/Layouts.def"
};

enum class DType {
#define KVGEN_ABI_DTYPE(Id, Name, Bytes) Id,
#include "kvgen/ABI/DTypes.def"
};

enum class KernelKind {
#define KVGEN_ABI_KERNEL_KIND(Id, Name, Rows, Slot, Entry) Id,
#include "kvgen/ABI/KernelKinds.def"
};

/// A kind's traits (KernelKinds.def says what each means).
enum class KindRows { Into, OutOf, None };
enum class KindSlot { Mapping, BlockTable, PageTable };
enum class KindEntry { KV, Latent, None };
struct KindTraits {
  KindRows rows;
  KindSlot slot;
  KindEntry entry;
};

constexpr KindTraits kindTraits(KernelKind kind) {
  switch (kind) {
#define KVGEN_ABI_KERNEL_KIND(Id, Name, Rows, Slot, Entry)                     \
  case KernelKind::Id:                                                         \
    return {KindRows::Rows, KindSlot::Slot, KindEntry::Entry};
#include "kvgen/ABI/KernelKinds.def"
  }
  return {KindRows::None, KindSlot::Mapping, KindEntry::None};
}

/// A description's kernels. Vector and scalar are the alignment promise's two
/// sides; wide is a vector kernel planned for many tokens (two chunks a
/// thread, or a dynamic scale's IEEE division), which kvrt picks from the
/// launch's token count alone, so a captured graph stays valid.
enum class Variant { Vector, Scalar, Wide };

enum class QuantKind {
#define KVGEN_ABI_QUANT_KIND(Id, Name, QMax) Id,
#include "kvgen/ABI/Quant.def"
};

enum class ScaleGranularity {
#define KVGEN_ABI_SCALE_GRANULARITY(Id, Name) Id,
#include "kvgen/ABI/Quant.def"
};

enum class ScaleMode {
#define KVGEN_ABI_SCALE_MODE(Id, Name) Id,
#include "kvgen/ABI/Quant.def"
};

/// Which optional parameter groups a description's kernels take.
enum class Quantization { None, Static, Dynamic };

enum class Param {
#define KVGEN_ABI_PARAM(Id, Name, Role, Element) Id,
#include "kvgen/ABI/Params.def"
};

enum class ParamRole { Buffer, Scalar };
/// What a buffer parameter's elements are (None for scalars).
enum class ParamElement { Source, Cache, Output, F32, I32, I64, None };
enum class ParamWhen {
  Always,
  QuantStatic,
  QuantDynamic,
  /// The V side of the three above: absent for a K-only cache.
  WithValue,
  QuantStaticWithValue,
  QuantDynamicWithValue,
  /// The parts of a fused prologue (#kv.prologue<...>): absent without one.
  PrologueNorm,
  PrologueQNorm,
  PrologueRope,
  PrologueQ,
  /// Q written quantized (q_quant): its scale.
  PrologueQQuant
};

/// Which parts of a fused prologue a description has (none: no prologue).
struct PrologueParts {
  bool norm = false;
  bool rope = false;
  /// Q is read and written rotated (q_heads > 0).
  bool q = false;
  /// Q is written quantized (q_quant), with a scale.
  bool qQuant = false;
};

struct ParamInfo {
  Param id;
  const char *name;
  ParamRole role;
  ParamElement element;
};

struct KernelParam {
  KernelKind kind;
  Param id;
  ParamWhen when;
};

inline constexpr ParamInfo kParams[] = {
#define KVGEN_ABI_PARAM(Id, Name, Role, Element)                               \
  {Param::Id, Name, ParamRole::Role, ParamElement::Element},
#include "kvgen/ABI/Params.def"
};

inline constexpr KernelParam kKernelParams[] = {
#define KVGEN_ABI_KERNEL_PARAM(Kind, Id, When)                                 \
  {KernelKind::Kind, Param::Id, ParamWhen::When},
#include "kvgen/ABI/Params.def"
};

/// Whether a kernel of `kind` may store to buffer `param` (Params.def's
/// KVGEN_ABI_KERNEL_WRITES); false for a parameter the kind does not take.
constexpr bool kernelWrites(KernelKind kind, Param param) {
#define KVGEN_ABI_KERNEL_WRITES(Kind, Id)                                      \
  if (kind == KernelKind::Kind && param == Param::Id)                          \
    return true;
#include "kvgen/ABI/Params.def"
  return false;
}

//===----------------------------------------------------------------------===//
// Names
//===----------------------------------------------------------------------===//

constexpr const char *layoutName(Layout layout) {
  switch (layout) {
#define KVGEN_ABI_LAYOUT(Id, Name, KeyAxes, ValueAxes)                         \
  case Layout::Id:                                                             \
    return Name;
#include "kvgen/ABI/Layouts.def"
  }
  return "?";
}

constexpr const char *dtypeName(DType dtype) {
  switch (dtype) {
#define KVGEN_ABI_DTYPE(Id, Name, Bytes)                                       \
  case DType::Id:                                                              \
    return Name;
#include "kvgen/ABI/DTypes.def"
  }
  return "?";
}

constexpr size_t dtypeBytes(DType dtype) {
  switch (dtype) {
#define KVGEN_ABI_DTYPE(Id, Name, Bytes)                                       \
  case DType::Id:                                                              \
    return Bytes;
#include "kvgen/ABI/DTypes.def"
  }
  return 0;
}

constexpr const char *kindName(KernelKind kind) {
  switch (kind) {
#define KVGEN_ABI_KERNEL_KIND(Id, Name, Rows, Slot, Entry)                     \
  case KernelKind::Id:                                                         \
    return Name;
#include "kvgen/ABI/KernelKinds.def"
  }
  return "?";
}

/// In Variant's order (parseVariant reads them back).
inline constexpr const char *kVariantNames[] = {"vector", "scalar", "wide"};

constexpr const char *variantName(Variant variant) {
  return kVariantNames[static_cast<size_t>(variant)];
}

/// The suffix a variant adds to its description's name to name its kernel.
constexpr const char *variantSuffix(Variant variant) {
  switch (variant) {
  case Variant::Vector:
    return "";
  case Variant::Scalar:
    return "_scalar";
  case Variant::Wide:
    return "_wide";
  }
  return "?";
}

/// Whether a variant's kernel moves whole chunks with vector accesses, under
/// the alignment promise.
constexpr bool hasVectorPromise(Variant variant) {
  return variant != Variant::Scalar;
}

constexpr const char *quantKindName(QuantKind kind) {
  switch (kind) {
#define KVGEN_ABI_QUANT_KIND(Id, Name, QMax)                                   \
  case QuantKind::Id:                                                          \
    return Name;
#include "kvgen/ABI/Quant.def"
  }
  return "?";
}

/// The largest magnitude the kind stores: the saturation bound, and the
/// divisor of a dynamic scale (amax / qmax).
constexpr float quantMax(QuantKind kind) {
  switch (kind) {
#define KVGEN_ABI_QUANT_KIND(Id, Name, QMax)                                   \
  case QuantKind::Id:                                                          \
    return QMax;
#include "kvgen/ABI/Quant.def"
  }
  return 0;
}

constexpr const char *granularityName(ScaleGranularity granularity) {
  switch (granularity) {
#define KVGEN_ABI_SCALE_GRANULARITY(Id, Name)                                  \
  case ScaleGranularity::Id:                                                   \
    return Name;
#include "kvgen/ABI/Quant.def"
  }
  return "?";
}

constexpr const char *scaleModeName(ScaleMode mode) {
  switch (mode) {
#define KVGEN_ABI_SCALE_MODE(Id, Name)                                         \
  case ScaleMode::Id:                                                          \
    return Name;
#include "kvgen/ABI/Quant.def"
  }
  return "?";
}

constexpr const ParamInfo &paramInfo(Param param) {
  return kParams[static_cast<size_t>(param)];
}
constexpr const char *paramName(Param param) { return paramInfo(param).name; }

//===----------------------------------------------------------------------===//
// Parsing
//===----------------------------------------------------------------------===//

/// Sets `*out` to the entry named `name`; false if there is none.
template <typename Enum, size_t N>
constexpr bool parseName(const char *const (&names)[N], std::string_view name,
                         Enum *out) {
  for (size_t i = 0; i < N; ++i) {
    if (name == names[i]) {
      *out = static_cast<Enum>(i);
      return true;
    }
  }
  return false;
}

inline constexpr const char *kLayoutNames[] = {
#define KVGEN_ABI_LAYOUT(Id, Name, KeyAxes, ValueAxes) Name,
#include "kvgen/ABI/Layouts.def"
};
inline constexpr const char *kDTypeNames[] = {
#define KVGEN_ABI_DTYPE(Id, Name, Bytes) Name,
#include "kvgen/ABI/DTypes.def"
};
inline constexpr const char *kKindNames[] = {
#define KVGEN_ABI_KERNEL_KIND(Id, Name, Rows, Slot, Entry) Name,
#include "kvgen/ABI/KernelKinds.def"
};
inline constexpr const char *kQuantKindNames[] = {
#define KVGEN_ABI_QUANT_KIND(Id, Name, QMax) Name,
#include "kvgen/ABI/Quant.def"
};
inline constexpr const char *kGranularityNames[] = {
#define KVGEN_ABI_SCALE_GRANULARITY(Id, Name) Name,
#include "kvgen/ABI/Quant.def"
};
inline constexpr const char *kScaleModeNames[] = {
#define KVGEN_ABI_SCALE_MODE(Id, Name) Name,
#include "kvgen/ABI/Quant.def"
};

constexpr bool parseLayout(std::string_view name, Layout *out) {
  return parseName(kLayoutNames, name, out);
}
constexpr bool parseDType(std::string_view name, DType *out) {
  return parseName(kDTypeNames, name, out);
}
constexpr bool parseKind(std::string_view name, KernelKind *out) {
  return parseName(kKindNames, name, out);
}
constexpr bool parseVariant(std::string_view name, Variant *out) {
  return parseName(kVariantNames, name, out);
}
constexpr bool parseQuantKind(std::string_view name, QuantKind *out) {
  return parseName(kQuantKindNames, name, out);
}
constexpr bool parseGranularity(std::string_view name, ScaleGranularity *out) {
  return parseName(kGranularityNames, name, out);
}
constexpr bool parseScaleMode(std::string_view name, ScaleMode *out) {
  return parseName(kScaleModeNames, name, out);
}

//===----------------------------------------------------------------------===//
// Parameter lists
//===----------------------------------------------------------------------===//

/// Whether a parameter that exists `when` is part of a description
/// quantized as `quant` whose cache is K-only (no V) or not.
constexpr bool isPresent(ParamWhen when, Quantization quant, bool kOnly = false,
                         PrologueParts prologue = {}) {
  switch (when) {
  case ParamWhen::PrologueNorm:
    return prologue.norm;
  case ParamWhen::PrologueQNorm:
    return prologue.norm && prologue.q;
  case ParamWhen::PrologueRope:
    return prologue.rope;
  case ParamWhen::PrologueQ:
    return prologue.q;
  case ParamWhen::PrologueQQuant:
    return prologue.q && prologue.qQuant;
  case ParamWhen::Always:
    return true;
  case ParamWhen::QuantStatic:
    return quant == Quantization::Static;
  case ParamWhen::QuantDynamic:
    return quant == Quantization::Dynamic;
  case ParamWhen::WithValue:
    return !kOnly;
  case ParamWhen::QuantStaticWithValue:
    return !kOnly && quant == Quantization::Static;
  case ParamWhen::QuantDynamicWithValue:
    return !kOnly && quant == Quantization::Dynamic;
  }
  return false;
}

/// Calls `fn(const ParamInfo &)` for each parameter of `kind`, in ABI order
/// (buffers first), for a description quantized as `quant` whose cache is
/// K-only or not.
template <typename Fn>
void forEachParam(KernelKind kind, Quantization quant, bool kOnly, Fn &&fn) {
  for (const KernelParam &p : kKernelParams)
    if (p.kind == kind && isPresent(p.when, quant, kOnly))
      fn(paramInfo(p.id));
}

/// The same for a description with a fused prologue's `prologue` parts.
template <typename Fn>
void forEachParam(KernelKind kind, Quantization quant, bool kOnly,
                  PrologueParts prologue, Fn &&fn) {
  for (const KernelParam &p : kKernelParams)
    if (p.kind == kind && isPresent(p.when, quant, kOnly, prologue))
      fn(paramInfo(p.id));
}

/// The same for a cache with K and V.
template <typename Fn>
void forEachParam(KernelKind kind, Quantization quant, Fn &&fn) {
  forEachParam(kind, quant, /*kOnly=*/false, static_cast<Fn &&>(fn));
}

/// The number of parameters forEachParam visits, and how many of them are
/// buffers.
constexpr size_t countParams(KernelKind kind, Quantization quant,
                             size_t *buffers = nullptr) {
  size_t total = 0, numBuffers = 0;
  for (const KernelParam &p : kKernelParams) {
    if (p.kind != kind || !isPresent(p.when, quant))
      continue;
    ++total;
    if (paramInfo(p.id).role == ParamRole::Buffer)
      ++numBuffers;
  }
  if (buffers)
    *buffers = numBuffers;
  return total;
}

/// The most parameters and buffers any kernel takes: kvrt's fixed-size
/// launch arrays. A K-only cache only drops parameters, so counting with
/// K and V bounds it. A fused prologue's parameters are not counted here:
/// kvrt bounds its arrays with every part of a prologue counted
/// (runtime/src/Validation.h, maxParamsWithPrologue).
constexpr size_t maxParams() {
  size_t most = 0;
  for (KernelKind kind : {
#define KVGEN_ABI_KERNEL_KIND(Id, Name, Rows, Slot, Entry) KernelKind::Id,
#include "kvgen/ABI/KernelKinds.def"
       })
    for (Quantization q :
         {Quantization::None, Quantization::Static, Quantization::Dynamic})
      most = countParams(kind, q) > most ? countParams(kind, q) : most;
  return most;
}
constexpr size_t maxBuffers() {
  size_t most = 0;
  for (KernelKind kind : {
#define KVGEN_ABI_KERNEL_KIND(Id, Name, Rows, Slot, Entry) KernelKind::Id,
#include "kvgen/ABI/KernelKinds.def"
       })
    for (Quantization q :
         {Quantization::None, Quantization::Static, Quantization::Dynamic}) {
      size_t buffers = 0;
      countParams(kind, q, &buffers);
      most = buffers > most ? buffers : most;
    }
  return most;
}

/// The most scalars any kernel takes. Not maxParams() - maxBuffers(): the
/// kind with the most parameters need not be the one with the most scalars
/// (paged_kv_append has a buffer more and a scalar less than fused_append).
constexpr size_t maxScalars() {
  size_t most = 0;
  for (KernelKind kind : {
#define KVGEN_ABI_KERNEL_KIND(Id, Name, Rows, Slot, Entry) KernelKind::Id,
#include "kvgen/ABI/KernelKinds.def"
       })
    for (Quantization q :
         {Quantization::None, Quantization::Static, Quantization::Dynamic}) {
      size_t buffers = 0;
      size_t scalars = countParams(kind, q, &buffers) - buffers;
      most = scalars > most ? scalars : most;
    }
  return most;
}

// Every KVGEN_ABI_KERNEL_WRITES entry is a buffer its kind takes.
static_assert(
    [] {
      auto takes = [](KernelKind kind, Param param) {
        for (const KernelParam &p : kKernelParams)
          if (p.kind == kind && p.id == param)
            return paramInfo(param).role == ParamRole::Buffer;
        return false;
      };
#define KVGEN_ABI_KERNEL_WRITES(Kind, Id)                                      \
  if (!takes(KernelKind::Kind, Param::Id))                                     \
    return false;
#include "kvgen/ABI/Params.def"
      return true;
    }(),
    "Params.def: a KVGEN_ABI_KERNEL_WRITES entry names a scalar, or a buffer "
    "its kind does not take");

// The table's order is the enum's: paramInfo indexes it.
static_assert(
    [] {
      for (size_t i = 0; i < sizeof(kParams) / sizeof(kParams[0]); ++i)
        if (static_cast<size_t>(kParams[i].id) != i)
          return false;
      return true;
    }(),
    "kParams must list the parameters in the order of enum Param");

} // namespace kvgen::abi

#include "kvgen/ABI/LayoutInfo.h"

#endif // KVGEN_ABI_ABI_H
