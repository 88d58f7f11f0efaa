//===- GeneratedAppend.cpp - the generated kernel, through kvrt_append ----===//
//
// The one launchable that depends on kvrt: DLPack tensors over kvbench's
// buffers, one kvrt_append_args per input set, built before any timing.
//
//===----------------------------------------------------------------------===//

#include "DLTensors.h"
#include "Launchables.h"
#include "MlaAppend.h"

#include "kvrt/kvrt.h"

#include <dlpack/dlpack.h>

namespace kvbench {

namespace {

constexpr DLDataType kF32{kDLFloat, 32, 1};

class GeneratedAppend : public Launchable {
public:
  GeneratedAppend(kvrt_bundle *bundle, std::string kvrtName,
                  kvrt_variant variant, const CacheGeometry &g,
                  const DeviceState &state)
      : bundle(bundle), kernelName(std::move(kvrtName)), variant(variant),
        geometry(g), device(state.device) {
    keyCacheShape = g.keyShape;
    valueCacheShape = g.valueShape;
    scaleCacheShape = g.scaleCacheShape;
    const DLDataType cache = dlpackDtype(g.desc.cacheDtype);
    keyCache = tensor(state.keyCache, cache, keyCacheShape);
    if (!g.dual && !g.desc.kOnly)
      valueCache = tensor(state.valueAlloc, cache, valueCacheShape);
    if (state.keyScaleCache) {
      keyScaleCache = tensor(state.keyScaleCache, kF32, scaleCacheShape);
      valueScaleCache = tensor(state.valueScaleCache, kF32, scaleCacheShape);
    }
  }
  std::string name() const override {
    return "generated " + kernelName + " via kvrt";
  }
  void prepare(int64_t tokens, const std::vector<SetPointers> &sets) override;
  bool launch(int set, cudaStream_t stream) override {
    const kvrt_status status = kvrt_append(bundle, &args[size_t(set)], stream);
    if (status == KVRT_SUCCESS)
      return true;
    error =
        format("kvrt_append returned %d: %s", int(status), kvrt_last_error());
    return false;
  }

private:
  DLTensor tensor(const void *data, DLDataType dtype,
                  std::vector<int64_t> &shape) const {
    return deviceTensor(data, device, dtype, shape);
  }

  /// The static scale tensor's shape for `tokens` tokens (KERNEL-ABI.md).
  std::vector<int64_t> staticScaleShape(int64_t tokens) const {
    const int64_t H = geometry.desc.numHeads;
    switch (geometry.desc.quant->granularity) {
    case abi::ScaleGranularity::PerTensor:
      return {1};
    case abi::ScaleGranularity::PerHead:
      return {H};
    case abi::ScaleGranularity::PerToken:
      return {tokens};
    case abi::ScaleGranularity::PerTokenHead:
      return {tokens, H};
    case abi::ScaleGranularity::PerBlock:
      return {geometry.numBlocks, H};
    }
    return {1};
  }

  kvrt_bundle *bundle;
  std::string kernelName;
  kvrt_variant variant;
  CacheGeometry geometry;
  int device;
  std::vector<int64_t> keyCacheShape, valueCacheShape, scaleCacheShape,
      inputShape, slotShape, scaleShape;
  DLTensor keyCache{}, valueCache{}, keyScaleCache{}, valueScaleCache{};
  std::vector<DLTensor> keys, values, slots, keyScales, valueScales;
  std::vector<kvrt_append_args> args;
};

void GeneratedAppend::prepare(int64_t tokens,
                              const std::vector<SetPointers> &sets) {
  inputShape = {tokens, geometry.desc.numHeads, geometry.desc.headDim};
  slotShape = {tokens};
  const bool staticScales = geometry.desc.quant &&
                            geometry.desc.quant->mode == abi::ScaleMode::Static;
  if (staticScales)
    scaleShape = staticScaleShape(tokens);
  const DLDataType source = dlpackDtype(geometry.desc.sourceDtype);
  keys.clear();
  values.clear();
  slots.clear();
  keyScales.clear();
  valueScales.clear();
  for (const SetPointers &s : sets) {
    keys.push_back(tensor(s.key, source, inputShape));
    values.push_back(tensor(s.value, source, inputShape));
    slots.push_back(tensor(s.slots, DLDataType{kDLInt, 64, 1}, slotShape));
    if (staticScales) {
      keyScales.push_back(tensor(s.keyScale, kF32, scaleShape));
      valueScales.push_back(tensor(s.valueScale, kF32, scaleShape));
    }
  }
  // The argument structs point into the vectors: fill them last.
  args.assign(sets.size(), kvrt_append_args{});
  for (size_t i = 0; i < sets.size(); ++i) {
    kvrt_append_args &a = args[i];
    a.struct_size = sizeof(a);
    a.kernel = kernelName.c_str();
    a.key = &keys[i];
    // A K-only cache takes no V at all (kvrt refuses one by name).
    const bool kOnly = geometry.desc.kOnly;
    a.value = kOnly ? nullptr : &values[i];
    a.slot_mapping = &slots[i];
    a.key_cache = &keyCache;
    a.value_cache = geometry.dual || kOnly ? nullptr : &valueCache;
    a.variant = variant;
    if (staticScales) {
      a.key_scale = &keyScales[i];
      a.value_scale = kOnly ? nullptr : &valueScales[i];
    } else if (geometry.desc.quant) {
      a.key_scale_cache = &keyScaleCache;
      a.value_scale_cache = kOnly ? nullptr : &valueScaleCache;
    }
  }
}

} // namespace

std::unique_ptr<Launchable> makeGeneratedAppend(kvrt_bundle *bundle,
                                                const std::string &kvrtName,
                                                const std::string &variant,
                                                const CacheGeometry &g,
                                                const DeviceState &state) {
  const kvrt_variant v = variant == "scalar"   ? KVRT_VARIANT_SCALAR
                         : variant == "wide"   ? KVRT_VARIANT_WIDE
                         : variant == "vector" ? KVRT_VARIANT_VECTOR
                                               : KVRT_VARIANT_AUTO;
  if (g.desc.latent)
    return makeMlaAppend(bundle, kvrtName, v, g, state);
  return std::make_unique<GeneratedAppend>(bundle, kvrtName, v, g, state);
}

} // namespace kvbench
