//===- CppApiTest.cpp - kvrt.hpp: Status and the RAII Bundle --------------===//

#include "kvrt/kvrt.hpp"

#include "Fixtures.h"

using namespace kvrt::test;
using ::testing::HasSubstr;

namespace {

TEST(CppApi, LoadAndFail) {
  std::string text = standardBundle().dump();
  kvrt::Bundle bundle;
  kvrt::Status status =
      kvrt::Bundle::loadMemory(text.data(), text.size(), bundle);
  ASSERT_TRUE(status.ok()) << status.toString();
  EXPECT_TRUE(static_cast<bool>(bundle));
  EXPECT_EQ(bundle.numKernels(), 5u);
  EXPECT_EQ(bundle.kernelNames().front(), "kv_append");

  kvrt::Bundle moved = std::move(bundle);
  EXPECT_FALSE(static_cast<bool>(bundle));
  EXPECT_TRUE(static_cast<bool>(moved));

  kvrt::Bundle missing;
  status = kvrt::Bundle::loadFile("/nonexistent.json", missing);
  EXPECT_FALSE(status);
  EXPECT_EQ(status.getCode(), KVRT_ERROR_IO);
  EXPECT_THAT(status.toString(), HasSubstr("KVRT_ERROR_IO: cannot open"));
  EXPECT_FALSE(static_cast<bool>(missing));
}

TEST_F(LaunchTest, CppApiLaunches) {
  kvrt::Bundle wrapped(bundle.release());
  kvrt_append_args args = appendArgs();
  kvrt::Status status = wrapped.append(args);
  EXPECT_TRUE(status.ok()) << status.toString();
  EXPECT_EQ(calls(), 1);

  key.get()->dtype = f16();
  args = appendArgs();
  status = wrapped.append(args);
  EXPECT_EQ(status.getCode(), KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(status.getMessage(), HasSubstr("key: dtype is f16"));
  EXPECT_TRUE(wrapped.setHostKernel("kv_slots", nullptr).ok());
  EXPECT_EQ(wrapped.buildSlotMapping(slotArgs()).getCode(),
            KVRT_ERROR_NOT_FOUND);
}

} // namespace
