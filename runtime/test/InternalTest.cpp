//===- InternalTest.cpp - the pieces below the C ABI ----------------------===//

#include "CudaDriver.h"
#include "FakeCuda.h"
#include "Manifest.h"
#include "Status.h"
#include "Validation.h"

#include <stdexcept>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace kvrt::impl;
using ::testing::HasSubstr;

namespace {

// A launch's fixed arrays (LaunchPlan, PackedParams) hold every kind's
// buffers and scalars. The kind with the most parameters need not have the
// most scalars: sizing the scalars as maxParams() - maxBuffers() let
// fused_append's 19 scalars overflow once paged_kv_append (10 buffers, 18
// scalars) set both maxima.
TEST(LaunchArrays, HoldEveryKindsBuffersAndScalars) {
  for (const char *name : kvgen::abi::kKindNames) {
    kvgen::abi::KernelKind kind;
    ASSERT_TRUE(kvgen::abi::parseKind(name, &kind));
    for (auto quant :
         {kvgen::abi::Quantization::None, kvgen::abi::Quantization::Static,
          kvgen::abi::Quantization::Dynamic}) {
      size_t buffers = 0;
      size_t total = kvgen::abi::countParams(kind, quant, &buffers);
      EXPECT_LE(buffers, static_cast<size_t>(kvrt::impl::kMaxBuffers)) << name;
      EXPECT_LE(total - buffers, static_cast<size_t>(kvrt::impl::kMaxScalars))
          << name;
    }
  }
}

TEST(Guarded, AllocationFailureIsOutOfMemory) {
  kvrt_status status = guarded([]() -> Status { throw std::bad_alloc(); });
  EXPECT_EQ(status, KVRT_ERROR_OUT_OF_MEMORY);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("out of host memory"));
}

TEST(Guarded, OtherExceptionsAreInternal) {
  kvrt_status status = guarded(
      []() -> Status { throw std::runtime_error("vector::at out of range"); });
  EXPECT_EQ(status, KVRT_ERROR_INTERNAL);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("kvrt internal error: vector::at"));
  EXPECT_EQ(guarded([]() -> Status { throw 7; }), KVRT_ERROR_INTERNAL);
}

TEST(Quoted, EscapesAndBounds) {
  EXPECT_EQ(quote(std::string_view("a\0b", 3)), "'a\\x00b'");
  std::string quotedLong = quote(std::string(1000, 'x'));
  EXPECT_LT(quotedLong.size(), 130u);
  EXPECT_THAT(quotedLong, HasSubstr("(1000 bytes)"));
}

TEST(Base64, Decodes) {
  std::vector<unsigned char> bytes;
  ASSERT_TRUE(decodeBase64("aGVsbG8=", &bytes));
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), "hello");
  ASSERT_TRUE(decodeBase64("aGVs\nbG8h", &bytes));
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), "hello!");
  ASSERT_TRUE(decodeBase64("+/8=", &bytes));
  EXPECT_EQ(bytes, (std::vector<unsigned char>{0xfb, 0xff}));
  ASSERT_TRUE(decodeBase64("", &bytes));
  EXPECT_TRUE(bytes.empty());
}

TEST(Base64, Refuses) {
  std::vector<unsigned char> bytes;
  EXPECT_FALSE(decodeBase64("aGVsbG8", &bytes)) << "unpadded";
  EXPECT_FALSE(decodeBase64("aG=sbG8=", &bytes)) << "data after padding";
  EXPECT_FALSE(decodeBase64("aGVs*G8=", &bytes)) << "outside the alphabet";
  EXPECT_FALSE(decodeBase64("a===", &bytes)) << "too much padding";
}

TEST(Chip, Parses) {
  Target target;
  ASSERT_TRUE(parseChip("sm_90", &target));
  EXPECT_EQ(target.major, 9);
  EXPECT_EQ(target.minor, 0);
  EXPECT_FALSE(target.archSpecific);
  ASSERT_TRUE(parseChip("sm_90a", &target));
  EXPECT_TRUE(target.archSpecific);
  ASSERT_TRUE(parseChip("sm_86", &target));
  EXPECT_EQ(target.major, 8);
  EXPECT_EQ(target.minor, 6);
  ASSERT_TRUE(parseChip("sm_100f", &target));
  EXPECT_EQ(target.major, 10);
  EXPECT_TRUE(target.familySpecific);
  ASSERT_TRUE(parseChip("sm_120", &target));
  EXPECT_EQ(target.major, 12);
}

TEST(Chip, Refuses) {
  Target target;
  for (const char *chip :
       {"sm_9", "compute_90", "sm_", "sm_90ab", "sm_09", "gfx90a", "sm_90 "})
    EXPECT_FALSE(parseChip(chip, &target)) << chip;
}

TEST(Params, MatchTheAbi) {
  using kvgen::abi::countParams;
  using kvgen::abi::Quantization;
  EXPECT_EQ(countParams(KernelKind::Append, Quantization::None), 21u);
  EXPECT_EQ(countParams(KernelKind::Append, Quantization::Static), 23u);
  EXPECT_EQ(countParams(KernelKind::SlotMapping, Quantization::None), 8u);
  EXPECT_EQ(countParams(KernelKind::FusedAppend, Quantization::None), 26u);
  EXPECT_EQ(countParams(KernelKind::Gather, Quantization::Dynamic), 23u);
}

TEST(Driver, MissingLibraryIsNoDriver) {
  CudaDriver driver;
  Status status = CudaDriver::load("libkvrt-no-such-driver.so.1", &driver);
  EXPECT_EQ(status.getCode(), KVRT_ERROR_NO_DRIVER);
  EXPECT_THAT(status.getMessage(),
              HasSubstr("libkvrt-no-such-driver.so.1 could not be loaded"));
  EXPECT_THAT(status.toString(), HasSubstr("KVRT_ERROR_NO_DRIVER"));
  EXPECT_THAT(status.toString(), HasSubstr("CudaDriver.cpp:"));
}

TEST(Driver, MissingEntryPointIsNotFound) {
  // A library that loads but is no CUDA driver.
  CudaDriver driver;
  Status status = CudaDriver::load("libm.so.6", &driver);
  EXPECT_EQ(status.getCode(), KVRT_ERROR_NOT_FOUND);
  EXPECT_THAT(status.getMessage(),
              HasSubstr("has no entry point cuGetErrorName"));
}

TEST(Driver, FakeDriverResolves) {
  fake_cuda_reset();
  CudaDriver driver;
  Status status = CudaDriver::initialize(KVRT_FAKE_CUDA_PATH, &driver);
  ASSERT_TRUE(status.ok()) << status.toString();
  EXPECT_NE(driver.cuCtxGetId, nullptr) << "optional, but the fake has it";
}

TEST(Driver, CuInitFailureIsNoDevice) {
  fake_cuda_reset();
  fake_cuda_state()->initResult = 100;
  CudaDriver driver;
  Status status = CudaDriver::initialize(KVRT_FAKE_CUDA_PATH, &driver);
  EXPECT_EQ(status.getCode(), KVRT_ERROR_NO_DEVICE);
  EXPECT_THAT(status.getMessage(), HasSubstr("cuInit failed"));
  EXPECT_THAT(status.getMessage(), HasSubstr("CUDA_ERROR_NO_DEVICE"));
  fake_cuda_reset();
}

TEST(Driver, ZeroDevicesIsNoDevice) {
  fake_cuda_reset();
  fake_cuda_state()->deviceCount = 0;
  CudaDriver driver;
  Status status = CudaDriver::initialize(KVRT_FAKE_CUDA_PATH, &driver);
  EXPECT_EQ(status.getCode(), KVRT_ERROR_NO_DEVICE);
  EXPECT_THAT(status.getMessage(), HasSubstr("zero devices"));
  fake_cuda_reset();
}

TEST(Driver, CheckDescribesTheError) {
  fake_cuda_reset();
  CudaDriver driver;
  ASSERT_TRUE(CudaDriver::initialize(KVRT_FAKE_CUDA_PATH, &driver).ok());
  Status status = driver.check(218, "cuModuleLoadDataEx", __FILE__, __LINE__);
  EXPECT_EQ(status.getCode(), KVRT_ERROR_DRIVER);
  EXPECT_THAT(status.getMessage(),
              HasSubstr("cuModuleLoadDataEx failed: CUDA_ERROR_INVALID_PTX "
                        "(218: fake driver error)"));
  EXPECT_TRUE(driver.check(0, "cuInit", __FILE__, __LINE__).ok());
}

} // namespace
