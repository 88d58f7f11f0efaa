//===- Specs.cpp - what each tensor of a description must look like -------===//
//
// Built once per description at load time (docs/KERNEL-ABI.md, "Tensors kvrt
// accepts"): a launch only compares against them.
//
//===----------------------------------------------------------------------===//

#include "Validation.h"

namespace kvrt::impl {

//===----------------------------------------------------------------------===//
// Specs per role
//===----------------------------------------------------------------------===//

static const char *const kCacheInnerRule =
    "the innermost dimension of a cache must have stride 1";
static const char *const kIndexInnerRule =
    "must be 1: kvrt passes index tensors as contiguous buffers";

/// K/V rows: an append's input (source_dtype) or a gather's output
/// (output_dtype).
static TensorSpec rowsSpec(const char *name, const KernelDescription &kernel,
                           DType dtype) {
  TensorSpec spec;
  spec.name = name;
  spec.dtype = dtype;
  spec.kernel = kernel.name.c_str();
  spec.rank = 3;
  spec.shapeText = "[num_tokens, num_kv_heads, head_dim]";
  spec.dimNames[0] = "num_tokens";
  spec.dimNames[1] = "num_kv_heads";
  spec.dimNames[2] = "head_dim";
  spec.dims[1] = kernel.cache.numKvHeads;
  spec.dims[2] = kernel.cache.headDim;
  return spec;
}

static TensorSpec indexSpec(const char *name, DType dtype,
                            const char *shapeText,
                            std::initializer_list<const char *> dimNames) {
  TensorSpec spec;
  spec.name = name;
  spec.dtype = dtype;
  spec.shapeText = shapeText;
  spec.innerStrideRule = kIndexInnerRule;
  for (const char *dimName : dimNames)
    spec.dimNames[spec.rank++] = dimName;
  return spec;
}

namespace {
/// Built once per process.
struct AbiIndexSpecs : IndexSpecs {
  AbiIndexSpecs() {
    slotMapping = indexSpec("slot_mapping", DType::I64, "[num_tokens] (int64)",
                            {"num_tokens"});
    blockTable = indexSpec("block_table", DType::I32,
                           "[num_reqs, max_blocks_per_req] (int32)",
                           {"num_reqs", "max_blocks_per_req"});
    blockTable.innerStrideRule = "a block table row must be contiguous "
                                 "(inner stride 1)";
    queryStartLoc = indexSpec("query_start_loc", DType::I32,
                              "[num_reqs + 1] (int32)", {"num_reqs + 1"});
    contextLens = indexSpec("context_lens", DType::I32, "[num_reqs] (int32)",
                            {"num_reqs"});
  }
};
} // namespace

const IndexSpecs &indexSpecs() {
  static const AbiIndexSpecs specs;
  return specs;
}

static TensorSpec cacheSpec(const char *name, const KernelDescription &kernel,
                            bool isValue) {
  const CacheDescription &cache = kernel.cache;
  TensorSpec spec;
  spec.name = name;
  spec.dtype = cache.dtype;
  spec.kernel = kernel.name.c_str();
  spec.innerStrideRule = kCacheInnerRule;
  spec.injective = true;
  auto set = [&](const char *text,
                 std::initializer_list<std::pair<const char *, int64_t>> dims) {
    spec.shapeText = text;
    spec.rank = 0;
    for (const auto &[dimName, extent] : dims) {
      spec.dimNames[spec.rank] = dimName;
      spec.dims[spec.rank] = extent;
      ++spec.rank;
    }
  };
  int64_t heads = cache.numKvHeads, dim = cache.headDim,
          block = cache.blockSize;
  if (cache.latent) {
    // vLLM's MLA cache: the one head is not a dimension.
    set("[num_blocks, block_size, kv_lora_rank + rope_dim] (latent)",
        {{"num_blocks", -1},
         {"block_size", block},
         {"kv_lora_rank + rope_dim", dim}});
    return spec;
  }
  switch (cache.layout) {
  case Layout::Contiguous:
    set("[batch, num_kv_heads, max_seq_len, head_dim] (contiguous)",
        {{"batch", -1},
         {"num_kv_heads", heads},
         {"max_seq_len", block},
         {"head_dim", dim}});
    break;
  case Layout::PagedNHD:
    set("[num_blocks, block_size, num_kv_heads, head_dim] (paged_nhd)",
        {{"num_blocks", -1},
         {"block_size", block},
         {"num_kv_heads", heads},
         {"head_dim", dim}});
    break;
  case Layout::PagedHND:
    set("[num_blocks, num_kv_heads, block_size, head_dim] (paged_hnd)",
        {{"num_blocks", -1},
         {"num_kv_heads", heads},
         {"block_size", block},
         {"head_dim", dim}});
    break;
  case Layout::VllmVectorized:
    if (isValue)
      set("[num_blocks, num_kv_heads, head_dim, block_size] (vllm_vectorized "
          "value cache)",
          {{"num_blocks", -1},
           {"num_kv_heads", heads},
           {"head_dim", dim},
           {"block_size", block}});
    else
      set("[num_blocks, num_kv_heads, head_dim/x, block_size, x] "
          "(vllm_vectorized key cache)",
          {{"num_blocks", -1},
           {"num_kv_heads", heads},
           {"head_dim/x", dim / cache.x},
           {"block_size", block},
           {"x", cache.x}});
    break;
  case Layout::DualStacked:
    set("[num_blocks, 2, num_kv_heads, block_size, head_dim] (dual_stacked)",
        {{"num_blocks", -1},
         {"K/V index", 2},
         {"num_kv_heads", heads},
         {"block_size", block},
         {"head_dim", dim}});
    break;
  }
  return spec;
}

/// A static scale of the description's granularity (docs/CONTRACT.md,
/// "Quantization"): fp32, compact; num_tokens and num_blocks are bound by
/// the launch.
static TensorSpec scaleSpec(const char *name, const KernelDescription &kernel) {
  TensorSpec spec;
  spec.name = name;
  spec.dtype = DType::F32;
  spec.kernel = kernel.name.c_str();
  spec.compact = true;
  int64_t heads = kernel.cache.numKvHeads;
  auto set = [&](const char *text,
                 std::initializer_list<std::pair<const char *, int64_t>> dims) {
    spec.shapeText = text;
    for (const auto &[dimName, extent] : dims) {
      spec.dimNames[spec.rank] = dimName;
      spec.dims[spec.rank++] = extent;
    }
  };
  switch (kernel.cache.quant.granularity) {
  case ScaleGranularity::PerTensor:
    set("[1] (f32, per_tensor)", {{"1", 1}});
    break;
  case ScaleGranularity::PerHead:
    set("[num_kv_heads] (f32, per_head)", {{"num_kv_heads", heads}});
    break;
  case ScaleGranularity::PerToken:
    set("[num_tokens] (f32, per_token)", {{"num_tokens", -1}});
    break;
  case ScaleGranularity::PerTokenHead:
    set("[num_tokens, num_kv_heads] (f32, per_token_head)",
        {{"num_tokens", -1}, {"num_kv_heads", heads}});
    break;
  case ScaleGranularity::PerBlock:
    set("[num_blocks, num_kv_heads] (f32, per_block)",
        {{"num_blocks", -1}, {"num_kv_heads", heads}});
    break;
  }
  return spec;
}

/// A dynamic scale cache: one scale per slot (and head), beside the cache.
static TensorSpec scaleCacheSpec(const char *name,
                                 const KernelDescription &kernel) {
  TensorSpec spec;
  spec.name = name;
  spec.dtype = DType::F32;
  spec.kernel = kernel.name.c_str();
  spec.compact = true;
  const CacheDescription &cache = kernel.cache;
  bool contiguous = cache.layout == Layout::Contiguous;
  bool perHead = cache.quant.granularity == ScaleGranularity::PerTokenHead;
  spec.dimNames[0] = contiguous ? "batch" : "num_blocks";
  spec.dims[0] = -1;
  spec.dimNames[1] = contiguous ? "max_seq_len" : "block_size";
  spec.dims[1] = cache.blockSize;
  spec.rank = 2;
  if (perHead) {
    spec.dimNames[2] = "num_kv_heads";
    spec.dims[2] = cache.numKvHeads;
    spec.rank = 3;
  }
  spec.shapeText =
      contiguous
          ? (perHead ? "[batch, max_seq_len, num_kv_heads] (f32, scale cache)"
                     : "[batch, max_seq_len] (f32, scale cache)")
          : (perHead ? "[num_blocks, block_size, num_kv_heads] (f32, scale "
                       "cache)"
                     : "[num_blocks, block_size] (f32, scale cache)");
  return spec;
}

/// One part of a latent entry: [num_tokens, size] of source_dtype.
static TensorSpec partSpec(const char *name, const KernelDescription &kernel,
                           const char *sizeName, int64_t size,
                           const char *shapeText) {
  TensorSpec spec;
  spec.name = name;
  spec.dtype = kernel.sourceDtype;
  spec.kernel = kernel.name.c_str();
  spec.rank = 2;
  spec.shapeText = shapeText;
  spec.dimNames[0] = "num_tokens";
  spec.dimNames[1] = sizeName;
  spec.dims[1] = size;
  return spec;
}

OperationSpecs makeSpecs(const KernelDescription &kernel) {
  OperationSpecs specs;
  if (kernel.kind == KernelKind::SlotMapping)
    return specs;
  specs.key = rowsSpec("key", kernel, kernel.sourceDtype);
  specs.value = rowsSpec("value", kernel, kernel.sourceDtype);
  specs.keyOut = rowsSpec("key_out", kernel, kernel.outputDtype);
  specs.valueOut = rowsSpec("value_out", kernel, kernel.outputDtype);
  specs.keyCache = cacheSpec("key_cache", kernel, /*isValue=*/false);
  if (kernel.cache.latent) {
    specs.kvC = partSpec("kv_c", kernel, "kv_lora_rank",
                         kernel.cache.kvLoraRank, "[num_tokens, kv_lora_rank]");
    specs.kPe = partSpec("k_pe", kernel, "rope_dim", kernel.cache.ropeDim,
                         "[num_tokens, rope_dim]");
  }
  specs.valueCache = cacheSpec("value_cache", kernel, /*isValue=*/true);
  if (kernel.cache.quantized) {
    specs.keyScale = scaleSpec("key_scale", kernel);
    specs.valueScale = scaleSpec("value_scale", kernel);
    specs.keyScaleCache = scaleCacheSpec("key_scale_cache", kernel);
    specs.valueScaleCache = scaleCacheSpec("value_scale_cache", kernel);
  }
  return specs;
}

} // namespace kvrt::impl
