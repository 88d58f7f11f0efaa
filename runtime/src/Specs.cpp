//===- Specs.cpp - what each tensor of a description must look like -------===//
//
// Built once per description at load time (docs/KERNEL-ABI.md, "Tensors kvrt
// accepts"): a launch only compares against them.
//
//===----------------------------------------------------------------------===//

#include "Validation.h"

#include <algorithm>

namespace kvrt::impl {

using abi::Param;

/// Each dimension's name and extent (-1 where the launch binds it).
using Dims = std::initializer_list<std::pair<const char *, int64_t>>;

/// A spec named after its parameter; `kernel` is the description that fixes
/// its dtype and shape, NULL where the ABI fixes them.
static TensorSpec makeSpec(Param param, DType dtype, const char *kernel,
                           const char *shapeText, Dims dims) {
  TensorSpec spec;
  spec.name = abi::paramName(param);
  spec.dtype = dtype;
  spec.kernel = kernel;
  spec.shapeText = shapeText;
  for (const auto &[dimName, extent] : dims) {
    spec.dimNames[spec.rank] = dimName;
    spec.dims[spec.rank++] = extent;
  }
  return spec;
}

namespace {
/// The index tensors' specs, built once per process from the ABI: a
/// dimension per KVGEN_ABI_EXTENT of the tensor, named by its count.
struct AbiIndexSpecs : OperationSpecs {
  /// Per parameter: the shape text, then the dimensions' names.
  std::string texts[kNumParamIds][1 + kMaxRank];

  AbiIndexSpecs() {
    for (const abi::ParamInfo &param : abi::kParams) {
      bool i64 = param.element == abi::ParamElement::I64;
      if (!i64 && param.element != abi::ParamElement::I32)
        continue;
      TensorSpec &spec = (*this)[param.id];
      std::string *text = texts[static_cast<int>(param.id)];
      spec = makeSpec(param.id, i64 ? DType::I64 : DType::I32, nullptr, "", {});
      for (const ExtentRule &rule : kExtents)
        if (rule.buffer == param.id) {
          text[1 + rule.dim] = countName(rule.count, rule.bias);
          spec.rank = std::max(spec.rank, rule.dim + 1);
        }
      text[0] = "[";
      for (int i = 0; i < spec.rank; ++i) {
        spec.dimNames[i] = text[1 + i].c_str();
        text[0] += (i ? ", " : "") + text[1 + i];
      }
      text[0] += i64 ? "] (int64)" : "] (int32)";
      spec.shapeText = text[0].c_str();
      spec.innerStrideRule =
          param.id == Param::BlockTable
              ? "a block table row must be contiguous (inner stride 1)"
              : "must be 1: kvrt passes index tensors as contiguous buffers";
    }
  }
};

/// The shape texts of every layout's caches and scale caches, built once
/// from the axes: "[num_blocks, block_size, num_kv_heads, head_dim]
/// (<layout>)"; a layout whose sides differ says "key cache" or "value
/// cache".
struct ShapeTexts {
  std::string cache[abi::kNumLayouts][2];
  /// The value cache of a cache whose V head size differs: its Dim axis is
  /// v_head_dim.
  std::string valueCacheOwnDim[abi::kNumLayouts];
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
      std::string own = cache[l][1];
      size_t at = own.find("head_dim");
      if (at != std::string::npos)
        own.insert(at, "v_");
      valueCacheOwnDim[l] = own;
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

static TensorSpec cacheSpec(Param param, const KernelDescription &kernel) {
  const CacheDescription &cache = kernel.cache;
  bool isValue = param == Param::ValueCache;
  TensorSpec spec;
  if (cache.inlineScales) {
    // The entry is bytes: the quantized latent, its scales, the RoPE part.
    spec = makeSpec(param, cache.dtype, kernel.name.c_str(),
                    "[num_blocks, block_size, entry_bytes] (latent with "
                    "inline scales)",
                    {{"num_blocks", -1},
                     {"block_size", cache.blockSize},
                     {"entry_bytes", cache.entryBytes}});
  } else if (cache.latent) {
    // vLLM's MLA cache: the one head is not a dimension.
    spec = makeSpec(param, cache.dtype, kernel.name.c_str(),
                    "[num_blocks, block_size, kv_lora_rank + rope_dim] "
                    "(latent)",
                    {{"num_blocks", -1},
                     {"block_size", cache.blockSize},
                     {"kv_lora_rank + rope_dim", cache.headDim}});
  } else {
    const abi::LayoutInfo &layout = abi::layoutInfo(cache.layout);
    const abi::CacheAxes &axes = layout.axes(isValue);
    size_t l = static_cast<size_t>(cache.layout);
    bool ownDim = isValue && cache.asymmetric();
    spec = makeSpec(param, cache.dtype, kernel.name.c_str(),
                    ownDim ? shapeTexts().valueCacheOwnDim[l].c_str()
                           : shapeTexts().cache[l][isValue].c_str(),
                    {});
    for (int i = 0; i < axes.rank; ++i) {
      spec.dimNames[i] = abi::axisName(axes[i], layout.paged());
      spec.dims[i] =
          abi::axisExtent(axes[i], -1, cache.numKvHeads, cache.blockSize,
                          isValue ? cache.valueDim() : cache.headDim, cache.x);
      // V's head size by its own name where it differs from K's.
      if (isValue && cache.asymmetric() && axes[i] == abi::Axis::Dim)
        spec.dimNames[i] = "v_head_dim";
      // An NVFP4 row is bytes: head_dim / 2 of values, head_dim / 16 of
      // scales.
      if (cache.nvfp4 && axes[i] == abi::Axis::Dim) {
        spec.dimNames[i] = "head_dim / 2 + head_dim / 16 (nvfp4 row bytes)";
        spec.dims[i] = cache.nvfp4RowBytes;
      }
    }
    spec.rank = axes.rank;
    spec.compactBelowBlock = cache.nvfp4;
    spec.rawBytes = cache.nvfp4;
  }
  spec.innerStrideRule =
      "the innermost dimension of a cache must have stride 1";
  spec.injective = true;
  return spec;
}

/// A static scale of the description's granularity (docs/CONTRACT.md,
/// "Quantization"), or a dynamic scale cache: one scale per slot (and head),
/// beside the cache. fp32, compact; num_tokens and num_blocks are bound by
/// the launch.
static TensorSpec scaleSpec(Param param, const KernelDescription &kernel) {
  const CacheDescription &cache = kernel.cache;
  int64_t heads = cache.numKvHeads;
  auto scale = [&](const char *shapeText, Dims dims) {
    TensorSpec spec =
        makeSpec(param, DType::F32, kernel.name.c_str(), shapeText, dims);
    spec.compact = true;
    return spec;
  };
  if (param == Param::KeyScaleCache || param == Param::ValueScaleCache) {
    const abi::LayoutInfo &layout = abi::layoutInfo(cache.layout);
    bool perHead = cache.quant.granularity == ScaleGranularity::PerTokenHead;
    TensorSpec spec =
        scale(shapeTexts()
                  .scaleCache[static_cast<size_t>(cache.layout)][perHead]
                  .c_str(),
              {{layout.blocksName(), -1},
               {layout.tokensName(), cache.blockSize},
               {"num_kv_heads", heads}});
    spec.rank = perHead ? 3 : 2;
    return spec;
  }
  switch (cache.quant.granularity) {
  case ScaleGranularity::PerTensor:
    return scale("[1] (f32, per_tensor)", {{"1", 1}});
  case ScaleGranularity::PerHead:
    return scale("[num_kv_heads] (f32, per_head)", {{"num_kv_heads", heads}});
  case ScaleGranularity::PerToken:
    return scale("[num_tokens] (f32, per_token)", {{"num_tokens", -1}});
  case ScaleGranularity::PerTokenHead:
    return scale("[num_tokens, num_kv_heads] (f32, per_token_head)",
                 {{"num_tokens", -1}, {"num_kv_heads", heads}});
  case ScaleGranularity::PerBlock:
    return scale("[num_blocks, num_kv_heads] (f32, per_block)",
                 {{"num_blocks", -1}, {"num_kv_heads", heads}});
  }
  return TensorSpec();
}

/// The fused prologue's tensors (docs/CONTRACT.md, "The fused prologue"):
/// Q in and out with any strides, the cos/sin cache and the weights
/// compact in the source dtype, epsilon an f32 [1]; rope_positions is an
/// index tensor (AbiIndexSpecs). False for any other parameter.
static bool prologueSpec(Param param, const KernelDescription &kernel,
                         TensorSpec *out) {
  const PrologueDescription &prologue = kernel.prologue;
  const char *k = kernel.name.c_str();
  DType source = kernel.sourceDtype;
  int64_t headDim = kernel.cache.headDim;
  // An MLA prologue's Q is vLLM's q_pe: heads of rope_dim elements.
  bool latent = kernel.cache.latent;
  switch (param) {
  case Param::Query:
  case Param::QOut:
    *out = makeSpec(
        param, param == Param::QOut && prologue.qQuant ? DType::F8E4M3 : source,
        k,
        latent ? "[num_tokens, q_heads, rope_dim]"
               : "[num_tokens, q_heads, head_dim]",
        {{"num_tokens", -1},
         {"q_heads", prologue.qHeads},
         {latent ? "rope_dim" : "head_dim",
          latent ? kernel.cache.ropeDim : headDim}});
    // Two Q elements at one address would be written by two threads.
    out->injective = param == Param::QOut;
    return true;
  case Param::KPeOut:
    *out = makeSpec(param, source, k, "[num_tokens, rope_dim]",
                    {{"num_tokens", -1}, {"rope_dim", kernel.cache.ropeDim}});
    out->injective = true;
    return true;
  case Param::CosSinCache:
    *out = makeSpec(param, prologue.f32CosSin ? DType::F32 : source, k,
                    "[max_position, rotary_dim] (compact, cos then sin)",
                    {{"max_position", -1}, {"rotary_dim", prologue.rotaryDim}});
    out->compact = true;
    return true;
  case Param::KNormWeight:
  case Param::QNormWeight:
    *out = makeSpec(param, source, k, "[head_dim] (compact)",
                    {{"head_dim", headDim}});
    out->compact = true;
    return true;
  case Param::Epsilon:
  case Param::QScale:
    *out = makeSpec(param, DType::F32, k, "[1] (f32)", {{"1", 1}});
    out->compact = true;
    return true;
  default:
    return false;
  }
}

/// V's rows: the appended V, the gathered V.
static bool isValueRows(Param param) {
  return param == Param::Value || param == Param::ValueOut;
}

OperationSpecs makeSpecs(const KernelDescription &kernel) {
  static const AbiIndexSpecs indexSpecs;
  OperationSpecs specs = indexSpecs;
  if (!touchesCache(kernel.kind))
    return specs;
  const CacheDescription &cache = kernel.cache;
  const char *k = kernel.name.c_str();
  // The rows, caches and scales, by what their elements are.
  for (const abi::ParamInfo &param : abi::kParams) {
    TensorSpec &spec = specs[param.id];
    if (prologueSpec(param.id, kernel, &spec))
      continue;
    bool kvC = param.id == Param::KvC;
    switch (param.element) {
    case abi::ParamElement::Source:
    case abi::ParamElement::Output: {
      DType rows = param.element == abi::ParamElement::Source
                       ? kernel.sourceDtype
                       : kernel.outputDtype;
      if (kvC || param.id == Param::KPe) // one part of a latent entry
        spec = makeSpec(param.id, rows, k,
                        kvC ? "[num_tokens, kv_lora_rank]"
                            : "[num_tokens, rope_dim]",
                        {{"num_tokens", -1},
                         {kvC ? "kv_lora_rank" : "rope_dim",
                          kvC ? cache.kvLoraRank : cache.ropeDim}});
      else if (isValueRows(param.id) && cache.asymmetric())
        spec = makeSpec(param.id, rows, k,
                        "[num_tokens, num_kv_heads, v_head_dim]",
                        {{"num_tokens", -1},
                         {"num_kv_heads", cache.numKvHeads},
                         {"v_head_dim", cache.valueDim()}});
      else
        spec =
            makeSpec(param.id, rows, k, "[num_tokens, num_kv_heads, head_dim]",
                     {{"num_tokens", -1},
                      {"num_kv_heads", cache.numKvHeads},
                      {"head_dim", cache.headDim}});
      break;
    }
    case abi::ParamElement::Cache:
      spec = cacheSpec(param.id, kernel);
      break;
    case abi::ParamElement::F32:
      if (cache.quantized)
        spec = scaleSpec(param.id, kernel);
      break;
    default:
      break; // the index tensors, fixed by the ABI; scalars
    }
  }
  return specs;
}

} // namespace kvrt::impl
