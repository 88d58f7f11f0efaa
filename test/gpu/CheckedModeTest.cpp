//===- CheckedModeTest.cpp - kvrt's checked mode on the device ------------===//
//
// The matrix's checked_* cases turn the mode on with
// kvrt_bundle_set_checked() for every description. These tests cover the
// other switch, KVRT_CHECKED=1 at load time, and that the mode is off
// otherwise: the same out-of-range launch is then accepted and writes
// nothing for that token, as the contract says.
//
//===----------------------------------------------------------------------===//

#include "GpuSuite.h"

#include "conformance/Harness.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

using namespace kvgen;
using namespace kvgen::conformance;

namespace {

/// Loads the suite's bundle again with KVRT_CHECKED set to `value` (unset
/// if null) for the duration of the load.
kvrt_bundle *loadWithEnv(const char *value) {
  const char *old = std::getenv("KVRT_CHECKED");
  std::string saved = old ? old : "";
  if (value)
    setenv("KVRT_CHECKED", value, 1);
  else
    unsetenv("KVRT_CHECKED");
  kvrt_bundle *bundle = nullptr;
  kvrt_status status =
      kvrt_bundle_load_file(gpu::suite().bundlePath.c_str(), &bundle);
  if (old)
    setenv("KVRT_CHECKED", saved.c_str(), 1);
  else
    unsetenv("KVRT_CHECKED");
  EXPECT_EQ(status, KVRT_SUCCESS) << kvrt_last_error();
  return status == KVRT_SUCCESS ? bundle : nullptr;
}

struct BundleOwner {
  kvrt_bundle *bundle;
  ~BundleOwner() {
    if (bundle)
      kvrt_bundle_destroy(bundle);
  }
};

/// One append of `slots` on gpu_append_paged_nhd through `bundle`; the
/// caches are checked to hold exactly what the reference says when
/// `expectWritten`, and to be untouched otherwise.
void appendOnce(kvrt_bundle *bundle, const std::vector<int64_t> &slots,
                kvrt_status want, const std::string &message,
                bool expectWritten) {
  gpu::Suite &s = gpu::suite();
  std::optional<Description> found =
      findDescription(s.matrix, "gpu_append_paged_nhd");
  ASSERT_TRUE(found.has_value());
  const Description &desc = *found;
  Backend &b = *s.backend;
  std::mt19937_64 rng(s.options.seed);
  std::string error;
  int64_t tokens = static_cast<int64_t>(slots.size());
  SourceSet source;
  CacheSet caches;
  DeviceBuffer slotBuffer;
  ASSERT_TRUE(
      source.create(b, desc, tokens, SourceStorage::Compact, rng, error))
      << error;
  ASSERT_TRUE(caches.create(b, desc, 32, CacheStorage::Compact, rng(), error))
      << error;
  ASSERT_TRUE(uploadVector(b, slots, slotBuffer, error)) << error;
  TensorArg slotArg(slotBuffer.get(), 0, b.device(), int64Type(), {tokens},
                    {1});
  kvrt_append_args args = KVRT_ARGS_INIT(kvrt_append_args);
  args.kernel = desc.name.c_str();
  args.key = source.key();
  args.value = source.value();
  args.slot_mapping = slotArg.get();
  args.key_cache = caches.keyCache();
  args.value_cache = caches.valueCache();
  args.variant = KVRT_VARIANT_AUTO;
  kvrt_status status = kvrt_append(bundle, &args, b.stream());
  ASSERT_EQ(status, want) << kvrt_last_error();
  if (!message.empty()) {
    EXPECT_NE(std::string(kvrt_last_error()).find(message), std::string::npos)
        << kvrt_last_error();
  }
  ASSERT_TRUE(b.synchronize()) << b.lastError();
  if (expectWritten)
    caches.expectAppend(source, slots);
  std::string report;
  EXPECT_TRUE(caches.check(report)) << report;
}

TEST(CheckedMode, EnvironmentTurnsItOnAtLoad) {
  BundleOwner checked{loadWithEnv("1")};
  ASSERT_NE(checked.bundle, nullptr);
  // Token 5 reuses token 1's slot.
  std::vector<int64_t> slots = {16 * 3 + 2, 16 * 7 + 9,  -1,
                                16 * 2,     16 * 9 + 15, 16 * 7 + 9};
  appendOnce(checked.bundle, slots, KVRT_ERROR_INVALID_ARGUMENT,
             "slot_mapping[5] = 121 is also used by token 1", false);
  // Past the 32 blocks of the cache.
  appendOnce(checked.bundle, {5, 32 * 16 + 3, 40}, KVRT_ERROR_INVALID_ARGUMENT,
             "slot_mapping[1] = 515", false);
  // A valid batch with padding runs and writes what it should.
  appendOnce(checked.bundle, {5, -1, 40, 16 * 31 + 15, -7}, KVRT_SUCCESS, "",
             true);
}

TEST(CheckedMode, OffByDefaultAndOffWithZero) {
  for (const char *value : {static_cast<const char *>(nullptr), "0"}) {
    BundleOwner plain{loadWithEnv(value)};
    ASSERT_NE(plain.bundle, nullptr);
    // Unchecked, an out-of-range slot is the contract's no-op: success,
    // and only the in-range tokens are written.
    appendOnce(plain.bundle, {5, 32 * 16 + 3, 40}, KVRT_SUCCESS, "", true);
  }
}

TEST(CheckedMode, SetCheckedTogglesIt) {
  BundleOwner bundle{loadWithEnv(nullptr)};
  ASSERT_NE(bundle.bundle, nullptr);
  ASSERT_EQ(kvrt_bundle_set_checked(bundle.bundle, 1), KVRT_SUCCESS);
  appendOnce(bundle.bundle, {7, 7}, KVRT_ERROR_INVALID_ARGUMENT,
             "slot_mapping[1] = 7 is also used by token 0", false);
  ASSERT_EQ(kvrt_bundle_set_checked(bundle.bundle, 0), KVRT_SUCCESS);
  // Without the check a duplicate is the caller's bug and not detected; a
  // single token is written normally.
  appendOnce(bundle.bundle, {7}, KVRT_SUCCESS, "", true);
}

} // namespace
