//===- Bundle.cpp - the bundle kvrt loads: manifest, PTX, cubin -----------===//
//
// Writes the kvgen-bundle JSON of docs/KERNEL-ABI.md from the kernel plans:
// per kernel its kind, variant, cache, dtypes, vector width, launch geometry
// and parameter names (from the ABI's table, the walk kvrt packs from), then
// the target and the code. kvrt's Manifest.cpp is the reader.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Pipeline/Bundle.h"
#include "kvgen/ABI/ABI.h"

#include "llvm/Support/Base64.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace kvgen;

static llvm::json::Object quantToJSON(kv::QuantAttr quant) {
  return llvm::json::Object{
      {"kind", kv::stringifyQuantKind(quant.getKind()).str()},
      {"granularity",
       kv::stringifyScaleGranularity(quant.getGranularity()).str()},
      {"mode", kv::stringifyScaleMode(quant.getMode()).str()},
      {"reciprocal", quant.getReciprocal()}};
}

static llvm::json::Object cacheToJSON(kv::CacheType cache) {
  llvm::json::Object o;
  o["layout"] = kv::stringifyLayoutKind(cache.getLayout()).str();
  if (cache.isPaged())
    o["block_size"] = cache.getBlockSize();
  else
    o["max_seq_len"] = cache.getMaxSeqLen();
  o["num_kv_heads"] = cache.getNumKvHeads();
  o["head_dim"] = cache.getHeadDim();
  o["dtype"] = kv::getDTypeName(cache.getDtype());
  if (cache.getLayoutInfo().hasX())
    o["x"] = cache.getX();
  if (kv::QuantAttr quant = cache.getQuant())
    o["quant"] = quantToJSON(quant);
  // Written only where they hold, so that a K/V cache's entry is unchanged.
  if (cache.getKOnly())
    o["k_only"] = true;
  if (kv::LatentAttr latent = cache.getLatent())
    o["latent"] = llvm::json::Object{{"kv_lora_rank", latent.getKvLoraRank()},
                                     {"rope_dim", latent.getRopeDim()}};
  return o;
}

static std::string describe(const KernelPlan &plan) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "kv." << abi::kindName(plan.kind) << " @" << plan.name << " : "
     << plan.cache;
  if (plan.kind == KernelKind::Gather)
    os << " to " << plan.sourceType;
  else if (plan.sourceType)
    os << " from " << plan.sourceType;
  return text;
}

std::string kvgen::writeBundle(ArrayRef<KernelPlan> plans,
                               const GPUTargetOptions &opts, StringRef ptx,
                               std::optional<StringRef> cubin) {
  llvm::json::Array kernels;
  for (const KernelPlan &plan : plans) {
    llvm::json::Object k;
    k["name"] = plan.name;
    k["kind"] = abi::kindName(plan.kind);
    k["variant"] = abi::variantName(plan.variant);
    if (plan.variant == KernelVariant::Wide) {
      k["min_tokens"] = plan.minTokens;
      if (plan.maxTokens > 0)
        k["max_tokens"] = plan.maxTokens;
    }
    k["description"] = describe(plan);
    k["cache"] = cacheToJSON(plan.cache);
    if (plan.kind == KernelKind::Gather)
      k["output_dtype"] = kv::getDTypeName(plan.sourceType);
    else if (plan.sourceType)
      k["source_dtype"] = kv::getDTypeName(plan.sourceType);
    k["alignment"] = plan.alignment;
    k["vector_elems"] = plan.vectorElems;
    k["vector_bytes"] = plan.vectorBytes;
    k["launch"] = llvm::json::Object{{"threads_x", plan.threadsX},
                                     {"tokens_per_block", plan.tokensPerBlock},
                                     {"chunks_per_token", plan.chunksPerToken}};
    // The names come from the ABI's table, the same walk kvrt packs from.
    llvm::json::Array params;
    for (abi::Param param : plan.getParams())
      params.push_back(abi::paramName(param));
    k["params"] = std::move(params);
    // Optional: a kvrt that predates it launches the kernel plainly, and
    // then its griddepcontrol.wait returns at once.
    if (opts.programmaticLaunch)
      k["programmatic_launch"] = true;
    kernels.push_back(std::move(k));
  }
  llvm::json::Object root;
  root["format"] = "kvgen-bundle";
  root["version"] = abi::kBundleVersion;
  root["target"] =
      llvm::json::Object{{"chip", opts.chip}, {"features", opts.features}};
  if (!ptx.empty())
    root["ptx"] = ptx.str();
  if (cubin)
    root["cubin_base64"] = llvm::encodeBase64(*cubin);
  root["kernels"] = std::move(kernels);
  std::string out;
  llvm::raw_string_ostream os(out);
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(root))) << "\n";
  return out;
}
