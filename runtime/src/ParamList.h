//===- ParamList.h - each kind's parameters, listed once ------------------===//
//
// Planning packs a launch's parameters in its kind's ABI order
// (include/kvgen/ABI/Params.def). The ABI's table holds every kind's
// parameters; walking all of it for each launch that plans cost more than
// the packing itself, so the list of each (kind, quantization, K-only) is
// made once, on first use.
//
//===----------------------------------------------------------------------===//

#ifndef KVRT_SRC_PARAMLIST_H
#define KVRT_SRC_PARAMLIST_H

#include "Validation.h"

namespace kvrt::impl {

/// One description's parameters, in ABI order (buffers first).
struct ParamList {
  const abi::ParamInfo *params[kMaxParams];
  int count = 0;
};

/// The parameters of `kind` for a description quantized as `quant` whose
/// cache is K-only or not.
const ParamList &paramList(KernelKind kind, Quantization quant, bool kOnly);

} // namespace kvrt::impl

#endif // KVRT_SRC_PARAMLIST_H
