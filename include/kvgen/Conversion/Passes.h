//===- Passes.h - kvgen lowering passes -------------------------*- C++ -*-===//

#ifndef KVGEN_CONVERSION_PASSES_H
#define KVGEN_CONVERSION_PASSES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Pass/Pass.h"

namespace kvgen {

#define GEN_PASS_DECL
#define GEN_PASS_REGISTRATION
#include "kvgen/Conversion/Passes.h.inc"

} // namespace kvgen

#endif // KVGEN_CONVERSION_PASSES_H
