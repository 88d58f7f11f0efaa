//===- Validation.cpp - plan any kernel kind's launch from Params.def -----===//
//
// One planner for every kind. What differs between kinds is data in
// include/kvgen/ABI/Params.def: the buffers and scalars each kind takes, in
// order (KVGEN_ABI_KERNEL_PARAM), which buffers it writes
// (KVGEN_ABI_KERNEL_WRITES), which extents bind each count
// (KVGEN_ABI_EXTENT) and which stride each stride scalar is
// (KVGEN_ABI_STRIDE). The rules that follow the description rather than the
// kind (a stacked, K-only or latent cache; quantization's scales) are
// checkCaches and checkScales.
//
//===----------------------------------------------------------------------===//

#include "Packing.h"

#include <algorithm>

namespace kvrt::impl {

using abi::Param;
using abi::ParamElement;

namespace {

/// A dimension of a buffer; Block..Dim through a cache's layout.
enum class Axis { Axis0, Axis1, Axis2, Block, Head, Pos, Dim };
struct StrideRule {
  Param scalar;
  Param buffer;
  Axis axis;
};
constexpr StrideRule kStrides[] = {
#define KVGEN_ABI_STRIDE(Id, Buffer, Along)                                    \
  {Param::Id, Param::Buffer, Axis::Along},
#include "kvgen/ABI/Params.def"
};

/// Every scalar is a count (KVGEN_ABI_EXTENT) or a stride (KVGEN_ABI_STRIDE),
/// once: a scalar added to Params.def without its source fails to compile
/// here rather than reach a kernel as 0.
constexpr bool everyScalarHasOneSource() {
  for (const abi::ParamInfo &param : abi::kParams) {
    if (param.role != abi::ParamRole::Scalar)
      continue;
    int counts = 0, strides = 0;
    for (const ExtentRule &rule : kExtents)
      counts += rule.count == param.id;
    for (const StrideRule &rule : kStrides)
      strides += rule.scalar == param.id;
    if (strides + (counts > 0) != 1)
      return false;
  }
  return true;
}
static_assert(everyScalarHasOneSource(),
              "each scalar of Params.def needs a KVGEN_ABI_EXTENT count or "
              "one KVGEN_ABI_STRIDE");

/// Whether any kind of `kind`'s parameter list is `param` (for any
/// description).
bool kindTakes(KernelKind kind, Param param) {
  for (const abi::KernelParam &p : abi::kKernelParams)
    if (p.kind == kind && p.id == param)
      return true;
  return false;
}

/// What a prologue part is, for a message.
const char *prologuePart(abi::ParamWhen when) {
  switch (when) {
  case abi::ParamWhen::PrologueNorm:
    return "norm = rms";
  case abi::ParamWhen::PrologueQNorm:
    return "norm = rms with q_heads";
  case abi::ParamWhen::PrologueRope:
    return "rope";
  case abi::ParamWhen::PrologueQQuant:
    return "q_quant";
  default:
    return "q_heads";
  }
}

/// A prologue tensor the description does not take is refused by name, and
/// one it takes is required by name: a caller that passes Q to a kernel
/// without a prologue would otherwise get an unrotated Q back and never
/// know.
Status checkPrologueGiven(const KernelDescription &kernel,
                          const DLTensor *const given[kNumParamIds]) {
  abi::PrologueParts parts = kernel.prologue.parts();
  for (const abi::KernelParam &p : abi::kKernelParams) {
    if (p.kind != kernel.kind || !isPrologue(p.when) ||
        abi::paramInfo(p.id).role != abi::ParamRole::Buffer)
      continue;
    bool taken = abi::isPresent(p.when, Quantization::None, false, parts);
    bool isGiven = given[static_cast<int>(p.id)] != nullptr;
    if (taken && !isGiven)
      return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                        "%s: tensor is NULL but the kernel '%s' has a fused "
                        "prologue with %s, which takes it",
                        abi::paramName(p.id), kernel.name.c_str(),
                        prologuePart(p.when));
    if (!taken && isGiven)
      return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                        "%s: must be NULL: the kernel '%s' has %s%s",
                        abi::paramName(p.id), kernel.name.c_str(),
                        kernel.prologue.any() ? "a fused prologue without "
                                              : "no fused prologue",
                        kernel.prologue.any() ? prologuePart(p.when) : "");
  }
  return Status();
}

/// q_out given as query itself: the same first element, element size, shape
/// and strides (vLLM rotates Q in place, and the kernels read the Q they
/// need before they write it over). Any other overlap would have a thread
/// read Q another thread already wrote: refused. An fp8 q_out (q_quant) at
/// query's address with query's element strides is such an overlap: its
/// elements are half as wide, so they lie over other lanes' Q. Likewise an
/// MLA prologue's k_pe_out given as k_pe itself (vLLM rotates k_pe in place
/// too).
bool isInPlaceQuery(const TensorView &written, Param writtenParam,
                    const TensorView &other, Param otherParam) {
  bool pair = (writtenParam == Param::QOut && otherParam == Param::Query) ||
              (writtenParam == Param::KPeOut && otherParam == Param::KPe);
  if (!pair || written.first != other.first ||
      written.elementBytes != other.elementBytes || written.rank != other.rank)
    return false;
  for (int i = 0; i < written.rank; ++i)
    if (written.shape[i] != other.shape[i] ||
        (written.shape[i] > 1 && written.strides[i] != other.strides[i]))
      return false;
  return true;
}

/// The tensors a launch checks whole (a stacked cache once, not its K and
/// V views), by parameter: what the one-device and overlap rules compare.
struct WholeTensors {
  const TensorView *views[kMaxBuffers];
  Param params[kMaxBuffers];
  int count = 0;

  void add(const TensorView &view, Param param) {
    views[count] = &view;
    params[count++] = param;
  }
};

/// The tensors of a launch's caches and scales, as checkCaches and
/// checkScales found them.
struct CacheViews {
  /// A stacked cache is checked whole, then seen as its K and V views.
  TensorView key, value, stacked;
  /// key_scale, value_scale or the two scale caches, by the description.
  TensorView scales[2];
};

/// The scale parameters: static K and V, then dynamic K and V.
constexpr Param kScales[4] = {Param::KeyScale, Param::ValueScale,
                              Param::KeyScaleCache, Param::ValueScaleCache};

} // namespace

const KernelDescription &describingKernel(const Manifest &manifest,
                                          const Operation &operation) {
  int index = operation.promiseKernel() >= 0
                  ? operation.promiseKernel()
                  : operation.kernelOf(Variant::Scalar);
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

/// The caches by the layout: a stacked one whole and as its K and V views,
/// a K-only one without V, else K and V on one device, of one block count,
/// and disjoint where the kind writes them.
static Status checkCaches(const KernelDescription &kernel,
                          const OperationSpecs &specs,
                          const DLTensor *const given[kNumParamIds],
                          CacheViews *out, ParamValues *values,
                          WholeTensors *whole) {
  const CacheDescription &cache = kernel.cache;
  const abi::LayoutInfo &layout = abi::layoutInfo(cache.layout);
  const DLTensor *keyCache = given[static_cast<int>(Param::KeyCache)];
  const DLTensor *valueCache = given[static_cast<int>(Param::ValueCache)];
  if (layout.stacked()) {
    if (valueCache)
      return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                        "value_cache: must be NULL for the %s layout of '%s': "
                        "key_cache holds K at index 0 and V at index 1 of its "
                        "second dimension",
                        layout.name, kernel.name.c_str());
    KVRT_RETURN_IF_ERROR(
        checkTensor(keyCache, specs[Param::KeyCache], &out->stacked));
    stackedView(out->stacked, 0, "key_cache[:, 0]", &out->key);
    stackedView(out->stacked, 1, "key_cache[:, 1]", &out->value);
    values->set(Param::KeyCache, out->key);
    values->set(Param::ValueCache, out->value);
    whole->add(out->stacked, Param::KeyCache);
    return Status();
  }
  if (!cache.hasValue() && valueCache)
    return refuseValue("value_cache", kernel);
  KVRT_RETURN_IF_ERROR(
      checkTensor(keyCache, specs[Param::KeyCache], &out->key));
  values->set(Param::KeyCache, out->key);
  whole->add(out->key, Param::KeyCache);
  if (!cache.hasValue())
    return Status();
  KVRT_RETURN_IF_ERROR(
      checkTensor(valueCache, specs[Param::ValueCache], &out->value));
  KVRT_RETURN_IF_ERROR(checkSameDevice(out->key, out->value));
  KVRT_RETURN_IF_ERROR(
      checkSameExtent(out->key, 0, out->value, 0, layout.blocksName()));
  // Two caches a kernel only reads (a gather's) may share bytes.
  if (abi::kernelWrites(kernel.kind, Param::KeyCache))
    KVRT_RETURN_IF_ERROR(checkDisjoint(out->key, out->value));
  values->set(Param::ValueCache, out->value);
  whole->add(out->value, Param::ValueCache);
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
static Status checkScales(const KernelDescription &kernel,
                          const OperationSpecs &specs,
                          const DLTensor *const given[kNumParamIds],
                          const TensorView &rows, CacheViews *caches,
                          ParamValues *values, WholeTensors *whole) {
  const CacheDescription &cache = kernel.cache;
  Quantization quantization = cache.quantization();
  int first = quantization == Quantization::Dynamic ? 2 : 0;
  bool withValue = cache.hasValue();
  auto name = [](int i) { return abi::paramName(kScales[i]); };
  auto givenAt = [&](int i) { return given[static_cast<int>(kScales[i])]; };
  for (int i = 0; i < 4; ++i) {
    bool taken = quantization != Quantization::None && i / 2 == first / 2;
    if (!withValue && i % 2 == 1 && givenAt(i))
      return refuseValue(name(i), kernel);
    if (taken || !givenAt(i))
      continue;
    if (quantization == Quantization::None)
      return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                        "%s: must be NULL: the kernel '%s' is not quantized",
                        name(i), kernel.name.c_str());
    return KVRT_ERROR(
        KVRT_ERROR_INVALID_ARGUMENT,
        "%s: must be NULL: the kernel '%s' (%s) takes %s%s%s", name(i),
        kernel.name.c_str(), describeQuant(cache).c_str(), name(first),
        withValue ? " and " : "", withValue ? name(first + 1) : "");
  }
  if (quantization == Quantization::None)
    return Status();

  const TensorView &cacheView = caches->key;
  for (int k = 0; k < (withValue ? 2 : 1); ++k) {
    Param param = kScales[first + k];
    const TensorSpec &spec = specs[param];
    if (!givenAt(first + k))
      return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                        "%s: tensor is NULL but the kernel '%s' is quantized "
                        "(%s) and takes it: %s",
                        spec.name, kernel.name.c_str(),
                        describeQuant(cache).c_str(), spec.shapeText);
    TensorView &view = caches->scales[k];
    KVRT_RETURN_IF_ERROR(checkTensor(givenAt(first + k), spec, &view));
    if (view.tensor->device.device_type !=
            cacheView.tensor->device.device_type ||
        view.tensor->device.device_id != cacheView.tensor->device.device_id)
      return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                        "%s: on %s but the cache is on %s; a scale lives on "
                        "the cache's device",
                        view.name, describeDevice(view.tensor->device).c_str(),
                        describeDevice(cacheView.tensor->device).c_str());
    if (first == 2) {
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
    values->set(param, view);
    whole->add(view, param);
  }
  return Status();
}

//===----------------------------------------------------------------------===//
// The plan
//===----------------------------------------------------------------------===//

/// The stride of `view` along `axis`; a cache's axes per docs/KERNEL-ABI.md's
/// offset table, read at the layout's axes (of the K or V view, for a
/// stacked cache). A latent cache [nb, bs, entry] has one head.
static int64_t strideAlong(const CacheDescription &cache, Param buffer,
                           Axis axis, const TensorView &view) {
  if (axis <= Axis::Axis2)
    return view.strides[static_cast<int>(axis)];
  if (cache.latent) {
    const int64_t latent[] = {view.strides[0], 0, view.strides[1],
                              view.strides[2]};
    return latent[static_cast<int>(axis) - static_cast<int>(Axis::Block)];
  }
  abi::CacheAxes axes = abi::layoutInfo(cache.layout)
                            .axes(/*isValue=*/buffer == Param::ValueCache)
                            .view();
  switch (axis) {
  case Axis::Block:
    return view.strides[axes.blockAxis()];
  case Axis::Head:
    return view.strides[axes.headAxis()];
  case Axis::Pos:
    return view.strides[axes.posAxis()];
  default:
    return view.strides[axes.dimAxis()];
  }
}

std::string countName(Param count, int bias) {
  const char *name = abi::paramName(count);
  return bias ? formatString("%s + %d", name, bias) : std::string(name);
}

Status planLaunch(const Manifest &manifest, const Operation &operation,
                  const OperationSpecs &specs,
                  const DLTensor *const given[kNumParamIds], LaunchPlan *plan) {
  const KernelDescription &kernel = describingKernel(manifest, operation);
  const CacheDescription &cache = kernel.cache;
  KernelKind kind = kernel.kind;
  bool withValue = cache.hasValue();
  auto givenAt = [&](Param param) { return given[static_cast<int>(param)]; };

  // A V row given to a kernel without V (value_cache and the V scales are
  // refused where the caches and scales are checked).
  if (!withValue)
    for (const abi::KernelParam &p : abi::kKernelParams)
      if (p.kind == kind && p.when == abi::ParamWhen::WithValue &&
          abi::paramInfo(p.id).element != ParamElement::Cache && givenAt(p.id))
        return refuseValue(abi::paramName(p.id), kernel);

  KVRT_RETURN_IF_ERROR(checkPrologueGiven(kernel, given));

  // Each buffer against its spec, in ABI order; the caches by the layout.
  const ParamList &list = paramList(kind, cache.quantization(), !withValue,
                                    kernel.prologue.parts());
  TensorView views[kNumParamIds];
  CacheViews caches;
  ParamValues values;
  WholeTensors whole;
  for (int i = 0; i < list.count; ++i) {
    const abi::ParamInfo &param = *list.params[i];
    if (param.role == abi::ParamRole::Scalar)
      break; // every buffer comes before the first scalar
    if ((param.element == ParamElement::F32 && param.id != Param::Epsilon &&
         param.id != Param::QScale) ||
        param.id == Param::ValueCache)
      continue; // checkScales, checkCaches
    if (param.id == Param::KeyCache) {
      KVRT_RETURN_IF_ERROR(
          checkCaches(kernel, specs, given, &caches, &values, &whole));
      continue;
    }
    TensorView &view = views[static_cast<int>(param.id)];
    KVRT_RETURN_IF_ERROR(
        checkTensor(given[static_cast<int>(param.id)], specs[param.id], &view));
    values.set(param.id, view);
    whole.add(view, param.id);
  }

  // One device: the first buffer's.
  for (int i = 1; i < whole.count; ++i)
    KVRT_RETURN_IF_ERROR(checkSameDevice(*whole.views[0], *whole.views[i]));

  // Each count from the first buffer that has it; the others agree.
  const TensorView *binder[kNumParamIds] = {};
  const ExtentRule *bound[kNumParamIds] = {};
  for (int i = 0; i < list.count; ++i) {
    const TensorView *view = values.view(list.params[i]->id);
    if (!view)
      continue;
    for (const ExtentRule &rule : kExtents) {
      if (rule.buffer != list.params[i]->id)
        continue;
      int count = static_cast<int>(rule.count);
      int64_t extent = view->shape[rule.dim];
      if (!binder[count]) {
        if (extent < rule.bias)
          return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                            "%s: has %lld elements; it needs %s (at least "
                            "%d)%s",
                            view->name, static_cast<long long>(extent),
                            countName(rule.count, rule.bias).c_str(), rule.bias,
                            rule.buffer == Param::KvIndptr
                                ? ": kv_indptr[b] .. kv_indptr[b + 1] are "
                                  "request b's pages"
                                : "");
        binder[count] = view;
        bound[count] = &rule;
        values.set(rule.count, extent - rule.bias);
      } else if (extent != binder[count]->shape[bound[count]->dim] -
                               bound[count]->bias + rule.bias) {
        return checkSameExtent(*binder[count], bound[count]->dim, *view,
                               rule.dim,
                               countName(rule.count, rule.bias).c_str(),
                               rule.bias - bound[count]->bias);
      }
    }
  }

  // The scales the description takes; per-token ones bound by num_tokens.
  if (kindTakes(kind, Param::KeyScale))
    KVRT_RETURN_IF_ERROR(checkScales(
        kernel, specs, given, *binder[static_cast<int>(Param::NumTokens)],
        &caches, &values, &whole));

  // q_out may be query itself, and nothing else of it: said first, since
  // a q_out shifted from query usually reaches the next section of the QKV
  // rows too.
  if (const TensorView *qOut = values.view(Param::QOut)) {
    const TensorView &query = *values.view(Param::Query);
    if (!isInPlaceQuery(*qOut, Param::QOut, query, Param::Query) &&
        !checkDisjoint(*qOut, query).ok())
      return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                        "q_out: overlaps query but is not query itself; "
                        "q_out may alias query only exactly (the same "
                        "data + byte_offset, dtype, shape and strides)");
  }
  if (const TensorView *kPeOut = values.view(Param::KPeOut)) {
    const TensorView &kPe = *values.view(Param::KPe);
    if (!isInPlaceQuery(*kPeOut, Param::KPeOut, kPe, Param::KPe) &&
        !checkDisjoint(*kPeOut, kPe).ok())
      return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                        "k_pe_out: overlaps k_pe but is not k_pe itself; "
                        "k_pe_out may alias k_pe only exactly (the same "
                        "data + byte_offset, shape and strides)");
  }
  // What the kind writes must not share bytes with anything else.
  for (int w = 0; w < whole.count; ++w)
    if (abi::kernelWrites(kind, whole.params[w]))
      for (int o = 0; o < whole.count; ++o)
        if (o != w && !isInPlaceQuery(*whole.views[w], whole.params[w],
                                      *whole.views[o], whole.params[o]))
          KVRT_RETURN_IF_ERROR(checkDisjoint(*whole.views[w], *whole.views[o]));

  for (const StrideRule &rule : kStrides)
    if (const TensorView *view = values.view(rule.buffer))
      values.set(rule.scalar,
                 strideAlong(cache, rule.buffer, rule.axis, *view));

  plan->operation = &operation;
  plan->device = whole.views[0]->tensor->device;
  plan->numTokens = values.scalars[static_cast<int>(Param::NumTokens)];
  if (values.view(Param::KeyCache)) {
    plan->numBlocks = caches.key.shape[0];
    plan->blockSize = cache.blockSize;
  }
  return packInAbiOrder(kernel, values, plan);
}

} // namespace kvrt::impl
