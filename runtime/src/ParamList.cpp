//===- ParamList.cpp - each kind's parameters, listed once ----------------===//

#include "ParamList.h"

#include <iterator>
#include <memory>

namespace kvrt::impl {

namespace {
constexpr int kNumKinds = static_cast<int>(std::size(abi::kKindNames));
constexpr int kNumQuantizations = 3;
} // namespace

const ParamList &paramList(KernelKind kind, Quantization quant, bool kOnly) {
  static const auto lists = [] {
    auto all = std::make_unique<ParamList[]>(kNumKinds * kNumQuantizations * 2);
    for (int k = 0; k < kNumKinds; ++k)
      for (int q = 0; q < kNumQuantizations; ++q)
        for (int only = 0; only < 2; ++only) {
          ParamList &list = all[(k * kNumQuantizations + q) * 2 + only];
          abi::forEachParam(static_cast<KernelKind>(k),
                            static_cast<Quantization>(q), only != 0,
                            [&](const abi::ParamInfo &param) {
                              list.params[list.count++] = &param;
                            });
        }
    return all;
  }();
  return lists[(static_cast<int>(kind) * kNumQuantizations +
                static_cast<int>(quant)) *
                   2 +
               (kOnly ? 1 : 0)];
}

} // namespace kvrt::impl
