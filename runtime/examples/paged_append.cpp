//===- paged_append.cpp - kvrt end to end: prefill and decode appends -----===//
//
// Loads a kvgen bundle, builds a paged NHD bf16 KV cache (block 16, 8 KV
// heads, head_dim 128) in GPU memory, appends one chunked prefill of two
// requests (529 tokens, padded to 536) through kvrt_build_slot_mapping +
// kvrt_append, then three decode steps through kvrt_fused_append (one with
// the scalar variant forced), copies the caches back and checks every byte:
// each written slot against a plain loop, every other byte still poison.
//
//   kvrt-example-paged-append [--time] [bundle.json ...]
//
// With no bundle argument it loads KVRT_EXAMPLE_DEFAULT_BUNDLE, set at
// configure time to out/default.bundle.json, which scripts/main.sh writes.
// Several bundles may be given; each kind of kernel is taken from the first
// bundle that has it. A bundle without a slot_mapping kernel gets the slot
// mapping from the host; one without fused_append decodes through slot_mapping
// + append.
//
// --time also measures the host cost of a decode-sized kvrt_fused_append
// beside an empty kernel launched through the driver directly.
//
// Exit status: 0 when every byte matches; 1 on any failure; 77 ("skipped",
// as automake and ctest's SKIP_RETURN_CODE read it) with "skipped: <reason>"
// when there is no NVIDIA driver, no GPU, or no bundle at the given path.
//
// The example reaches the CUDA driver the way kvrt does, through
// dlopen("libcuda.so.1"), so it builds without the CUDA toolkit.
//
//===----------------------------------------------------------------------===//

#include <kvrt/kvrt.h>

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#ifndef KVRT_EXAMPLE_DEFAULT_BUNDLE
#define KVRT_EXAMPLE_DEFAULT_BUNDLE "out/default.bundle.json"
#endif

namespace {

constexpr int kSkip = 77;

// The cache this example builds; the bundle must describe the same one.
constexpr int64_t kBlockSize = 16;
constexpr int64_t kHeads = 8;
constexpr int64_t kHeadDim = 128;
constexpr int64_t kBlocks = 64;
constexpr int64_t kMaxBlocksPerReq = 32;
constexpr int64_t kRequests = 2;
// K and V are views into a fused QKV projection with 32 query heads.
constexpr int64_t kQueryHeads = 32;
constexpr int64_t kQkvRow = (kQueryHeads + 2 * kHeads) * kHeadDim;
constexpr uint8_t kPoison = 0xA5;

//===----------------------------------------------------------------------===//
// The CUDA driver, dlopen'ed
//===----------------------------------------------------------------------===//

using CUresult = int;
using CUdeviceptr = unsigned long long;
using CUcontext = void *;
using CUmodule = void *;
using CUfunction = void *;

#define EXAMPLE_CUDA_SYMBOLS(X)                                                \
  X(cuInit, "cuInit", unsigned)                                                \
  X(cuDeviceGetCount, "cuDeviceGetCount", int *)                               \
  X(cuDeviceGet, "cuDeviceGet", int *, int)                                    \
  X(cuDeviceGetName, "cuDeviceGetName", char *, int, int)                      \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", CUcontext *, int)    \
  X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", int)            \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", CUcontext)                             \
  X(cuCtxSynchronize, "cuCtxSynchronize", )                                    \
  X(cuMemAlloc, "cuMemAlloc_v2", CUdeviceptr *, size_t)                        \
  X(cuMemFree, "cuMemFree_v2", CUdeviceptr)                                    \
  X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", CUdeviceptr, const void *, size_t)        \
  X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", void *, CUdeviceptr, size_t)              \
  X(cuMemsetD8, "cuMemsetD8_v2", CUdeviceptr, unsigned char, size_t)           \
  X(cuModuleLoadData, "cuModuleLoadData", CUmodule *, const void *)            \
  X(cuModuleGetFunction, "cuModuleGetFunction", CUfunction *, CUmodule,        \
    const char *)                                                              \
  X(cuModuleUnload, "cuModuleUnload", CUmodule)                                \
  X(cuLaunchKernel, "cuLaunchKernel", CUfunction, unsigned, unsigned,          \
    unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **,         \
    void **)                                                                   \
  X(cuGetErrorName, "cuGetErrorName", CUresult, const char **)

struct Driver {
#define EXAMPLE_DECLARE(name, symbol, ...) CUresult (*name)(__VA_ARGS__);
  EXAMPLE_CUDA_SYMBOLS(EXAMPLE_DECLARE)
#undef EXAMPLE_DECLARE
};

Driver cu;

/// Loads the driver and makes device 0's primary context current; the
/// reason it cannot otherwise.
std::string openDriver(CUcontext *context) {
  void *library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library)
    return "libcuda.so.1 not found (no NVIDIA driver on this machine)";
#define EXAMPLE_RESOLVE(name, symbol, ...)                                     \
  cu.name = reinterpret_cast<decltype(cu.name)>(dlsym(library, symbol));       \
  if (!cu.name)                                                                \
    return std::string("the driver lacks ") + symbol;
  EXAMPLE_CUDA_SYMBOLS(EXAMPLE_RESOLVE)
#undef EXAMPLE_RESOLVE
  int count = 0;
  if (cu.cuInit(0) != 0 || cu.cuDeviceGetCount(&count) != 0 || count == 0)
    return "the CUDA driver reports no usable GPU";
  if (cu.cuDevicePrimaryCtxRetain(context, 0) != 0 ||
      cu.cuCtxSetCurrent(*context) != 0)
    return "cannot make device 0's primary context current";
  return "";
}

void checkCuda(CUresult result, const char *what) {
  if (result == 0)
    return;
  const char *name = "?";
  cu.cuGetErrorName(result, &name);
  std::fprintf(stderr, "paged_append: %s failed: %s\n", what, name);
  std::exit(1);
}

/// A device allocation described as a DLTensor.
struct DeviceTensor {
  DeviceTensor(DLDataType dtype, std::vector<int64_t> shapeIn,
               size_t bytesIn = 0)
      : shape(std::move(shapeIn)) {
    bytes = bytesIn;
    if (!bytes) {
      bytes = (dtype.bits / 8);
      for (int64_t extent : shape)
        bytes *= static_cast<size_t>(extent);
    }
    checkCuda(cu.cuMemAlloc(&pointer, bytes), "cuMemAlloc");
    tensor.data = reinterpret_cast<void *>(pointer);
    tensor.device = {kDLCUDA, 0};
    tensor.ndim = static_cast<int32_t>(shape.size());
    tensor.dtype = dtype;
    tensor.shape = shape.data();
    tensor.strides = nullptr;
    tensor.byte_offset = 0;
  }
  DeviceTensor(const DeviceTensor &) = delete;
  ~DeviceTensor() { cu.cuMemFree(pointer); }

  /// A strided view of the same memory (e.g. K inside a QKV projection).
  DLTensor view(std::vector<int64_t> &viewShape,
                std::vector<int64_t> &viewStrides, uint64_t byteOffset,
                DLDataType dtype) const {
    DLTensor result = tensor;
    result.ndim = static_cast<int32_t>(viewShape.size());
    result.shape = viewShape.data();
    result.strides = viewStrides.data();
    result.byte_offset = byteOffset;
    result.dtype = dtype;
    return result;
  }

  template <typename T> void upload(const std::vector<T> &host) {
    checkCuda(cu.cuMemcpyHtoD(pointer, host.data(), host.size() * sizeof(T)),
              "cuMemcpyHtoD");
  }
  template <typename T> std::vector<T> download() const {
    std::vector<T> host(bytes / sizeof(T));
    checkCuda(cu.cuMemcpyDtoH(host.data(), pointer, bytes), "cuMemcpyDtoH");
    return host;
  }
  void fill(uint8_t byte) {
    checkCuda(cu.cuMemsetD8(pointer, byte, bytes), "cuMemsetD8");
  }

  CUdeviceptr pointer = 0;
  size_t bytes = 0;
  std::vector<int64_t> shape;
  DLTensor tensor = {};
};

constexpr DLDataType kBF16 = {kDLBfloat, 16, 1};
constexpr DLDataType kI32 = {kDLInt, 32, 1};
constexpr DLDataType kI64 = {kDLInt, 64, 1};

uint16_t toBF16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  bits += 0x7fff + ((bits >> 16) & 1); // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

//===----------------------------------------------------------------------===//
// Bundles
//===----------------------------------------------------------------------===//

struct Kernels {
  std::vector<kvrt_bundle *> bundles;
  /// Per kind: the bundle and the description name, or none.
  kvrt_bundle *appendBundle = nullptr, *slotsBundle = nullptr,
              *fusedBundle = nullptr;
  std::string append, slots, fused;
};

void findKinds(Kernels &kernels) {
  for (kvrt_bundle *bundle : kernels.bundles) {
    for (size_t i = 0, e = kvrt_bundle_num_kernels(bundle); i < e; ++i) {
      std::string kind = kvrt_bundle_kernel_kind(bundle, i);
      std::string name = kvrt_bundle_kernel_name(bundle, i);
      // A description is named by its vector kernel: strip "_scalar".
      if (kind != "slot_mapping" &&
          std::string(kvrt_bundle_kernel_variant(bundle, i)) == "scalar")
        name.resize(name.size() - 7);
      auto take = [&](kvrt_bundle *&whichBundle, std::string &whichName) {
        if (!whichBundle) {
          whichBundle = bundle;
          whichName = name;
        }
      };
      if (kind == "append")
        take(kernels.appendBundle, kernels.append);
      else if (kind == "slot_mapping")
        take(kernels.slotsBundle, kernels.slots);
      else if (kind == "fused_append")
        take(kernels.fusedBundle, kernels.fused);
    }
  }
}

void checkKvrt(kvrt_status status, const char *what) {
  if (status == KVRT_SUCCESS)
    return;
  std::fprintf(stderr, "paged_append: %s refused: %s: %s\n", what,
               kvrt_status_name(status), kvrt_last_error());
  std::exit(1);
}

//===----------------------------------------------------------------------===//
// The reference
//===----------------------------------------------------------------------===//

struct Step {
  std::vector<int32_t> queryStartLoc;
  std::vector<int32_t> contextLens;
  int64_t numTokens = 0; // padded
};

/// docs/KERNEL-ABI.md's slot rule, as a plain loop.
std::vector<int64_t> referenceSlots(const Step &step,
                                    const std::vector<int32_t> &blockTable) {
  std::vector<int64_t> slots(step.numTokens, -1);
  for (int64_t r = 0; r < kRequests; ++r) {
    for (int32_t t = step.queryStartLoc[r]; t < step.queryStartLoc[r + 1];
         ++t) {
      int64_t position = step.contextLens[r] + t - step.queryStartLoc[r];
      if (position / kBlockSize >= kMaxBlocksPerReq)
        continue;
      int32_t block = blockTable[r * kMaxBlocksPerReq + position / kBlockSize];
      if (block >= 0)
        slots[t] = block * kBlockSize + position % kBlockSize;
    }
  }
  return slots;
}

/// Writes token `t` of `qkv` (K at head offset kQueryHeads, V after it) into
/// the expected NHD caches.
void referenceAppend(const std::vector<uint16_t> &qkv,
                     const std::vector<int64_t> &slots,
                     std::vector<uint16_t> &keyCache,
                     std::vector<uint16_t> &valueCache) {
  for (size_t t = 0; t < slots.size(); ++t) {
    int64_t slot = slots[t];
    if (slot < 0 || slot / kBlockSize >= kBlocks)
      continue;
    for (int64_t h = 0; h < kHeads; ++h) {
      for (int64_t d = 0; d < kHeadDim; ++d) {
        int64_t cache = (slot * kHeads + h) * kHeadDim + d;
        keyCache[cache] = qkv[t * kQkvRow + (kQueryHeads + h) * kHeadDim + d];
        valueCache[cache] =
            qkv[t * kQkvRow + (kQueryHeads + kHeads + h) * kHeadDim + d];
      }
    }
  }
}

std::vector<uint16_t> randomQkv(int64_t tokens, std::mt19937 &random) {
  std::uniform_real_distribution<float> values(-4.0f, 4.0f);
  std::vector<uint16_t> qkv(tokens * kQkvRow);
  for (uint16_t &value : qkv)
    value = toBF16(values(random));
  return qkv;
}

struct Cache {
  DeviceTensor key{kBF16, {kBlocks, kBlockSize, kHeads, kHeadDim}};
  DeviceTensor value{kBF16, {kBlocks, kBlockSize, kHeads, kHeadDim}};
};

/// K and V views of a device QKV buffer of `tokens` rows.
struct QkvViews {
  QkvViews(const DeviceTensor &qkv, int64_t tokens)
      : shape{tokens, kHeads, kHeadDim}, strides{kQkvRow, kHeadDim, 1} {
    key = qkv.view(shape, strides, kQueryHeads * kHeadDim * 2, kBF16);
    value =
        qkv.view(shape, strides, (kQueryHeads + kHeads) * kHeadDim * 2, kBF16);
  }
  std::vector<int64_t> shape, strides;
  DLTensor key, value;
};

/// Runs one step: slot mapping + append, or fused append.
void runStep(const Kernels &kernels, const Step &step, bool fused,
             kvrt_variant variant, const DeviceTensor &qkv,
             DeviceTensor &blockTable, Cache &cache,
             const std::vector<int32_t> &hostBlockTable,
             std::vector<int64_t> *slotsOut) {
  DeviceTensor queryStartLoc(kI32, {kRequests + 1});
  DeviceTensor contextLens(kI32, {kRequests});
  queryStartLoc.upload(step.queryStartLoc);
  contextLens.upload(step.contextLens);
  QkvViews views(qkv, step.numTokens);

  if (fused) {
    kvrt_fused_append_args args = {kernels.fused.c_str(),
                                   &views.key,
                                   &views.value,
                                   &blockTable.tensor,
                                   &queryStartLoc.tensor,
                                   &contextLens.tensor,
                                   &cache.key.tensor,
                                   &cache.value.tensor,
                                   variant};
    checkKvrt(kvrt_fused_append(kernels.fusedBundle, &args, nullptr),
              "kvrt_fused_append");
    return;
  }

  DeviceTensor slots(kI64, {step.numTokens});
  std::vector<int64_t> expected = referenceSlots(step, hostBlockTable);
  if (kernels.slotsBundle) {
    slots.fill(0x5A); // so that an unwritten slot shows
    kvrt_slot_mapping_args args = {kernels.slots.c_str(), &blockTable.tensor,
                                   &queryStartLoc.tensor, &contextLens.tensor,
                                   &slots.tensor};
    checkKvrt(kvrt_build_slot_mapping(kernels.slotsBundle, &args, nullptr),
              "kvrt_build_slot_mapping");
  } else {
    slots.upload(expected);
  }
  kvrt_append_args args = {
      kernels.append.c_str(), &views.key,          &views.value, &slots.tensor,
      &cache.key.tensor,      &cache.value.tensor, variant};
  checkKvrt(kvrt_append(kernels.appendBundle, &args, nullptr), "kvrt_append");
  checkCuda(cu.cuCtxSynchronize(), "cuCtxSynchronize");
  *slotsOut = slots.download<int64_t>();
  if (*slotsOut != expected) {
    for (size_t t = 0; t < expected.size(); ++t) {
      if ((*slotsOut)[t] != expected[t]) {
        std::fprintf(stderr,
                     "paged_append: slot_mapping[%zu] is %lld, expected "
                     "%lld\n",
                     t, static_cast<long long>((*slotsOut)[t]),
                     static_cast<long long>(expected[t]));
        std::exit(1);
      }
    }
  }
}

size_t compareCaches(const char *name, const std::vector<uint16_t> &actual,
                     const std::vector<uint16_t> &expected) {
  size_t mismatches = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (actual[i] == expected[i])
      continue;
    if (mismatches++ < 5) {
      size_t slot = i / (kHeads * kHeadDim);
      std::fprintf(
          stderr,
          "paged_append: %s block %zu pos %zu head %zu dim %zu: "
          "0x%04x, expected 0x%04x%s\n",
          name, slot / kBlockSize, slot % kBlockSize, (i / kHeadDim) % kHeads,
          i % kHeadDim, actual[i], expected[i],
          expected[i] == kPoison * 0x101 ? " (poison: never written)" : "");
    }
  }
  return mismatches;
}

/// Host time per call of `launch`, in microseconds, over batches that keep
/// the GPU's queue from filling.
template <typename Launch> double timeLaunches(Launch launch) {
  constexpr int kBatches = 20, kPerBatch = 100;
  double total = 0;
  for (int batch = 0; batch < kBatches; ++batch) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kPerBatch; ++i)
      launch();
    auto stop = std::chrono::steady_clock::now();
    checkCuda(cu.cuCtxSynchronize(), "cuCtxSynchronize");
    if (batch > 0) // the first batch warms up
      total += std::chrono::duration<double, std::micro>(stop - start).count();
  }
  return total / ((kBatches - 1) * kPerBatch);
}

} // namespace

int main(int argc, char **argv) {
  bool time = false;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--time") == 0)
      time = true;
    else
      paths.push_back(argv[i]);
  }
  if (paths.empty())
    paths.push_back(KVRT_EXAMPLE_DEFAULT_BUNDLE);

  CUcontext context = nullptr;
  std::string reason = openDriver(&context);
  if (!reason.empty()) {
    std::printf("skipped: %s\n", reason.c_str());
    return kSkip;
  }
  char deviceName[128] = "?";
  cu.cuDeviceGetName(deviceName, sizeof(deviceName), 0);

  Kernels kernels;
  for (const std::string &path : paths) {
    struct stat info;
    if (stat(path.c_str(), &info) != 0) {
      std::printf("skipped: no bundle at %s (build one with kvgen, or pass "
                  "its path)\n",
                  path.c_str());
      return kSkip;
    }
    kvrt_bundle *bundle = nullptr;
    checkKvrt(kvrt_bundle_load_file(path.c_str(), &bundle),
              "kvrt_bundle_load_file");
    kernels.bundles.push_back(bundle);
  }
  findKinds(kernels);
  if (!kernels.appendBundle) {
    std::fprintf(stderr, "paged_append: no append kernel in the bundle(s)\n");
    return 1;
  }
  std::printf("paged_append on %s: append '%s', slot_mapping '%s', "
              "fused_append '%s'\n",
              deviceName, kernels.append.c_str(),
              kernels.slotsBundle ? kernels.slots.c_str() : "(host)",
              kernels.fusedBundle ? kernels.fused.c_str()
                                  : "(slot_mapping + append)");

  std::mt19937 random(2026);
  Cache cache;
  cache.key.fill(kPoison);
  cache.value.fill(kPoison);
  std::vector<uint16_t> expectedKey(cache.key.bytes / 2, kPoison * 0x101);
  std::vector<uint16_t> expectedValue = expectedKey;

  // Each request owns 32 blocks, in a random order.
  std::vector<int32_t> permutation(kBlocks);
  std::iota(permutation.begin(), permutation.end(), 0);
  std::shuffle(permutation.begin(), permutation.end(), random);
  std::vector<int32_t> hostBlockTable(
      permutation.begin(), permutation.begin() + kRequests * kMaxBlocksPerReq);
  DeviceTensor blockTable(kI32, {kRequests, kMaxBlocksPerReq});
  blockTable.upload(hostBlockTable);

  // Prefill: request 0 from position 0 (300 tokens), request 1 a chunk of
  // 229 after 5 cached tokens; 7 padding tokens at the end.
  Step prefill{{0, 300, 529}, {0, 5}, 536};
  std::vector<uint16_t> hostQkv = randomQkv(prefill.numTokens, random);
  DeviceTensor qkv(kBF16, {prefill.numTokens, kQkvRow});
  qkv.upload(hostQkv);
  std::vector<int64_t> slots;
  runStep(kernels, prefill, /*fused=*/false, KVRT_VARIANT_AUTO, qkv, blockTable,
          cache, hostBlockTable, &slots);
  referenceAppend(hostQkv, slots, expectedKey, expectedValue);
  size_t written = std::count_if(slots.begin(), slots.end(),
                                 [](int64_t slot) { return slot >= 0; });

  // Decode: one token per request, padded to 4 (CUDA-graph style).
  for (int step = 0; step < 3; ++step) {
    Step decode{{0, 1, 2}, {300 + step, 234 + step}, 4};
    std::vector<uint16_t> stepQkv = randomQkv(decode.numTokens, random);
    DeviceTensor stepDevice(kBF16, {decode.numTokens, kQkvRow});
    stepDevice.upload(stepQkv);
    kvrt_variant variant = step == 1 ? KVRT_VARIANT_SCALAR : KVRT_VARIANT_AUTO;
    std::vector<int64_t> stepSlots = referenceSlots(decode, hostBlockTable);
    runStep(kernels, decode, kernels.fusedBundle != nullptr, variant,
            stepDevice, blockTable, cache, hostBlockTable, &slots);
    checkCuda(cu.cuCtxSynchronize(), "cuCtxSynchronize");
    referenceAppend(stepQkv, stepSlots, expectedKey, expectedValue);
    written += 2;
  }

  checkCuda(cu.cuCtxSynchronize(), "cuCtxSynchronize");
  size_t mismatches =
      compareCaches("key_cache", cache.key.download<uint16_t>(), expectedKey) +
      compareCaches("value_cache", cache.value.download<uint16_t>(),
                    expectedValue);
  if (mismatches) {
    std::fprintf(stderr, "paged_append: FAILED: %zu mismatching elements\n",
                 mismatches);
    return 1;
  }
  std::printf("paged_append: %zu slots written (prefill 529 tokens + 7 "
              "padding, 3 decode steps); K and V caches match byte for byte, "
              "every other byte kept its poison\n",
              written);

  if (time && kernels.fusedBundle) {
    // A decode-sized fused append against an empty kernel, both launched
    // from this loop.
    static const char kEmptyPtx[] = ".version 7.0\n.target sm_52\n"
                                    ".address_size 64\n"
                                    ".visible .entry kvrt_empty() { ret; }\n";
    CUmodule module = nullptr;
    CUfunction empty = nullptr;
    checkCuda(cu.cuModuleLoadData(&module, kEmptyPtx), "cuModuleLoadData");
    checkCuda(cu.cuModuleGetFunction(&empty, module, "kvrt_empty"),
              "cuModuleGetFunction");
    double emptyUs = timeLaunches([&] {
      checkCuda(cu.cuLaunchKernel(empty, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr,
                                  nullptr),
                "cuLaunchKernel");
    });
    // The same with fused_append's 54 eight-byte parameters: the part of a
    // launch that is the driver copying arguments.
    std::string widePtx = ".version 7.0\n.target sm_52\n.address_size 64\n"
                          ".visible .entry kvrt_empty_wide(";
    for (int i = 0; i < 54; ++i)
      widePtx +=
          std::string(i ? ", " : "") + ".param .u64 p" + std::to_string(i);
    widePtx += ") { ret; }\n";
    CUmodule wideModule = nullptr;
    CUfunction wide = nullptr;
    checkCuda(cu.cuModuleLoadData(&wideModule, widePtx.c_str()),
              "cuModuleLoadData");
    checkCuda(cu.cuModuleGetFunction(&wide, wideModule, "kvrt_empty_wide"),
              "cuModuleGetFunction");
    int64_t values[54] = {};
    void *wideParams[54];
    for (int i = 0; i < 54; ++i)
      wideParams[i] = &values[i];
    double wideUs = timeLaunches([&] {
      checkCuda(cu.cuLaunchKernel(wide, 1, 1, 1, 128, 1, 1, 0, nullptr,
                                  wideParams, nullptr),
                "cuLaunchKernel");
    });
    Step decode{{0, 1, 2}, {400, 300}, 2};
    DeviceTensor queryStartLoc(kI32, {kRequests + 1});
    DeviceTensor contextLens(kI32, {kRequests});
    queryStartLoc.upload(decode.queryStartLoc);
    contextLens.upload(decode.contextLens);
    QkvViews views(qkv, decode.numTokens);
    kvrt_fused_append_args args = {kernels.fused.c_str(), &views.key,
                                   &views.value,          &blockTable.tensor,
                                   &queryStartLoc.tensor, &contextLens.tensor,
                                   &cache.key.tensor,     &cache.value.tensor,
                                   KVRT_VARIANT_AUTO};
    double fusedUs = timeLaunches([&] {
      checkKvrt(kvrt_fused_append(kernels.fusedBundle, &args, nullptr),
                "kvrt_fused_append");
    });
    std::printf("paged_append: host time per launch: empty kernel %.2f us, "
                "empty kernel with 54 params %.2f us, kvrt_fused_append (2 "
                "tokens) %.2f us (%.0f%% of the empty kernel, %.0f%% of the "
                "54-param one)\n",
                emptyUs, wideUs, fusedUs, 100.0 * fusedUs / emptyUs,
                100.0 * fusedUs / wideUs);
    cu.cuModuleUnload(module);
    cu.cuModuleUnload(wideModule);
  }

  for (kvrt_bundle *bundle : kernels.bundles)
    kvrt_bundle_destroy(bundle);
  cu.cuDevicePrimaryCtxRelease(0);
  return 0;
}
