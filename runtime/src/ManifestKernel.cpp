//===- ManifestKernel.cpp - parse and verify one kernel of the manifest ---===//
//
// Every name is read through the ABI vocabulary (include/kvgen/ABI) and every
// parameter list is checked against abi::forEachParam, so kvrt accepts
// exactly what the compiler writes.
//
//===----------------------------------------------------------------------===//

#include "FieldReader.h"
#include "Limits.h"
#include "Manifest.h"
#include "Validation.h"

namespace kvrt::impl {

// ManifestPrologue.cpp.
Status parsePrologue(const FieldReader &kernel, KernelDescription *out);
// ManifestNvfp4.cpp.
Status parseNvfp4(const FieldReader &cache, CacheDescription *out);

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

/// The cache element each quantization kind stores.
static DType storedDType(QuantKind kind) {
  switch (kind) {
  case QuantKind::FP8E4M3:
    return DType::F8E4M3;
  case QuantKind::FP8E5M2:
    return DType::F8E5M2;
  case QuantKind::Int8:
  case QuantKind::NVFP4:
    return DType::I8;
  }
  return DType::I8;
}

static Status parseQuant(const FieldReader &cache, CacheDescription *out) {
  FieldReader quant = cache;
  KVRT_RETURN_IF_ERROR(cache.getObject(key::cache::quant, &quant));
  QuantDescription &q = out->quant;
  KVRT_RETURN_IF_ERROR(
      quant.getName(key::quant::kind, abi::kQuantKindNames, &q.kind));
  KVRT_RETURN_IF_ERROR(quant.getName(key::quant::granularity,
                                     abi::kGranularityNames, &q.granularity));
  KVRT_RETURN_IF_ERROR(
      quant.getName(key::quant::mode, abi::kScaleModeNames, &q.mode));
  q.reciprocal = quant.getBool(key::quant::reciprocal);

  // The rules of docs/CONTRACT.md, "Quantization": a bundle that breaks one
  // was not written by a kvgen that keeps them.
  if (out->dtype != storedDType(q.kind))
    return KVRT_BUNDLE_ERROR("%s is %s but %s stores %s",
                             cache.field(key::cache::dtype).c_str(),
                             dtypeName(out->dtype), abi::quantKindName(q.kind),
                             dtypeName(storedDType(q.kind)));
  bool perGroup = q.granularity == ScaleGranularity::PerToken ||
                  q.granularity == ScaleGranularity::PerTokenHead;
  if (q.mode == ScaleMode::Dynamic && !perGroup)
    return KVRT_BUNDLE_ERROR("%s: dynamic %s scales are not supported; "
                             "dynamic scales are per_token or per_token_head",
                             quant.field(key::quant::mode).c_str(),
                             abi::granularityName(q.granularity));
  if (q.granularity == ScaleGranularity::PerBlock &&
      !abi::layoutInfo(out->layout).paged())
    return KVRT_BUNDLE_ERROR("%s: per_block scales need a paged layout, not "
                             "%s",
                             quant.field(key::quant::granularity).c_str(),
                             layoutName(out->layout));
  return Status();
}

/// "latent.inline_scales": a latent entry that stores its group scales
/// (docs/KERNEL-ABI.md); its byte count must be the one the compiler's
/// layout gives (LatentEntry.h), which kvrt checks the cache against.
static Status parseInlineScales(const FieldReader &latent,
                                CacheDescription *out) {
  out->inlineScales = latent.has(key::latent::inline_scales);
  if (!out->inlineScales) {
    if (out->ropeDim <= 0)
      return KVRT_BUNDLE_ERROR("%s must be positive (0 only with "
                               "inline_scales), got %lld",
                               latent.field(key::latent::rope_dim).c_str(),
                               static_cast<long long>(out->ropeDim));
    return Status();
  }
  FieldReader scales = latent;
  KVRT_RETURN_IF_ERROR(latent.getObject(key::latent::inline_scales, &scales));
  out->groupSize = scales.getInt(key::inline_scales::group_size);
  out->entryBytes = scales.getInt(key::inline_scales::entry_bytes);
  KVRT_RETURN_IF_ERROR(scales.getName(
      key::inline_scales::rope_dtype, abi::kDTypeNames, &out->ropeDtype,
      +[](DType t) {
        return t == DType::F32 || t == DType::F16 || t == DType::BF16;
      },
      "f32, f16 or bf16"));
  if (out->ropeDim < 0 || out->kvLoraRank % out->groupSize != 0)
    return KVRT_BUNDLE_ERROR(
        "%s: group_size %lld must divide kv_lora_rank %lld, and rope_dim "
        "(%lld) be 0 or more",
        latent.field(key::latent::inline_scales).c_str(),
        static_cast<long long>(out->groupSize),
        static_cast<long long>(out->kvLoraRank),
        static_cast<long long>(out->ropeDim));
  // Bounded: kv_lora_rank and rope_dim are below head_dim's limit.
  int64_t bytes = out->kvLoraRank * dtypeBytes(out->dtype) +
                  out->kvLoraRank / out->groupSize * 4 +
                  out->ropeDim * dtypeBytes(out->ropeDtype);
  if (!out->quantized || dtypeBytes(out->dtype) != 1 ||
      out->quant.mode != ScaleMode::Dynamic ||
      out->quant.granularity != ScaleGranularity::PerToken ||
      bytes != out->entryBytes)
    return KVRT_BUNDLE_ERROR(
        "%s: an entry with inline scales is a 1-byte cache with dynamic "
        "per_token quant and %lld bytes (kv_lora_rank + 4 per group + "
        "rope_dim of rope_dtype), got %s and entry_bytes %lld",
        latent.field(key::latent::inline_scales).c_str(),
        static_cast<long long>(bytes), dtypeName(out->dtype),
        static_cast<long long>(out->entryBytes));
  return Status();
}

/// "k_only" and "latent": a cache without V, and the MLA latent cache's two
/// parts, which must make up its one head.
static Status parseKOnly(const FieldReader &cache, CacheDescription *out) {
  out->kOnly = cache.getBool(key::cache::k_only);
  out->latent = cache.has(key::cache::latent);
  if (out->latent) {
    FieldReader latent = cache;
    KVRT_RETURN_IF_ERROR(cache.getObject(key::cache::latent, &latent));
    out->kvLoraRank = latent.getInt(key::latent::kv_lora_rank);
    out->ropeDim = latent.getInt(key::latent::rope_dim);
    KVRT_RETURN_IF_ERROR(parseInlineScales(latent, out));
    if (!abi::layoutInfo(out->layout).tokenMajor() || out->numKvHeads != 1 ||
        out->kvLoraRank + out->ropeDim != out->headDim)
      return KVRT_BUNDLE_ERROR(
          "%s: a latent cache is %s with "
          "num_kv_heads 1 and head_dim kv_lora_rank + rope_dim "
          "(%lld + %lld), got %s, %lld and %lld",
          cache.field(key::cache::latent).c_str(),
          abi::layoutNamesWhere([](const abi::LayoutInfo &l) {
            return l.tokenMajor();
          }).c_str(),
          static_cast<long long>(out->kvLoraRank),
          static_cast<long long>(out->ropeDim), layoutName(out->layout),
          static_cast<long long>(out->numKvHeads),
          static_cast<long long>(out->headDim));
  }
  if (!out->hasValue() && abi::layoutInfo(out->layout).stacked())
    return KVRT_BUNDLE_ERROR("%s: a K-only cache cannot be %s",
                             cache.field(key::cache::layout).c_str(),
                             layoutName(out->layout));
  return Status();
}

/// "v_head_dim": V's head size where it differs from K's, on the layouts
/// that keep V's rows whole and apart from K's (docs/CONTRACT.md).
static Status parseValueHeadDim(const FieldReader &cache,
                                const FieldReader &kernel,
                                const abi::LayoutInfo &info,
                                CacheDescription *out) {
  if (!cache.has(key::cache::v_head_dim))
    return Status();
  std::string field = cache.field(key::cache::v_head_dim);
  out->valueHeadDim = cache.getInt(key::cache::v_head_dim);
  if (out->valueHeadDim == out->headDim)
    return KVRT_BUNDLE_ERROR("%s is head_dim (%lld): kvgen writes it only "
                             "where V's head size differs",
                             field.c_str(),
                             static_cast<long long>(out->headDim));
  if (!out->hasValue())
    return KVRT_BUNDLE_ERROR("%s: a cache without V has no V head size",
                             field.c_str());
  if (info.stacked() || info.hasX() || !info.chunkContiguous())
    return KVRT_BUNDLE_ERROR("%s: the %s layout has one head size for K and "
                             "V",
                             field.c_str(), info.name);
  if (out->quantized && out->quant.mode != ScaleMode::Static)
    return KVRT_BUNDLE_ERROR("%s: a cache with v_head_dim takes static "
                             "scales only",
                             field.c_str());
  if (out->valueHeadDim > limits::kMaxHeadDim)
    return KVRT_BUNDLE_ERROR("%s is %lld, past the limit of %lld "
                             "(docs/CONTRACT.md)",
                             field.c_str(),
                             static_cast<long long>(out->valueHeadDim),
                             static_cast<long long>(limits::kMaxHeadDim));
  // Cannot overflow: both factors are bounded above.
  if (out->numKvHeads * out->valueHeadDim > limits::kMaxElementsPerToken)
    return KVRT_BUNDLE_ERROR(
        "%s: num_kv_heads * v_head_dim is %lld, past the "
        "limit of %lld elements per token (docs/CONTRACT.md)",
        kernel.field(key::kernel::cache).c_str(),
        static_cast<long long>(out->numKvHeads * out->valueHeadDim),
        static_cast<long long>(limits::kMaxElementsPerToken));
  return Status();
}

static Status parseCache(const FieldReader &kernel, CacheDescription *out) {
  FieldReader cache = kernel;
  KVRT_RETURN_IF_ERROR(kernel.getObject(key::kernel::cache, &cache));

  KVRT_RETURN_IF_ERROR(
      cache.getName(key::cache::layout, abi::kLayoutNames, &out->layout));

  // Any block size: a power of two only lets the kernel use a shift.
  const abi::LayoutInfo &info = abi::layoutInfo(out->layout);
  const char *blockKey =
      info.paged() ? key::cache::block_size : key::cache::max_seq_len;
  KVRT_RETURN_IF_ERROR(cache.require(blockKey));
  KVRT_RETURN_IF_ERROR(cache.refuse(
      info.paged() ? key::cache::max_seq_len : key::cache::block_size,
      info.paged() ? "a paged layout has block_size"
                   : "this layout has max_seq_len"));
  out->blockSize = cache.getInt(blockKey);
  out->numKvHeads = cache.getInt(key::cache::num_kv_heads);
  out->headDim = cache.getInt(key::cache::head_dim);
  auto pastLimit = [&](const char *key, int64_t value, int64_t limit) {
    return KVRT_BUNDLE_ERROR("%s is %lld, past the limit of %lld (%s, "
                             "docs/CONTRACT.md)",
                             cache.field(key).c_str(),
                             static_cast<long long>(value),
                             static_cast<long long>(limit), key);
  };
  if (out->blockSize > limits::kMaxBlockSize)
    return pastLimit(blockKey, out->blockSize, limits::kMaxBlockSize);
  if (out->headDim > limits::kMaxHeadDim)
    return pastLimit(key::cache::head_dim, out->headDim, limits::kMaxHeadDim);
  if (out->numKvHeads > limits::kMaxKvHeads)
    return pastLimit(key::cache::num_kv_heads, out->numKvHeads,
                     limits::kMaxKvHeads);
  // Cannot overflow: both factors are bounded above.
  if (out->numKvHeads * out->headDim > limits::kMaxElementsPerToken)
    return KVRT_BUNDLE_ERROR(
        "%s: num_kv_heads * head_dim is %lld, past the "
        "limit of %lld elements per token (docs/CONTRACT.md)",
        kernel.field(key::kernel::cache).c_str(),
        static_cast<long long>(out->numKvHeads * out->headDim),
        static_cast<long long>(limits::kMaxElementsPerToken));

  KVRT_RETURN_IF_ERROR(cache.getName(
      key::cache::dtype, abi::kDTypeNames, &out->dtype,
      +[](DType t) { return t != DType::I32 && t != DType::I64; },
      "f32, f16, bf16, f8e4m3, f8e5m2 or i8"));

  out->x = 0;
  if (info.hasX()) {
    KVRT_RETURN_IF_ERROR(cache.require(key::cache::x));
    out->x = cache.getInt(key::cache::x);
    if (out->headDim % out->x != 0)
      return KVRT_BUNDLE_ERROR("%s must divide head_dim",
                               cache.field(key::cache::x).c_str());
  } else {
    KVRT_RETURN_IF_ERROR(
        cache.refuse(key::cache::x, "only a layout with an X axis has x"));
  }

  // The quantization first: a latent entry with inline scales is checked
  // against it.
  out->quantized = cache.has(key::cache::quant);
  if (out->quantized)
    KVRT_RETURN_IF_ERROR(parseQuant(cache, out));
  KVRT_RETURN_IF_ERROR(parseKOnly(cache, out));
  KVRT_RETURN_IF_ERROR(parseValueHeadDim(cache, kernel, info, out));
  return parseNvfp4(cache, out);
}

static Status parseParams(const FieldReader &kernel, KernelKind kind,
                          Quantization quantization, bool kOnly,
                          abi::PrologueParts prologue) {
  std::string path = kernel.field(key::kernel::params);
  const json &object = kernel.value().at(key::kernel::params);
  if (!object.is_array())
    return KVRT_BUNDLE_ERROR("%s must be an array of strings", path.c_str());
  // The list kvrt packs: exactly the ABI's, in its order.
  const char *expected[kMaxBuffers + kMaxScalars];
  size_t count = 0;
  abi::forEachParam(
      kind, quantization, kOnly, prologue,
      [&](const abi::ParamInfo &param) { expected[count++] = param.name; });
  size_t common = std::min(count, object.size());
  for (size_t i = 0; i < common; ++i) {
    const json &entry = object[i];
    if (!entry.is_string())
      return KVRT_BUNDLE_ERROR("%s[%zu] must be a string", path.c_str(), i);
    const std::string &name = entry.get_ref<const std::string &>();
    if (name != expected[i])
      return KVRT_BUNDLE_ERROR("%s[%zu] is %s but kvrt packs '%s' there "
                               "for kind %s",
                               path.c_str(), i, quote(name).c_str(),
                               expected[i], kindName(kind));
  }
  if (object.size() < count)
    return KVRT_BUNDLE_ERROR("%s has %zu entries but kvrt packs %zu for kind "
                             "%s (first missing: '%s')",
                             path.c_str(), object.size(), count, kindName(kind),
                             expected[object.size()]);
  if (object.size() > count)
    return KVRT_BUNDLE_ERROR("%s has %zu entries but kvrt packs %zu for kind "
                             "%s (first extra: %s)",
                             path.c_str(), object.size(), count, kindName(kind),
                             describeValue(object[count]).c_str());
  return Status();
}

/// The kernel's entry rebuilt from what kvrt parsed, with the schema's keys:
/// bounded depth, so that dump() cannot recurse on whatever else the
/// bundle's entry held.
static std::string manifestJson(const KernelDescription &kernel) {
  namespace k = key::kernel;
  json entry = {{k::name, kernel.name},
                {k::kind, kindName(kernel.kind)},
                {k::variant, variantName(kernel.variant)}};
  if (!kernel.description.empty())
    entry[k::description] = kernel.description;
  if (touchesCache(kernel.kind)) {
    namespace c = key::cache;
    const CacheDescription &cache = kernel.cache;
    bool paged = abi::layoutInfo(cache.layout).paged();
    json object = {{c::layout, layoutName(cache.layout)},
                   {paged ? c::block_size : c::max_seq_len, cache.blockSize},
                   {c::num_kv_heads, cache.numKvHeads},
                   {c::head_dim, cache.headDim},
                   {c::dtype, dtypeName(cache.dtype)}};
    if (cache.asymmetric())
      object[c::v_head_dim] = cache.valueDim();
    if (abi::layoutInfo(cache.layout).hasX())
      object[c::x] = cache.x;
    if (cache.quantized)
      object[c::quant] = {
          {key::quant::kind, abi::quantKindName(cache.quant.kind)},
          {key::quant::granularity,
           abi::granularityName(cache.quant.granularity)},
          {key::quant::mode, abi::scaleModeName(cache.quant.mode)},
          {key::quant::reciprocal, cache.quant.reciprocal}};
    if (cache.kOnly)
      object[c::k_only] = true;
    if (cache.latent) {
      object[c::latent] = {{key::latent::kv_lora_rank, cache.kvLoraRank},
                           {key::latent::rope_dim, cache.ropeDim}};
      if (cache.inlineScales)
        object[c::latent][key::latent::inline_scales] = {
            {key::inline_scales::group_size, cache.groupSize},
            {key::inline_scales::rope_dtype, dtypeName(cache.ropeDtype)},
            {key::inline_scales::entry_bytes, cache.entryBytes}};
    }
    if (cache.nvfp4)
      object[c::nvfp4] = {{key::nvfp4::k_scales, cache.nvfp4KScales},
                          {key::nvfp4::v_scales, cache.nvfp4VScales},
                          {key::nvfp4::search, cache.nvfp4Search},
                          {key::nvfp4::row_bytes, cache.nvfp4RowBytes}};
    entry[k::cache] = object;
    if (abi::kindTraits(kernel.kind).rows == abi::KindRows::OutOf)
      entry[k::output_dtype] = dtypeName(kernel.outputDtype);
    else
      entry[k::source_dtype] = dtypeName(kernel.sourceDtype);
  }
  if (kernel.variant == Variant::Wide)
    entry[k::min_tokens] = kernel.minTokens;
  if (kernel.maxTokens > 0)
    entry[k::max_tokens] = kernel.maxTokens;
  entry[k::alignment] = kernel.alignment;
  entry[k::vector_elems] = kernel.vectorElems;
  if (kernel.vectorBytes > 0)
    entry[k::vector_bytes] = kernel.vectorBytes;
  json launch = {{key::launch::threads_x, kernel.launch.threadsX},
                 {key::launch::tokens_per_block, kernel.launch.tokensPerBlock}};
  if (kernel.launch.chunksPerToken > 0)
    launch[key::launch::chunks_per_token] = kernel.launch.chunksPerToken;
  entry[k::launch] = launch;
  if (kernel.programmaticLaunch)
    entry[k::programmatic_launch] = true;
  if (kernel.prologue.any()) {
    namespace p = key::prologue;
    const PrologueDescription &prologue = kernel.prologue;
    json object = json::object();
    if (prologue.qHeads > 0)
      object[p::q_heads] = prologue.qHeads;
    if (prologue.norm)
      object[p::norm] = "rms";
    if (!prologue.rope.empty()) {
      object[p::rope] = prologue.rope;
      object[p::rotary_dim] = prologue.rotaryDim;
    }
    if (prologue.qQuant)
      object[p::q_quant] = "fp8_e4m3";
    if (prologue.f32CosSin)
      object[p::cos_sin] = "f32";
    entry[k::prologue] = object;
  }
  json params = json::array();
  abi::forEachParam(
      kernel.kind, kernel.cache.quantization(), !kernel.cache.hasValue(),
      kernel.prologue.parts(),
      [&](const abi::ParamInfo &param) { params.push_back(param.name); });
  entry[k::params] = params;
  return entry.dump();
}

Status parseKernel(const json &object, size_t index, KernelDescription *out) {
  namespace k = key::kernel;
  std::string path = formatString("kernels[%zu]", index);
  if (!object.is_object())
    return KVRT_BUNDLE_ERROR("%s must be an object", path.c_str());
  FieldReader kernel(object, path, schema::Object::kernel);
  KVRT_RETURN_IF_ERROR(
      kernel.checkField(*schema::findField(schema::Object::kernel, k::name)));
  out->name = kernel.getString(k::name);
  if (!isIdentifier(out->name))
    return KVRT_BUNDLE_ERROR("%s is %s; a kernel name must be a PTX "
                             "identifier",
                             kernel.field(k::name).c_str(),
                             quote(out->name).c_str());
  // From here on name the kernel too: "kernels[2] ('kv_append')".
  path = formatString("kernels[%zu] (%s)", index, quote(out->name).c_str());
  kernel = FieldReader(object, path, schema::Object::kernel);
  KVRT_RETURN_IF_ERROR(kernel.check());

  out->description = kernel.getString(k::description);
  KVRT_RETURN_IF_ERROR(kernel.getName(k::kind, abi::kKindNames, &out->kind));
  // A kind that touches no cache has one scalar kernel and no cache, rows or
  // promise to check.
  abi::KindTraits traits = abi::kindTraits(out->kind);

  std::string variant = kernel.getString(k::variant);
  if (!touchesCache(out->kind)) {
    if (!variant.empty() && variant != "scalar")
      return KVRT_BUNDLE_ERROR("%s is %s; a %s kernel is scalar",
                               kernel.field(k::variant).c_str(),
                               quote(variant).c_str(), kindName(out->kind));
    out->variant = Variant::Scalar;
  } else {
    KVRT_RETURN_IF_ERROR(kernel.require(k::variant));
    KVRT_RETURN_IF_ERROR(
        kernel.getName(k::variant, abi::kVariantNames, &out->variant));
    if (const char *suffix = abi::variantSuffix(out->variant);
        *suffix && !endsWith(out->name, suffix))
      return KVRT_BUNDLE_ERROR("%s is a %s variant, so its name must end in "
                               "'%s' (<description>%s)",
                               kernel.field(k::name).c_str(), variant.c_str(),
                               suffix, suffix);
  }
  // The wide variant's token threshold: kvrt picks it over the vector
  // variant from that many tokens on; and its optional upper bound, from
  // which AUTO goes back to the vector variant. A bound at or below the
  // threshold would leave the wide kernel no launch at all: a broken
  // bundle, not a choice.
  if (out->variant != Variant::Wide) {
    KVRT_RETURN_IF_ERROR(kernel.refuse(
        k::min_tokens, "only a wide variant has a token threshold"));
    KVRT_RETURN_IF_ERROR(
        kernel.refuse(k::max_tokens, "only a wide variant has a token bound"));
  } else {
    KVRT_RETURN_IF_ERROR(kernel.require(k::min_tokens));
    out->minTokens = kernel.getInt(k::min_tokens);
    out->maxTokens = kernel.getInt(k::max_tokens);
    if (kernel.has(k::max_tokens) && out->maxTokens <= out->minTokens)
      return KVRT_BUNDLE_ERROR("%s is %lld, not above min_tokens (%lld): "
                               "the wide variant would never be picked",
                               kernel.field(k::max_tokens).c_str(),
                               static_cast<long long>(out->maxTokens),
                               static_cast<long long>(out->minTokens));
  }

  if (touchesCache(out->kind)) {
    KVRT_RETURN_IF_ERROR(parseCache(kernel, &out->cache));

    // Rows into the cache are source_dtype; rows out of it, output_dtype.
    bool outOf = traits.rows == abi::KindRows::OutOf;
    const char *rowsKey = outOf ? k::output_dtype : k::source_dtype;
    KVRT_RETURN_IF_ERROR(
        kernel.refuse(outOf ? k::source_dtype : k::output_dtype,
                      outOf ? "a gather has output_dtype"
                            : "only a gather has output_dtype"));
    DType &rows = outOf ? out->outputDtype : out->sourceDtype;
    KVRT_RETURN_IF_ERROR(kernel.require(rowsKey));
    KVRT_RETURN_IF_ERROR(kernel.getName(
        rowsKey, abi::kDTypeNames, &rows,
        +[](DType t) {
          return t == DType::F32 || t == DType::F16 || t == DType::BF16;
        },
        "f32, f16 or bf16"));
    // The contract refuses this cast (range one way, precision the other);
    // a kernel that claims it was not made by a kvgen that keeps it.
    DType cacheType = out->cache.dtype;
    if ((rows == DType::F16 && cacheType == DType::BF16) ||
        (rows == DType::BF16 && cacheType == DType::F16))
      return KVRT_BUNDLE_ERROR("%s is %s but the cache dtype is %s; the "
                               "kernel contract refuses f16 <-> bf16",
                               kernel.field(rowsKey).c_str(), dtypeName(rows),
                               dtypeName(cacheType));
  }

  bool isVector = abi::hasVectorPromise(out->variant);
  if (isVector) {
    KVRT_RETURN_IF_ERROR(kernel.require(k::alignment));
    KVRT_RETURN_IF_ERROR(kernel.require(k::vector_elems));
  }
  out->alignment = kernel.getInt(k::alignment, 1);
  out->vectorElems = kernel.getInt(k::vector_elems, 1);
  out->vectorBytes = kernel.getInt(k::vector_bytes);
  if (!isPowerOfTwo(out->alignment))
    return KVRT_BUNDLE_ERROR("%s must be a power of two",
                             kernel.field(k::alignment).c_str());
  if (isVector) {
    // A vector never straddles two heads (or two x-groups).
    bool hasX = abi::layoutInfo(out->cache.layout).hasX();
    int64_t group = hasX ? out->cache.x : out->cache.headDim;
    if (group % out->vectorElems != 0)
      return KVRT_BUNDLE_ERROR("%s (%lld) must divide %s (%lld)",
                               kernel.field(k::vector_elems).c_str(),
                               static_cast<long long>(out->vectorElems),
                               hasX ? "cache.x" : "cache.head_dim",
                               static_cast<long long>(group));
    // Nor, where V's head size differs, a V head.
    if (out->cache.valueDim() % out->vectorElems != 0)
      return KVRT_BUNDLE_ERROR("%s (%lld) must divide cache.v_head_dim (%lld)",
                               kernel.field(k::vector_elems).c_str(),
                               static_cast<long long>(out->vectorElems),
                               static_cast<long long>(out->cache.valueDim()));
    // Nor the two parts of a latent entry.
    if (out->cache.latent && out->cache.kvLoraRank % out->vectorElems != 0)
      return KVRT_BUNDLE_ERROR("%s (%lld) must divide "
                               "cache.latent.kv_lora_rank (%lld)",
                               kernel.field(k::vector_elems).c_str(),
                               static_cast<long long>(out->vectorElems),
                               static_cast<long long>(out->cache.kvLoraRank));
  }

  FieldReader launch = kernel;
  KVRT_RETURN_IF_ERROR(kernel.getObject(k::launch, &launch));
  LaunchDescription &geometry = out->launch;
  geometry.threadsX = launch.getInt(key::launch::threads_x);
  geometry.tokensPerBlock = launch.getInt(key::launch::tokens_per_block);
  if (touchesCache(out->kind))
    KVRT_RETURN_IF_ERROR(launch.require(key::launch::chunks_per_token));
  geometry.chunksPerToken = launch.getInt(key::launch::chunks_per_token);
  // CUDA's limit on threads per block; a launch past it always fails.
  constexpr int64_t kThreads = limits::kMaxThreadsPerBlock;
  if (geometry.threadsX > kThreads || geometry.tokensPerBlock > kThreads ||
      geometry.threadsX * geometry.tokensPerBlock > kThreads)
    return KVRT_BUNDLE_ERROR("%s: threads_x (%lld) * tokens_per_block (%lld) "
                             "exceeds 1024 threads per block",
                             kernel.field(k::launch).c_str(),
                             static_cast<long long>(geometry.threadsX),
                             static_cast<long long>(geometry.tokensPerBlock));

  out->programmaticLaunch = kernel.getBool(k::programmatic_launch);

  // A kind whose entry is latent writes latent caches, and no other kind
  // that writes rows into a cache does.
  if (traits.rows == abi::KindRows::Into &&
      (traits.entry == abi::KindEntry::Latent) != out->cache.latent)
    return KVRT_BUNDLE_ERROR("%s: kind %s %s", kernel.field(k::kind).c_str(),
                             kindName(out->kind),
                             out->cache.latent ? "cannot write a latent cache"
                                               : "needs a latent cache");
  KVRT_RETURN_IF_ERROR(parsePrologue(kernel, out));
  KVRT_RETURN_IF_ERROR(parseParams(kernel, out->kind, out->cache.quantization(),
                                   !out->cache.hasValue(),
                                   out->prologue.parts()));
  out->manifestJson = manifestJson(*out);
  return Status();
}

} // namespace kvrt::impl
