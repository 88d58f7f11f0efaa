//===- Passes.h - kvgen's LLVM-level transforms -----------------*- C++ -*-===//
//
// The declarations of kvgen's transforms (Passes.td) and their registration.
// Like the conversions' header, it names no dialect.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_TRANSFORMS_PASSES_H
#define KVGEN_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"

namespace kvgen {

#define GEN_PASS_DECL
#define GEN_PASS_REGISTRATION
#include "kvgen/Transforms/Passes.h.inc"

} // namespace kvgen

#endif // KVGEN_TRANSFORMS_PASSES_H
