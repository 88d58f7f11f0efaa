//===- BundleTest.cpp - kvgen's manifest, as kvrt reads it ----------------===//
//
// The bundle is the one interface between the compiler and the runtime: what
// kvgen writes for every layout and kind must load in kvrt with the same
// kernels, kinds and variants, and a manifest whose parameter list drifts
// from the ABI must be refused.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Pipeline/Bundle.h"
#include "kvgen/Pipeline/Description.h"
#include "kvgen/Pipeline/Pipeline.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/JSON.h"

#include <gtest/gtest.h>
#include <kvrt/kvrt.h>

#include <string>

using namespace kvgen;

namespace {

class BundleTest : public ::testing::Test {
protected:
  BundleTest() : context(makeRegistry()) { context.loadAllAvailableDialects(); }

  static mlir::DialectRegistry makeRegistry() {
    mlir::DialectRegistry registry;
    registerKVGenDialects(registry);
    return registry;
  }

  /// The host bundle (manifest only) of a kv module's text.
  std::string bundleOf(const std::string &text) {
    mlir::OwningOpRef<mlir::ModuleOp> module = parseDescription(text, &context);
    EXPECT_TRUE(module) << text;
    if (!module)
      return {};
    return writeBundle(collectPlans(*module), GPUTargetOptions(), "",
                       std::nullopt);
  }

  mlir::MLIRContext context;
};

std::string cacheFor(const std::string &layout) {
  std::string geometry =
      layout == "contiguous" ? "max_seq_len = 300" : "block_size = 32";
  return "!kv.cache<layout = " + layout + ", " + geometry +
         ", num_kv_heads = 4, head_dim = 64, dtype = f16>";
}

TEST_F(BundleTest, EveryLayoutLoadsInKvrtWithItsKernels) {
  for (std::string layout : {"contiguous", "paged_nhd", "paged_hnd",
                             "vllm_vectorized", "dual_stacked"}) {
    std::string text =
        "module {\n  kv.append @a : " + cacheFor(layout) + " from f32\n";
    if (layout != "contiguous")
      text += "  kv.slot_mapping @s : " + cacheFor(layout) +
              "\n  kv.fused_append @f : " + cacheFor(layout) + " from f16\n";
    text += "}\n";
    std::string json = bundleOf(text);
    kvrt_bundle *bundle = nullptr;
    ASSERT_EQ(kvrt_bundle_load_memory(json.data(), json.size(), &bundle),
              KVRT_SUCCESS)
        << layout << ": " << kvrt_last_error();
    size_t expected = layout == "contiguous" ? 2 : 5;
    ASSERT_EQ(kvrt_bundle_num_kernels(bundle), expected) << layout;
    for (size_t i = 0; i < expected; ++i) {
      std::string name = kvrt_bundle_kernel_name(bundle, i);
      std::string kind = kvrt_bundle_kernel_kind(bundle, i);
      std::string variant = kvrt_bundle_kernel_variant(bundle, i);
      if (name == "a" || name == "a_scalar")
        EXPECT_EQ(kind, "append");
      else if (name == "s")
        EXPECT_EQ(kind, "slot_mapping");
      else
        EXPECT_EQ(kind, "fused_append") << name;
      bool scalar =
          name.size() > 7 && name.compare(name.size() - 7, 7, "_scalar") == 0;
      if (name != "s")
        EXPECT_EQ(variant, scalar ? "scalar" : "vector") << name;
    }
    kvrt_bundle_destroy(bundle);
  }
}

TEST_F(BundleTest, ManifestRecordsThePlan) {
  std::string json =
      bundleOf("module {\n  kv.append @a : " + cacheFor("vllm_vectorized") +
               " from f32\n}\n");
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(json);
  ASSERT_TRUE(bool(parsed));
  const llvm::json::Object *kernel =
      (*parsed->getAsObject()->getArray("kernels"))[0].getAsObject();
  EXPECT_EQ(*kernel->getString("name"), "a");
  EXPECT_EQ(*kernel->getString("source_dtype"), "f32");
  // 16 bytes of f32: 4 elements; f16's x is 8.
  EXPECT_EQ(*kernel->getInteger("vector_elems"), 4);
  EXPECT_EQ(*kernel->getInteger("alignment"), 16);
  const llvm::json::Object *cache = kernel->getObject("cache");
  EXPECT_EQ(*cache->getString("layout"), "vllm_vectorized");
  EXPECT_EQ(*cache->getInteger("x"), 8);
  EXPECT_EQ(*cache->getInteger("block_size"), 32);
  const llvm::json::Object *launch = kernel->getObject("launch");
  EXPECT_EQ(*launch->getInteger("chunks_per_token"), 4 * 64 / 4);
  EXPECT_EQ(kernel->getArray("params")->size(), 21u);
}

TEST_F(BundleTest, KvrtRefusesAParameterListThatDriftedFromTheABI) {
  std::string json = bundleOf(
      "module {\n  kv.append @a : " + cacheFor("paged_nhd") + " from f16\n}\n");
  std::string needle = "\"num_blocks\"";
  size_t at = json.find(needle);
  ASSERT_NE(at, std::string::npos);
  json.replace(at, needle.size(), "\"num_slots\"");
  kvrt_bundle *bundle = nullptr;
  EXPECT_EQ(kvrt_bundle_load_memory(json.data(), json.size(), &bundle),
            KVRT_ERROR_INVALID_BUNDLE);
  EXPECT_NE(std::string(kvrt_last_error()).find("params"), std::string::npos)
      << kvrt_last_error();
}

} // namespace
