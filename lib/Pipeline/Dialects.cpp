//===- Dialects.cpp - every dialect and translation kvgen uses ------------===//
//
// The kv dialect, upstream's dialects and extensions (the loop nest, GPU,
// NVVM, LLVM and their ConvertToLLVM interfaces), the LLVM IR translations
// and the NVVM target's serializer: one registry for kvgen, kvgen-opt and the
// C++ API. InitAllDialects is the slowest header to compile; only this file
// includes it.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Dialect/KV/IR/KVDialect.h"
#include "kvgen/Pipeline/Pipeline.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"

using namespace mlir;
using namespace kvgen;

void kvgen::registerKVGenDialects(DialectRegistry &registry) {
  registry.insert<kv::KVDialect>();
  registerAllDialects(registry);
  registerAllExtensions(registry);
  registerAllToLLVMIRTranslations(registry);
  NVVM::registerNVVMTargetInterfaceExternalModels(registry);
}
