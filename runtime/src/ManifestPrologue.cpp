//===- ManifestPrologue.cpp - parse and verify a kernel's fused prologue --===//
//
// A kernel's "prologue" object (docs/KERNEL-ABI.md): its parts decide the
// kernel's parameter list, and its rules are those of docs/CONTRACT.md ("The
// fused prologue") that the compiler's verifier keeps.
//
//===----------------------------------------------------------------------===//

#include "FieldReader.h"
#include "Limits.h"
#include "Manifest.h"
#include "Validation.h"

namespace kvrt::impl {

/// An MLA kernel's prologue (ManifestPrologueMLA.cpp).
Status checkLatentPrologue(const FieldReader &object, const std::string &path,
                           const KernelDescription &kernel);

/// Whether kernels of `kind` may have a fused prologue: whether any of its
/// parameters is a prologue's (include/kvgen/ABI/Params.def).
static bool takesPrologue(KernelKind kind) {
  for (const abi::KernelParam &p : abi::kKernelParams)
    if (p.kind == kind && isPrologue(p.when))
      return true;
  return false;
}

/// "prologue": the fused prologue's parts, which decide the parameter list,
/// and the rules of docs/CONTRACT.md ("The fused prologue") that the
/// compiler's verifier keeps: a bundle that breaks one was not written by a
/// kvgen that keeps them, and kvrt would check tensors against a shape no
/// kernel has.
Status parsePrologue(const FieldReader &kernel, KernelDescription *out) {
  namespace p = key::prologue;
  if (!kernel.has(key::kernel::prologue))
    return Status();
  std::string path = kernel.field(key::kernel::prologue);
  if (!takesPrologue(out->kind))
    return KVRT_BUNDLE_ERROR("%s: a %s kernel has no fused prologue (only "
                             "append, fused_append and paged_kv_append have "
                             "one)",
                             path.c_str(), kindName(out->kind));
  FieldReader object = kernel;
  KVRT_RETURN_IF_ERROR(kernel.getObject(key::kernel::prologue, &object));
  PrologueDescription &prologue = out->prologue;
  const CacheDescription &cache = out->cache;
  prologue.qHeads = object.getInt(p::q_heads);
  std::string norm = object.getString(p::norm);
  if (object.has(p::norm) && norm != "rms")
    return KVRT_BUNDLE_ERROR("%s is %s; the norm is \"rms\"",
                             object.field(p::norm).c_str(),
                             quote(norm).c_str());
  prologue.norm = object.has(p::norm);
  prologue.rope = object.getString(p::rope);
  if (object.has(p::rope) && prologue.rope != "neox" && prologue.rope != "gptj")
    return KVRT_BUNDLE_ERROR("%s is %s; the rotation is \"neox\" or "
                             "\"gptj\"",
                             object.field(p::rope).c_str(),
                             quote(prologue.rope).c_str());
  if (object.has(p::rope))
    KVRT_RETURN_IF_ERROR(object.require(p::rotary_dim));
  else
    KVRT_RETURN_IF_ERROR(
        object.refuse(p::rotary_dim, "only a prologue with rope has one"));
  prologue.rotaryDim = object.getInt(p::rotary_dim);
  std::string qQuant = object.getString(p::q_quant);
  if (object.has(p::q_quant) && (qQuant != "fp8_e4m3" || prologue.qHeads <= 0))
    return KVRT_BUNDLE_ERROR("%s is %s; Q's quantization is \"fp8_e4m3\", "
                             "with q_heads",
                             object.field(p::q_quant).c_str(),
                             quote(qQuant).c_str());
  prologue.qQuant = object.has(p::q_quant);
  std::string cosSin = object.getString(p::cos_sin);
  if (object.has(p::cos_sin) && (cosSin != "f32" || prologue.rope.empty()))
    return KVRT_BUNDLE_ERROR("%s is %s; the cos/sin cache's dtype is \"f32\" "
                             "(or absent: the source dtype), with rope",
                             object.field(p::cos_sin).c_str(),
                             quote(cosSin).c_str());
  prologue.f32CosSin = object.has(p::cos_sin);
  if (!prologue.norm && prologue.rope.empty())
    return KVRT_BUNDLE_ERROR("%s has neither norm nor rope: it would leave K "
                             "as it is",
                             path.c_str());
  if (cache.latent)
    return checkLatentPrologue(object, path, *out);
  if (prologue.rotaryDim % 2 != 0 || prologue.rotaryDim > cache.headDim)
    return KVRT_BUNDLE_ERROR("%s is %lld; it must be even and at most "
                             "head_dim (%lld)",
                             object.field(p::rotary_dim).c_str(),
                             static_cast<long long>(prologue.rotaryDim),
                             static_cast<long long>(cache.headDim));
  // Bounded: q_heads times the head is at most the elements of a token.
  if (prologue.qHeads > 0 &&
      (prologue.qHeads % cache.numKvHeads != 0 ||
       prologue.qHeads > limits::kMaxElementsPerToken / cache.headDim))
    return KVRT_BUNDLE_ERROR(
        "%s is %lld; it must be a multiple of num_kv_heads (%lld) and "
        "q_heads * head_dim at most %lld elements (docs/CONTRACT.md)",
        object.field(p::q_heads).c_str(),
        static_cast<long long>(prologue.qHeads),
        static_cast<long long>(cache.numKvHeads),
        static_cast<long long>(limits::kMaxElementsPerToken));
  if (!cache.hasValue() || cache.asymmetric() || cache.nvfp4 ||
      cache.quantization() == Quantization::Dynamic)
    return KVRT_BUNDLE_ERROR(
        "%s: a prologue needs a cache with K and V of "
        "one head size and static or no scales (not NVFP4)",
        path.c_str());
  return Status();
}

} // namespace kvrt::impl
