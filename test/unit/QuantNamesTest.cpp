//===- QuantNamesTest.cpp - #kv.quant is the ABI's vocabulary -------------===//
//
// A #kv.quant's kind, granularity and mode are the kernel ABI's enums
// (include/kvgen/ABI/Quant.def), read and printed by their ABI names: the
// dialect has no list of its own. What could still drift is checked here:
// every ABI name must read back as itself, the int4 refusal must name every
// kind there is, and each kind's storage dtype in the dialect must be the
// one kvrt expects of the bundle.
//
//===----------------------------------------------------------------------===//

#include "kvgen/ABI/ABI.h"
#include "kvgen/Dialect/KV/IR/KVDialect.h"
#include "kvgen/Pipeline/Bundle.h"
#include "kvgen/Pipeline/Description.h"
#include "kvgen/Pipeline/Pipeline.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>
#include <kvrt/kvrt.h>

#include <string>

using namespace kvgen;

namespace {

class QuantNamesTest : public ::testing::Test {
protected:
  QuantNamesTest() : context(makeRegistry()) {
    context.loadAllAvailableDialects();
  }

  static mlir::DialectRegistry makeRegistry() {
    mlir::DialectRegistry registry;
    registerKVGenDialects(registry);
    return registry;
  }

  /// Parses an attribute; `error` receives the first diagnostic.
  mlir::Attribute parse(const std::string &text, std::string *error) {
    mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
      if (error->empty())
        *error = d.str();
      return mlir::success();
    });
    return mlir::parseAttribute(text, &context);
  }

  mlir::MLIRContext context;
};

std::string quantText(const char *kind, const char *granularity,
                      const char *mode) {
  return std::string("#kv.quant<kind = ") + kind +
         ", granularity = " + granularity + ", mode = " + mode + ">";
}

TEST_F(QuantNamesTest, EveryABINameReadsAndPrintsAsItself) {
  for (size_t k = 0; k < std::size(kvgen::abi::kQuantKindNames); ++k)
    for (size_t g = 0; g < std::size(kvgen::abi::kGranularityNames); ++g)
      for (size_t m = 0; m < std::size(kvgen::abi::kScaleModeNames); ++m) {
        std::string text = quantText(kvgen::abi::kQuantKindNames[k],
                                     kvgen::abi::kGranularityNames[g],
                                     kvgen::abi::kScaleModeNames[m]);
        std::string error;
        auto quant = llvm::dyn_cast_or_null<kv::QuantAttr>(parse(text, &error));
        // The verifier refuses some combinations (a dynamic per_tensor
        // scale, ...), never a name.
        if (!quant) {
          EXPECT_EQ(error.find("unknown"), std::string::npos)
              << text << ": " << error;
          continue;
        }
        EXPECT_EQ(quant.getKind(), static_cast<kvgen::abi::QuantKind>(k));
        EXPECT_EQ(quant.getGranularity(),
                  static_cast<kvgen::abi::ScaleGranularity>(g));
        EXPECT_EQ(quant.getMode(), static_cast<kvgen::abi::ScaleMode>(m));
        std::string printed;
        llvm::raw_string_ostream os(printed);
        mlir::Attribute(quant).print(os);
        EXPECT_EQ(printed, text);
      }
}

TEST_F(QuantNamesTest, AnUnknownNameIsRefusedWithTheABIsList) {
  std::string error;
  EXPECT_FALSE(parse(quantText("fp4", "per_tensor", "static"), &error));
  std::string known;
  for (const char *name : kvgen::abi::kQuantKindNames)
    known += (known.empty() ? "" : ", ") + std::string(name);
  EXPECT_EQ(error, "unknown quantization kind 'fp4': expected one of " + known);
}

TEST_F(QuantNamesTest, TheInt4RefusalNamesEveryKindThereIs) {
  for (size_t k = 0; k < std::size(kvgen::abi::kQuantKindNames); ++k)
    EXPECT_NE(kv::kUnsupportedInt4, static_cast<kvgen::abi::QuantKind>(k));
  std::string error;
  EXPECT_FALSE(parse(quantText("int4", "per_tensor", "static"), &error));
  EXPECT_NE(error.find("int4 caches are not supported"), std::string::npos)
      << error;
  // The message lists the kinds to use instead by hand.
  std::string instead = error.substr(error.find("use "));
  for (const char *name : kvgen::abi::kQuantKindNames)
    EXPECT_NE(instead.find(name), std::string::npos)
        << "the int4 refusal does not offer " << name << ": " << error;
}

TEST_F(QuantNamesTest, EveryKindsStorageIsTheDTypeKvrtExpects) {
  for (size_t k = 0; k < std::size(kvgen::abi::kQuantKindNames); ++k) {
    auto kind = static_cast<kvgen::abi::QuantKind>(k);
    mlir::Type storage =
        kv::QuantAttr::get(&context, kind,
                           kvgen::abi::ScaleGranularity::PerTensor,
                           kvgen::abi::ScaleMode::Static, false)
            .getStorageType(&context);
    std::string dtype;
    llvm::raw_string_ostream os(dtype);
    storage.print(os);
    // An NVFP4 cache also says where its values and scales go.
    bool nvfp4 = kind == kvgen::abi::QuantKind::NVFP4;
    std::string text =
        "module {\n  kv.append @a : !kv.cache<layout = "
        "paged_nhd, block_size = 16, num_kv_heads = 2, "
        "head_dim = 64, dtype = " +
        dtype + ", quant = " +
        quantText(kvgen::abi::kQuantKindNames[k], "per_tensor", "static") +
        (nvfp4 ? ", nvfp4 = #kv.nvfp4<k_scales = linear, v_scales = "
                 "swizzled, search = divisor_six>"
               : "") +
        "> from bf16\n}\n";
    mlir::OwningOpRef<mlir::ModuleOp> module = parseDescription(text, &context);
    ASSERT_TRUE(module) << text;
    std::string json = writeBundle(collectPlans(*module), GPUTargetOptions(),
                                   "", std::nullopt);
    kvrt_bundle *bundle = nullptr;
    EXPECT_EQ(kvrt_bundle_load_memory(json.data(), json.size(), &bundle),
              KVRT_SUCCESS)
        << kvgen::abi::kQuantKindNames[k] << ": " << kvrt_last_error();
    kvrt_bundle_destroy(bundle);
  }
}

} // namespace
