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
    // An append and a fused append have vector, scalar and wide kernels.
    size_t expected = layout == "contiguous" ? 3 : 7;
    ASSERT_EQ(kvrt_bundle_num_kernels(bundle), expected) << layout;
    for (size_t i = 0; i < expected; ++i) {
      std::string name = kvrt_bundle_kernel_name(bundle, i);
      std::string kind = kvrt_bundle_kernel_kind(bundle, i);
      std::string variant = kvrt_bundle_kernel_variant(bundle, i);
      if (name == "a" || name == "a_scalar" || name == "a_wide")
        EXPECT_EQ(kind, "append");
      else if (name == "s")
        EXPECT_EQ(kind, "slot_mapping");
      else
        EXPECT_EQ(kind, "fused_append") << name;
      llvm::StringRef ref(name);
      if (name != "s")
        EXPECT_EQ(variant, ref.ends_with("_scalar") ? "scalar"
                           : ref.ends_with("_wide") ? "wide"
                                                    : "vector")
            << name;
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

TEST_F(BundleTest, ManifestRecordsTheWideVariant) {
  std::string json = bundleOf(
      "module {\n  kv.append @a : " + cacheFor("paged_nhd") + " from f16\n}\n");
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(json);
  ASSERT_TRUE(bool(parsed));
  const llvm::json::Array &kernels =
      *parsed->getAsObject()->getArray("kernels");
  ASSERT_EQ(kernels.size(), 3u);
  const llvm::json::Object *vector = kernels[0].getAsObject();
  const llvm::json::Object *wide = kernels[2].getAsObject();
  EXPECT_EQ(*wide->getString("name"), "a_wide");
  EXPECT_EQ(*wide->getString("variant"), "wide");
  // An unquantized cache whose token's chunks divide by four: the
  // four-chunk kernel, from 2048 tokens on with no upper bound
  // (KernelPlan.cpp, wideChunksPerThread and wideMaxTokens).
  EXPECT_EQ(*wide->getInteger("min_tokens"), 2048);
  EXPECT_FALSE(wide->getInteger("max_tokens"));
  EXPECT_FALSE(vector->getInteger("min_tokens"));
  EXPECT_FALSE(vector->getInteger("max_tokens"));
  // The vector kernel's promise and parameters; four chunks a thread, so
  // a quarter of the threads a token (8 of 32) and sixteen tokens a block
  // of 128 threads.
  for (llvm::StringRef key : {"alignment", "vector_elems", "vector_bytes"})
    EXPECT_EQ(wide->getInteger(key), vector->getInteger(key)) << key.str();
  EXPECT_EQ(*wide->getArray("params"), *vector->getArray("params"));
  const llvm::json::Object *launch = wide->getObject("launch");
  // 4 heads x 64 f16 = 32 chunks of 8.
  EXPECT_EQ(*launch->getInteger("chunks_per_token"), 32);
  EXPECT_EQ(*launch->getInteger("threads_x"), 8);
  EXPECT_EQ(*launch->getInteger("tokens_per_block"), 16);
  EXPECT_EQ(*vector->getObject("launch")->getInteger("threads_x"), 32);
}

TEST_F(BundleTest, WideVariantByQuantization) {
  auto kernelsOf = [&](const std::string &quant) {
    std::string cache = "!kv.cache<layout = paged_nhd, block_size = 16, "
                        "num_kv_heads = 8, head_dim = 128, dtype = " +
                        quant + ">";
    std::string json =
        bundleOf("module {\n  kv.append @a : " + cache + " from bf16\n}\n");
    llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(json);
    if (!parsed) {
      ADD_FAILURE() << llvm::toString(parsed.takeError()) << "\n" << cache;
      return llvm::json::Array();
    }
    const llvm::json::Array *kernels =
        parsed->getAsObject()->getArray("kernels");
    if (!kernels) {
      ADD_FAILURE() << "no kernels for " << cache;
      return llvm::json::Array();
    }
    return *kernels;
  };
  // A static scale: the wide kernel from 16384 tokens on.
  llvm::json::Array fp8 =
      kernelsOf("f8E4M3FN, quant = #kv.quant<kind = fp8_e4m3, granularity = "
                "per_tensor, mode = static>");
  ASSERT_EQ(fp8.size(), 3u);
  EXPECT_EQ(*fp8[2].getAsObject()->getInteger("min_tokens"), 16384);
  // ... with no upper bound: it stays ahead.
  EXPECT_FALSE(fp8[2].getAsObject()->getInteger("max_tokens"));
  // A dynamic scale of a 16-bit source: the wide kernel (IEEE division)
  // from 2048 tokens on, one chunk a thread like the vector kernel.
  llvm::json::Array int8 =
      kernelsOf("i8, quant = #kv.quant<kind = int8, granularity = "
                "per_token_head, mode = dynamic>");
  ASSERT_EQ(int8.size(), 3u);
  const llvm::json::Object *wide = int8[2].getAsObject();
  EXPECT_EQ(*wide->getString("variant"), "wide");
  EXPECT_EQ(*wide->getInteger("min_tokens"), 2048);
  EXPECT_FALSE(wide->getInteger("max_tokens"));
  EXPECT_EQ(
      *wide->getObject("launch")->getInteger("threads_x"),
      *int8[0].getAsObject()->getObject("launch")->getInteger("threads_x"));
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
