//===- KVPrologue.cpp - the fused prologue's verifiers --------------------===//
//
// #kv.prologue<...> (docs/dev/PROLOGUE.md): the attribute checks its own
// parameters; verifyKernelPrologue checks it against the op that carries it
// and that op's cache. Each refusal names the parameter and the value.
//
//===----------------------------------------------------------------------===//

#include "kvgen/ABI/Limits.h"
#include "kvgen/Dialect/KV/IR/KVDialect.h"

using namespace mlir;
using namespace kvgen;
using namespace kvgen::kv;

LogicalResult PrologueAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   int64_t qHeads, StringRef norm,
                                   StringRef rope, int64_t rotaryDim,
                                   StringRef qQuant, StringRef cosSin) {
  if (qHeads < 0)
    return emitError() << "q_heads must be positive (or absent for no Q), "
                          "got "
                       << qHeads;
  if (!norm.empty() && norm != "rms")
    return emitError() << "unknown norm '" << norm << "': expected rms";
  if (!rope.empty() && rope != "neox" && rope != "gptj")
    return emitError() << "unknown rope '" << rope
                       << "': expected neox or gptj";
  if (norm.empty() && rope.empty())
    return emitError() << "a prologue needs norm or rope: with neither it "
                          "would leave K as it is";
  if (rope.empty() && rotaryDim != 0)
    return emitError() << "rotary_dim = " << rotaryDim
                       << " without rope: name the rotation (rope = neox or "
                          "rope = gptj)";
  if (!rope.empty() && rotaryDim <= 0)
    return emitError() << "rope = " << rope
                       << " needs a positive rotary_dim, got " << rotaryDim;
  if (rotaryDim % 2 != 0)
    return emitError() << "rotary_dim must be even (RoPE rotates pairs of "
                          "elements), got "
                       << rotaryDim;
  if (!qQuant.empty() && qQuant != "fp8_e4m3")
    return emitError() << "unknown q_quant '" << qQuant
                       << "': expected fp8_e4m3";
  if (!qQuant.empty() && qHeads <= 0)
    return emitError() << "q_quant = " << qQuant
                       << " needs q_heads: it quantizes the Q the prologue "
                          "writes";
  if (!cosSin.empty() && cosSin != "f32")
    return emitError() << "unknown cos_sin '" << cosSin
                       << "': expected f32 (or absent: the source dtype)";
  if (!cosSin.empty() && rope.empty())
    return emitError() << "cos_sin = " << cosSin
                       << " without rope: only RoPE reads the cos/sin cache";
  return success();
}

/// An MLA append's prologue (docs/dev/PROLOGUE.md): RoPE on k_pe, the
/// entry's last rope_dim elements, and on q_pe [num_tokens, q_heads,
/// rope_dim]; kv_c is stored as it is. The kind is an MLA append: the ops
/// refuse a latent cache on any other append, and a kind that moves no rows
/// in is refused before.
static LogicalResult verifyLatentPrologue(Operation *op, CacheType cache,
                                          PrologueAttr prologue) {
  LatentAttr latent = cache.getLatent();
  if (latent.getScales())
    return op->emitOpError()
           << "a prologue on a latent entry with inline scales "
              "(#kv.inline_scales, vLLM's fp8_ds_mla) is not supported yet: "
              "a bf16, fp16 or statically scaled latent cache takes one";
  if (prologue.getRotaryDim() != latent.getRopeDim())
    return op->emitOpError()
           << "rotary_dim " << prologue.getRotaryDim()
           << " is not the latent's rope_dim " << latent.getRopeDim()
           << ": an MLA prologue rotates the whole of k_pe and q_pe";
  int64_t qHeads = prologue.getQHeads();
  if (qHeads > abi::kMaxKvHeads ||
      qHeads * latent.getRopeDim() > abi::kMaxElementsPerToken)
    return op->emitOpError()
           << "q_heads " << qHeads
           << " is past the limit: a kernel supports at most "
           << abi::kMaxKvHeads << " Q heads and " << abi::kMaxElementsPerToken
           << " Q elements per token";
  if (prologue.hasQQuant() || prologue.hasF32CosSin())
    return op->emitOpError()
           << "q_quant and cos_sin = f32 on an MLA append are not supported "
              "yet: q_pe is written and the cos/sin cache read in the source "
              "dtype";
  // A latent cache takes static scales only (its type's rule).
  return success();
}

LogicalResult kvgen::kv::verifyKernelPrologue(Operation *op,
                                              abi::KernelKind kind,
                                              CacheType cache, Type rows) {
  (void)rows;
  Attribute attr = op->getAttr("prologue");
  if (!attr)
    return success();
  auto prologue = dyn_cast<PrologueAttr>(attr);
  if (!prologue)
    return op->emitOpError()
           << "'prologue' must be a #kv.prologue<...>, got " << attr;
  abi::KindTraits traits = abi::kindTraits(kind);
  if (traits.rows != abi::KindRows::Into)
    return op->emitOpError()
           << "cannot take a prologue: it reads rows out of the cache, and a "
              "prologue transforms rows on their way in";
  if (cache.getLatent() && prologue.hasNorm())
    return op->emitOpError()
           << "cannot normalize a latent cache's entry: MLA takes rope "
              "(on k_pe) and no norm";
  if (cache.getLatent())
    return verifyLatentPrologue(op, cache, prologue);
  if (kind != abi::KernelKind::Append && kind != abi::KernelKind::FusedAppend &&
      kind != abi::KernelKind::PagedKvAppend)
    return op->emitOpError()
           << "does not take a prologue yet: kv.append, kv.fused_append and "
              "kv.paged_kv_append do (docs/dev/PROLOGUE.md)";
  int64_t headDim = cache.getHeadDim();
  if (prologue.getRotaryDim() > headDim)
    return op->emitOpError()
           << "rotary_dim " << prologue.getRotaryDim()
           << " is more than head_dim " << headDim
           << ": RoPE rotates the first rotary_dim elements of a head";
  if (prologue.hasRope() && !prologue.isNeox() && headDim % 2 != 0)
    return op->emitOpError()
           << "rope = gptj pairs elements 2i and 2i + 1 of a head: head_dim "
              "must be even, got "
           << headDim;
  int64_t numKvHeads = cache.getNumKvHeads();
  int64_t qHeads = prologue.getQHeads();
  if (qHeads % numKvHeads != 0)
    return op->emitOpError()
           << "q_heads " << qHeads << " is not a multiple of num_kv_heads "
           << numKvHeads << ": each KV head serves the same number of Q heads";
  if (qHeads > abi::kMaxKvHeads || qHeads * headDim > abi::kMaxElementsPerToken)
    return op->emitOpError()
           << "q_heads " << qHeads
           << " is past the limit: a kernel supports at most "
           << abi::kMaxKvHeads << " Q heads and " << abi::kMaxElementsPerToken
           << " Q elements per token";
  // What this release does not build yet, refused rather than guessed.
  if (QuantAttr quant = cache.getQuant();
      quant && quant.getMode() == ScaleMode::Dynamic)
    return op->emitOpError() << "a prologue on a cache with dynamic scales "
                                "is not supported yet: static scales or none";
  if (cache.isAsymmetric())
    return op->emitOpError() << "a prologue on a cache with v_head_dim is "
                                "not supported yet";
  if (!cache.hasValue())
    return op->emitOpError()
           << "a prologue on a K-only cache is not supported yet";
  if (cache.getNvfp4())
    return op->emitOpError()
           << "a prologue on an NVFP4 cache is not supported yet: its groups "
              "of 16 are quantized by one thread each, a prologue's units "
              "span lanes";
  return success();
}
