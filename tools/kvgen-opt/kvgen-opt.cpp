//===- kvgen-opt.cpp - mlir-opt with the kv dialect and passes ------------===//
//
// For the lit tests: parse, verify, run kvgen's passes one at a time, or one
// of its pipelines by name (--kv-lower-to-gpu, ...), print.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Conversion/Passes.h"
#include "kvgen/Pipeline/Pipeline.h"
#include "kvgen/Transforms/Passes.h"

#include "mlir/InitAllPasses.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::registerAllPasses();
  kvgen::registerKVGenPasses();
  kvgen::registerKVGenTransformsPasses();
  kvgen::registerKVGenPipelines();
  mlir::DialectRegistry registry;
  kvgen::registerKVGenDialects(registry);
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "kvgen optimizer driver\n", registry));
}
