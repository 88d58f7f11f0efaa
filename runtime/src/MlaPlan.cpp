//===- MlaPlan.cpp - plan an MLA latent append ----------------------------===//
//
// mla_append and mla_fused_append check the same tensors (kv_c, k_pe, the
// 3-D latent cache and its one scale); they differ only in where the slots
// come from: slot_mapping, or the block table and positions, which then
// stand in for slot_mapping in the device and overlap checks.
//
//===----------------------------------------------------------------------===//

#include "PlanParts.h"

namespace kvrt::impl {

using abi::Param;

Status planMla(const Manifest &manifest, const Operation &operation,
               const OperationSpecs &specs, const MlaTensors &args,
               LaunchPlan *plan) {
  const KernelDescription &kernel = describingKernel(manifest, operation);
  TensorView kvC, kPe, slots, starts, lens;
  CacheViews caches;
  ParamValues values;
  KVRT_RETURN_IF_ERROR(checkTensor(args.kvC, specs.kvC, &kvC));
  KVRT_RETURN_IF_ERROR(checkTensor(args.kPe, specs.kPe, &kPe));
  KVRT_RETURN_IF_ERROR(
      checkCaches(kernel, specs, args.keyCache, nullptr, &caches));
  // The fused kind's block table stands in for slot_mapping in the checks.
  if (args.blockTable)
    KVRT_RETURN_IF_ERROR(checkRequests(args.blockTable, args.queryStartLoc,
                                       args.contextLens, &slots, &starts, &lens,
                                       &values));
  else
    KVRT_RETURN_IF_ERROR(
        checkTensor(args.slotMapping, indexSpecs().slotMapping, &slots));
  for (const TensorView *view : {&kPe, &caches.key, &slots})
    KVRT_RETURN_IF_ERROR(checkSameDevice(kvC, *view));
  KVRT_RETURN_IF_ERROR(checkSameExtent(kvC, 0, kPe, 0, "num_tokens"));
  if (!args.blockTable) {
    KVRT_RETURN_IF_ERROR(checkSameExtent(kvC, 0, slots, 0, "num_tokens"));
    values.set(Param::SlotMapping, slots);
    starts = lens = slots;
  }
  // The latent cache's scales are K's: value_scale has no place here.
  const DLTensor *scales[4] = {args.keyScale, nullptr, nullptr, nullptr};
  KVRT_RETURN_IF_ERROR(
      checkScales(kernel, specs, scales, kvC, &caches, &values));

  // Params.def's KVGEN_ABI_KERNEL_WRITES for both latent kinds, spelled out.
  static_assert(
      abi::kernelWrites(KernelKind::MlaAppend, Param::KeyCache) &&
          abi::kernelWrites(KernelKind::MlaFusedAppend, Param::KeyCache) &&
          !abi::kernelWrites(KernelKind::MlaAppend, Param::KeyScale) &&
          !abi::kernelWrites(KernelKind::MlaFusedAppend, Param::KeyScale),
      "a latent append writes its cache and nothing else");
  const TensorView *written[] = {&caches.key};
  const TensorView *all[] = {&kvC,
                             &kPe,
                             &slots,
                             &starts,
                             &lens,
                             &caches.key,
                             caches.numScales ? &caches.scales[0] : &kvC};
  KVRT_RETURN_IF_ERROR(checkWritesDisjoint(written, 1, all, std::size(all)));

  values.set(Param::KvC, kvC);
  values.set(Param::KPe, kPe);
  values.set(Param::KeyCache, caches.key);
  values.set(Param::NumTokens, kvC.shape[0]);
  values.set(Param::NumBlocks, caches.key.shape[0]);
  values.set(Param::KvCStrideToken, kvC.strides[0]);
  values.set(Param::KvCStrideDim, kvC.strides[1]);
  values.set(Param::KPeStrideToken, kPe.strides[0]);
  values.set(Param::KPeStrideDim, kPe.strides[1]);
  setCacheStrides(&values, kernel.cache, false, caches.key);

  plan->operation = &operation;
  plan->device = kvC.tensor->device;
  plan->numTokens = kvC.shape[0];
  plan->numBlocks = caches.key.shape[0];
  plan->blockSize = kernel.cache.blockSize;
  return packInAbiOrder(kernel, values, plan);
}

} // namespace kvrt::impl
