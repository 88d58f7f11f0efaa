//===- MlaAppend.cpp - the generated MLA append, through kvrt -------------===//
//
// One kvrt_mla_append_args per input set, built before any timing. The
// input pool's rows are [tokens, 1, L + R]: kv_c is columns [0, L) and k_pe
// columns [L, L + R) of the same rows (strides L + R and 1), so the cache
// must end up holding the pool's rows unchanged, which Check.cpp verifies
// as it does for any one-head K-only cache.
//
//===----------------------------------------------------------------------===//

#include "MlaAppend.h"

#include "DLTensors.h"

namespace kvbench {
namespace {

constexpr DLDataType kF32{kDLFloat, 32, 1};

class MlaAppend : public Launchable {
public:
  MlaAppend(kvrt_bundle *bundle, std::string kvrtName, kvrt_variant variant,
            const CacheGeometry &g, const DeviceState &state)
      : bundle(bundle), kernelName(std::move(kvrtName)), variant(variant),
        latent(*g.desc.latent), desc(g.desc), device(state.device),
        cacheShape(g.keyShape) {
    cache = tensor(state.keyCache, dlpackDtype(g.desc.cacheDtype), cacheShape,
                   nullptr);
  }
  std::string name() const override {
    return "generated " + kernelName + " via kvrt_mla_append";
  }
  void prepare(int64_t tokens, const std::vector<SetPointers> &sets) override;
  bool launch(int set, cudaStream_t stream) override {
    const kvrt_status status =
        kvrt_mla_append(bundle, &args[size_t(set)], stream);
    if (status == KVRT_SUCCESS)
      return true;
    error = format("kvrt_mla_append returned %d: %s", int(status),
                   kvrt_last_error());
    return false;
  }

private:
  DLTensor tensor(const void *data, DLDataType dtype,
                  std::vector<int64_t> &shape, int64_t *strides) const {
    return deviceTensor(data, device, dtype, shape, strides);
  }

  kvrt_bundle *bundle;
  std::string kernelName;
  kvrt_variant variant;
  LatentDesc latent;
  Description desc;
  int device;
  std::vector<int64_t> cacheShape, kvCShape, kPeShape, slotShape, scaleShape;
  /// Both parts step a whole row per token.
  int64_t rowStrides[2] = {0, 1};
  DLTensor cache{};
  std::vector<DLTensor> kvCs, kPes, slots, scales;
  std::vector<kvrt_mla_append_args> args;
};

void MlaAppend::prepare(int64_t tokens, const std::vector<SetPointers> &sets) {
  const int64_t L = latent.kvLoraRank, R = latent.ropeDim;
  kvCShape = {tokens, L};
  kPeShape = {tokens, R};
  slotShape = {tokens};
  rowStrides[0] = L + R;
  const bool staticScales =
      desc.quant && desc.quant->mode == abi::ScaleMode::Static;
  if (staticScales)
    scaleShape = {desc.quant->granularity == abi::ScaleGranularity::PerToken
                      ? tokens
                      : 1};
  const DLDataType source = dlpackDtype(desc.sourceDtype);
  kvCs.clear();
  kPes.clear();
  slots.clear();
  scales.clear();
  for (const SetPointers &s : sets) {
    kvCs.push_back(tensor(s.key, source, kvCShape, rowStrides));
    kPes.push_back(tensor(s.key + L, source, kPeShape, rowStrides));
    slots.push_back(
        tensor(s.slots, DLDataType{kDLInt, 64, 1}, slotShape, nullptr));
    if (staticScales)
      scales.push_back(tensor(s.keyScale, kF32, scaleShape, nullptr));
  }
  // The argument structs point into the vectors: fill them last.
  args.assign(sets.size(), kvrt_mla_append_args{});
  for (size_t i = 0; i < sets.size(); ++i) {
    kvrt_mla_append_args &a = args[i];
    a.struct_size = sizeof(a);
    a.kernel = kernelName.c_str();
    a.kv_c = &kvCs[i];
    a.k_pe = &kPes[i];
    a.slot_mapping = &slots[i];
    a.key_cache = &cache;
    a.variant = variant;
    a.key_scale = staticScales ? &scales[i] : nullptr;
  }
}

} // namespace

std::unique_ptr<Launchable> makeMlaAppend(kvrt_bundle *bundle,
                                          const std::string &kvrtName,
                                          kvrt_variant variant,
                                          const CacheGeometry &g,
                                          const DeviceState &state) {
  return std::make_unique<MlaAppend>(bundle, kvrtName, variant, g, state);
}

} // namespace kvbench
