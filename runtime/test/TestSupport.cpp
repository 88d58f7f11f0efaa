//===- TestSupport.cpp - recording host kernels ---------------------------===//

#include "TestSupport.h"

#include <cstring>

namespace kvrt::test {

Recorded &recorded() {
  static Recorded state;
  return state;
}

/// Records `Buffers` pointers and then `Scalars` i32 scalars, each widened
/// to one int64_t of `params`.
/// Which counter of Recorded a recorder bumps.
enum Counter { VectorCalls, ScalarCalls, WideCalls };

template <int Buffers, int Scalars, Counter Calls>
static void recorder(void **params) {
  Recorded &state = recorded();
  ++(Calls == VectorCalls   ? state.vectorCalls
     : Calls == ScalarCalls ? state.scalarCalls
                            : state.wideCalls);
  state.params.assign(Buffers + Scalars, 0);
  for (int i = 0; i < Buffers; ++i)
    std::memcpy(&state.params[i], params[i], sizeof(int64_t));
  for (int i = Buffers; i < Buffers + Scalars; ++i) {
    int32_t scalar;
    std::memcpy(&scalar, params[i], sizeof(scalar));
    state.params[i] = scalar;
  }
}

template <Counter Calls> static kvrt_host_kernel recorderFor(int count) {
  // Every count a kind has (docs/KERNEL-ABI.md): one per buffer plus the
  // scalars, unquantized and with two scale buffers.
  switch (count) {
  case 4 + 4: // slot_mapping
    return recorder<4, 4, Calls>;
  case 3 + 9: // K-only append
    return recorder<3, 9, Calls>;
  case 5 + 16: // append, gather
    return recorder<5, 16, Calls>;
  case 7 + 16: // quantized append, gather
    return recorder<7, 16, Calls>;
  case 7 + 19: // fused_append
    return recorder<7, 19, Calls>;
  case 9 + 19: // quantized fused_append
    return recorder<9, 19, Calls>;
  case 4 + 9: // quantized K-only append; mla_append
    return recorder<4, 9, Calls>;
  case 5 + 9: // quantized mla_append
    return recorder<5, 9, Calls>;
  case 12 + 23: // append with every part of a prologue
    return recorder<12, 23, Calls>;
  case 13 + 26: // fused_append with every part of a prologue
    return recorder<13, 26, Calls>;
  case 15 + 25: // paged_kv_append with every part of a prologue
    return recorder<15, 25, Calls>;
  case 13 + 25: // paged_kv_append with FlashInfer's prologue (fp8 Q, no norm)
    return recorder<13, 25, Calls>;
  }
  return nullptr;
}

/// One parameter per buffer and per scalar: the manifest's list.
static int parameterCount(const json &params) {
  return static_cast<int>(params.size());
}

void registerRecorders(kvrt_bundle *bundle, bool vector, bool scalar,
                       bool wide) {
  for (size_t i = 0, e = kvrt_bundle_num_kernels(bundle); i < e; ++i) {
    std::string variant = kvrt_bundle_kernel_variant(bundle, i);
    bool isVector = variant == "vector", isWide = variant == "wide";
    if (isVector ? !vector : isWide ? !wide : !scalar)
      continue;
    json entry = json::parse(kvrt_bundle_kernel_manifest(bundle, i));
    int count = parameterCount(entry["params"]);
    kvrt_host_kernel fn = isVector ? recorderFor<VectorCalls>(count)
                          : isWide ? recorderFor<WideCalls>(count)
                                   : recorderFor<ScalarCalls>(count);
    if (!fn)
      std::abort(); // a kind this helper does not know: fix the table
    kvrt_bundle_set_host_kernel(bundle, kvrt_bundle_kernel_name(bundle, i), fn);
  }
}

} // namespace kvrt::test
