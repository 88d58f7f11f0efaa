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

namespace kvrt::impl {

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
    return DType::I8;
  }
  return DType::I8;
}

static Status parseQuant(const FieldReader &cache, const json &object,
                         CacheDescription *out) {
  FieldReader quant(object, cache.field("quant"));
  QuantDescription &q = out->quant;
  std::string text;
  KVRT_RETURN_IF_ERROR(quant.getString("kind", &text));
  if (!abi::parseQuantKind(text, &q.kind))
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s is %s; expected %s",
                      quant.field("kind").c_str(), quote(text).c_str(),
                      nameList(abi::kQuantKindNames).c_str());
  KVRT_RETURN_IF_ERROR(quant.getString("granularity", &text));
  if (!abi::parseGranularity(text, &q.granularity))
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s is %s; expected %s",
                      quant.field("granularity").c_str(), quote(text).c_str(),
                      nameList(abi::kGranularityNames).c_str());
  KVRT_RETURN_IF_ERROR(quant.getString("mode", &text));
  if (!abi::parseScaleMode(text, &q.mode))
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s is %s; expected %s",
                      quant.field("mode").c_str(), quote(text).c_str(),
                      nameList(abi::kScaleModeNames).c_str());
  q.reciprocal = false;
  KVRT_RETURN_IF_ERROR(
      quant.getBool("reciprocal", &q.reciprocal, /*required=*/false));

  // The rules of docs/CONTRACT.md, "Quantization": a bundle that breaks one
  // was not written by a kvgen that keeps them.
  if (out->dtype != storedDType(q.kind))
    return KVRT_ERROR(
        KVRT_ERROR_INVALID_BUNDLE, "bundle: %s is %s but %s stores %s",
        cache.field("dtype").c_str(), dtypeName(out->dtype),
        abi::quantKindName(q.kind), dtypeName(storedDType(q.kind)));
  bool perGroup = q.granularity == ScaleGranularity::PerToken ||
                  q.granularity == ScaleGranularity::PerTokenHead;
  if (q.mode == ScaleMode::Dynamic && !perGroup)
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s: dynamic %s scales are not supported; "
                      "dynamic scales are per_token or per_token_head",
                      quant.field("mode").c_str(),
                      abi::granularityName(q.granularity));
  if (q.granularity == ScaleGranularity::PerBlock &&
      !abi::layoutInfo(out->layout).paged())
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s: per_block scales need a paged layout, not "
                      "%s",
                      quant.field("granularity").c_str(),
                      layoutName(out->layout));
  return Status();
}

/// "k_only" and "latent": a cache without V, and the MLA latent cache's two
/// parts, which must make up its one head.
static Status parseKOnly(const FieldReader &cache, CacheDescription *out) {
  KVRT_RETURN_IF_ERROR(
      cache.getBool("k_only", &out->kOnly, /*required=*/false));
  out->latent = cache.has("latent");
  if (out->latent) {
    const json *object = nullptr;
    KVRT_RETURN_IF_ERROR(cache.getObject("latent", &object));
    FieldReader latent(*object, cache.field("latent"));
    KVRT_RETURN_IF_ERROR(latent.getPositive("kv_lora_rank", &out->kvLoraRank));
    KVRT_RETURN_IF_ERROR(latent.getPositive("rope_dim", &out->ropeDim));
    if (!abi::layoutInfo(out->layout).tokenMajor() || out->numKvHeads != 1 ||
        out->kvLoraRank + out->ropeDim != out->headDim)
      return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                        "bundle: %s: a latent cache is %s with "
                        "num_kv_heads 1 and head_dim kv_lora_rank + rope_dim "
                        "(%lld + %lld), got %s, %lld and %lld",
                        cache.field("latent").c_str(),
                        abi::layoutNamesWhere([](const abi::LayoutInfo &l) {
                          return l.tokenMajor();
                        }).c_str(),
                        static_cast<long long>(out->kvLoraRank),
                        static_cast<long long>(out->ropeDim),
                        layoutName(out->layout),
                        static_cast<long long>(out->numKvHeads),
                        static_cast<long long>(out->headDim));
  }
  if (!out->hasValue() && abi::layoutInfo(out->layout).stacked())
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s: a K-only cache cannot be %s",
                      cache.field("layout").c_str(), layoutName(out->layout));
  return Status();
}

static Status parseCache(const FieldReader &kernel, const json &object,
                         CacheDescription *out) {
  FieldReader cache(object, kernel.field("cache"));
  auto invalid = [&](const char *key, const char *rule) {
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE, "bundle: %s %s",
                      cache.field(key).c_str(), rule);
  };

  std::string layout;
  KVRT_RETURN_IF_ERROR(cache.getString("layout", &layout));
  if (!abi::parseLayout(layout, &out->layout))
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s is %s; expected %s",
                      cache.field("layout").c_str(), quote(layout).c_str(),
                      nameList(abi::kLayoutNames).c_str());

  // Any block size: a power of two only lets the kernel use a shift.
  const abi::LayoutInfo &info = abi::layoutInfo(out->layout);
  const char *blockKey = info.tokensName();
  KVRT_RETURN_IF_ERROR(cache.getPositive(blockKey, &out->blockSize));
  KVRT_RETURN_IF_ERROR(cache.getPositive("num_kv_heads", &out->numKvHeads));
  KVRT_RETURN_IF_ERROR(cache.getPositive("head_dim", &out->headDim));
  auto pastLimit = [&](const char *key, int64_t value, int64_t limit) {
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s is %lld, past the limit of %lld (%s, "
                      "docs/CONTRACT.md)",
                      cache.field(key).c_str(), static_cast<long long>(value),
                      static_cast<long long>(limit), key);
  };
  if (out->blockSize > limits::kMaxBlockSize)
    return pastLimit(blockKey, out->blockSize, limits::kMaxBlockSize);
  if (out->headDim > limits::kMaxHeadDim)
    return pastLimit("head_dim", out->headDim, limits::kMaxHeadDim);
  if (out->numKvHeads > limits::kMaxKvHeads)
    return pastLimit("num_kv_heads", out->numKvHeads, limits::kMaxKvHeads);
  // Cannot overflow: both factors are bounded above.
  if (out->numKvHeads * out->headDim > limits::kMaxElementsPerToken)
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s: num_kv_heads * head_dim is %lld, past the "
                      "limit of %lld elements per token (docs/CONTRACT.md)",
                      kernel.field("cache").c_str(),
                      static_cast<long long>(out->numKvHeads * out->headDim),
                      static_cast<long long>(limits::kMaxElementsPerToken));

  std::string dtype;
  KVRT_RETURN_IF_ERROR(cache.getString("dtype", &dtype));
  if (!abi::parseDType(dtype, &out->dtype) || out->dtype == DType::I32 ||
      out->dtype == DType::I64)
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s is %s; expected f32, f16, bf16, f8e4m3, "
                      "f8e5m2 or i8",
                      cache.field("dtype").c_str(), quote(dtype).c_str());

  if (info.hasX()) {
    KVRT_RETURN_IF_ERROR(cache.getPositive("x", &out->x));
    if (out->headDim % out->x != 0)
      return invalid("x", "must divide head_dim");
  } else {
    out->x = 0;
  }

  KVRT_RETURN_IF_ERROR(parseKOnly(cache, out));
  out->quantized = cache.has("quant");
  if (!out->quantized)
    return Status();
  const json *quant = nullptr;
  KVRT_RETURN_IF_ERROR(cache.getObject("quant", &quant));
  return parseQuant(cache, *quant, out);
}

static Status parseParams(const FieldReader &kernel, const json &object,
                          KernelKind kind, Quantization quantization,
                          bool kOnly) {
  std::string path = kernel.field("params");
  if (!object.is_array())
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s must be an array of strings", path.c_str());
  // The list kvrt packs: exactly the ABI's, in its order.
  const char *expected[abi::maxParams()];
  size_t count = 0;
  abi::forEachParam(
      kind, quantization, kOnly,
      [&](const abi::ParamInfo &param) { expected[count++] = param.name; });
  size_t common = std::min(count, object.size());
  for (size_t i = 0; i < common; ++i) {
    const json &entry = object[i];
    if (!entry.is_string())
      return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                        "bundle: %s[%zu] must be a string", path.c_str(), i);
    const std::string &name = entry.get_ref<const std::string &>();
    if (name != expected[i])
      return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                        "bundle: %s[%zu] is %s but kvrt packs '%s' there "
                        "for kind %s",
                        path.c_str(), i, quote(name).c_str(), expected[i],
                        kindName(kind));
  }
  if (object.size() < count)
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s has %zu entries but kvrt packs %zu for kind "
                      "%s (first missing: '%s')",
                      path.c_str(), object.size(), count, kindName(kind),
                      expected[object.size()]);
  if (object.size() > count)
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s has %zu entries but kvrt packs %zu for kind "
                      "%s (first extra: %s)",
                      path.c_str(), object.size(), count, kindName(kind),
                      describeValue(object[count]).c_str());
  return Status();
}

/// The kernel's entry rebuilt from what kvrt parsed: bounded depth, so that
/// dump() cannot recurse on whatever else the bundle's entry held.
static std::string manifestJson(const KernelDescription &kernel) {
  json entry = {{"name", kernel.name},
                {"kind", kindName(kernel.kind)},
                {"variant", variantName(kernel.variant)}};
  if (!kernel.description.empty())
    entry["description"] = kernel.description;
  if (kernel.kind != KernelKind::SlotMapping) {
    const CacheDescription &cache = kernel.cache;
    json object = {
        {"layout", layoutName(cache.layout)},
        {abi::layoutInfo(cache.layout).tokensName(), cache.blockSize},
        {"num_kv_heads", cache.numKvHeads},
        {"head_dim", cache.headDim},
        {"dtype", dtypeName(cache.dtype)}};
    if (abi::layoutInfo(cache.layout).hasX())
      object["x"] = cache.x;
    if (cache.quantized)
      object["quant"] = {
          {"kind", abi::quantKindName(cache.quant.kind)},
          {"granularity", abi::granularityName(cache.quant.granularity)},
          {"mode", abi::scaleModeName(cache.quant.mode)},
          {"reciprocal", cache.quant.reciprocal}};
    if (cache.kOnly)
      object["k_only"] = true;
    if (cache.latent)
      object["latent"] = {{"kv_lora_rank", cache.kvLoraRank},
                          {"rope_dim", cache.ropeDim}};
    entry["cache"] = object;
    if (kernel.kind == KernelKind::Gather)
      entry["output_dtype"] = dtypeName(kernel.outputDtype);
    else
      entry["source_dtype"] = dtypeName(kernel.sourceDtype);
  }
  if (kernel.variant == Variant::Wide)
    entry["min_tokens"] = kernel.minTokens;
  if (kernel.maxTokens > 0)
    entry["max_tokens"] = kernel.maxTokens;
  entry["alignment"] = kernel.alignment;
  entry["vector_elems"] = kernel.vectorElems;
  json launch = {{"threads_x", kernel.launch.threadsX},
                 {"tokens_per_block", kernel.launch.tokensPerBlock}};
  if (kernel.kind != KernelKind::SlotMapping)
    launch["chunks_per_token"] = kernel.launch.chunksPerToken;
  entry["launch"] = launch;
  if (kernel.programmaticLaunch)
    entry["programmatic_launch"] = true;
  json params = json::array();
  abi::forEachParam(
      kernel.kind, kernel.cache.quantization(), !kernel.cache.hasValue(),
      [&](const abi::ParamInfo &param) { params.push_back(param.name); });
  entry["params"] = params;
  return entry.dump();
}

Status parseKernel(const json &object, size_t index, KernelDescription *out) {
  std::string path = formatString("kernels[%zu]", index);
  if (!object.is_object())
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE, "bundle: %s must be an object",
                      path.c_str());
  FieldReader kernel(object, path);

  KVRT_RETURN_IF_ERROR(kernel.getString("name", &out->name));
  if (!isIdentifier(out->name))
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s is %s; a kernel name must be a PTX "
                      "identifier",
                      kernel.field("name").c_str(), quote(out->name).c_str());
  // From here on name the kernel too: "kernels[2] ('kv_append')".
  path = formatString("kernels[%zu] (%s)", index, quote(out->name).c_str());
  kernel = FieldReader(object, path);

  KVRT_RETURN_IF_ERROR(kernel.getString("description", &out->description,
                                        /*required=*/false));
  std::string kind;
  KVRT_RETURN_IF_ERROR(kernel.getString("kind", &kind));
  if (!abi::parseKind(kind, &out->kind))
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s is %s; expected %s",
                      kernel.field("kind").c_str(), quote(kind).c_str(),
                      nameList(abi::kKindNames).c_str());
  bool appendLike = out->kind != KernelKind::SlotMapping;

  std::string variant;
  KVRT_RETURN_IF_ERROR(kernel.getString("variant", &variant, appendLike));
  if (!appendLike) {
    // The slot_mapping kernel has no vector form and no promise to check.
    if (!variant.empty() && variant != "scalar")
      return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                        "bundle: %s is %s; a slot_mapping kernel is scalar",
                        kernel.field("variant").c_str(),
                        quote(variant).c_str());
    out->variant = Variant::Scalar;
  } else if (!abi::parseVariant(variant, &out->variant)) {
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s is %s; expected vector, scalar or wide",
                      kernel.field("variant").c_str(), quote(variant).c_str());
  } else if (const char *suffix = abi::variantSuffix(out->variant);
             *suffix && !endsWith(out->name, suffix)) {
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s is a %s variant, so its name must end in "
                      "'%s' (<description>%s)",
                      kernel.field("name").c_str(), variant.c_str(), suffix,
                      suffix);
  }
  // The wide variant's token threshold: kvrt picks it over the vector
  // variant from that many tokens on.
  bool wide = out->variant == Variant::Wide;
  if (wide || kernel.has("min_tokens")) {
    if (!wide)
      return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                        "bundle: %s is set, but only a wide variant has a "
                        "token threshold",
                        kernel.field("min_tokens").c_str());
    KVRT_RETURN_IF_ERROR(kernel.getPositive("min_tokens", &out->minTokens));
  }
  // Its optional upper bound: from that many tokens on, AUTO goes back to
  // the vector variant. A bound at or below the threshold would leave the
  // wide kernel no launch at all: a broken bundle, not a choice.
  if (kernel.has("max_tokens")) {
    if (!wide)
      return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                        "bundle: %s is set, but only a wide variant has a "
                        "token bound",
                        kernel.field("max_tokens").c_str());
    KVRT_RETURN_IF_ERROR(kernel.getPositive("max_tokens", &out->maxTokens));
    if (out->maxTokens <= out->minTokens)
      return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                        "bundle: %s is %lld, not above min_tokens (%lld): "
                        "the wide variant would never be picked",
                        kernel.field("max_tokens").c_str(),
                        static_cast<long long>(out->maxTokens),
                        static_cast<long long>(out->minTokens));
  }

  if (appendLike) {
    const json *cache = nullptr;
    KVRT_RETURN_IF_ERROR(kernel.getObject("cache", &cache));
    KVRT_RETURN_IF_ERROR(parseCache(kernel, *cache, &out->cache));

    // An append reads source_dtype rows; a gather writes output_dtype rows.
    bool gather = out->kind == KernelKind::Gather;
    const char *key = gather ? "output_dtype" : "source_dtype";
    DType &rows = gather ? out->outputDtype : out->sourceDtype;
    std::string text;
    KVRT_RETURN_IF_ERROR(kernel.getString(key, &text));
    if (!abi::parseDType(text, &rows) ||
        !(rows == DType::F32 || rows == DType::F16 || rows == DType::BF16))
      return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                        "bundle: %s is %s; expected f32, f16 or bf16",
                        kernel.field(key).c_str(), quote(text).c_str());
    // The contract refuses this cast (range one way, precision the other);
    // a kernel that claims it was not made by a kvgen that keeps it.
    DType cacheType = out->cache.dtype;
    if ((rows == DType::F16 && cacheType == DType::BF16) ||
        (rows == DType::BF16 && cacheType == DType::F16))
      return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                        "bundle: %s is %s but the cache dtype is %s; the "
                        "kernel contract refuses f16 <-> bf16",
                        kernel.field(key).c_str(), dtypeName(rows),
                        dtypeName(cacheType));
  }

  bool isVector = abi::hasVectorPromise(out->variant);
  out->alignment = 1;
  out->vectorElems = 1;
  KVRT_RETURN_IF_ERROR(
      kernel.getPositive("alignment", &out->alignment, isVector));
  if (!isPowerOfTwo(out->alignment))
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s must be a power of two",
                      kernel.field("alignment").c_str());
  KVRT_RETURN_IF_ERROR(
      kernel.getPositive("vector_elems", &out->vectorElems, isVector));
  int64_t vectorBytes = 0;
  KVRT_RETURN_IF_ERROR(kernel.getPositive("vector_bytes", &vectorBytes,
                                          /*required=*/false));
  if (isVector) {
    // A vector never straddles two heads (or two x-groups).
    bool hasX = abi::layoutInfo(out->cache.layout).hasX();
    int64_t group = hasX ? out->cache.x : out->cache.headDim;
    if (group % out->vectorElems != 0)
      return KVRT_ERROR(
          KVRT_ERROR_INVALID_BUNDLE, "bundle: %s (%lld) must divide %s (%lld)",
          kernel.field("vector_elems").c_str(),
          static_cast<long long>(out->vectorElems),
          hasX ? "cache.x" : "cache.head_dim", static_cast<long long>(group));
    // Nor the two parts of a latent entry.
    if (out->cache.latent && out->cache.kvLoraRank % out->vectorElems != 0)
      return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                        "bundle: %s (%lld) must divide "
                        "cache.latent.kv_lora_rank (%lld)",
                        kernel.field("vector_elems").c_str(),
                        static_cast<long long>(out->vectorElems),
                        static_cast<long long>(out->cache.kvLoraRank));
  }

  const json *launchObject = nullptr;
  KVRT_RETURN_IF_ERROR(kernel.getObject("launch", &launchObject));
  FieldReader launch(*launchObject, kernel.field("launch"));
  LaunchDescription &geometry = out->launch;
  if (!appendLike && !launch.has("tokens_per_block") && launch.has("threads")) {
    // "one thread per token": threads is tokens_per_block, threads_x is 1.
    KVRT_RETURN_IF_ERROR(
        launch.getPositive("threads", &geometry.tokensPerBlock));
    geometry.threadsX = 1;
  } else {
    KVRT_RETURN_IF_ERROR(launch.getPositive("threads_x", &geometry.threadsX));
    KVRT_RETURN_IF_ERROR(
        launch.getPositive("tokens_per_block", &geometry.tokensPerBlock));
  }
  KVRT_RETURN_IF_ERROR(launch.getPositive(
      "chunks_per_token", &geometry.chunksPerToken, appendLike));
  // CUDA's limit on threads per block; a launch past it always fails.
  constexpr int64_t kThreads = limits::kMaxThreadsPerBlock;
  if (geometry.threadsX > kThreads || geometry.tokensPerBlock > kThreads ||
      geometry.threadsX * geometry.tokensPerBlock > kThreads)
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s: threads_x (%lld) * tokens_per_block (%lld) "
                      "exceeds 1024 threads per block",
                      kernel.field("launch").c_str(),
                      static_cast<long long>(geometry.threadsX),
                      static_cast<long long>(geometry.tokensPerBlock));

  KVRT_RETURN_IF_ERROR(kernel.getBool(
      "programmatic_launch", &out->programmaticLaunch, /*required=*/false));

  auto params = object.find("params");
  if (params == object.end())
    return kernel.missing("params");
  // mla_append and mla_fused_append write latent caches and nothing else
  // writes them.
  bool writesLatent = out->kind == KernelKind::MlaAppend ||
                      out->kind == KernelKind::MlaFusedAppend;
  if (appendLike && out->kind != KernelKind::Gather &&
      writesLatent != out->cache.latent)
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE, "bundle: %s: kind %s %s",
                      kernel.field("kind").c_str(), kindName(out->kind),
                      out->cache.latent ? "cannot write a latent cache"
                                        : "needs a latent cache");
  KVRT_RETURN_IF_ERROR(parseParams(kernel, *params, out->kind,
                                   out->cache.quantization(),
                                   !out->cache.hasValue()));
  out->manifestJson = manifestJson(*out);
  return Status();
}

} // namespace kvrt::impl
