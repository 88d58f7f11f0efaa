//===- CopyBlocks.cpp - kvrt_copy_blocks: whole cache blocks, checked -----===//
//
// vLLM's swap_blocks. A block copy is one memcpy per pair, which the copy
// engine does as fast as any kernel could; what kvrt adds is the check. Every
// rule holds before the first byte moves, so a refused call wrote nothing.
//
//===----------------------------------------------------------------------===//

#include "CudaDriver.h"
#include "Limits.h"
#include "TensorCheck.h"

#include <algorithm>
#include <cstring>
#include <vector>

using namespace kvrt::impl;

#define KVRT_REFUSE(...) KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT, __VA_ARGS__)

namespace {
/// A cache as its blocks (dimension 0), each `bytes` contiguous bytes.
struct Blocks {
  char *first;
  int64_t count, bytes;
  bool host;
  int device;
  uintptr_t begin() const { return reinterpret_cast<uintptr_t>(first); }
  uintptr_t end() const { return begin() + count * bytes; }
};
using Dim = std::pair<int64_t, int64_t>; // (stride, extent)
} // namespace

/// Its block (dimensions 1..) fills its bytes: the dimensions of extent > 1,
/// ordered by stride, are compact; dimension 0 steps one block.
static Status checkCache(const char *name, const DLTensor *t, Blocks *out,
                         std::vector<Dim> *dims) {
  int type = t ? t->device.device_type : 0;
  if (!t || (type != kDLCPU && type != kDLCUDA && type != kDLCUDAHost) ||
      t->device.device_id < 0 || t->ndim < 1 || !t->shape ||
      t->dtype.lanes != 1 || t->dtype.bits == 0 || t->dtype.bits % 8)
    return KVRT_REFUSE(
        "%s: %s; a cache is blocks along dimension 0 of whole-byte scalars, "
        "on cpu, cuda_host or cuda",
        name,
        t ? (describeDType(t->dtype) + " on " + describeDevice(t->device))
                .c_str()
          : "NULL");
  int64_t block = 1, stride0 = 0, expected = 1, bytes, total;
  for (int k = t->ndim - 1; k >= 0; --k) {
    int64_t extent = t->shape[k], stride = t->strides ? t->strides[k] : block;
    if (extent < 0 || stride < 0 ||
        (k && __builtin_mul_overflow(block, extent, &block)))
      return KVRT_REFUSE("%s: shape[%d] %lld or its stride %lld is negative "
                         "or overflows 64 bits",
                         name, k, (long long)extent, (long long)stride);
    if (k == 0)
      stride0 = stride;
    else if (extent > 1)
      dims->push_back({stride, extent});
  }
  std::sort(dims->begin(), dims->end());
  for (const Dim &dim : *dims) {
    if (dim.first != expected)
      return KVRT_REFUSE("%s: a block (dimensions 1..) is not contiguous: a "
                         "stride of %lld where %lld would close the gap",
                         name, (long long)dim.first, (long long)expected);
    expected *= dim.second;
  }
  int64_t count = t->shape[0];
  if (block == 0 || (count > 1 && stride0 != block))
    return KVRT_REFUSE("%s: dimension 0 has stride %lld but a block holds %lld "
                       "elements: blocks must be non-empty and follow one "
                       "another",
                       name, (long long)stride0, (long long)block);
  uintptr_t first = reinterpret_cast<uintptr_t>(t->data) + t->byte_offset;
  if (__builtin_mul_overflow(block, t->dtype.bits / 8, &bytes) ||
      __builtin_mul_overflow(bytes, count, &total) ||
      (count && (!t->data || first >= limits::kAddressLimit ||
                 uint64_t(total) > limits::kAddressLimit - first)))
    return KVRT_REFUSE("%s: its %lld blocks reach past 2^57 or from NULL", name,
                       (long long)count);
  *out = Blocks{reinterpret_cast<char *>(first), count, bytes, type != kDLCUDA,
                t->device.device_id};
  return Status();
}

/// The mapping's form, its pairs' ranges, and no destination block twice.
static Status checkMapping(const DLTensor *m, const Blocks &src,
                           const Blocks &dst, const int64_t **out) {
  if (!m || m->device.device_type != kDLCPU || m->dtype.code != kDLInt ||
      m->dtype.bits != 64 || m->dtype.lanes != 1 || m->ndim != 2 || !m->shape ||
      m->shape[1] != 2 || m->shape[0] < 0 ||
      (m->strides &&
       (m->strides[1] != 1 || (m->shape[0] > 1 && m->strides[0] != 2))) ||
      (m->shape[0] && !m->data))
    return KVRT_REFUSE("block_mapping: must be a contiguous int64 [n, 2] "
                       "tensor of (src block, dst block) pairs on the cpu");
  const int64_t *pairs = reinterpret_cast<const int64_t *>(
      static_cast<const char *>(m->data) + m->byte_offset);
  std::vector<int64_t> written(m->shape[0]);
  for (int64_t i = 0; i < 2 * m->shape[0]; ++i) {
    const Blocks &side = i % 2 ? dst : src;
    if (pairs[i] < 0 || pairs[i] >= side.count)
      return KVRT_REFUSE(
          "block_mapping: pair %lld names %s block %lld, outside [0, %lld)",
          (long long)i / 2, i % 2 ? "dst" : "src", (long long)pairs[i],
          (long long)side.count);
    if (i % 2)
      written[i / 2] = pairs[i];
  }
  std::sort(written.begin(), written.end());
  auto twice = std::adjacent_find(written.begin(), written.end());
  if (twice != written.end())
    return KVRT_REFUSE("block_mapping: dst block %lld is written by two pairs",
                       (long long)*twice);
  *out = pairs;
  return Status();
}

static Status copyBlocks(const kvrt_copy_blocks_args *given,
                         kvrt_stream stream) {
  if (!given || given->struct_size < KVRT_COPY_BLOCKS_ARGS_STRUCT_SIZE)
    return KVRT_REFUSE("args: NULL, or struct_size below that of "
                       "kvrt_copy_blocks_args (%zu); use KVRT_ARGS_INIT",
                       size_t(KVRT_COPY_BLOCKS_ARGS_STRUCT_SIZE));
  kvrt_copy_blocks_args args{};
  std::memcpy(&args, given, std::min(given->struct_size, sizeof(args)));
  Blocks src, dst;
  std::vector<Dim> srcDims, dstDims;
  KVRT_RETURN_IF_ERROR(checkCache("src", args.src, &src, &srcDims));
  KVRT_RETURN_IF_ERROR(checkCache("dst", args.dst, &dst, &dstDims));
  DLDataType a = args.src->dtype, b = args.dst->dtype;
  // A uint8 fp8 cache and a float8 view of one hold the same bytes.
  if (a.bits != b.bits || srcDims != dstDims ||
      (a.code != b.code &&
       (a.bits != 8 || (a.code != kDLUInt && b.code != kDLUInt))))
    return KVRT_REFUSE("dst: its blocks (%s) are not laid out as src's (%s): "
                       "the same dtype, extents and strides after dimension 0",
                       describeDType(b).c_str(), describeDType(a).c_str());
  if (args.block_bytes != src.bytes)
    return KVRT_REFUSE(
        "block_bytes is %lld but a block of src and dst is %lld bytes",
        (long long)args.block_bytes, (long long)src.bytes);
  int gpu = src.host ? dst.device : src.device;
  if (!src.host && !dst.host && dst.device != gpu)
    return KVRT_REFUSE("dst: on cuda:%d but src on cuda:%d; blocks are copied "
                       "within one GPU or between a GPU and the host",
                       dst.device, gpu);
  if (src.host == dst.host && src.begin() < dst.end() &&
      dst.begin() < src.end())
    return KVRT_REFUSE("dst: shares bytes with src; blocks are copied between "
                       "two caches");
  const int64_t *pairs = nullptr;
  KVRT_RETURN_IF_ERROR(checkMapping(args.block_mapping, src, dst, &pairs));
  int64_t n = args.block_mapping->shape[0];
  if (src.host && dst.host) {
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(dst.first + pairs[2 * i + 1] * dst.bytes,
                  src.first + pairs[2 * i] * src.bytes, src.bytes);
    return Status();
  }
  if (n == 0)
    return Status();
  // In the caller's context of the device, as a CUDA runtime caller has it
  // (vLLM's device guard; kvgen.vllm's torch.cuda.device).
  const CudaDriver *process = nullptr;
  KVRT_RETURN_IF_ERROR(CudaDriver::get(&process));
  const CudaDriver &cu = *process;
  if (!cu.cuMemcpyAsync)
    return KVRT_ERROR(KVRT_ERROR_NOT_FOUND,
                      "the CUDA driver has no cuMemcpyAsync");
  cuda::CUdevice device = 0, current = -1;
  cuda::CUcontext context = nullptr;
  KVRT_CUDA_CHECK(cu, cuDeviceGet(&device, gpu));
  KVRT_CUDA_CHECK(cu, cuCtxGetCurrent(&context));
  if (context)
    KVRT_CUDA_CHECK(cu, cuCtxGetDevice(&current));
  if (current != device)
    return KVRT_REFUSE("the calling thread's current CUDA context is %s, not "
                       "one of cuda:%d, where the blocks are",
                       context ? "on another device" : "none", gpu);
  for (int64_t i = 0; i < n; ++i)
    KVRT_CUDA_CHECK(cu,
                    cuMemcpyAsync(reinterpret_cast<uintptr_t>(
                                      dst.first + pairs[2 * i + 1] * dst.bytes),
                                  reinterpret_cast<uintptr_t>(
                                      src.first + pairs[2 * i] * src.bytes),
                                  size_t(src.bytes), cuda::CUstream(stream)));
  return Status();
}

extern "C" kvrt_status kvrt_copy_blocks(const kvrt_copy_blocks_args *args,
                                        kvrt_stream stream) {
  return guarded([&] { return copyBlocks(args, stream); });
}
