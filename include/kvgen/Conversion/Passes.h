//===- Passes.h - kvgen lowering passes -------------------------*- C++ -*-===//
//
// The declarations of kvgen's passes (Passes.td) and their registration. The
// header names no dialect: each pass includes the dialects it works on, so a
// pass over the loop nest does not compile the GPU and LLVM dialects' headers.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_CONVERSION_PASSES_H
#define KVGEN_CONVERSION_PASSES_H

#include "mlir/Pass/Pass.h"

namespace kvgen {

#define GEN_PASS_DECL
#define GEN_PASS_REGISTRATION
#include "kvgen/Conversion/Passes.h.inc"

} // namespace kvgen

#endif // KVGEN_CONVERSION_PASSES_H
