//===- FakeDriverTest.h - launches through kvrt's fake driver ---*- C++ -*-===//
//
// The fixture of the tests that launch through the fake CUDA driver
// (FakeCuda.h) on CUDA device 0: the driver's state and kvrt's verified
// ranges reset before each test, every tensor on the device, and a way to
// load another manifest in place of the standard one.
//
//===----------------------------------------------------------------------===//

#ifndef KVRT_TEST_FAKEDRIVERTEST_H
#define KVRT_TEST_FAKEDRIVERTEST_H

#include "FakeCuda.h"
#include "Fixtures.h"
#include "GpuLauncher.h"

namespace kvrt::test {

class FakeDriverTest : public LaunchTest {
protected:
  void SetUp() override {
    fake_cuda_reset();
    kvrt::impl::GpuLauncher::forgetVerifiedRanges();
    state = fake_cuda_state();
    LaunchTest::SetUp();
    moveAllTo({kDLCUDA, 0});
  }

  /// Replaces the fixture's bundle with one loaded from `manifest`.
  void reload(const json &manifest) {
    kvrt_bundle *raw = nullptr;
    ASSERT_EQ(load(manifest, &raw), KVRT_SUCCESS) << kvrt_last_error();
    bundle.reset(raw);
  }

  FakeCudaState *state = nullptr;
};

} // namespace kvrt::test

#endif // KVRT_TEST_FAKEDRIVERTEST_H
