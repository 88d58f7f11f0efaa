//===- PTX.h - from NVVM-lowered kernels to PTX and cubin -------*- C++ -*-===//
//
// The last two GPU stages: the NVVM target's serializer turns the gpu.module
// into PTX (--emit=ptx), and the CUDA toolkit's ptxas assembles the PTX for
// one chip (--emit=cubin, --with-cubin).
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_PIPELINE_PTX_H
#define KVGEN_PIPELINE_PTX_H

#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace kvgen {

/// Serializes the gpu.module of an NVVM-lowered module to PTX; if `llvmIR` is
/// given, it receives the optimized LLVM IR.
mlir::FailureOr<std::string> serializeToPTX(mlir::ModuleOp module,
                                            std::string *llvmIR = nullptr);

/// Runs ptxas on `ptx` for `chip`; returns the cubin, or failure with ptxas's
/// log (and the command that reproduces it) in `log`. `verboseLog`, if given,
/// receives ptxas -v's resource report.
mlir::FailureOr<std::string> runPtxas(llvm::StringRef ptx, llvm::StringRef chip,
                                      std::string &log,
                                      std::string *verboseLog = nullptr);

} // namespace kvgen

#endif // KVGEN_PIPELINE_PTX_H
