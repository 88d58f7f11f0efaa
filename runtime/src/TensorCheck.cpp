//===- TensorCheck.cpp - one DLTensor against what the kernel expects -----===//
//
// The order is: presence, device, dtype, rank, shape, strides, memory
// (extent, NULL data, the 2^57 rule, element alignment); then the rules
// between tensors: one device, one extent, writes that alias nothing.
//
//===----------------------------------------------------------------------===//

#include "TensorCheck.h"

#include "Limits.h"

#include <algorithm>
#include <numeric>

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

/// What a spec expects, for a message: "the kernel 'k' was generated for
/// <what>" where the description fixes it, "must be <what>" where the ABI
/// does.
static std::string expectation(const TensorSpec &spec,
                               const std::string &what) {
  if (spec.kernel)
    return formatString("the kernel '%s' was generated for %s", spec.kernel,
                        what.c_str());
  return "must be " + what;
}

Status checkTensor(const DLTensor *tensor, const TensorSpec &spec,
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
  // An NVFP4 cache holds bytes: PyTorch's uint8 (vLLM's) or int8.
  bool rawByte =
      spec.rawBytes && tensor->dtype.bits == 8 &&
      (tensor->dtype.code == kDLInt || tensor->dtype.code == kDLUInt);
  if (!rawByte && !matchesDType(tensor->dtype, spec.dtype))
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT, "%s: dtype is %s but %s",
                      name, describeDType(tensor->dtype).c_str(),
                      expectation(spec, dtypeName(spec.dtype)).c_str());

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
      return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                        "%s: shape[%d] (%s) is %lld but %s; "
                        "expected %s",
                        name, i, spec.dimNames[i],
                        static_cast<long long>(extent),
                        expectation(spec, std::to_string(spec.dims[i])).c_str(),
                        spec.shapeText);
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
  if (spec.compact || spec.compactBelowBlock) {
    int64_t expected = 1;
    for (int i = spec.rank - 1; i >= (spec.compact ? 0 : 1); --i) {
      if (out->shape[i] > 1 && out->strides[i] != expected)
        return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                          "%s: stride[%d] (%s) is %lld but must be %lld: %s "
                          "must be contiguous (compact row-major%s)",
                          name, i, spec.dimNames[i],
                          static_cast<long long>(out->strides[i]),
                          static_cast<long long>(expected), name,
                          spec.compact ? ""
                                       : " below its block: an NVFP4 block "
                                         "is one page of rows");
      expected *= std::max<int64_t>(out->shape[i], 1);
    }
  }
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
// Rules between tensors
//===----------------------------------------------------------------------===//

Status checkSameDevice(const TensorView &first, const TensorView &other) {
  DLDevice a = first.tensor->device, b = other.tensor->device;
  if (a.device_type == b.device_type && a.device_id == b.device_id)
    return Status();
  return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                    "%s: on %s but %s is on %s; all tensors of a launch must "
                    "be on one device",
                    other.name, describeDevice(b).c_str(), first.name,
                    describeDevice(a).c_str());
}

Status checkSameExtent(const TensorView &reference, int referenceDim,
                       const TensorView &view, int dim, const char *dimName,
                       int64_t adjust) {
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

/// The bytes of `view`'s rows (its unit-stride dimension) and the gcd, in
/// bytes, of its other strides (of dims of extent > 1): every element lies
/// within a row's bytes of a multiple of that gcd past its first. False
/// where the view has no such rows.
static bool rowPeriod(const TensorView &view, int64_t *period, int64_t *row) {
  int inner = -1;
  int64_t g = 0;
  for (int d = 0; d < view.rank; ++d) {
    if (view.shape[d] <= 1)
      continue;
    if (view.strides[d] == 1 && inner < 0) {
      inner = d;
      continue;
    }
    if (view.strides[d] <= 0)
      return false;
    g = std::gcd(g, view.strides[d]);
  }
  int64_t bytes = static_cast<int64_t>(view.elementBytes);
  *row = (inner < 0 ? 1 : view.shape[inner]) * bytes;
  *period = g * bytes;
  return g > 0 && *row <= *period;
}

/// Views that share rows of one allocation, side by side: K =
/// packed[..., :D] and V = packed[..., D:] of one [..., D + Dv] buffer (a
/// layer's K and V of different head sizes, as vLLM packs them). Both step
/// by multiples of one period P, and within a period one's elements lie in
/// [0, row_a) and the other's in [r, r + row_b), r = offset mod P.
static bool shareRowsDisjointly(const TensorView &a, const TensorView &b) {
  if (b.begin() < a.begin())
    return shareRowsDisjointly(b, a);
  int64_t periodA, rowA, periodB, rowB;
  if (!rowPeriod(a, &periodA, &rowA) || !rowPeriod(b, &periodB, &rowB) ||
      periodA != periodB)
    return false;
  int64_t r = static_cast<int64_t>(b.begin() - a.begin()) % periodA;
  return rowA <= r && r + rowB <= periodA;
}

Status checkDisjoint(const TensorView &written, const TensorView &other) {
  if (written.extent == 0 || other.extent == 0)
    return Status();
  if (written.end() <= other.begin() || other.end() <= written.begin())
    return Status();
  if (interleaveDisjointly(written, other) ||
      shareRowsDisjointly(written, other))
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

void stackedView(const TensorView &stacked, int index, const char *name,
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

} // namespace kvrt::impl
