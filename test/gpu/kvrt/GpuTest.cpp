//===- GpuTest.cpp - kvrt on a real GPU, with the reference kernels -------===//
//
// ctest label `gpu`; every test skips (with the reason) where there is no
// driver or no GPU. Uses the bundle made from ReferenceKernels.cu, so it tests
// kvrt's driver path independently of kvgen: pointer checks, compute
// capability, JIT logs, the primary context, and capture in a CUDA graph
// (which fails if a launch allocates or synchronizes).
//
//===----------------------------------------------------------------------===//

#include "kvrt/kvrt.h"
#include "kvrt/test/TensorArg.h"

#include <nlohmann/json.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <thread>
#include <vector>

using ::testing::HasSubstr;
using json = nlohmann::json;

namespace {

/// Why the tests cannot run here, or "" when a GPU is usable. The tests
/// allocate and copy with the CUDA runtime, as an application does; kvrt
/// reaches the driver on its own.
const std::string &unavailable() {
  static const std::string reason = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
      return std::string("no usable GPU (or no NVIDIA driver)");
    return std::string();
  }();
  return reason;
}

#define CU(call) ASSERT_EQ(call, cudaSuccess) << #call

constexpr int64_t kTokens = 40, kHeads = 8, kHeadDim = 128, kBlockSize = 16,
                  kBlocks = 16;
constexpr size_t kRowBytes = kHeads * kHeadDim * 2;

struct Buffer {
  explicit Buffer(size_t bytes) : bytes(bytes) { cudaMalloc(&pointer, bytes); }
  ~Buffer() { cudaFree(pointer); }
  Buffer(const Buffer &) = delete;
  void *data() const { return pointer; }
  void *pointer = nullptr;
  size_t bytes;
};

/// A compact tensor on cuda:0.
kvrt::test::TensorArg tensorOf(void *data, DLDataType dtype,
                               std::vector<int64_t> shape) {
  return kvrt::test::TensorArg(data, 0, {kDLCUDA, 0}, dtype, std::move(shape),
                               {});
}

std::string readBundle() {
  // The environment may point elsewhere: a build carried to a GPU machine.
  const char *path = std::getenv("KVRT_REFERENCE_BUNDLE");
  std::ifstream file(path ? path : KVRT_REFERENCE_BUNDLE);
  return std::string(std::istreambuf_iterator<char>(file),
                     std::istreambuf_iterator<char>());
}

class GpuTest : public ::testing::Test {
protected:
  void SetUp() override {
    if (!unavailable().empty())
      GTEST_SKIP() << unavailable();
    CU(cudaSetDevice(0));
    loadBundle(readBundle());
    key = std::make_unique<Buffer>(kTokens * kRowBytes);
    value = std::make_unique<Buffer>(kTokens * kRowBytes);
    slots = std::make_unique<Buffer>(kTokens * 8);
    keyCache = std::make_unique<Buffer>(kBlocks * kBlockSize * kRowBytes);
    valueCache = std::make_unique<Buffer>(kBlocks * kBlockSize * kRowBytes);
    DLDataType bf16 = {kDLBfloat, 16, 1};
    keyTensor = tensorOf(key->data(), bf16, inputShape);
    valueTensor = tensorOf(value->data(), bf16, inputShape);
    slotTensor = tensorOf(slots->data(), {kDLInt, 64, 1}, slotShape);
    kcTensor = tensorOf(keyCache->data(), bf16, cacheShape);
    vcTensor = tensorOf(valueCache->data(), bf16, cacheShape);
    // Slots: token t goes to slot 3 t + 1; every fifth token is padding.
    hostSlots.resize(kTokens);
    for (int64_t t = 0; t < kTokens; ++t)
      hostSlots[t] = t % 5 == 4 ? -1 : 3 * t + 1;
    CU(cudaMemcpy(slots->pointer, hostSlots.data(), slots->bytes,
                  cudaMemcpyHostToDevice));
    hostKey.resize(kTokens * kRowBytes / 2);
    for (size_t i = 0; i < hostKey.size(); ++i)
      hostKey[i] = static_cast<uint16_t>(0x3c00 + i % 509);
    CU(cudaMemcpy(key->pointer, hostKey.data(), key->bytes,
                  cudaMemcpyHostToDevice));
    CU(cudaMemcpy(value->pointer, hostKey.data(), value->bytes,
                  cudaMemcpyHostToDevice));
  }
  void TearDown() override { kvrt_bundle_destroy(bundle); }

  void loadBundle(const std::string &text) {
    kvrt_bundle_destroy(bundle);
    bundle = nullptr;
    ASSERT_EQ(kvrt_bundle_load_memory(text.data(), text.size(), &bundle),
              KVRT_SUCCESS)
        << kvrt_last_error();
  }

  kvrt_status append(kvrt_stream stream = nullptr) {
    args = {sizeof(kvrt_append_args), nullptr,          keyTensor.get(),
            valueTensor.get(),        slotTensor.get(), kcTensor.get(),
            vcTensor.get(),           KVRT_VARIANT_AUTO};
    return kvrt_append(bundle, &args, stream);
  }

  /// Every slot the append wrote holds its token's row; the rest is poison.
  void expectAppended() {
    std::vector<uint16_t> cache(keyCache->bytes / 2);
    CU(cudaDeviceSynchronize());
    CU(cudaMemcpy(cache.data(), keyCache->pointer, keyCache->bytes,
                  cudaMemcpyDeviceToHost));
    std::vector<uint16_t> expected(cache.size(), 0xA5A5);
    for (int64_t t = 0; t < kTokens; ++t)
      if (hostSlots[t] >= 0)
        std::memcpy(&expected[hostSlots[t] * kRowBytes / 2],
                    &hostKey[t * kRowBytes / 2], kRowBytes);
    EXPECT_TRUE(cache == expected) << "the key cache differs";
  }

  kvrt_bundle *bundle = nullptr;
  // Allocated in SetUp, once the driver is known to be there.
  std::unique_ptr<Buffer> key, value, slots, keyCache, valueCache;
  std::vector<int64_t> inputShape{kTokens, kHeads, kHeadDim},
      slotShape{kTokens}, cacheShape{kBlocks, kBlockSize, kHeads, kHeadDim};
  kvrt::test::TensorArg keyTensor, valueTensor, slotTensor, kcTensor, vcTensor;
  kvrt_append_args args = KVRT_ARGS_INIT(kvrt_append_args);
  std::vector<int64_t> hostSlots;
  std::vector<uint16_t> hostKey;
};

TEST_F(GpuTest, AppendWritesTheSlots) {
  CU(cudaMemset(keyCache->pointer, 0xA5, keyCache->bytes));
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  expectAppended();
}

TEST_F(GpuTest, CheckedModeRefusesADuplicateSlotAndWritesNothing) {
  CU(cudaMemset(keyCache->pointer, 0xA5, keyCache->bytes));
  ASSERT_EQ(kvrt_bundle_set_checked(bundle, 1), KVRT_SUCCESS);
  hostSlots[7] = hostSlots[3];
  CU(cudaMemcpy(slots->pointer, hostSlots.data(), slots->bytes,
                cudaMemcpyHostToDevice));
  EXPECT_EQ(append(), KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(),
              HasSubstr("slot_mapping[7] = 10 is also used by token 3"));
  std::vector<uint8_t> cache(keyCache->bytes);
  CU(cudaMemcpy(cache.data(), keyCache->pointer, keyCache->bytes,
                cudaMemcpyDeviceToHost));
  EXPECT_TRUE(std::all_of(cache.begin(), cache.end(), [](uint8_t byte) {
    return byte == 0xA5;
  })) << "a refused launch wrote the cache";
}

TEST_F(GpuTest, CheckedModeRefusesASlotPastTheCache) {
  ASSERT_EQ(kvrt_bundle_set_checked(bundle, 1), KVRT_SUCCESS);
  hostSlots[2] = kBlocks * kBlockSize;
  CU(cudaMemcpy(slots->pointer, hostSlots.data(), slots->bytes,
                cudaMemcpyHostToDevice));
  EXPECT_EQ(append(), KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("slot_mapping[2] = "));
  EXPECT_THAT(kvrt_last_error(), HasSubstr("is out of range"));
}

TEST_F(GpuTest, CheckedModeAppendsDistinctSlots) {
  CU(cudaMemset(keyCache->pointer, 0xA5, keyCache->bytes));
  ASSERT_EQ(kvrt_bundle_set_checked(bundle, 1), KVRT_SUCCESS);
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  expectAppended();
}

TEST_F(GpuTest, CapturedInACudaGraph) {
  cudaStream_t stream = nullptr;
  CU(cudaStreamCreate(&stream));
  // The first launch loads the module; capture then sees only the launch.
  ASSERT_EQ(append(stream), KVRT_SUCCESS) << kvrt_last_error();
  CU(cudaStreamSynchronize(stream));
  CU(cudaMemset(keyCache->pointer, 0xA5, keyCache->bytes));
  // Global mode: capture fails if the launch allocates or synchronizes.
  CU(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  kvrt_status status = append(stream);
  cudaGraph_t graph = nullptr;
  CU(cudaStreamEndCapture(stream, &graph));
  ASSERT_EQ(status, KVRT_SUCCESS) << kvrt_last_error();
  cudaGraphExec_t exec = nullptr;
  CU(cudaGraphInstantiate(&exec, graph, 0));
  CU(cudaGraphLaunch(exec, stream));
  CU(cudaStreamSynchronize(stream));
  expectAppended();
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST_F(GpuTest, NoCurrentContextUsesThePrimaryOne) {
  CU(cudaMemset(keyCache->pointer, 0xA5, keyCache->bytes));
  CU(cudaDeviceSynchronize());
  kvrt_status status = KVRT_ERROR_DRIVER;
  std::string message;
  // A fresh thread has no current context.
  std::thread([&] {
    status = append();
    message = kvrt_last_error();
  }).join();
  ASSERT_EQ(status, KVRT_SUCCESS) << message;
  expectAppended();
}

TEST_F(GpuTest, HostPointerLabelledCudaIsRefused) {
  std::vector<uint16_t> host(kTokens * kRowBytes / 2);
  keyTensor.get()->data = host.data();
  EXPECT_EQ(append(), KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(),
              HasSubstr("key: device is cuda:0 but its data"));
}

TEST_F(GpuTest, DeviceOutOfRange) {
  for (DLTensor *tensor : {keyTensor.get(), valueTensor.get(), slotTensor.get(),
                           kcTensor.get(), vcTensor.get()})
    tensor->device.device_id = 63;
  EXPECT_EQ(append(), KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("key: on cuda:63 but the driver"));
}

TEST_F(GpuTest, NewerTargetIsUnsupported) {
  json manifest = json::parse(readBundle());
  manifest["target"]["chip"] = "sm_120";
  loadBundle(manifest.dump());
  EXPECT_EQ(append(), KVRT_ERROR_UNSUPPORTED_DEVICE);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("compiled for sm_120"));
}

TEST_F(GpuTest, BadPtxCarriesTheJitLog) {
  json manifest = json::parse(readBundle());
  manifest.erase("cubin_base64");
  manifest["ptx"] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                    ".visible .entry kv_append(\n  .param .u64 p\n) {\n"
                    "  mov.u32 %r1, %undefined;\n  ret;\n}\n";
  loadBundle(manifest.dump());
  EXPECT_EQ(append(), KVRT_ERROR_DRIVER);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("could not JIT the bundle's PTX"));
  EXPECT_THAT(kvrt_last_error(), HasSubstr("JIT error log"));
  std::printf("the refusal: %s\n", kvrt_last_error());
}

} // namespace
