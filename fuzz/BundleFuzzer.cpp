//===- BundleFuzzer.cpp - libFuzzer harness for kvrt's bundle loader ------===//
//
// Arbitrary bytes into kvrt_bundle_load_memory, as an application would pass
// a bundle read from disk: every input is either refused with a status or
// loaded; a loaded bundle's kernels are then listed through the C API. No
// GPU is needed: the driver is only looked up at launch.
//
//===----------------------------------------------------------------------===//

#include "kvrt/kvrt.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kvrt_bundle *bundle = nullptr;
  if (kvrt_bundle_load_memory(data, size, &bundle) != KVRT_SUCCESS)
    return 0;
  // Touch every string the loader kept, so that a dangling or unterminated
  // one is caught here rather than in an application.
  size_t total = 0;
  for (size_t i = 0, e = kvrt_bundle_num_kernels(bundle); i < e; ++i)
    for (const char *s : {kvrt_bundle_kernel_name(bundle, i),
                          kvrt_bundle_kernel_kind(bundle, i),
                          kvrt_bundle_kernel_variant(bundle, i)})
      if (s)
        total += std::strlen(s);
  kvrt_bundle_destroy(bundle);
  return total == SIZE_MAX;
}
