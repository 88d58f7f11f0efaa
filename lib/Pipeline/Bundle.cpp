//===- Bundle.cpp - the bundle kvrt loads: manifest, PTX, cubin -----------===//
//
// Writes the kvgen-bundle JSON of docs/KERNEL-ABI.md from the kernel plans:
// per kernel its kind, variant, cache, dtypes, vector width, launch geometry
// and parameter names (from the ABI's table, the walk kvrt packs from), its
// fused prologue where it has one, then
// the target and the code. Every key is spelled through the schema
// (include/kvgen/ABI/Bundle.def) that kvrt's reader checks against.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Pipeline/Bundle.h"
#include "kvgen/ABI/ABI.h"
#include "kvgen/ABI/BundleSchema.h"
#include "kvgen/Dialect/KV/IR/LatentEntry.h"
#include "kvgen/Dialect/KV/IR/Nvfp4.h"

#include "llvm/Support/Base64.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace kvgen;
namespace key = kvgen::abi::bundle::key;

static llvm::json::Object quantToJSON(kv::QuantAttr quant) {
  return llvm::json::Object{
      {key::quant::kind, kv::stringifyQuantKind(quant.getKind()).str()},
      {key::quant::granularity,
       kv::stringifyScaleGranularity(quant.getGranularity()).str()},
      {key::quant::mode, kv::stringifyScaleMode(quant.getMode()).str()},
      {key::quant::reciprocal, quant.getReciprocal()}};
}

static llvm::json::Object cacheToJSON(kv::CacheType cache) {
  llvm::json::Object o;
  o[key::cache::layout] = kv::stringifyLayoutKind(cache.getLayout()).str();
  if (cache.isPaged())
    o[key::cache::block_size] = cache.getBlockSize();
  else
    o[key::cache::max_seq_len] = cache.getMaxSeqLen();
  o[key::cache::num_kv_heads] = cache.getNumKvHeads();
  o[key::cache::head_dim] = cache.getHeadDim();
  if (cache.isAsymmetric())
    o[key::cache::v_head_dim] = cache.getValueHeadDim();
  o[key::cache::dtype] = kv::getDTypeName(cache.getDtype());
  if (cache.getLayoutInfo().hasX())
    o[key::cache::x] = cache.getX();
  if (kv::QuantAttr quant = cache.getQuant())
    o[key::cache::quant] = quantToJSON(quant);
  // Written only where they hold, so that a K/V cache's entry is unchanged.
  if (cache.getKOnly())
    o[key::cache::k_only] = true;
  if (kv::LatentAttr latent = cache.getLatent()) {
    llvm::json::Object l{{key::latent::kv_lora_rank, latent.getKvLoraRank()},
                         {key::latent::rope_dim, latent.getRopeDim()}};
    if (kv::InlineScalesAttr scales = latent.getScales())
      l[key::latent::inline_scales] = llvm::json::Object{
          {key::inline_scales::group_size, scales.getGroupSize()},
          {key::inline_scales::rope_dtype,
           kv::getDTypeName(scales.getRopeDtype())},
          {key::inline_scales::entry_bytes,
           kv::getInlineScalesLayout(cache).entryBytes}};
    o[key::cache::latent] = std::move(l);
  }
  if (kv::Nvfp4Attr nvfp4 = cache.getNvfp4())
    o[key::cache::nvfp4] = llvm::json::Object{
        {key::nvfp4::k_scales,
         kv::stringifyNvfp4ScaleLayout(nvfp4.getKScales()).str()},
        {key::nvfp4::v_scales,
         kv::stringifyNvfp4ScaleLayout(nvfp4.getVScales()).str()},
        {key::nvfp4::search,
         kv::stringifyNvfp4ScaleSearch(nvfp4.getSearch()).str()},
        {key::nvfp4::row_bytes, kv::getNvfp4Page(cache).rowBytes()}};
  return o;
}

static std::string describe(const KernelPlan &plan) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "kv." << abi::kindName(plan.kind) << " @" << plan.name << " : "
     << plan.cache;
  if (plan.readsRows())
    os << " to " << plan.sourceType;
  else if (plan.sourceType)
    os << " from " << plan.sourceType;
  if (plan.prologue)
    os << " prologue " << plan.prologue;
  return text;
}

std::string kvgen::writeBundle(ArrayRef<KernelPlan> plans,
                               const GPUTargetOptions &opts, StringRef ptx,
                               std::optional<StringRef> cubin) {
  llvm::json::Array kernels;
  for (const KernelPlan &plan : plans) {
    llvm::json::Object k;
    k[key::kernel::name] = plan.name;
    k[key::kernel::kind] = abi::kindName(plan.kind);
    k[key::kernel::variant] = abi::variantName(plan.variant);
    if (plan.variant == KernelVariant::Wide) {
      k[key::kernel::min_tokens] = plan.minTokens;
      if (plan.maxTokens > 0)
        k[key::kernel::max_tokens] = plan.maxTokens;
    }
    k[key::kernel::description] = describe(plan);
    k[key::kernel::cache] = cacheToJSON(plan.cache);
    if (plan.readsRows())
      k[key::kernel::output_dtype] = kv::getDTypeName(plan.sourceType);
    else if (plan.sourceType)
      k[key::kernel::source_dtype] = kv::getDTypeName(plan.sourceType);
    k[key::kernel::alignment] = plan.alignment;
    k[key::kernel::vector_elems] = plan.vectorElems;
    k[key::kernel::vector_bytes] = plan.vectorBytes;
    k[key::kernel::launch] = llvm::json::Object{
        {key::launch::threads_x, plan.threadsX},
        {key::launch::tokens_per_block, plan.tokensPerBlock},
        {key::launch::chunks_per_token, plan.chunksPerToken}};
    // The names come from the ABI's table, the same walk kvrt packs from.
    llvm::json::Array params;
    for (abi::Param param : plan.getParams())
      params.push_back(abi::paramName(param));
    k[key::kernel::params] = std::move(params);
    // Optional: a kvrt that predates it launches the kernel plainly, and
    // then its griddepcontrol.wait returns at once.
    if (opts.programmaticLaunch)
      k[key::kernel::programmatic_launch] = true;
    // The prologue's parts, typed: kvrt checks the parameter list against
    // them and the tensors against q_heads and rotary_dim. Written only
    // where the kernel has one, so that every other entry is unchanged.
    if (kv::PrologueAttr prologue = plan.prologue) {
      llvm::json::Object o;
      if (prologue.hasQ())
        o[key::prologue::q_heads] = prologue.getQHeads();
      if (prologue.hasQQuant())
        o[key::prologue::q_quant] = prologue.getQQuant().str();
      if (prologue.hasNorm())
        o[key::prologue::norm] = prologue.getNorm().str();
      if (prologue.hasRope()) {
        o[key::prologue::rope] = prologue.getRope().str();
        o[key::prologue::rotary_dim] = prologue.getRotaryDim();
        if (prologue.hasF32CosSin())
          o[key::prologue::cos_sin] = prologue.getCosSin().str();
      }
      k[key::kernel::prologue] = std::move(o);
    }
    kernels.push_back(std::move(k));
  }
  llvm::json::Object root;
  root[key::root::format] = "kvgen-bundle";
  root[key::root::version] = abi::kBundleVersion;
  root[key::root::target] = llvm::json::Object{
      {key::target::chip, opts.chip}, {key::target::features, opts.features}};
  if (!ptx.empty())
    root[key::root::ptx] = ptx.str();
  if (cubin)
    root[key::root::cubin_base64] = llvm::encodeBase64(*cubin);
  root[key::root::kernels] = std::move(kernels);
  std::string out;
  llvm::raw_string_ostream os(out);
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(root))) << "\n";
  return out;
}
