//===- Packing.cpp - a launch's parameters in ABI order -------------------===//

#include "Packing.h"

#include "Limits.h"

#include <algorithm>
#include <iterator>
#include <memory>

namespace kvrt::impl {

using abi::Param;

namespace {
constexpr int kNumKinds = static_cast<int>(std::size(abi::kKindNames));
constexpr int kNumQuantizations = 3;
} // namespace

const ParamList &paramList(KernelKind kind, Quantization quant, bool kOnly,
                           abi::PrologueParts prologue) {
  // By kind, quantization, K-only, then the prologue's four parts as bits.
  constexpr int kPrologues = 16;
  static const auto lists = [] {
    auto all = std::make_unique<ParamList[]>(kNumKinds * kNumQuantizations * 2 *
                                             kPrologues);
    for (int k = 0; k < kNumKinds; ++k)
      for (int q = 0; q < kNumQuantizations; ++q)
        for (int only = 0; only < 2; ++only)
          for (int bits = 0; bits < kPrologues; ++bits) {
            ParamList &list =
                all[((k * kNumQuantizations + q) * 2 + only) * kPrologues +
                    bits];
            abi::PrologueParts parts = {(bits & 1) != 0, (bits & 2) != 0,
                                        (bits & 4) != 0, (bits & 8) != 0};
            abi::forEachParam(static_cast<KernelKind>(k),
                              static_cast<Quantization>(q), only != 0, parts,
                              [&](const abi::ParamInfo &param) {
                                list.params[list.count++] = &param;
                              });
          }
    return all;
  }();
  int bits = (prologue.norm ? 1 : 0) | (prologue.rope ? 2 : 0) |
             (prologue.q ? 4 : 0) | (prologue.qQuant ? 8 : 0);
  return lists[((static_cast<int>(kind) * kNumQuantizations +
                 static_cast<int>(quant)) *
                    2 +
                (kOnly ? 1 : 0)) *
                   kPrologues +
               bits];
}

/// The elements one step of `view`'s outermost dimension (a token of a row
/// tensor, a block or row of a cache) spans: the furthest offset reached
/// without stepping it, plus one.
static int64_t innerSpan(const TensorView &view) {
  int64_t span = 1;
  for (int i = 1; i < view.rank; ++i)
    if (view.shape[i] > 0) // an empty dimension reaches nothing
      span += (view.shape[i] - 1) * view.strides[i];
  return span;
}

/// The kernels take their scalars as i32 and address within one token or
/// block in 32 bits (docs/KERNEL-ABI.md, "Limits"): a launch past either
/// bound is refused, never truncated.
static Status checkFitsAbi(const abi::ParamInfo &param, int64_t scalar,
                           const TensorView *view) {
  if (param.role == abi::ParamRole::Scalar) {
    if (scalar <= limits::kMaxScalar)
      return Status();
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                      "%s is %lld, past 2^31 - 1: the kernels take strides "
                      "and counts as 32-bit integers",
                      param.name, static_cast<long long>(scalar));
  }
  const char *unit = nullptr;
  switch (param.element) {
  case abi::ParamElement::Source:
  case abi::ParamElement::Output:
    unit = "token";
    break;
  case abi::ParamElement::Cache:
    unit = "block";
    break;
  default:
    return Status(); // indexed by slot or token in 64 bits
  }
  // A view's dimensions are at most rank 5 of extents and strides that
  // passed the 64-bit overflow check of its extent: no overflow here.
  int64_t span = innerSpan(*view);
  if (span <= limits::kMaxScalar)
    return Status();
  return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                    "%s: one %s of it spans %lld elements, past 2^31 - 1: the "
                    "kernels compute offsets within a %s in 32 bits",
                    view->name, unit, static_cast<long long>(span), unit);
}

Status packInAbiOrder(const KernelDescription &kernel,
                      const ParamValues &values, LaunchPlan *plan) {
  std::fill(std::begin(plan->bufferOf), std::end(plan->bufferOf), -1);
  const char *unset = nullptr;
  const ParamList &list =
      paramList(kernel.kind, kernel.cache.quantization(),
                !kernel.cache.hasValue(), kernel.prologue.parts());
  for (int i = 0; i < list.count; ++i) {
    const abi::ParamInfo &param = *list.params[i];
    int id = static_cast<int>(param.id);
    if (param.role == abi::ParamRole::Scalar || values.views[id])
      KVRT_RETURN_IF_ERROR(
          checkFitsAbi(param, values.scalars[id], values.views[id]));
    if (param.role == abi::ParamRole::Scalar) {
      plan->scalars[plan->numScalars++] =
          static_cast<int32_t>(values.scalars[id]);
      continue;
    }
    if (!values.views[id]) {
      unset = param.name;
      break;
    }
    plan->bufferOf[id] = plan->numBuffers;
    plan->bufferParams[plan->numBuffers] = param.id;
    plan->buffers[plan->numBuffers++] = *values.views[id];
  }
  if (unset)
    return KVRT_ERROR(KVRT_ERROR_INTERNAL,
                      "kvrt has no value for the parameter '%s' of kind %s",
                      unset, kindName(kernel.kind));
  plan->kind = kernel.kind;
  // The vector variant moves the rows, then the cache entries, 16 bytes at
  // a time; a V cache side whose head_dim elements are not adjacent is
  // written element by element.
  bool valueChunks =
      abi::layoutInfo(kernel.cache.layout).chunkContiguous(/*isValue=*/true);
  for (bool rows : {true, false})
    for (int i = 0; i < plan->numBuffers; ++i) {
      abi::ParamElement element = abi::paramInfo(plan->bufferParams[i]).element;
      bool isRows = element == abi::ParamElement::Source ||
                    element == abi::ParamElement::Output;
      bool isCache =
          element == abi::ParamElement::Cache &&
          (plan->bufferParams[i] != Param::ValueCache || valueChunks);
      if (rows ? isRows : isCache)
        plan->promised[plan->numPromised++] = i;
    }
  return Status();
}

PackedParams::PackedParams(const LaunchPlan &plan) {
  for (int i = 0; i < plan.numBuffers; ++i) {
    // One pointer per buffer, its first element: the kernel indexes from it
    // with the explicit stride scalars.
    pointers[i] = plan.buffers[i].first;
    params[count++] = &pointers[i];
  }
  for (int i = 0; i < plan.numScalars; ++i) {
    scalars[i] = plan.scalars[i];
    params[count++] = &scalars[i];
  }
}

} // namespace kvrt::impl
