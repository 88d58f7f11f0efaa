//===- Validation.cpp - check every tensor before a launch ----------------===//
//
// Each rule is one check with one message of the form "<tensor>: <what is
// wrong>, <the rule>". The order is: presence, device, dtype, rank, shape,
// strides, memory (extent, NULL data, element alignment); then the rules
// between tensors: one device, one num_tokens, caches that alias nothing.
//
//===----------------------------------------------------------------------===//

#include "Validation.h"

#include "Limits.h"

namespace kvrt::impl {

// DLPack 1.1 type codes; Debian's dlpack.h (0.6) predates them.
static constexpr uint8_t kDLFloat8E4M3FNCode = 10;
static constexpr uint8_t kDLFloat8E5M2Code = 12;

//===----------------------------------------------------------------------===//
// Descriptions for messages
//===----------------------------------------------------------------------===//

std::string describeDevice(DLDevice device) {
  switch (device.device_type) {
  case kDLCPU:
    return formatString("cpu:%d", device.device_id);
  case kDLCUDA:
    return formatString("cuda:%d", device.device_id);
  case kDLCUDAHost:
    return formatString("cuda_host:%d", device.device_id);
  case kDLCUDAManaged:
    return formatString("cuda_managed:%d", device.device_id);
  default:
    return formatString("device type %d:%d",
                        static_cast<int>(device.device_type), device.device_id);
  }
}

std::string describeDType(DLDataType dtype) {
  std::string base;
  switch (dtype.code) {
  case kDLFloat:
    base = formatString("f%d", dtype.bits);
    break;
  case kDLBfloat:
    base = dtype.bits == 16 ? "bf16" : formatString("bfloat%d", dtype.bits);
    break;
  case kDLInt:
    base = formatString("i%d", dtype.bits);
    break;
  case kDLUInt:
    base = formatString("u%d", dtype.bits);
    break;
  case kDLFloat8E4M3FNCode:
    base = "f8e4m3";
    break;
  case kDLFloat8E5M2Code:
    base = "f8e5m2";
    break;
  default:
    base = formatString("code %d, %d bits", dtype.code, dtype.bits);
    break;
  }
  if (dtype.lanes != 1)
    base += formatString(" x %d lanes", dtype.lanes);
  return base;
}

static bool matchesDType(DLDataType actual, DType expected) {
  switch (expected) {
  case DType::F32:
    return actual.code == kDLFloat && actual.bits == 32;
  case DType::F16:
    return actual.code == kDLFloat && actual.bits == 16;
  case DType::BF16:
    return actual.code == kDLBfloat && actual.bits == 16;
  case DType::F8E4M3:
  case DType::F8E5M2: {
    // Serving stacks keep fp8 caches as raw bytes (vLLM's uint8 tensors),
    // and DLPack 0.x has no fp8 code; accept those as well as DLPack 1.1's.
    uint8_t code =
        expected == DType::F8E4M3 ? kDLFloat8E4M3FNCode : kDLFloat8E5M2Code;
    return actual.bits == 8 && (actual.code == code || actual.code == kDLUInt);
  }
  case DType::I8:
    return actual.code == kDLInt && actual.bits == 8;
  case DType::I32:
    return actual.code == kDLInt && actual.bits == 32;
  case DType::I64:
    return actual.code == kDLInt && actual.bits == 64;
  }
  return false;
}

//===----------------------------------------------------------------------===//
// One tensor
//===----------------------------------------------------------------------===//

/// No two in-range indices reach the same element: with the dimensions sorted
/// by stride, each stride passes the furthest offset of all smaller ones.
static bool isInjective(int rank, const int64_t *shape,
                        const int64_t *strides) {
  int order[kMaxRank];
  int count = 0;
  // Innermost first: row-major strides then come out sorted already.
  for (int i = rank - 1; i >= 0; --i)
    if (shape[i] > 1)
      order[count++] = i;
  // Insertion sort: at most five entries.
  for (int k = 1; k < count; ++k)
    for (int j = k; j > 0 && strides[order[j]] < strides[order[j - 1]]; --j)
      std::swap(order[j], order[j - 1]);
  int64_t reach = 0;
  for (int k = 0; k < count; ++k) {
    int i = order[k];
    if (strides[i] <= reach)
      return false;
    reach += strides[i] * (shape[i] - 1);
  }
  return true;
}

/// The refusal for a dimension whose extent the description fixes.
static Status wrongExtent(const TensorSpec &spec, int i, int64_t extent) {
  if (spec.kernel)
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                      "%s: shape[%d] (%s) is %lld but the kernel '%s' was "
                      "generated for %lld; expected %s",
                      spec.name, i, spec.dimNames[i],
                      static_cast<long long>(extent), spec.kernel,
                      static_cast<long long>(spec.dims[i]), spec.shapeText);
  return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                    "%s: shape[%d] (%s) is %lld but must be %lld; expected %s",
                    spec.name, i, spec.dimNames[i],
                    static_cast<long long>(extent),
                    static_cast<long long>(spec.dims[i]), spec.shapeText);
}

static Status checkTensor(const DLTensor *tensor, const TensorSpec &spec,
                          TensorView *out) {
  const char *name = spec.name;
  if (!tensor)
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                      "%s: tensor is NULL (required)", name);

  DLDevice device = tensor->device;
  if (device.device_type != kDLCUDA && device.device_type != kDLCPU)
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                      "%s: device %s is not supported: kvrt launches kDLCUDA "
                      "tensors on the GPU and kDLCPU tensors through host "
                      "kernels",
                      name, describeDevice(device).c_str());
  if (device.device_id < 0)
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                      "%s: device_id is %d; must be >= 0", name,
                      device.device_id);

  if (tensor->dtype.lanes != 1)
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                      "%s: dtype %s has %d lanes; kvrt takes scalar elements "
                      "(lanes == 1)",
                      name, describeDType(tensor->dtype).c_str(),
                      tensor->dtype.lanes);
  if (!matchesDType(tensor->dtype, spec.dtype)) {
    if (spec.kernel)
      return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                        "%s: dtype is %s but the kernel '%s' was generated for "
                        "%s",
                        name, describeDType(tensor->dtype).c_str(), spec.kernel,
                        dtypeName(spec.dtype));
    return KVRT_ERROR(
        KVRT_ERROR_INVALID_ARGUMENT, "%s: dtype is %s but must be %s", name,
        describeDType(tensor->dtype).c_str(), dtypeName(spec.dtype));
  }

  if (tensor->ndim != spec.rank)
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                      "%s: rank is %d but must be %d: %s", name, tensor->ndim,
                      spec.rank, spec.shapeText);
  if (!tensor->shape)
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                      "%s: shape is NULL but ndim is %d", name, tensor->ndim);

  out->name = name;
  out->tensor = tensor;
  out->rank = spec.rank;
  out->elementBytes = dtypeBytes(spec.dtype);
  // One pass, innermost first: extents, strides (DLPack: NULL means compact
  // row-major) and the offset of the last element.
  int64_t compact = 1, last = 0;
  bool empty = false, overflow = false;
  for (int i = spec.rank - 1; i >= 0; --i) {
    int64_t extent = tensor->shape[i];
    if (extent < 0)
      return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                        "%s: shape[%d] (%s) is negative (%lld)", name, i,
                        spec.dimNames[i], static_cast<long long>(extent));
    if (spec.dims[i] >= 0 && extent != spec.dims[i])
      return wrongExtent(spec, i, extent);
    int64_t stride = compact;
    if (tensor->strides) {
      stride = tensor->strides[i];
      if (stride < 0)
        return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                          "%s: stride[%d] (%s) is %lld; negative strides are "
                          "not supported",
                          name, i, spec.dimNames[i],
                          static_cast<long long>(stride));
    } else if (__builtin_mul_overflow(compact, std::max<int64_t>(extent, 1),
                                      &compact)) {
      return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                        "%s: shape overflows 64-bit offsets", name);
    }
    out->shape[i] = extent;
    out->strides[i] = stride;
    int64_t term = 0;
    empty |= extent == 0;
    overflow |= __builtin_mul_overflow(extent - 1, stride, &term) ||
                __builtin_add_overflow(last, term, &last);
  }
  int inner = spec.rank - 1;
  // A dimension of extent 1 is never stepped along: its stride is moot.
  if (spec.innerStrideRule && inner >= 0 && out->shape[inner] > 1 &&
      out->strides[inner] != 1)
    return KVRT_ERROR(
        KVRT_ERROR_INVALID_ARGUMENT, "%s: stride[%d] (%s) is %lld but %s", name,
        inner, spec.dimNames[inner],
        static_cast<long long>(out->strides[inner]), spec.innerStrideRule);
  if (spec.injective && !isInjective(spec.rank, out->shape, out->strides))
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                      "%s: its strides make distinct elements share memory, so "
                      "two slots would write the same bytes; a cache view "
                      "must not overlap itself",
                      name);
  out->extent = 0;
  uint64_t bytes = 0;
  if (!empty) {
    if (overflow || __builtin_mul_overflow(
                        static_cast<uint64_t>(last) + 1,
                        static_cast<uint64_t>(out->elementBytes), &bytes))
      return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                        "%s: shape and strides overflow 64-bit offsets", name);
    out->extent = last + 1;
  }
  out->allocated = static_cast<char *>(tensor->data);
  if (!tensor->data && out->extent > 0)
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                      "%s: data is NULL but the tensor has elements", name);
  // data + byte_offset + the bytes the strides reach, in 64-bit unsigned
  // arithmetic that must neither wrap nor pass 2^57: a kernel given such a
  // tensor would write through a wild pointer.
  uint64_t data = reinterpret_cast<uintptr_t>(tensor->data);
  uint64_t first = 0, end = 0;
  if (__builtin_add_overflow(data, tensor->byte_offset, &first) ||
      __builtin_add_overflow(first, bytes, &end) || end > limits::kAddressLimit)
    return KVRT_ERROR(
        KVRT_ERROR_INVALID_ARGUMENT,
        "%s: data (%p) + byte_offset (%llu) + the %llu bytes its shape and "
        "strides address reach past 2^57; every byte a tensor addresses must "
        "lie below 2^57, without wrapping 64 bits",
        name, tensor->data,
        static_cast<unsigned long long>(tensor->byte_offset),
        static_cast<unsigned long long>(bytes));
  out->first = reinterpret_cast<char *>(static_cast<uintptr_t>(first));
  // Element sizes are powers of two: a mask, not a division.
  if (out->begin() & (out->elementBytes - 1))
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                      "%s: data + byte_offset (%p) is not aligned to its "
                      "%zu-byte elements",
                      name, static_cast<void *>(out->first), out->elementBytes);
  return Status();
}

//===----------------------------------------------------------------------===//
// Specs per role
//===----------------------------------------------------------------------===//

static const char *const kCacheInnerRule =
    "the innermost dimension of a cache must have stride 1";
static const char *const kIndexInnerRule =
    "must be 1: kvrt passes index tensors as contiguous buffers";

static TensorSpec inputSpec(const char *name, const KernelDescription &kernel) {
  TensorSpec spec;
  spec.name = name;
  spec.dtype = kernel.sourceDtype;
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
/// The index tensors' specs: fixed by the ABI, built once per process.
struct IndexSpecs {
  TensorSpec slotMapping = indexSpec("slot_mapping", DType::I64,
                                     "[num_tokens] (int64)", {"num_tokens"});
  TensorSpec blockTable = [] {
    TensorSpec spec = indexSpec("block_table", DType::I32,
                                "[num_reqs, max_blocks_per_req] (int32)",
                                {"num_reqs", "max_blocks_per_req"});
    spec.innerStrideRule = "a block table row must be contiguous (inner "
                           "stride 1)";
    return spec;
  }();
  TensorSpec queryStartLoc =
      indexSpec("query_start_loc", DType::I32, "[num_reqs + 1] (int32)",
                {"num_reqs + 1"});
  TensorSpec contextLens =
      indexSpec("context_lens", DType::I32, "[num_reqs] (int32)", {"num_reqs"});
};
} // namespace

static const IndexSpecs &indexSpecs() {
  static const IndexSpecs specs;
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

OperationSpecs makeSpecs(const KernelDescription &kernel) {
  OperationSpecs specs;
  if (kernel.kind == KernelKind::SlotMapping)
    return specs;
  specs.key = inputSpec("key", kernel);
  specs.value = inputSpec("value", kernel);
  specs.keyCache = cacheSpec("key_cache", kernel, /*isValue=*/false);
  specs.valueCache = cacheSpec("value_cache", kernel, /*isValue=*/true);
  return specs;
}

/// The K (index 0) or V (index 1) view of a dual_stacked cache: dimension 1
/// dropped, the first element moved to the V half.
static void stackedView(const TensorView &stacked, int index, const char *name,
                        TensorView *view) {
  *view = stacked;
  view->name = name;
  view->rank = 4;
  const int kept[4] = {0, 2, 3, 4};
  for (int i = 0; i < 4; ++i) {
    view->shape[i] = stacked.shape[kept[i]];
    view->strides[i] = stacked.strides[kept[i]];
  }
  view->first = stacked.first + index * stacked.strides[1] *
                                    static_cast<int64_t>(stacked.elementBytes);
  // Cannot overflow: the stacked tensor's extent already bounds it.
  view->extent = 0;
  if (stacked.extent > 0) {
    view->extent = 1;
    for (int i = 0; i < 4; ++i)
      view->extent += (view->shape[i] - 1) * view->strides[i];
  }
}

/// Appends the four stride scalars (block, head, pos, dim) of a cache view,
/// per docs/KERNEL-ABI.md's offset table.
static void pushCacheStrides(LaunchPlan *plan, Layout layout,
                             const TensorView &view) {
  const int64_t *s = view.strides;
  int64_t *out = plan->scalars + plan->numScalars;
  plan->numScalars += 4;
  switch (layout) {
  case Layout::PagedNHD: // [nb, bs, H, D]
    out[0] = s[0], out[1] = s[2], out[2] = s[1], out[3] = s[3];
    return;
  case Layout::VllmVectorized: // K [nb, H, D/x, bs, x]; V [nb, H, D, bs]
    out[0] = s[0], out[1] = s[1], out[2] = s[3], out[3] = s[2];
    return;
  case Layout::Contiguous:  // [B, H, S, D]
  case Layout::PagedHND:    // [nb, H, bs, D]
  case Layout::DualStacked: // view [nb, H, bs, D]
    out[0] = s[0], out[1] = s[1], out[2] = s[2], out[3] = s[3];
    return;
  }
}

//===----------------------------------------------------------------------===//
// Rules between tensors
//===----------------------------------------------------------------------===//

static Status checkSameDevice(const TensorView &first,
                              const TensorView &other) {
  DLDevice a = first.tensor->device, b = other.tensor->device;
  if (a.device_type == b.device_type && a.device_id == b.device_id)
    return Status();
  return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                    "%s: on %s but %s is on %s; all tensors of a launch must "
                    "be on one device",
                    other.name, describeDevice(b).c_str(), first.name,
                    describeDevice(a).c_str());
}

static Status checkSameExtent(const TensorView &reference, int referenceDim,
                              const TensorView &view, int dim,
                              const char *dimName, int64_t adjust = 0) {
  int64_t expected = reference.shape[referenceDim] + adjust;
  if (view.shape[dim] == expected)
    return Status();
  if (adjust == 0)
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                      "%s: shape[%d] (%s) is %lld but %s has %lld", view.name,
                      dim, dimName, static_cast<long long>(view.shape[dim]),
                      reference.name, static_cast<long long>(expected));
  return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                    "%s: shape[%d] (%s) is %lld but must be %lld (%s has %lld "
                    "rows, plus %lld)",
                    view.name, dim, dimName,
                    static_cast<long long>(view.shape[dim]),
                    static_cast<long long>(expected), reference.name,
                    static_cast<long long>(reference.shape[referenceDim]),
                    static_cast<long long>(adjust));
}

/// The stride, in bytes, of `view`'s outermost dimension (the largest
/// stride among dims of extent > 1), and the bytes one step of it spans.
static bool outerPeriod(const TensorView &view, int64_t *period,
                        int64_t *span) {
  int outer = -1;
  for (int d = 0; d < view.rank; ++d)
    if (view.shape[d] > 1 && view.strides[d] > 0 &&
        (outer < 0 || view.strides[d] > view.strides[outer]))
      outer = d;
  if (outer < 0)
    return false;
  int64_t bytes = static_cast<int64_t>(view.elementBytes);
  *period = view.strides[outer] * bytes;
  *span = (view.extent - (view.shape[outer] - 1) * view.strides[outer]) * bytes;
  return true;
}

/// Views that take turns in one allocation: both repeat with the same period
/// (their outermost stride), and within a period one's elements lie in
/// [0, span_a) and the other's in [r, r + span_b), r = offset mod period,
/// with span_a <= r and r + span_b <= period. K = kv[:, 0] and V = kv[:, 1]
/// of one [num_blocks, 2, ...] allocation (FlashInfer's paged layout) are
/// such views. False where it cannot tell: the caller then keeps the
/// byte-range rule.
static bool interleaveDisjointly(const TensorView &a, const TensorView &b) {
  if (b.begin() < a.begin())
    return interleaveDisjointly(b, a);
  int64_t periodA, spanA, periodB, spanB;
  if (!outerPeriod(a, &periodA, &spanA) || !outerPeriod(b, &periodB, &spanB) ||
      periodA != periodB)
    return false;
  int64_t r = static_cast<int64_t>(b.begin() - a.begin()) % periodA;
  return spanA <= r && r + spanB <= periodA;
}

/// A written tensor must not share bytes with any other tensor of the launch:
/// the kernel would read what it just wrote, or two caches would interleave.
static Status checkDisjoint(const TensorView &written,
                            const TensorView &other) {
  if (written.extent == 0 || other.extent == 0)
    return Status();
  if (written.end() <= other.begin() || other.end() <= written.begin())
    return Status();
  if (interleaveDisjointly(written, other))
    return Status();
  return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                    "%s: overlaps %s in memory (bytes [%p, %p) and [%p, %p)); "
                    "a tensor the kernel writes must not alias another",
                    written.name, other.name,
                    reinterpret_cast<void *>(written.begin()),
                    reinterpret_cast<void *>(written.end()),
                    reinterpret_cast<void *>(other.begin()),
                    reinterpret_cast<void *>(other.end()));
}

//===----------------------------------------------------------------------===//
// Plans
//===----------------------------------------------------------------------===//

const KernelDescription &describingKernel(const Manifest &manifest,
                                          const Operation &operation) {
  int index = operation.vectorKernel >= 0 ? operation.vectorKernel
                                          : operation.scalarKernel;
  return manifest.kernels[index];
}

namespace {
/// The caches of an append-like launch: the K/V views are written straight
/// into the plan; `whole` is what was passed, for the range checks.
struct Caches {
  TensorView stacked;
  const TensorView *whole[2];
  int numWhole = 0;
};
} // namespace

static Status checkCaches(const KernelDescription &kernel,
                          const OperationSpecs &specs, const DLTensor *keyCache,
                          const DLTensor *valueCache, TensorView *keyView,
                          TensorView *valueView, Caches *out) {
  const CacheDescription &cache = kernel.cache;
  if (cache.layout == Layout::DualStacked) {
    if (valueCache)
      return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                        "value_cache: must be NULL for the dual_stacked layout "
                        "of '%s': key_cache holds K at index 0 and V at index "
                        "1 of its second dimension",
                        kernel.name.c_str());
    KVRT_RETURN_IF_ERROR(checkTensor(keyCache, specs.keyCache, &out->stacked));
    stackedView(out->stacked, 0, "key_cache[:, 0]", keyView);
    stackedView(out->stacked, 1, "key_cache[:, 1]", valueView);
    out->whole[0] = &out->stacked;
    out->numWhole = 1;
    return Status();
  }
  KVRT_RETURN_IF_ERROR(checkTensor(keyCache, specs.keyCache, keyView));
  KVRT_RETURN_IF_ERROR(checkTensor(valueCache, specs.valueCache, valueView));
  KVRT_RETURN_IF_ERROR(checkSameDevice(*keyView, *valueView));
  KVRT_RETURN_IF_ERROR(checkSameExtent(
      *keyView, 0, *valueView, 0,
      cache.layout == Layout::Contiguous ? "batch" : "num_blocks"));
  KVRT_RETURN_IF_ERROR(checkDisjoint(*keyView, *valueView));
  out->whole[0] = keyView;
  out->whole[1] = valueView;
  out->numWhole = 2;
  return Status();
}

static void pushStrides(LaunchPlan *plan, const TensorView &view) {
  for (int i = 0; i < 3; ++i)
    plan->scalars[plan->numScalars++] = view.strides[i];
}

/// The vector variant moves K/V 16 bytes at a time through these; the
/// vllm_vectorized value cache is written element by element.
static void setPromised(LaunchPlan *plan, const KernelDescription &kernel,
                        int key, int value, int keyCache, int valueCache) {
  plan->promised[plan->numPromised++] = key;
  plan->promised[plan->numPromised++] = value;
  plan->promised[plan->numPromised++] = keyCache;
  if (kernel.cache.layout != Layout::VllmVectorized)
    plan->promised[plan->numPromised++] = valueCache;
}

Status planAppend(const Manifest &manifest, const Operation &operation,
                  const OperationSpecs &specs, const kvrt_append_args &args,
                  LaunchPlan *plan) {
  const KernelDescription &kernel = describingKernel(manifest, operation);
  // Buffers in ABI order: key, value, slot_mapping, key_cache, value_cache.
  TensorView *b = plan->buffers;
  TensorView &key = b[0], &value = b[1], &slots = b[2];
  KVRT_RETURN_IF_ERROR(checkTensor(args.key, specs.key, &key));
  KVRT_RETURN_IF_ERROR(checkTensor(args.value, specs.value, &value));
  KVRT_RETURN_IF_ERROR(
      checkTensor(args.slot_mapping, indexSpecs().slotMapping, &slots));
  Caches caches;
  KVRT_RETURN_IF_ERROR(checkCaches(kernel, specs, args.key_cache,
                                   args.value_cache, &b[3], &b[4], &caches));

  KVRT_RETURN_IF_ERROR(checkSameDevice(key, value));
  KVRT_RETURN_IF_ERROR(checkSameDevice(key, slots));
  KVRT_RETURN_IF_ERROR(checkSameDevice(key, b[3]));
  KVRT_RETURN_IF_ERROR(checkSameExtent(key, 0, value, 0, "num_tokens"));
  KVRT_RETURN_IF_ERROR(checkSameExtent(key, 0, slots, 0, "num_tokens"));
  for (int i = 0; i < caches.numWhole; ++i) {
    KVRT_RETURN_IF_ERROR(checkDisjoint(*caches.whole[i], key));
    KVRT_RETURN_IF_ERROR(checkDisjoint(*caches.whole[i], value));
    KVRT_RETURN_IF_ERROR(checkDisjoint(*caches.whole[i], slots));
  }

  plan->kind = KernelKind::Append;
  plan->operation = &operation;
  plan->device = key.tensor->device;
  plan->numTokens = key.shape[0];
  plan->numBuffers = 5;
  plan->slotMapping = 2;
  plan->numBlocks = b[3].shape[0];
  plan->blockSize = kernel.cache.blockSize;
  setPromised(plan, kernel, 0, 1, 3, 4);
  plan->scalars[plan->numScalars++] = plan->numTokens;
  plan->scalars[plan->numScalars++] = b[3].shape[0];
  pushStrides(plan, key);
  pushStrides(plan, value);
  pushCacheStrides(plan, kernel.cache.layout, b[3]);
  pushCacheStrides(plan, kernel.cache.layout, b[4]);
  return Status();
}

static Status checkRequests(const DLTensor *blockTable,
                            const DLTensor *queryStartLoc,
                            const DLTensor *contextLens, TensorView *table,
                            TensorView *starts, TensorView *lens) {
  const IndexSpecs &index = indexSpecs();
  KVRT_RETURN_IF_ERROR(checkTensor(blockTable, index.blockTable, table));
  KVRT_RETURN_IF_ERROR(checkTensor(queryStartLoc, index.queryStartLoc, starts));
  KVRT_RETURN_IF_ERROR(checkTensor(contextLens, index.contextLens, lens));
  KVRT_RETURN_IF_ERROR(checkSameDevice(*table, *starts));
  KVRT_RETURN_IF_ERROR(checkSameDevice(*table, *lens));
  KVRT_RETURN_IF_ERROR(
      checkSameExtent(*table, 0, *starts, 0, "num_reqs + 1", 1));
  KVRT_RETURN_IF_ERROR(checkSameExtent(*table, 0, *lens, 0, "num_reqs"));
  return Status();
}

static void pushRequestScalars(LaunchPlan *plan, const TensorView &table) {
  plan->scalars[plan->numScalars++] = table.shape[0];
  plan->scalars[plan->numScalars++] = table.strides[0];
  plan->scalars[plan->numScalars++] = table.shape[1];
}

Status planSlotMapping(const Manifest &manifest, const Operation &operation,
                       const OperationSpecs &specs,
                       const kvrt_slot_mapping_args &args, LaunchPlan *plan) {
  (void)manifest;
  (void)specs;
  // Buffers in ABI order: block_table, query_start_loc, context_lens,
  // slot_mapping.
  TensorView *b = plan->buffers;
  KVRT_RETURN_IF_ERROR(checkRequests(args.block_table, args.query_start_loc,
                                     args.context_lens, &b[0], &b[1], &b[2]));
  TensorView &slots = b[3];
  KVRT_RETURN_IF_ERROR(
      checkTensor(args.slot_mapping, indexSpecs().slotMapping, &slots));
  KVRT_RETURN_IF_ERROR(checkSameDevice(b[0], slots));
  for (int i = 0; i < 3; ++i)
    KVRT_RETURN_IF_ERROR(checkDisjoint(slots, b[i]));

  plan->kind = KernelKind::SlotMapping;
  plan->operation = &operation;
  plan->device = slots.tensor->device;
  plan->numTokens = slots.shape[0];
  plan->numBuffers = 4;
  plan->scalars[plan->numScalars++] = plan->numTokens;
  pushRequestScalars(plan, b[0]);
  return Status();
}

Status planFusedAppend(const Manifest &manifest, const Operation &operation,
                       const OperationSpecs &specs,
                       const kvrt_fused_append_args &args, LaunchPlan *plan) {
  const KernelDescription &kernel = describingKernel(manifest, operation);
  // Buffers in ABI order: key, value, block_table, query_start_loc,
  // context_lens, key_cache, value_cache.
  TensorView *b = plan->buffers;
  TensorView &key = b[0], &value = b[1];
  KVRT_RETURN_IF_ERROR(checkTensor(args.key, specs.key, &key));
  KVRT_RETURN_IF_ERROR(checkTensor(args.value, specs.value, &value));
  KVRT_RETURN_IF_ERROR(checkRequests(args.block_table, args.query_start_loc,
                                     args.context_lens, &b[2], &b[3], &b[4]));
  Caches caches;
  KVRT_RETURN_IF_ERROR(checkCaches(kernel, specs, args.key_cache,
                                   args.value_cache, &b[5], &b[6], &caches));

  KVRT_RETURN_IF_ERROR(checkSameDevice(key, value));
  KVRT_RETURN_IF_ERROR(checkSameDevice(key, b[2]));
  KVRT_RETURN_IF_ERROR(checkSameDevice(key, b[5]));
  KVRT_RETURN_IF_ERROR(checkSameExtent(key, 0, value, 0, "num_tokens"));
  for (int i = 0; i < caches.numWhole; ++i)
    for (int input = 0; input < 5; ++input)
      KVRT_RETURN_IF_ERROR(checkDisjoint(*caches.whole[i], b[input]));

  plan->kind = KernelKind::FusedAppend;
  plan->operation = &operation;
  plan->device = key.tensor->device;
  plan->numTokens = key.shape[0];
  plan->numBuffers = 7;
  plan->blockTable = 2;
  plan->queryStartLoc = 3;
  plan->contextLens = 4;
  plan->numBlocks = b[5].shape[0];
  plan->blockSize = kernel.cache.blockSize;
  setPromised(plan, kernel, 0, 1, 5, 6);
  plan->scalars[plan->numScalars++] = plan->numTokens;
  plan->scalars[plan->numScalars++] = b[5].shape[0];
  pushRequestScalars(plan, b[2]);
  pushStrides(plan, key);
  pushStrides(plan, value);
  pushCacheStrides(plan, kernel.cache.layout, b[5]);
  pushCacheStrides(plan, kernel.cache.layout, b[6]);
  return Status();
}

//===----------------------------------------------------------------------===//
// The vector promise
//===----------------------------------------------------------------------===//

bool checkVectorPromise(const LaunchPlan &plan, const KernelDescription &vector,
                        PromiseBreach *breach) {
  // Powers of two in practice: masks instead of 64-bit divisions.
  uint64_t alignmentMask = static_cast<uint64_t>(vector.alignment) - 1;
  int64_t elems = vector.vectorElems;
  bool elemsPowerOfTwo = (elems & (elems - 1)) == 0;
  auto multiple = [&](int64_t stride) {
    return elemsPowerOfTwo ? (stride & (elems - 1)) == 0 : stride % elems == 0;
  };
  for (int p = 0; p < plan.numPromised; ++p) {
    const TensorView &view = plan.buffers[plan.promised[p]];
    if (view.extent == 0)
      continue;
    breach->view = &view;
    if (view.begin() & alignmentMask) {
      breach->rule = PromiseBreach::Alignment;
      return false;
    }
    int inner = view.rank - 1;
    for (int i = 0; i < view.rank; ++i) {
      if (view.shape[i] == 1)
        continue;
      if (i == inner && view.strides[i] != 1) {
        breach->rule = PromiseBreach::InnerStride;
        breach->dim = i;
        return false;
      }
      if (i != inner && !multiple(view.strides[i])) {
        breach->rule = PromiseBreach::OuterStride;
        breach->dim = i;
        return false;
      }
    }
  }
  breach->view = nullptr;
  return true;
}

Status describeBreach(const PromiseBreach &breach,
                      const KernelDescription &vector) {
  const TensorView &view = *breach.view;
  switch (breach.rule) {
  case PromiseBreach::Alignment:
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                      "%s: data + byte_offset (%p) is not aligned to %lld "
                      "bytes, which the vector variant '%s' assumes (AUTO "
                      "would use the scalar variant)",
                      view.name, static_cast<void *>(view.first),
                      static_cast<long long>(vector.alignment),
                      vector.name.c_str());
  case PromiseBreach::InnerStride:
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                      "%s: stride[%d] is %lld but the vector variant '%s' "
                      "assumes a contiguous innermost dimension (stride 1) "
                      "(AUTO would use the scalar variant)",
                      view.name, breach.dim,
                      static_cast<long long>(view.strides[breach.dim]),
                      vector.name.c_str());
  case PromiseBreach::OuterStride:
    break;
  }
  return KVRT_ERROR(
      KVRT_ERROR_INVALID_ARGUMENT,
      "%s: stride[%d] is %lld, not a multiple of vector_elems "
      "(%lld), which the vector variant '%s' assumes (AUTO would "
      "use the scalar variant)",
      view.name, breach.dim, static_cast<long long>(view.strides[breach.dim]),
      static_cast<long long>(vector.vectorElems), vector.name.c_str());
}

} // namespace kvrt::impl
