//===- Validation.cpp - plan a launch: every tensor, then the ABI order ---===//
//
// Each plan checks its tensors (TensorCheck.h) against the description's
// specs (Specs.cpp), records every parameter's value by its ABI id, and packs
// them in the order of the kind's parameter list (include/kvgen/ABI/
// Params.def): the order is written down once, for kvgen and kvrt alike.
//
//===----------------------------------------------------------------------===//

#include "Limits.h"
#include "ParamList.h"
#include "PlanParts.h"

#include <algorithm>

namespace kvrt::impl {

using abi::Param;

/// The four stride scalars (block, head, pos, dim) of a cache view, per
/// docs/KERNEL-ABI.md's offset table: read at the layout's axes (of the K or
/// V view, for a stacked cache).
void setCacheStrides(ParamValues *values, const CacheDescription &cache,
                     bool isValue, const TensorView &view) {
  const int64_t *s = view.strides;
  int64_t block, head, pos, dim;
  if (cache.latent) { // [nb, bs, entry]: one head
    block = s[0], head = 0, pos = s[1], dim = s[2];
  } else {
    abi::CacheAxes axes = abi::layoutInfo(cache.layout).axes(isValue).view();
    block = s[axes.blockAxis()], head = s[axes.headAxis()],
    pos = s[axes.posAxis()], dim = s[axes.dimAxis()];
  }
  values->set(isValue ? Param::ValueCacheStrideBlock
                      : Param::KeyCacheStrideBlock,
              block);
  values->set(isValue ? Param::ValueCacheStrideHead : Param::KeyCacheStrideHead,
              head);
  values->set(isValue ? Param::ValueCacheStridePos : Param::KeyCacheStridePos,
              pos);
  values->set(isValue ? Param::ValueCacheStrideDim : Param::KeyCacheStrideDim,
              dim);
}

/// The three stride scalars of a [num_tokens, H, D] view.
static void setRowStrides(ParamValues *values, Param token,
                          const TensorView &view) {
  int first = static_cast<int>(token);
  for (int i = 0; i < 3; ++i)
    values->scalars[first + i] = view.strides[i];
}

/// The elements one step of `view`'s outermost dimension (a token of a row
/// tensor, a block or row of a cache) spans: the furthest offset reached
/// without stepping it, plus one.
static int64_t innerSpan(const TensorView &view) {
  int64_t span = 1;
  for (int i = 1; i < view.rank; ++i)
    if (view.shape[i] > 0) // an empty dimension reaches nothing
      span += (view.shape[i] - 1) * view.strides[i];
  return span;
}

/// The kernels take their scalars as i32 and address within one token or
/// block in 32 bits (docs/KERNEL-ABI.md, "Limits"): a launch past either
/// bound is refused, never truncated.
static Status checkFitsAbi(const abi::ParamInfo &param, int64_t scalar,
                           const TensorView *view) {
  if (param.role == abi::ParamRole::Scalar) {
    if (scalar <= limits::kMaxScalar)
      return Status();
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                      "%s is %lld, past 2^31 - 1: the kernels take strides "
                      "and counts as 32-bit integers",
                      param.name, static_cast<long long>(scalar));
  }
  const char *unit = nullptr;
  switch (param.element) {
  case abi::ParamElement::Source:
  case abi::ParamElement::Output:
    unit = "token";
    break;
  case abi::ParamElement::Cache:
    unit = "block";
    break;
  default:
    return Status(); // indexed by slot or token in 64 bits
  }
  // A view's dimensions are at most rank 5 of extents and strides that
  // passed the 64-bit overflow check of its extent: no overflow here.
  int64_t span = innerSpan(*view);
  if (span <= limits::kMaxScalar)
    return Status();
  return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                    "%s: one %s of it spans %lld elements, past 2^31 - 1: the "
                    "kernels compute offsets within a %s in 32 bits",
                    view->name, unit, static_cast<long long>(span), unit);
}

/// Copies the values into `plan` in the kind's ABI order and records where
/// checked mode and the vector promise find their tensors.
Status packInAbiOrder(const KernelDescription &kernel,
                      const ParamValues &values, LaunchPlan *plan) {
  int indexOf[kNumParamIds];
  std::fill(std::begin(indexOf), std::end(indexOf), -1);
  const char *unset = nullptr;
  const ParamList &list = paramList(kernel.kind, kernel.cache.quantization(),
                                    !kernel.cache.hasValue());
  for (int i = 0; i < list.count; ++i) {
    const abi::ParamInfo &param = *list.params[i];
    int id = static_cast<int>(param.id);
    if (param.role == abi::ParamRole::Scalar || values.views[id])
      KVRT_RETURN_IF_ERROR(
          checkFitsAbi(param, values.scalars[id], values.views[id]));
    if (param.role == abi::ParamRole::Scalar) {
      plan->scalars[plan->numScalars++] =
          static_cast<int32_t>(values.scalars[id]);
      continue;
    }
    if (!values.views[id]) {
      unset = param.name;
      break;
    }
    indexOf[id] = plan->numBuffers;
    plan->bufferParams[plan->numBuffers] = param.id;
    plan->buffers[plan->numBuffers++] = *values.views[id];
  }
  if (unset)
    return KVRT_ERROR(KVRT_ERROR_INTERNAL,
                      "kvrt has no value for the parameter '%s' of kind %s",
                      unset, kindName(kernel.kind));
  auto at = [&](Param param) { return indexOf[static_cast<int>(param)]; };
  plan->kind = kernel.kind;
  bool latent = kernel.kind == KernelKind::MlaAppend ||
                kernel.kind == KernelKind::MlaFusedAppend;
  if (kernel.kind == KernelKind::Append || kernel.kind == KernelKind::MlaAppend)
    plan->slotMapping = at(Param::SlotMapping);
  if (kernel.kind == KernelKind::FusedAppend ||
      kernel.kind == KernelKind::MlaFusedAppend) {
    plan->blockTable = at(Param::BlockTable);
    plan->queryStartLoc = at(Param::QueryStartLoc);
    plan->contextLens = at(Param::ContextLens);
  }
  if (kernel.kind == KernelKind::PagedKvAppend) {
    plan->batchIndices = at(Param::BatchIndices);
    plan->positions = at(Param::Positions);
    plan->kvIndices = at(Param::KvIndices);
    plan->kvIndptr = at(Param::KvIndptr);
  }
  // The vector variant moves these 16 bytes at a time; a cache side whose
  // head_dim elements are not adjacent is written element by element.
  bool gather = kernel.kind == KernelKind::Gather;
  bool withValue = kernel.cache.hasValue();
  if (latent) {
    plan->promised[plan->numPromised++] = at(Param::KvC);
    plan->promised[plan->numPromised++] = at(Param::KPe);
    plan->promised[plan->numPromised++] = at(Param::KeyCache);
  } else if (kernel.kind != KernelKind::SlotMapping) {
    plan->promised[plan->numPromised++] =
        at(gather ? Param::KeyOut : Param::Key);
    if (withValue)
      plan->promised[plan->numPromised++] =
          at(gather ? Param::ValueOut : Param::Value);
    plan->promised[plan->numPromised++] = at(Param::KeyCache);
    if (withValue &&
        abi::layoutInfo(kernel.cache.layout).chunkContiguous(/*isValue=*/true))
      plan->promised[plan->numPromised++] = at(Param::ValueCache);
  }
  return Status();
}

const KernelDescription &describingKernel(const Manifest &manifest,
                                          const Operation &operation) {
  int index = operation.promiseKernel() >= 0 ? operation.promiseKernel()
                                             : operation.scalarKernel;
  return manifest.kernels[index];
}

//===----------------------------------------------------------------------===//
// Caches and scales
//===----------------------------------------------------------------------===//

/// A V tensor given to a kernel whose cache has none.
static Status refuseValue(const char *name, const KernelDescription &kernel) {
  return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                    "%s: must be NULL: the kernel '%s' has a %s cache, "
                    "which has no V",
                    name, kernel.name.c_str(),
                    kernel.cache.latent ? "latent (MLA)" : "K-only");
}

Status checkCaches(const KernelDescription &kernel, const OperationSpecs &specs,
                   const DLTensor *keyCache, const DLTensor *valueCache,
                   CacheViews *out) {
  const CacheDescription &cache = kernel.cache;
  const abi::LayoutInfo &layout = abi::layoutInfo(cache.layout);
  if (layout.stacked()) {
    if (valueCache)
      return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                        "value_cache: must be NULL for the %s layout of '%s': "
                        "key_cache holds K at index 0 and V at index 1 of its "
                        "second dimension",
                        layout.name, kernel.name.c_str());
    KVRT_RETURN_IF_ERROR(checkTensor(keyCache, specs.keyCache, &out->stacked));
    stackedView(out->stacked, 0, "key_cache[:, 0]", &out->key);
    stackedView(out->stacked, 1, "key_cache[:, 1]", &out->value);
    out->whole[0] = &out->stacked;
    out->numWhole = 1;
    return Status();
  }
  if (!cache.hasValue()) {
    if (valueCache)
      return refuseValue("value_cache", kernel);
    KVRT_RETURN_IF_ERROR(checkTensor(keyCache, specs.keyCache, &out->key));
    out->whole[0] = &out->key;
    out->numWhole = 1;
    return Status();
  }
  KVRT_RETURN_IF_ERROR(checkTensor(keyCache, specs.keyCache, &out->key));
  KVRT_RETURN_IF_ERROR(checkTensor(valueCache, specs.valueCache, &out->value));
  KVRT_RETURN_IF_ERROR(checkSameDevice(out->key, out->value));
  KVRT_RETURN_IF_ERROR(
      checkSameExtent(out->key, 0, out->value, 0, layout.blocksName()));
  // Two caches a kernel only reads (a gather's) may share bytes.
  if (abi::kernelWrites(kernel.kind, Param::KeyCache))
    KVRT_RETURN_IF_ERROR(checkDisjoint(out->key, out->value));
  out->whole[0] = &out->key;
  out->whole[1] = &out->value;
  out->numWhole = 2;
  return Status();
}

/// "fp8_e4m3, per_tensor, static".
static std::string describeQuant(const CacheDescription &cache) {
  return formatString("%s, %s, %s", abi::quantKindName(cache.quant.kind),
                      abi::granularityName(cache.quant.granularity),
                      abi::scaleModeName(cache.quant.mode));
}

/// The scale tensors of a launch: those the description takes are checked
/// (NULL refused), the others must be NULL. `rows` binds num_tokens.
Status checkScales(const KernelDescription &kernel, const OperationSpecs &specs,
                   const DLTensor *const given[4], const TensorView &rows,
                   CacheViews *caches, ParamValues *values) {
  static const char *const kNames[4] = {"key_scale", "value_scale",
                                        "key_scale_cache", "value_scale_cache"};
  const CacheDescription &cache = kernel.cache;
  Quantization quantization = cache.quantization();
  int first = quantization == Quantization::Dynamic ? 2 : 0;
  bool withValue = cache.hasValue();
  for (int i = 0; i < 4; ++i) {
    bool taken = quantization != Quantization::None && i / 2 == first / 2;
    if (!withValue && i % 2 == 1 && given[i])
      return refuseValue(kNames[i], kernel);
    if (taken || !given[i])
      continue;
    if (quantization == Quantization::None)
      return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                        "%s: must be NULL: the kernel '%s' is not quantized",
                        kNames[i], kernel.name.c_str());
    return KVRT_ERROR(
        KVRT_ERROR_INVALID_ARGUMENT,
        "%s: must be NULL: the kernel '%s' (%s) takes %s%s%s", kNames[i],
        kernel.name.c_str(), describeQuant(cache).c_str(), kNames[first],
        withValue ? " and " : "", withValue ? kNames[first + 1] : "");
  }
  if (quantization == Quantization::None)
    return Status();

  const TensorSpec *scaleSpecs[4] = {&specs.keyScale, &specs.valueScale,
                                     &specs.keyScaleCache,
                                     &specs.valueScaleCache};
  const Param params[4] = {Param::KeyScale, Param::ValueScale,
                           Param::KeyScaleCache, Param::ValueScaleCache};
  const TensorView &cacheView = caches->key;
  int sides = withValue ? 2 : 1;
  for (int k = 0; k < sides; ++k) {
    int i = first + k;
    if (!given[i])
      return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                        "%s: tensor is NULL but the kernel '%s' is quantized "
                        "(%s) and takes it: %s",
                        kNames[i], kernel.name.c_str(),
                        describeQuant(cache).c_str(), scaleSpecs[i]->shapeText);
    TensorView &view = caches->scales[k];
    KVRT_RETURN_IF_ERROR(checkTensor(given[i], *scaleSpecs[i], &view));
    if (view.tensor->device.device_type !=
            cacheView.tensor->device.device_type ||
        view.tensor->device.device_id != cacheView.tensor->device.device_id)
      return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                        "%s: on %s but the cache is on %s; a scale lives on "
                        "the cache's device",
                        view.name, describeDevice(view.tensor->device).c_str(),
                        describeDevice(cacheView.tensor->device).c_str());
    if (i >= 2) {
      // One scale per slot: the scale cache has the cache's blocks.
      KVRT_RETURN_IF_ERROR(checkSameExtent(
          cacheView, 0, view, 0, abi::layoutInfo(cache.layout).blocksName()));
    } else if (cache.quant.granularity == ScaleGranularity::PerToken ||
               cache.quant.granularity == ScaleGranularity::PerTokenHead) {
      KVRT_RETURN_IF_ERROR(checkSameExtent(rows, 0, view, 0, "num_tokens"));
    } else if (cache.quant.granularity == ScaleGranularity::PerBlock) {
      KVRT_RETURN_IF_ERROR(
          checkSameExtent(cacheView, 0, view, 0, "num_blocks"));
    }
    values->set(params[i], view);
  }
  caches->numScales = sides;
  return Status();
}

/// The caches (and, for an append, the dynamic scale caches) the kernel
/// writes must not share bytes with anything else of the launch.
Status checkWritesDisjoint(const TensorView *const *written, int numWritten,
                           const TensorView *const *others, int numOthers) {
  for (int w = 0; w < numWritten; ++w)
    for (int o = 0; o < numOthers; ++o)
      if (written[w] != others[o])
        KVRT_RETURN_IF_ERROR(checkDisjoint(*written[w], *others[o]));
  return Status();
}

//===----------------------------------------------------------------------===//
// Plans
//===----------------------------------------------------------------------===//

/// The rows, caches and scales shared by append, fused_append and
/// paged_kv_append.
Status checkAppendTensors(const KernelDescription &kernel,
                          const OperationSpecs &specs, const DLTensor *key,
                          const DLTensor *value, const DLTensor *keyCache,
                          const DLTensor *valueCache,
                          const DLTensor *const scales[4], TensorView *keyView,
                          TensorView *valueView, CacheViews *caches,
                          ParamValues *values) {
  bool withValue = kernel.cache.hasValue();
  if (!withValue && value)
    return refuseValue("value", kernel);
  KVRT_RETURN_IF_ERROR(checkTensor(key, specs.key, keyView));
  if (withValue)
    KVRT_RETURN_IF_ERROR(checkTensor(value, specs.value, valueView));
  KVRT_RETURN_IF_ERROR(
      checkCaches(kernel, specs, keyCache, valueCache, caches));
  if (withValue)
    KVRT_RETURN_IF_ERROR(checkSameDevice(*keyView, *valueView));
  KVRT_RETURN_IF_ERROR(checkSameDevice(*keyView, caches->key));
  if (withValue)
    KVRT_RETURN_IF_ERROR(
        checkSameExtent(*keyView, 0, *valueView, 0, "num_tokens"));
  KVRT_RETURN_IF_ERROR(
      checkScales(kernel, specs, scales, *keyView, caches, values));
  values->set(Param::Key, *keyView);
  values->set(Param::KeyCache, caches->key);
  values->set(Param::NumTokens, keyView->shape[0]);
  values->set(Param::NumBlocks, caches->key.shape[0]);
  setRowStrides(values, Param::KeyStrideToken, *keyView);
  setCacheStrides(values, kernel.cache, false, caches->key);
  if (!withValue) {
    // Stands in for V in the overlap checks: the same tensor twice.
    *valueView = *keyView;
    return Status();
  }
  values->set(Param::Value, *valueView);
  values->set(Param::ValueCache, caches->value);
  setRowStrides(values, Param::ValueStrideToken, *valueView);
  setCacheStrides(values, kernel.cache, true, caches->value);
  return Status();
}

/// What an append-like launch writes, as Params.def's
/// KVGEN_ABI_KERNEL_WRITES says for its kind: the caches, and the scales
/// where they are a dynamic description's scale caches.
int writtenByAppend(const KernelDescription &kernel, const CacheViews &caches,
                    const TensorView *written[4]) {
  int count = 0;
  if (abi::kernelWrites(kernel.kind, Param::KeyCache))
    for (int i = 0; i < caches.numWhole; ++i)
      written[count++] = caches.whole[i];
  Param scales = kernel.cache.quantization() == Quantization::Dynamic
                     ? Param::KeyScaleCache
                     : Param::KeyScale;
  if (abi::kernelWrites(kernel.kind, scales))
    for (int i = 0; i < caches.numScales; ++i)
      written[count++] = &caches.scales[i];
  return count;
}

Status planAppend(const Manifest &manifest, const Operation &operation,
                  const OperationSpecs &specs, const kvrt_append_args &args,
                  LaunchPlan *plan) {
  const KernelDescription &kernel = describingKernel(manifest, operation);
  TensorView key, value, slots;
  CacheViews caches;
  ParamValues values;
  const DLTensor *scales[4] = {args.key_scale, args.value_scale,
                               args.key_scale_cache, args.value_scale_cache};
  KVRT_RETURN_IF_ERROR(checkAppendTensors(
      kernel, specs, args.key, args.value, args.key_cache, args.value_cache,
      scales, &key, &value, &caches, &values));
  KVRT_RETURN_IF_ERROR(
      checkTensor(args.slot_mapping, indexSpecs().slotMapping, &slots));
  KVRT_RETURN_IF_ERROR(checkSameDevice(key, slots));
  KVRT_RETURN_IF_ERROR(checkSameExtent(key, 0, slots, 0, "num_tokens"));
  values.set(Param::SlotMapping, slots);

  const TensorView *written[4];
  int numWritten = writtenByAppend(kernel, caches, written);
  const TensorView *all[] = {&key,
                             &value,
                             &slots,
                             caches.whole[0],
                             caches.numWhole > 1 ? caches.whole[1] : &key,
                             caches.numScales ? &caches.scales[0] : &key,
                             caches.numScales > 1 ? &caches.scales[1] : &key};
  KVRT_RETURN_IF_ERROR(
      checkWritesDisjoint(written, numWritten, all, std::size(all)));

  plan->operation = &operation;
  plan->device = key.tensor->device;
  plan->numTokens = key.shape[0];
  plan->numBlocks = caches.key.shape[0];
  plan->blockSize = kernel.cache.blockSize;
  return packInAbiOrder(kernel, values, plan);
}

Status checkRequests(const DLTensor *blockTable, const DLTensor *queryStartLoc,
                     const DLTensor *contextLens, TensorView *table,
                     TensorView *starts, TensorView *lens,
                     ParamValues *values) {
  const IndexSpecs &index = indexSpecs();
  KVRT_RETURN_IF_ERROR(checkTensor(blockTable, index.blockTable, table));
  KVRT_RETURN_IF_ERROR(checkTensor(queryStartLoc, index.queryStartLoc, starts));
  KVRT_RETURN_IF_ERROR(checkTensor(contextLens, index.contextLens, lens));
  KVRT_RETURN_IF_ERROR(checkSameDevice(*table, *starts));
  KVRT_RETURN_IF_ERROR(checkSameDevice(*table, *lens));
  KVRT_RETURN_IF_ERROR(
      checkSameExtent(*table, 0, *starts, 0, "num_reqs + 1", 1));
  KVRT_RETURN_IF_ERROR(checkSameExtent(*table, 0, *lens, 0, "num_reqs"));
  values->set(Param::BlockTable, *table);
  values->set(Param::QueryStartLoc, *starts);
  values->set(Param::ContextLens, *lens);
  values->set(Param::NumReqs, table->shape[0]);
  values->set(Param::BlockTableStride, table->strides[0]);
  values->set(Param::MaxBlocksPerReq, table->shape[1]);
  return Status();
}

Status planSlotMapping(const Manifest &manifest, const Operation &operation,
                       const OperationSpecs &specs,
                       const kvrt_slot_mapping_args &args, LaunchPlan *plan) {
  (void)specs;
  const KernelDescription &kernel = describingKernel(manifest, operation);
  TensorView table, starts, lens, slots;
  ParamValues values;
  KVRT_RETURN_IF_ERROR(checkRequests(args.block_table, args.query_start_loc,
                                     args.context_lens, &table, &starts, &lens,
                                     &values));
  KVRT_RETURN_IF_ERROR(
      checkTensor(args.slot_mapping, indexSpecs().slotMapping, &slots));
  KVRT_RETURN_IF_ERROR(checkSameDevice(table, slots));
  static_assert(
      abi::kernelWrites(KernelKind::SlotMapping, Param::SlotMapping) &&
          !abi::kernelWrites(KernelKind::SlotMapping, Param::BlockTable) &&
          !abi::kernelWrites(KernelKind::SlotMapping, Param::QueryStartLoc) &&
          !abi::kernelWrites(KernelKind::SlotMapping, Param::ContextLens),
      "a slot_mapping kernel writes the slots and nothing else");
  for (const TensorView *read : {&table, &starts, &lens})
    KVRT_RETURN_IF_ERROR(checkDisjoint(slots, *read));
  values.set(Param::SlotMapping, slots);
  values.set(Param::NumTokens, slots.shape[0]);

  plan->operation = &operation;
  plan->device = slots.tensor->device;
  plan->numTokens = slots.shape[0];
  return packInAbiOrder(kernel, values, plan);
}

Status planFusedAppend(const Manifest &manifest, const Operation &operation,
                       const OperationSpecs &specs,
                       const kvrt_fused_append_args &args, LaunchPlan *plan) {
  const KernelDescription &kernel = describingKernel(manifest, operation);
  TensorView key, value, table, starts, lens;
  CacheViews caches;
  ParamValues values;
  const DLTensor *scales[4] = {args.key_scale, args.value_scale,
                               args.key_scale_cache, args.value_scale_cache};
  KVRT_RETURN_IF_ERROR(checkAppendTensors(
      kernel, specs, args.key, args.value, args.key_cache, args.value_cache,
      scales, &key, &value, &caches, &values));
  KVRT_RETURN_IF_ERROR(checkRequests(args.block_table, args.query_start_loc,
                                     args.context_lens, &table, &starts, &lens,
                                     &values));
  KVRT_RETURN_IF_ERROR(checkSameDevice(key, table));

  const TensorView *written[4];
  int numWritten = writtenByAppend(kernel, caches, written);
  const TensorView *all[] = {&key,
                             &value,
                             &table,
                             &starts,
                             &lens,
                             caches.whole[0],
                             caches.numWhole > 1 ? caches.whole[1] : &key,
                             caches.numScales ? &caches.scales[0] : &key,
                             caches.numScales > 1 ? &caches.scales[1] : &key};
  KVRT_RETURN_IF_ERROR(
      checkWritesDisjoint(written, numWritten, all, std::size(all)));

  plan->operation = &operation;
  plan->device = key.tensor->device;
  plan->numTokens = key.shape[0];
  plan->numBlocks = caches.key.shape[0];
  plan->blockSize = kernel.cache.blockSize;
  return packInAbiOrder(kernel, values, plan);
}

Status planGather(const Manifest &manifest, const Operation &operation,
                  const OperationSpecs &specs, const kvrt_gather_args &args,
                  LaunchPlan *plan) {
  const KernelDescription &kernel = describingKernel(manifest, operation);
  TensorView slots, keyOut, valueOut;
  CacheViews caches;
  ParamValues values;
  KVRT_RETURN_IF_ERROR(
      checkCaches(kernel, specs, args.key_cache, args.value_cache, &caches));
  KVRT_RETURN_IF_ERROR(
      checkTensor(args.slot_mapping, indexSpecs().slotMapping, &slots));
  bool withValue = kernel.cache.hasValue();
  if (!withValue && args.value_out)
    return refuseValue("value_out", kernel);
  KVRT_RETURN_IF_ERROR(checkTensor(args.key_out, specs.keyOut, &keyOut));
  if (withValue)
    KVRT_RETURN_IF_ERROR(
        checkTensor(args.value_out, specs.valueOut, &valueOut));
  KVRT_RETURN_IF_ERROR(checkSameDevice(caches.key, slots));
  KVRT_RETURN_IF_ERROR(checkSameDevice(caches.key, keyOut));
  if (withValue)
    KVRT_RETURN_IF_ERROR(checkSameDevice(caches.key, valueOut));
  // Row i of the outputs is slot_mapping[i]'s.
  KVRT_RETURN_IF_ERROR(checkSameExtent(slots, 0, keyOut, 0, "num_tokens"));
  if (withValue)
    KVRT_RETURN_IF_ERROR(checkSameExtent(slots, 0, valueOut, 0, "num_tokens"));
  const DLTensor *scales[4] = {args.key_scale, args.value_scale,
                               args.key_scale_cache, args.value_scale_cache};
  KVRT_RETURN_IF_ERROR(
      checkScales(kernel, specs, scales, slots, &caches, &values));

  // Params.def's KVGEN_ABI_KERNEL_WRITES for a gather, spelled out.
  static_assert(
      abi::kernelWrites(KernelKind::Gather, Param::KeyOut) &&
          abi::kernelWrites(KernelKind::Gather, Param::ValueOut) &&
          !abi::kernelWrites(KernelKind::Gather, Param::KeyCache) &&
          !abi::kernelWrites(KernelKind::Gather, Param::ValueCache) &&
          !abi::kernelWrites(KernelKind::Gather, Param::KeyScaleCache) &&
          !abi::kernelWrites(KernelKind::Gather, Param::ValueScaleCache),
      "a gather writes its outputs and nothing else");
  const TensorView *written[] = {&keyOut, &valueOut};
  int numWritten = withValue ? 2 : 1;
  // Without V, the slots stand in for value_out (as for the missing caches
  // and scales): a copy of key_out there would overlap key_out itself.
  const TensorView *all[] = {&keyOut,
                             withValue ? &valueOut : &slots,
                             &slots,
                             caches.whole[0],
                             caches.numWhole > 1 ? caches.whole[1] : &slots,
                             caches.numScales ? &caches.scales[0] : &slots,
                             caches.numScales > 1 ? &caches.scales[1] : &slots};
  KVRT_RETURN_IF_ERROR(
      checkWritesDisjoint(written, numWritten, all, std::size(all)));

  values.set(Param::KeyCache, caches.key);
  values.set(Param::SlotMapping, slots);
  values.set(Param::KeyOut, keyOut);
  if (withValue) {
    values.set(Param::ValueCache, caches.value);
    values.set(Param::ValueOut, valueOut);
  }
  values.set(Param::NumTokens, slots.shape[0]);
  values.set(Param::NumBlocks, caches.key.shape[0]);
  setRowStrides(&values, Param::KeyOutStrideToken, keyOut);
  setCacheStrides(&values, kernel.cache, false, caches.key);
  if (withValue) {
    setRowStrides(&values, Param::ValueOutStrideToken, valueOut);
    setCacheStrides(&values, kernel.cache, true, caches.value);
  }

  plan->operation = &operation;
  plan->device = slots.tensor->device;
  plan->numTokens = slots.shape[0];
  plan->numBlocks = caches.key.shape[0];
  plan->blockSize = kernel.cache.blockSize;
  return packInAbiOrder(kernel, values, plan);
}

} // namespace kvrt::impl
