//===- ProgrammaticLaunchTest.cpp - the PDL opt-in, against a fake driver -===//
//
// The manifest's "programmatic_launch" field, kvrt_bundle_set_programmatic_
// launch and KVRT_PDL=1, and which launches go through cuLaunchKernelEx with
// the programmatic-stream-serialization attribute: only kernels that wait,
// only when asked.
//
//===----------------------------------------------------------------------===//

#include "FakeDriverTest.h"

#include <cstdlib>

using namespace kvrt::test;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

/// The standard bundle with the append's and the fused append's kernels
/// marked as waiting; the slot_mapping kernel does not wait.
json waitingBundle() {
  json bundle = standardBundle();
  for (json &kernel : bundle["kernels"])
    if (kernel["kind"] != "slot_mapping")
      kernel["programmatic_launch"] = true;
  return bundle;
}

using ProgrammaticLaunchTest = FakeDriverTest;

TEST_F(ProgrammaticLaunchTest, ManifestFieldIsReadAndEchoed) {
  reload(waitingBundle());
  std::string append = kvrt_bundle_kernel_manifest(bundle.get(), 0);
  EXPECT_THAT(append, HasSubstr("\"programmatic_launch\":true"));
  std::string slots = kvrt_bundle_kernel_manifest(bundle.get(), 2);
  EXPECT_THAT(slots, Not(HasSubstr("programmatic_launch")));
}

TEST_F(ProgrammaticLaunchTest, ManifestFieldMustBeABoolean) {
  json manifest = waitingBundle();
  manifest["kernels"][0]["programmatic_launch"] = "yes";
  kvrt_bundle *raw = nullptr;
  EXPECT_EQ(load(manifest, &raw), KVRT_ERROR_INVALID_BUNDLE);
  EXPECT_EQ(raw, nullptr);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("programmatic_launch"));
}

TEST_F(ProgrammaticLaunchTest, EnablingRefusedWithoutAWaitingKernel) {
  // The standard bundle has no waiting kernel.
  EXPECT_EQ(kvrt_bundle_set_programmatic_launch(bundle.get(), 1),
            KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("--programmatic-launch"));
  // Turning it off is always allowed, and launches stay plain.
  EXPECT_EQ(kvrt_bundle_set_programmatic_launch(bundle.get(), 0), KVRT_SUCCESS);
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(state->launches, 1);
  EXPECT_EQ(state->launchesEx, 0);
}

TEST_F(ProgrammaticLaunchTest, NullBundle) {
  EXPECT_EQ(kvrt_bundle_set_programmatic_launch(nullptr, 1),
            KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("bundle: is NULL"));
}

TEST_F(ProgrammaticLaunchTest, OffByDefault) {
  reload(waitingBundle());
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(state->launches, 1);
  EXPECT_EQ(state->launchesEx, 0);
}

TEST_F(ProgrammaticLaunchTest, WaitingKernelLaunchesWithTheAttribute) {
  reload(waitingBundle());
  ASSERT_EQ(kvrt_bundle_set_programmatic_launch(bundle.get(), 1), KVRT_SUCCESS)
      << kvrt_last_error();
  kvrt_stream stream = reinterpret_cast<kvrt_stream>(0x5a5a);
  kvrt_append_args args = appendArgs();
  ASSERT_EQ(kvrt_append(bundle.get(), &args, stream), KVRT_SUCCESS)
      << kvrt_last_error();
  EXPECT_EQ(state->launches, 1);
  EXPECT_EQ(state->launchesEx, 1);
  EXPECT_EQ(state->lastProgrammatic, 1);
  EXPECT_STREQ(state->lastFunction, "kv_append");
  EXPECT_EQ(state->stream, stream);
  // The same geometry as a plain launch: ceil(5 / 2) blocks of 4 x 2.
  EXPECT_EQ(state->grid[0], 3u);
  EXPECT_EQ(state->grid[1], 1u);
  EXPECT_EQ(state->block[0], 4u);
  EXPECT_EQ(state->block[1], 2u);
  EXPECT_EQ(state->block[2], 1u);
  EXPECT_EQ(state->sharedBytes, 0u);

  // Off again: plain.
  ASSERT_EQ(kvrt_bundle_set_programmatic_launch(bundle.get(), 0), KVRT_SUCCESS);
  ASSERT_EQ(append(), KVRT_SUCCESS);
  EXPECT_EQ(state->launches, 2);
  EXPECT_EQ(state->launchesEx, 1);
}

TEST_F(ProgrammaticLaunchTest, KernelThatDoesNotWaitLaunchesPlainly) {
  reload(waitingBundle());
  ASSERT_EQ(kvrt_bundle_set_programmatic_launch(bundle.get(), 1), KVRT_SUCCESS);
  ASSERT_EQ(slotMapping(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(state->launches, 1);
  EXPECT_EQ(state->launchesEx, 0);
  ASSERT_EQ(fused(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(state->launchesEx, 1);
}

TEST_F(ProgrammaticLaunchTest, EnvironmentTurnsItOnAtLoad) {
  ::setenv("KVRT_PDL", "1", 1);
  reload(waitingBundle());
  ::unsetenv("KVRT_PDL");
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(state->launchesEx, 1);
  EXPECT_EQ(state->lastProgrammatic, 1);
}

TEST_F(ProgrammaticLaunchTest, RefusedLaunchLaunchesNothing) {
  reload(waitingBundle());
  ASSERT_EQ(kvrt_bundle_set_programmatic_launch(bundle.get(), 1), KVRT_SUCCESS);
  slots.get()->dtype = f32(); // a bad slot_mapping: validation runs first
  EXPECT_EQ(append(), KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(state->launches, 0);
}

} // namespace
