//===- SupportChecker.h - a matrix cell, asked of the dialect ---*- C++ -*-===//
//
// The support matrix (SupportMatrix.cpp) asks the kv dialect's verifier
// about one description per cell: the forms of cache, the ABI's values to
// range over, and the checker that writes a description of a cell, parses
// it and keeps what the dialect accepts (for --print-support-matrix=kv).
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_TOOLS_KVGEN_SUPPORTCHECKER_H
#define KVGEN_TOOLS_KVGEN_SUPPORTCHECKER_H

#include "kvgen/ABI/ABI.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringRef.h"

#include <array>
#include <set>
#include <string>
#include <vector>

namespace kvgen::driver::matrix {

namespace abi = kvgen::abi;

/// The shapes of cache a description can have: K and V of one head size
/// or of two (`v_head_dim`), K only, an MLA latent.
enum class Form { KV, KVTwoSizes, KOnly, Latent };
inline constexpr Form kForms[] = {Form::KV, Form::KVTwoSizes, Form::KOnly,
                                  Form::Latent};

/// How the matrix names a form.
const char *formName(Form form);

/// Every value of an ABI enum, in the order of its names.
template <typename Enum, size_t N>
constexpr std::array<Enum, N> allOf(const char *const (&)[N]) {
  std::array<Enum, N> all{};
  for (size_t i = 0; i < N; ++i)
    all[i] = static_cast<Enum>(i);
  return all;
}
inline constexpr auto kLayouts = allOf<abi::Layout>(abi::kLayoutNames);
inline constexpr auto kKinds = allOf<abi::KernelKind>(abi::kKindNames);
inline constexpr auto kDTypes = allOf<abi::DType>(abi::kDTypeNames);
inline constexpr auto kQuantKinds = allOf<abi::QuantKind>(abi::kQuantKindNames);
inline constexpr auto kGranularities =
    allOf<abi::ScaleGranularity>(abi::kGranularityNames);
inline constexpr auto kModes = allOf<abi::ScaleMode>(abi::kScaleModeNames);

/// Writes the description of a cell and asks the dialect about it.
struct Checker {
  explicit Checker(mlir::MLIRContext &context) : context(context) {}

  /// MLIR's spelling of an ABI dtype: its name, but for the fp8 types.
  static std::string typeText(abi::DType dtype);

  /// The ABI dtype a quantization kind stores (QuantAttr::getStorageType).
  abi::DType storageOf(abi::QuantKind kind);

  /// What a kind's op takes after its cache, as its rows trait says:
  /// " from " the rows' type, " to " it, or nothing.
  llvm::StringRef clauseOf(abi::KernelKind kind);

  /// A cache of `form` in `layout` storing `dtype`, quantized by `quant` (or
  /// not: empty), of 8 heads of 128 or a latent of 512 + 64.
  std::string cacheText(abi::Layout layout, Form form, abi::DType dtype,
                        llvm::StringRef quant);

  static std::string quantText(abi::QuantKind kind, abi::ScaleGranularity g,
                               abi::ScaleMode mode, bool reciprocal = false);

  /// One kernel of `kind` on `cache`, its rows of `rows`.
  std::string opText(abi::KernelKind kind, llvm::StringRef symbol,
                     llvm::StringRef cache, abi::DType rows);

  /// Whether the dialect accepts `op` (a kv op's text); `why` receives the
  /// first error otherwise. An accepted op is kept for the =kv module, with
  /// `label` as its comment.
  bool accepts(abi::KernelKind kind, llvm::StringRef cache, abi::DType rows,
               llvm::StringRef label, std::string *why = nullptr);

  mlir::MLIRContext &context;
  std::set<std::string> kept;
  std::vector<std::string> keptOps;
};

} // namespace kvgen::driver::matrix

#endif // KVGEN_TOOLS_KVGEN_SUPPORTCHECKER_H
