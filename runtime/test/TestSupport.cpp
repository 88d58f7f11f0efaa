//===- TestSupport.cpp - recording host kernels ---------------------------===//

#include "TestSupport.h"

#include <cstring>

namespace kvrt::test {

Recorded &recorded() {
  static Recorded state;
  return state;
}

// The parameter count per kind (docs/KERNEL-ABI.md): five per buffer plus
// the scalars.
static constexpr int kAppendParams = 5 * 5 + 16;
static constexpr int kSlotMappingParams = 4 * 5 + 4;
static constexpr int kFusedParams = 7 * 5 + 19;

template <int Count, bool Vector> static void recorder(void **params) {
  Recorded &state = recorded();
  ++(Vector ? state.vectorCalls : state.scalarCalls);
  state.params.assign(Count, 0);
  for (int i = 0; i < Count; ++i)
    std::memcpy(&state.params[i], params[i], sizeof(int64_t));
}

void registerRecorders(kvrt_bundle *bundle, bool vector, bool scalar) {
  for (size_t i = 0, e = kvrt_bundle_num_kernels(bundle); i < e; ++i) {
    std::string kind = kvrt_bundle_kernel_kind(bundle, i);
    bool isVector =
        std::string(kvrt_bundle_kernel_variant(bundle, i)) == "vector";
    if ((isVector && !vector) || (!isVector && !scalar))
      continue;
    kvrt_host_kernel fn = nullptr;
    if (kind == "append")
      fn = isVector ? recorder<kAppendParams, true>
                    : recorder<kAppendParams, false>;
    else if (kind == "slot_mapping")
      fn = recorder<kSlotMappingParams, false>;
    else
      fn = isVector ? recorder<kFusedParams, true>
                    : recorder<kFusedParams, false>;
    kvrt_bundle_set_host_kernel(bundle, kvrt_bundle_kernel_name(bundle, i), fn);
  }
}

} // namespace kvrt::test
