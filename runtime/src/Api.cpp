//===- Api.cpp - the C ABI of kvrt ----------------------------------------===//
//
// Thin: each entry point runs its implementation inside a catch-all, so that
// no C++ exception crosses into a C caller, and publishes a failing status as
// the thread's last error.
//
//===----------------------------------------------------------------------===//

#include "kvrt/kvrt.h"

#include "Bundle.h"
#include "Status.h"

#include <cstring>

using namespace kvrt::impl;

extern "C" {

const char *kvrt_last_error(void) { return lastErrorMessage(); }

const char *kvrt_status_name(kvrt_status status) {
  // Read as its bits: a C caller may pass any int, and loading one outside
  // the enum's range as a kvrt_status is undefined in C++.
  static_assert(sizeof(kvrt_status) == sizeof(int),
                "kvrt_status is an int-sized C enum");
  int code = 0;
  std::memcpy(&code, &status, sizeof(code));
  return statusName(code);
}

kvrt_status kvrt_bundle_load_file(const char *path, kvrt_bundle **out) {
  return guarded([&] { return loadBundleFile(path, out); });
}

kvrt_status kvrt_bundle_load_memory(const void *data, size_t size,
                                    kvrt_bundle **out) {
  return guarded(
      [&] { return loadBundle(static_cast<const char *>(data), size, out); });
}

void kvrt_bundle_destroy(kvrt_bundle *bundle) {
  try {
    delete bundle;
  } catch (...) {
    // A destructor that throws has nowhere to report to; do not terminate.
  }
}

size_t kvrt_bundle_num_kernels(const kvrt_bundle *bundle) {
  return bundle ? bundle->manifest.kernels.size() : 0;
}

const char *kvrt_bundle_kernel_name(const kvrt_bundle *bundle, size_t index) {
  if (!bundle || index >= bundle->manifest.kernels.size())
    return nullptr;
  return bundle->manifest.kernels[index].name.c_str();
}

const char *kvrt_bundle_kernel_kind(const kvrt_bundle *bundle, size_t index) {
  if (!bundle || index >= bundle->manifest.kernels.size())
    return nullptr;
  return kindName(bundle->manifest.kernels[index].kind);
}

const char *kvrt_bundle_kernel_variant(const kvrt_bundle *bundle,
                                       size_t index) {
  if (!bundle || index >= bundle->manifest.kernels.size())
    return nullptr;
  return variantName(bundle->manifest.kernels[index].variant);
}

const char *kvrt_bundle_kernel_manifest(const kvrt_bundle *bundle,
                                        size_t index) {
  if (!bundle || index >= bundle->manifest.kernels.size())
    return nullptr;
  return bundle->manifest.kernels[index].manifestJson.c_str();
}

kvrt_status kvrt_bundle_set_host_kernel(kvrt_bundle *bundle,
                                        const char *kernel_name,
                                        kvrt_host_kernel fn) {
  return guarded([&] { return setHostKernel(bundle, kernel_name, fn); });
}

kvrt_status kvrt_bundle_set_checked(kvrt_bundle *bundle, int enabled) {
  return guarded([&] { return setChecked(bundle, enabled); });
}

kvrt_status kvrt_bundle_set_programmatic_launch(kvrt_bundle *bundle,
                                                int enabled) {
  return guarded([&] { return setProgrammaticLaunch(bundle, enabled); });
}

// kvrt_append, kvrt_gather, ...: one per kind (kvrt.h's KVRT_FOR_EACH_KIND).
#define KVRT_LAUNCH_ENTRY(Kind, Struct, FirstSize, Entry, Variant)             \
  kvrt_status Entry(kvrt_bundle *bundle, const Struct *args,                   \
                    kvrt_stream stream) {                                      \
    return guarded([&] { return launch(bundle, args, stream); });              \
  }
KVRT_FOR_EACH_KIND(KVRT_LAUNCH_ENTRY)
#undef KVRT_LAUNCH_ENTRY

} // extern "C"
