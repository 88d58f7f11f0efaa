//===- ManifestPrologueMLA.cpp - an MLA kernel's fused prologue -----------===//
//
// The "prologue" object of an mla_append or mla_fused_append kernel: RoPE on
// k_pe and q_pe only (docs/CONTRACT.md, "The MLA appends' prologue"), the
// rules the compiler's verifier keeps (lib/Dialect/KV/IR/KVPrologue.cpp).
//
//===----------------------------------------------------------------------===//

#include "FieldReader.h"
#include "Limits.h"
#include "Manifest.h"

namespace kvrt::impl {

Status checkLatentPrologue(const FieldReader &object, const std::string &path,
                           const KernelDescription &kernel) {
  namespace p = key::prologue;
  const PrologueDescription &prologue = kernel.prologue;
  const CacheDescription &cache = kernel.cache;
  if (prologue.norm)
    return KVRT_BUNDLE_ERROR("%s: a latent cache's prologue has no norm "
                             "(MLA takes rope, on k_pe and q_pe)",
                             path.c_str());
  if (prologue.rope.empty())
    return KVRT_BUNDLE_ERROR("%s: a latent cache's prologue needs rope",
                             path.c_str());
  if (prologue.rotaryDim != cache.ropeDim)
    return KVRT_BUNDLE_ERROR("%s is %lld; an MLA prologue rotates the whole "
                             "of k_pe: rope_dim (%lld)",
                             object.field(p::rotary_dim).c_str(),
                             static_cast<long long>(prologue.rotaryDim),
                             static_cast<long long>(cache.ropeDim));
  if (prologue.qHeads > limits::kMaxElementsPerToken / cache.ropeDim)
    return KVRT_BUNDLE_ERROR(
        "%s is %lld; q_heads * rope_dim must be at most "
        "%lld elements (docs/CONTRACT.md)",
        object.field(p::q_heads).c_str(),
        static_cast<long long>(prologue.qHeads),
        static_cast<long long>(limits::kMaxElementsPerToken));
  if (prologue.qQuant || prologue.f32CosSin)
    return KVRT_BUNDLE_ERROR("%s: q_quant and cos_sin on an MLA prologue are "
                             "not supported: q_pe and the cos/sin cache are "
                             "in the source dtype",
                             path.c_str());
  if (cache.inlineScales)
    return KVRT_BUNDLE_ERROR("%s: a prologue on a latent entry with inline "
                             "scales is not supported",
                             path.c_str());
  return Status();
}

} // namespace kvrt::impl
