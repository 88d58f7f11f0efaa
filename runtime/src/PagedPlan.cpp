//===- PagedPlan.cpp - plan a paged_kv_append launch ----------------------===//
//
// paged_kv_append takes FlashInfer's ragged page table as it is: the rows,
// caches and scales are an append's, and batch_indices, positions,
// kv_indices and kv_indptr (int32, contiguous) take the place of
// slot_mapping. Their values are the kernel's to check (every index is
// bounded there before a K/V read) and checked mode's; here only their
// dtypes, shapes, devices and overlaps.
//
//===----------------------------------------------------------------------===//

#include "PlanParts.h"

namespace kvrt::impl {

using abi::Param;

Status planPagedKvAppend(const Manifest &manifest, const Operation &operation,
                         const OperationSpecs &specs,
                         const kvrt_paged_kv_append_args &args,
                         LaunchPlan *plan) {
  const KernelDescription &kernel = describingKernel(manifest, operation);
  TensorView key, value, batch, positions, indices, indptr;
  CacheViews caches;
  ParamValues values;
  const DLTensor *scales[4] = {args.key_scale, args.value_scale,
                               args.key_scale_cache, args.value_scale_cache};
  KVRT_RETURN_IF_ERROR(checkAppendTensors(
      kernel, specs, args.key, args.value, args.key_cache, args.value_cache,
      scales, &key, &value, &caches, &values));
  const IndexSpecs &index = indexSpecs();
  KVRT_RETURN_IF_ERROR(
      checkTensor(args.batch_indices, index.batchIndices, &batch));
  KVRT_RETURN_IF_ERROR(
      checkTensor(args.positions, index.positions, &positions));
  KVRT_RETURN_IF_ERROR(checkTensor(args.kv_indices, index.kvIndices, &indices));
  KVRT_RETURN_IF_ERROR(checkTensor(args.kv_indptr, index.kvIndptr, &indptr));
  for (const TensorView *view : {&batch, &positions, &indices, &indptr})
    KVRT_RETURN_IF_ERROR(checkSameDevice(key, *view));
  // One batch index and one position per token: a shorter list would leave
  // the kernel reading past it.
  KVRT_RETURN_IF_ERROR(checkSameExtent(key, 0, batch, 0, "num_tokens"));
  KVRT_RETURN_IF_ERROR(checkSameExtent(key, 0, positions, 0, "num_tokens"));
  if (indptr.shape[0] < 1)
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                      "kv_indptr: has 0 elements; it needs batch_size + 1 "
                      "(at least 1): kv_indptr[b] .. kv_indptr[b + 1] are "
                      "request b's pages");
  values.set(Param::BatchIndices, batch);
  values.set(Param::Positions, positions);
  values.set(Param::KvIndices, indices);
  values.set(Param::KvIndptr, indptr);
  values.set(Param::BatchSize, indptr.shape[0] - 1);
  values.set(Param::NumIndices, indices.shape[0]);

  const TensorView *written[4];
  int numWritten = writtenByAppend(kernel, caches, written);
  const TensorView *all[] = {&key,
                             &value,
                             &batch,
                             &positions,
                             &indices,
                             &indptr,
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

} // namespace kvrt::impl
