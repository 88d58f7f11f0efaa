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

#include <nlohmann/json.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <dlfcn.h>

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

using CUresult = int;
using CUdeviceptr = unsigned long long;
using CUcontext = void *;
using CUstream = void *;
using CUgraph = void *;
using CUgraphExec = void *;

#define TEST_CUDA_SYMBOLS(X)                                                   \
  X(cuInit, "cuInit", unsigned)                                                \
  X(cuDeviceGetCount, "cuDeviceGetCount", int *)                               \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", CUcontext *, int)    \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", CUcontext)                             \
  X(cuCtxSynchronize, "cuCtxSynchronize", )                                    \
  X(cuMemAlloc, "cuMemAlloc_v2", CUdeviceptr *, size_t)                        \
  X(cuMemFree, "cuMemFree_v2", CUdeviceptr)                                    \
  X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", CUdeviceptr, const void *, size_t)        \
  X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", void *, CUdeviceptr, size_t)              \
  X(cuMemsetD8, "cuMemsetD8_v2", CUdeviceptr, unsigned char, size_t)           \
  X(cuStreamCreate, "cuStreamCreate", CUstream *, unsigned)                    \
  X(cuStreamDestroy, "cuStreamDestroy_v2", CUstream)                           \
  X(cuStreamSynchronize, "cuStreamSynchronize", CUstream)                      \
  X(cuStreamBeginCapture, "cuStreamBeginCapture_v2", CUstream, int)            \
  X(cuStreamEndCapture, "cuStreamEndCapture", CUstream, CUgraph *)             \
  X(cuGraphInstantiate, "cuGraphInstantiateWithFlags", CUgraphExec *, CUgraph, \
    unsigned long long)                                                        \
  X(cuGraphLaunch, "cuGraphLaunch", CUgraphExec, CUstream)                     \
  X(cuGraphExecDestroy, "cuGraphExecDestroy", CUgraphExec)                     \
  X(cuGraphDestroy, "cuGraphDestroy", CUgraph)

struct Driver {
#define TEST_DECLARE(name, symbol, ...) CUresult (*name)(__VA_ARGS__);
  TEST_CUDA_SYMBOLS(TEST_DECLARE)
#undef TEST_DECLARE
  std::string unavailable; // why not, if so
};

const Driver &driver() {
  static const Driver loaded = [] {
    Driver d;
    void *library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!library) {
      d.unavailable = "no libcuda.so.1 (no NVIDIA driver)";
      return d;
    }
#define TEST_RESOLVE(name, symbol, ...)                                        \
  d.name = reinterpret_cast<decltype(d.name)>(dlsym(library, symbol));         \
  if (!d.name) {                                                               \
    d.unavailable = std::string("the driver lacks ") + symbol;                 \
    return d;                                                                  \
  }
    TEST_CUDA_SYMBOLS(TEST_RESOLVE)
#undef TEST_RESOLVE
    int count = 0;
    CUcontext context = nullptr;
    if (d.cuInit(0) || d.cuDeviceGetCount(&count) || count == 0 ||
        d.cuDevicePrimaryCtxRetain(&context, 0))
      d.unavailable = "no usable GPU";
    return d;
  }();
  return loaded;
}

#define CU(call) ASSERT_EQ(driver().call, 0) << #call

constexpr int64_t kTokens = 40, kHeads = 8, kHeadDim = 128, kBlockSize = 16,
                  kBlocks = 16;
constexpr size_t kRowBytes = kHeads * kHeadDim * 2;

struct Buffer {
  explicit Buffer(size_t bytes) : bytes(bytes) {
    driver().cuMemAlloc(&pointer, bytes);
  }
  ~Buffer() { driver().cuMemFree(pointer); }
  Buffer(const Buffer &) = delete;
  void *data() const { return reinterpret_cast<void *>(pointer); }
  CUdeviceptr pointer = 0;
  size_t bytes;
};

DLTensor tensorOf(void *data, DLDataType dtype, std::vector<int64_t> &shape) {
  DLTensor tensor = {};
  tensor.data = data;
  tensor.device = {kDLCUDA, 0};
  tensor.ndim = static_cast<int32_t>(shape.size());
  tensor.dtype = dtype;
  tensor.shape = shape.data();
  return tensor;
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
    if (!driver().unavailable.empty())
      GTEST_SKIP() << driver().unavailable;
    CUcontext context = nullptr;
    CU(cuDevicePrimaryCtxRetain(&context, 0));
    CU(cuCtxSetCurrent(context));
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
    CU(cuMemcpyHtoD(slots->pointer, hostSlots.data(), slots->bytes));
    hostKey.resize(kTokens * kRowBytes / 2);
    for (size_t i = 0; i < hostKey.size(); ++i)
      hostKey[i] = static_cast<uint16_t>(0x3c00 + i % 509);
    CU(cuMemcpyHtoD(key->pointer, hostKey.data(), key->bytes));
    CU(cuMemcpyHtoD(value->pointer, hostKey.data(), value->bytes));
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
    args = {nullptr,   &keyTensor, &valueTensor,     &slotTensor,
            &kcTensor, &vcTensor,  KVRT_VARIANT_AUTO};
    return kvrt_append(bundle, &args, stream);
  }

  /// Every slot the append wrote holds its token's row; the rest is poison.
  void expectAppended() {
    std::vector<uint16_t> cache(keyCache->bytes / 2);
    ASSERT_EQ(driver().cuCtxSynchronize(), 0);
    CU(cuMemcpyDtoH(cache.data(), keyCache->pointer, keyCache->bytes));
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
  DLTensor keyTensor = {}, valueTensor = {}, slotTensor = {}, kcTensor = {},
           vcTensor = {};
  kvrt_append_args args = {};
  std::vector<int64_t> hostSlots;
  std::vector<uint16_t> hostKey;
};

TEST_F(GpuTest, AppendWritesTheSlots) {
  CU(cuMemsetD8(keyCache->pointer, 0xA5, keyCache->bytes));
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  expectAppended();
}

TEST_F(GpuTest, CheckedModeRefusesADuplicateSlotAndWritesNothing) {
  CU(cuMemsetD8(keyCache->pointer, 0xA5, keyCache->bytes));
  ASSERT_EQ(kvrt_bundle_set_checked(bundle, 1), KVRT_SUCCESS);
  hostSlots[7] = hostSlots[3];
  CU(cuMemcpyHtoD(slots->pointer, hostSlots.data(), slots->bytes));
  EXPECT_EQ(append(), KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(),
              HasSubstr("slot_mapping[7] = 10 is also used by token 3"));
  std::vector<uint8_t> cache(keyCache->bytes);
  CU(cuMemcpyDtoH(cache.data(), keyCache->pointer, keyCache->bytes));
  EXPECT_TRUE(std::all_of(cache.begin(), cache.end(), [](uint8_t byte) {
    return byte == 0xA5;
  })) << "a refused launch wrote the cache";
}

TEST_F(GpuTest, CheckedModeRefusesASlotPastTheCache) {
  ASSERT_EQ(kvrt_bundle_set_checked(bundle, 1), KVRT_SUCCESS);
  hostSlots[2] = kBlocks * kBlockSize;
  CU(cuMemcpyHtoD(slots->pointer, hostSlots.data(), slots->bytes));
  EXPECT_EQ(append(), KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("slot_mapping[2] = "));
  EXPECT_THAT(kvrt_last_error(), HasSubstr("is out of range"));
}

TEST_F(GpuTest, CheckedModeAppendsDistinctSlots) {
  CU(cuMemsetD8(keyCache->pointer, 0xA5, keyCache->bytes));
  ASSERT_EQ(kvrt_bundle_set_checked(bundle, 1), KVRT_SUCCESS);
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  expectAppended();
}

TEST_F(GpuTest, CapturedInACudaGraph) {
  CUstream stream = nullptr;
  CU(cuStreamCreate(&stream, 0));
  // The first launch loads the module; capture then sees only the launch.
  ASSERT_EQ(append(stream), KVRT_SUCCESS) << kvrt_last_error();
  CU(cuStreamSynchronize(stream));
  CU(cuMemsetD8(keyCache->pointer, 0xA5, keyCache->bytes));
  // Global mode: capture fails if the launch allocates or synchronizes.
  CU(cuStreamBeginCapture(stream, /*CU_STREAM_CAPTURE_MODE_GLOBAL=*/0));
  kvrt_status status = append(stream);
  CUgraph graph = nullptr;
  CU(cuStreamEndCapture(stream, &graph));
  ASSERT_EQ(status, KVRT_SUCCESS) << kvrt_last_error();
  CUgraphExec exec = nullptr;
  CU(cuGraphInstantiate(&exec, graph, 0));
  CU(cuGraphLaunch(exec, stream));
  CU(cuStreamSynchronize(stream));
  expectAppended();
  driver().cuGraphExecDestroy(exec);
  driver().cuGraphDestroy(graph);
  driver().cuStreamDestroy(stream);
}

TEST_F(GpuTest, NoCurrentContextUsesThePrimaryOne) {
  CU(cuMemsetD8(keyCache->pointer, 0xA5, keyCache->bytes));
  CU(cuCtxSynchronize());
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
  keyTensor.data = host.data();
  EXPECT_EQ(append(), KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(),
              HasSubstr("key: device is cuda:0 but its data"));
}

TEST_F(GpuTest, DeviceOutOfRange) {
  for (DLTensor *tensor :
       {&keyTensor, &valueTensor, &slotTensor, &kcTensor, &vcTensor})
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
