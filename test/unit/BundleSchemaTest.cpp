//===- BundleSchemaTest.cpp - the bundle schema against both its sides ----===//
//
// include/kvgen/ABI/Bundle.def is the one definition of the manifest. Here
// kvgen writes bundles whose descriptions between them use every key, and
// the test checks that
//   - every key kvgen writes is a key of its object in the schema, of the
//     schema's JSON type (a key added to the writer only fails here);
//   - every key of the schema is written (a key added to the schema only);
//   - kvrt reads every key back: a kernel's entry as kvrt rebuilds it from
//     what it parsed (kvrt_bundle_kernel_manifest) is kvgen's entry, and
//     each top-level key has a value kvrt refuses (a key the reader skips).
//
//===----------------------------------------------------------------------===//

#include "kvgen/ABI/BundleSchema.h"
#include "kvgen/Pipeline/Bundle.h"
#include "kvgen/Pipeline/Description.h"
#include "kvgen/Pipeline/Pipeline.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <gtest/gtest.h>
#include <kvrt/kvrt.h>

#include <set>
#include <string>

using namespace kvgen;
namespace schema = kvgen::abi::bundle;

namespace {

/// Between them, every key of the schema: both cache geometries, x, a wide
/// kernel with and without a bound, quantization, K-only and latent caches
/// (one with inline scales),
/// V of its own head size, a gather, slot_mapping, and a fused prologue.
constexpr const char *kDescriptions = R"mlir(module {
  kv.append @bound : !kv.cache<layout = paged_nhd, block_size = 16,
      num_kv_heads = 3, head_dim = 16, dtype = bf16> from bf16
  kv.append @batch : !kv.cache<layout = contiguous, max_seq_len = 300,
      num_kv_heads = 4, head_dim = 64, dtype = f16> from f32
  kv.append @vec : !kv.cache<layout = vllm_vectorized, block_size = 16,
      num_kv_heads = 4, head_dim = 64, dtype = f16> from f16
  kv.append @fp8 : !kv.cache<layout = paged_hnd, block_size = 16,
      num_kv_heads = 8, head_dim = 128, dtype = f8E4M3FN,
      quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor,
                        mode = static>> from bf16
  kv.append @konly : !kv.cache<layout = paged_hnd, block_size = 16,
      num_kv_heads = 2, head_dim = 64, dtype = f16, k_only = true> from f32
  kv.mla_append @mla : !kv.cache<layout = paged_nhd, block_size = 528,
      num_kv_heads = 1, head_dim = 512, dtype = bf16,
      latent = #kv.latent<kv_lora_rank = 448, rope_dim = 64>> from bf16
  kv.mla_append @dsmla : !kv.cache<layout = paged_nhd, block_size = 64,
      num_kv_heads = 1, head_dim = 576, dtype = f8E4M3FN,
      quant = #kv.quant<kind = fp8_e4m3, granularity = per_token,
                        mode = dynamic>,
      latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64,
        scales = #kv.inline_scales<group_size = 128, rope_dtype = bf16>>>
      from bf16
  kv.append @nvfp4 : !kv.cache<layout = paged_nhd, block_size = 16,
      num_kv_heads = 2, head_dim = 64, dtype = i8,
      quant = #kv.quant<kind = nvfp4, granularity = per_tensor,
                        mode = static>,
      nvfp4 = #kv.nvfp4<k_scales = linear, v_scales = swizzled,
                        search = divisor_six>> from bf16
  kv.gather @gather : !kv.cache<layout = paged_nhd, block_size = 16,
      num_kv_heads = 2, head_dim = 64, dtype = bf16> to f32
  kv.append @asym : !kv.cache<layout = paged_nhd, block_size = 16,
      num_kv_heads = 2, head_dim = 192, v_head_dim = 128, dtype = bf16> from bf16
  kv.slot_mapping @slots : !kv.cache<layout = paged_nhd, block_size = 16,
      num_kv_heads = 2, head_dim = 64, dtype = bf16>
  kv.append @rope : !kv.cache<layout = paged_nhd, block_size = 16,
      num_kv_heads = 2, head_dim = 64, dtype = bf16> from bf16
      prologue #kv.prologue<q_heads = 4, norm = rms, rope = neox,
                            rotary_dim = 32>
  kv.paged_kv_append @rope8 : !kv.cache<layout = paged_nhd, block_size = 16,
      num_kv_heads = 2, head_dim = 64, dtype = f8E4M3FN,
      quant = #kv.quant<kind = fp8_e4m3, granularity = per_tensor,
                        mode = static>> from bf16
      prologue #kv.prologue<q_heads = 4, rope = neox, rotary_dim = 64,
                            q_quant = fp8_e4m3, cos_sin = f32>
})mlir";

using Seen = std::set<std::pair<schema::Object, std::string>>;

/// Checks one object kvgen wrote against its schema and records its keys.
void walk(const llvm::json::Object &object, schema::Object kind,
          const std::string &path, Seen *seen) {
  for (const auto &[name, value] : object) {
    std::string key = name.str();
    std::string where = path.empty() ? key : path + "." + key;
    const schema::Field *field = schema::findField(kind, key);
    if (!field) {
      ADD_FAILURE() << "kvgen writes '" << where << "', which "
                    << "include/kvgen/ABI/Bundle.def does not list for "
                    << schema::objectName(kind);
      continue;
    }
    seen->insert({kind, key});
    switch (field->type) {
    case schema::Type::String:
      EXPECT_TRUE(value.getAsString()) << where << " is not a string";
      break;
    case schema::Type::Integer:
      EXPECT_TRUE(value.getAsInteger()) << where << " is not an integer";
      break;
    case schema::Type::Positive:
      EXPECT_GT(value.getAsInteger().value_or(0), 0)
          << where << " is not a positive integer";
      break;
    case schema::Type::Boolean:
      EXPECT_TRUE(value.getAsBoolean()) << where << " is not a boolean";
      break;
    case schema::Type::Object:
      if (const llvm::json::Object *inner = value.getAsObject())
        walk(*inner, schema::objectOf(*field), where, seen);
      else
        ADD_FAILURE() << where << " is not an object";
      break;
    case schema::Type::Array: {
      const llvm::json::Array *array = value.getAsArray();
      ASSERT_TRUE(array) << where << " is not an array";
      // The one array of objects: the kernels.
      if (kind == schema::Object::root && key == schema::key::root::kernels)
        for (size_t i = 0; i < array->size(); ++i) {
          const llvm::json::Object *kernel = (*array)[i].getAsObject();
          ASSERT_TRUE(kernel) << where << "[" << i << "] is not an object";
          walk(*kernel, schema::Object::kernel,
               where + "[" + std::to_string(i) + "]", seen);
        }
      break;
    }
    }
  }
}

class BundleSchemaTest : public ::testing::Test {
protected:
  BundleSchemaTest() : context(makeRegistry()) {
    context.loadAllAvailableDialects();
  }

  static mlir::DialectRegistry makeRegistry() {
    mlir::DialectRegistry registry;
    registerKVGenDialects(registry);
    return registry;
  }

  /// A GPU bundle of kDescriptions, with stand-ins for its PTX and cubin
  /// (kvrt reads them at launch, not at load).
  std::string bundle() {
    mlir::OwningOpRef<mlir::ModuleOp> module =
        parseDescription(kDescriptions, &context);
    EXPECT_TRUE(module);
    if (!module)
      return {};
    GPUTargetOptions opts;
    opts.features = "+ptx80";
    opts.programmaticLaunch = true;
    return writeBundle(collectPlans(*module), opts, "// ptx\n",
                       llvm::StringRef("\x7f"
                                       "ELF\x02\x01\x01"));
  }

  mlir::MLIRContext context;
};

TEST_F(BundleSchemaTest, KvgenWritesEverySchemaKeyAndNoOther) {
  std::string text = bundle();
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  ASSERT_TRUE(parsed->getAsObject());
  Seen seen;
  walk(*parsed->getAsObject(), schema::Object::root, "", &seen);
  for (const schema::Field &field : schema::kFields)
    EXPECT_TRUE(seen.count({field.object, field.key}))
        << "Bundle.def lists '" << field.key << "' of "
        << schema::objectName(field.object)
        << ", which kvgen wrote for none of the descriptions here";
}

TEST_F(BundleSchemaTest, KvrtReadsBackEveryKernelKey) {
  std::string text = bundle();
  kvrt_bundle *loaded = nullptr;
  ASSERT_EQ(kvrt_bundle_load_memory(text.data(), text.size(), &loaded),
            KVRT_SUCCESS)
      << kvrt_last_error();
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  ASSERT_TRUE(bool(parsed));
  const llvm::json::Array &kernels =
      *parsed->getAsObject()->getArray(schema::key::root::kernels);
  ASSERT_EQ(kvrt_bundle_num_kernels(loaded), kernels.size());
  for (size_t i = 0; i < kernels.size(); ++i) {
    llvm::json::Object written = *kernels[i].getAsObject();
    // kvgen records a slot_mapping kernel's cache for the reader of the
    // bundle; its kernel takes no cache, and kvrt has nothing to check it
    // against.
    if (*written.getString(schema::key::kernel::kind) == "slot_mapping")
      written.erase(schema::key::kernel::cache);
    llvm::Expected<llvm::json::Value> read =
        llvm::json::parse(kvrt_bundle_kernel_manifest(loaded, i));
    ASSERT_TRUE(bool(read)) << llvm::toString(read.takeError());
    llvm::json::Value expected(std::move(written));
    EXPECT_TRUE(expected == *read)
        << "kernels[" << i << "]: kvrt's entry differs from kvgen's\nkvgen: "
        << llvm::formatv("{0}", expected).str()
        << "\nkvrt:  " << kvrt_bundle_kernel_manifest(loaded, i);
  }
  kvrt_bundle_destroy(loaded);
}

TEST_F(BundleSchemaTest, KvrtReadsEveryTopLevelKey) {
  // A value kvrt refuses, per top-level key: one the reader skipped would
  // load. nullptr: kvrt keeps the value as it is (no value is wrong).
  struct Bad {
    schema::Object object;
    const char *key;
    const char *value;
  };
  const Bad bad[] = {
      {schema::Object::root, schema::key::root::format, R"("kvgen")"},
      {schema::Object::root, schema::key::root::version, "3"},
      {schema::Object::root, schema::key::root::ptx, R"("")"},
      {schema::Object::root, schema::key::root::cubin_base64, R"("!")"},
      {schema::Object::root, schema::key::root::target, "null"},
      {schema::Object::root, schema::key::root::kernels, "[]"},
      {schema::Object::target, schema::key::target::chip, R"("gfx90a")"},
      {schema::Object::target, schema::key::target::features, nullptr},
  };
  for (schema::Object object : {schema::Object::root, schema::Object::target})
    for (const schema::Field &field : schema::fieldsOf(object)) {
      const Bad *entry = nullptr;
      for (const Bad &b : bad)
        if (b.object == object && std::string(b.key) == field.key)
          entry = &b;
      if (!entry) {
        ADD_FAILURE() << "Bundle.def lists '" << field.key << "' of "
                      << schema::objectName(object)
                      << ": add here a value kvrt refuses for it";
        continue;
      }
      if (!entry->value)
        continue;
      llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(bundle());
      ASSERT_TRUE(bool(parsed));
      llvm::json::Object *root = parsed->getAsObject();
      llvm::json::Object *holder =
          object == schema::Object::root
              ? root
              : root->getObject(schema::key::root::target);
      (*holder)[field.key] = *llvm::json::parse(entry->value);
      std::string text;
      llvm::raw_string_ostream(text) << *parsed;
      kvrt_bundle *loaded = nullptr;
      EXPECT_EQ(kvrt_bundle_load_memory(text.data(), text.size(), &loaded),
                KVRT_ERROR_INVALID_BUNDLE)
          << field.key << " = " << entry->value << " loaded";
      kvrt_bundle_destroy(loaded);
    }
}

} // namespace
