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
struct AbiIndexSpecs : OperationSpecs {
  AbiIndexSpecs() {
    using abi::Param;
    OperationSpecs &s = *this;
    s[Param::SlotMapping] = indexSpec("slot_mapping", DType::I64,
                                      "[num_tokens] (int64)", {"num_tokens"});
    s[Param::BlockTable] = indexSpec("block_table", DType::I32,
                                     "[num_reqs, max_blocks_per_req] (int32)",
                                     {"num_reqs", "max_blocks_per_req"});
    s[Param::BlockTable].innerStrideRule =
        "a block table row must be contiguous (inner stride 1)";
    s[Param::QueryStartLoc] =
        indexSpec("query_start_loc", DType::I32, "[num_reqs + 1] (int32)",
                  {"num_reqs + 1"});
    s[Param::ContextLens] = indexSpec("context_lens", DType::I32,
                                      "[num_reqs] (int32)", {"num_reqs"});
    s[Param::BatchIndices] = indexSpec("batch_indices", DType::I32,
                                       "[num_tokens] (int32)", {"num_tokens"});
    s[Param::Positions] = indexSpec("positions", DType::I32,
                                    "[num_tokens] (int32)", {"num_tokens"});
    s[Param::KvIndices] = indexSpec("kv_indices", DType::I32,
                                    "[num_indices] (int32)", {"num_indices"});
    s[Param::KvIndptr] =
        indexSpec("kv_indptr", DType::I32, "[batch_size + 1] (int32)",
                  {"batch_size + 1"});
  }
};
} // namespace

/// The index tensors' specs, fixed by the ABI.
static const OperationSpecs &indexSpecs() {
  static const AbiIndexSpecs specs;
  return specs;
}

namespace {
/// The shape texts of every layout's caches and scale caches, built once
/// from the axes: "[num_blocks, block_size, num_kv_heads, head_dim]
/// (<layout>)"; a layout whose sides differ says "key cache" or "value
/// cache".
struct ShapeTexts {
  std::string cache[abi::kNumLayouts][2];
  /// By per_token_head or not.
  std::string scaleCache[abi::kNumLayouts][2];

  ShapeTexts() {
    for (size_t l = 0; l < abi::kNumLayouts; ++l) {
      const abi::LayoutInfo &layout = abi::layoutInfo(static_cast<Layout>(l));
      for (int isValue = 0; isValue < 2; ++isValue) {
        const abi::CacheAxes &axes = layout.axes(isValue);
        std::string text = "[";
        for (int i = 0; i < axes.rank; ++i) {
          text += i ? ", " : "";
          text += axes[i] == abi::Axis::Side
                      ? "2"
                      : abi::axisName(axes[i], layout.paged());
        }
        text += formatString("] (%s", layout.name);
        if (!(layout.key == layout.value))
          text += isValue ? " value cache" : " key cache";
        cache[l][isValue] = text + ")";
      }
      for (int perHead = 0; perHead < 2; ++perHead)
        scaleCache[l][perHead] =
            formatString("[%s, %s%s] (f32, scale cache)", layout.blocksName(),
                         layout.tokensName(), perHead ? ", num_kv_heads" : "");
    }
  }
};
const ShapeTexts &shapeTexts() {
  static const ShapeTexts texts;
  return texts;
}
} // namespace

static const char *cacheShapeText(Layout layout, bool isValue) {
  return shapeTexts().cache[static_cast<size_t>(layout)][isValue].c_str();
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
  if (cache.latent) {
    // vLLM's MLA cache: the one head is not a dimension.
    set("[num_blocks, block_size, kv_lora_rank + rope_dim] (latent)",
        {{"num_blocks", -1},
         {"block_size", cache.blockSize},
         {"kv_lora_rank + rope_dim", cache.headDim}});
    return spec;
  }
  const abi::LayoutInfo &layout = abi::layoutInfo(cache.layout);
  const abi::CacheAxes &axes = layout.axes(isValue);
  spec.shapeText = cacheShapeText(cache.layout, isValue);
  spec.rank = axes.rank;
  for (int i = 0; i < axes.rank; ++i) {
    spec.dimNames[i] = abi::axisName(axes[i], layout.paged());
    spec.dims[i] = abi::axisExtent(axes[i], -1, cache.numKvHeads,
                                   cache.blockSize, cache.headDim, cache.x);
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
  const abi::LayoutInfo &layout = abi::layoutInfo(cache.layout);
  bool perHead = cache.quant.granularity == ScaleGranularity::PerTokenHead;
  spec.dimNames[0] = layout.blocksName();
  spec.dims[0] = -1;
  spec.dimNames[1] = layout.tokensName();
  spec.dims[1] = cache.blockSize;
  spec.rank = 2;
  if (perHead) {
    spec.dimNames[2] = "num_kv_heads";
    spec.dims[2] = cache.numKvHeads;
    spec.rank = 3;
  }
  spec.shapeText = shapeTexts()
                       .scaleCache[static_cast<size_t>(cache.layout)][perHead]
                       .c_str();
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
  using abi::Param;
  OperationSpecs specs = indexSpecs();
  if (kernel.kind == KernelKind::SlotMapping)
    return specs;
  specs[Param::Key] = rowsSpec("key", kernel, kernel.sourceDtype);
  specs[Param::Value] = rowsSpec("value", kernel, kernel.sourceDtype);
  specs[Param::KeyOut] = rowsSpec("key_out", kernel, kernel.outputDtype);
  specs[Param::ValueOut] = rowsSpec("value_out", kernel, kernel.outputDtype);
  specs[Param::KeyCache] = cacheSpec("key_cache", kernel, /*isValue=*/false);
  if (kernel.cache.latent) {
    specs[Param::KvC] =
        partSpec("kv_c", kernel, "kv_lora_rank", kernel.cache.kvLoraRank,
                 "[num_tokens, kv_lora_rank]");
    specs[Param::KPe] =
        partSpec("k_pe", kernel, "rope_dim", kernel.cache.ropeDim,
                 "[num_tokens, rope_dim]");
  }
  specs[Param::ValueCache] = cacheSpec("value_cache", kernel, /*isValue=*/true);
  if (kernel.cache.quantized) {
    specs[Param::KeyScale] = scaleSpec("key_scale", kernel);
    specs[Param::ValueScale] = scaleSpec("value_scale", kernel);
    specs[Param::KeyScaleCache] = scaleCacheSpec("key_scale_cache", kernel);
    specs[Param::ValueScaleCache] = scaleCacheSpec("value_scale_cache", kernel);
  }
  return specs;
}

} // namespace kvrt::impl
