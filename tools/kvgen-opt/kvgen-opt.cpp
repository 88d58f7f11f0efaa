//===- kvgen-opt.cpp - mlir-opt with the kv dialect and passes ------------===//
//
// For the lit tests: parse, verify, run kvgen's passes one at a time, print.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Conversion/Passes.h"
#include "kvgen/Pipeline/Pipeline.h"

#include "mlir/InitAllPasses.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::registerAllPasses();
  kvgen::registerKVGenPasses();
  mlir::DialectRegistry registry;
  kvgen::registerKVGenDialects(registry);
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "kvgen optimizer driver\n", registry));
}
