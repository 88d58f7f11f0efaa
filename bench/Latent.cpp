//===- Latent.cpp - K-only and MLA latent caches in the bench -------------===//

#include "Latent.h"

namespace kvbench {

void readKOnly(const json &entry, const json &cache, Description &d) {
  d.kOnly = cache.value("k_only", false);
  if (!cache.contains("latent"))
    return;
  const json &latent = cache.at("latent");
  LatentDesc l;
  l.kvLoraRank = latent.at("kv_lora_rank").get<int64_t>();
  l.ropeDim = latent.at("rope_dim").get<int64_t>();
  if (latent.contains("inline_scales"))
    l.entryBytes = latent.at("inline_scales").at("entry_bytes").get<int64_t>();
  if (l.kvLoraRank <= 0 || l.ropeDim < (l.entryBytes ? 0 : 1) ||
      l.kvLoraRank + l.ropeDim != d.headDim || d.numHeads != 1 ||
      !abi::layoutInfo(d.layout).tokenMajor())
    fatal(format("a latent cache is one %s head of kv_lora_rank + "
                 "rope_dim elements; this one has kv_lora_rank %lld, rope_dim "
                 "%lld, %lld heads x %lld, layout %s: %s",
                 abi::layoutNamesWhere([](const abi::LayoutInfo &info) {
                   return info.tokenMajor();
                 }).c_str(),
                 (long long)l.kvLoraRank, (long long)l.ropeDim,
                 (long long)d.numHeads, (long long)d.headDim,
                 abi::layoutName(d.layout), entry.dump().c_str()));
  d.latent = l;
  d.kOnly = true;
}

void shapeKOnlyCache(CacheGeometry &g) {
  g.valueShape.clear();
  g.value = CacheStrides{};
  g.valueElems = 0;
  if (!g.desc.latent)
    return;
  // The one head is no dimension: [nb, bs, L + R], as vLLM's kv_cache; an
  // entry with inline scales is its bytes.
  const int64_t D =
      g.desc.latent->entryBytes ? g.desc.latent->entryBytes : g.desc.headDim;
  const int64_t bs = g.desc.blockSize;
  g.keyShape = {g.numBlocks, bs, D};
  g.key = {bs * D, D, D, 1, 0, 0};
  g.keyElems = g.numBlocks * bs * D;
  // Its scales are in the entry: no scale cache.
  if (g.desc.latent->entryBytes)
    g.scaleCacheShape.clear();
}

std::string kOnlyText(const Description &d) {
  if (!d.latent)
    return ", no V";
  return format(", no V; latent %lld + %lld", (long long)d.latent->kvLoraRank,
                (long long)d.latent->ropeDim);
}

void recordKOnly(const Description &d, json &description) {
  description["k_only"] = d.kOnly;
  if (d.latent) {
    description["latent"] = {{"kv_lora_rank", d.latent->kvLoraRank},
                             {"rope_dim", d.latent->ropeDim}};
    if (d.latent->entryBytes)
      description["latent"]["entry_bytes"] = d.latent->entryBytes;
  }
}

bool kOnlyField(const std::string &key, const Description &d, json *actual) {
  if (key == "k_only")
    *actual = d.kOnly;
  else if (key == "kv_lora_rank")
    *actual = d.latent ? d.latent->kvLoraRank : 0;
  else if (key == "rope_dim")
    *actual = d.latent ? d.latent->ropeDim : 0;
  else if (key == "entry_bytes")
    *actual = d.latent ? d.latent->entryBytes : 0;
  else
    return false;
  return true;
}

} // namespace kvbench
