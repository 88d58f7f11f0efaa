//===- host_append.cpp - kvrt on the CPU, host-target kernels -------------===//
//
// The host target's shared object (kvgen --target=host --emit=shared-lib)
// embeds its bundle (kvgen_bundle_json) and exports one packed entry point
// per kernel (_mlir_<name>). An application loads the bundle from it,
// registers each entry point with kvrt_bundle_set_host_kernel, and then calls
// kvrt_append on kDLCPU tensors: the same validation and argument packing as
// a GPU launch, run synchronously on this thread.
//
//   kvrt-host-append [kernels.so]
//
// Appends 5 tokens (one with slot -1, a padding token) into a paged NHD f32
// cache of 4 blocks of 16 slots, 2 KV heads, head_dim 64, and checks every
// byte: each written row, and the poison left everywhere else. Exit status 0
// when all match, 1 otherwise.
//
//===----------------------------------------------------------------------===//

#include <kvrt/kvrt.h>

#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#ifndef KVRT_HOST_APPEND_KERNELS
#define KVRT_HOST_APPEND_KERNELS "kernels.so"
#endif

namespace {

constexpr int64_t kBlocks = 4, kBlockSize = 16, kHeads = 2, kHeadDim = 64;
constexpr int64_t kTokens = 5;
constexpr float kPoison = -7.0f;

void check(kvrt_status status, const char *what) {
  if (status == KVRT_SUCCESS)
    return;
  std::fprintf(stderr, "host_append: %s: %s: %s\n", what,
               kvrt_status_name(status), kvrt_last_error());
  std::exit(1);
}

DLTensor cpuTensor(void *data, DLDataType dtype, std::vector<int64_t> &shape) {
  DLTensor t = {};
  t.data = data;
  t.device = {kDLCPU, 0};
  t.ndim = static_cast<int32_t>(shape.size());
  t.dtype = dtype;
  t.shape = shape.data();
  return t; // strides NULL: row-major
}

} // namespace

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : KVRT_HOST_APPEND_KERNELS;
  void *object = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!object) {
    std::fprintf(stderr, "host_append: %s\n", dlerror());
    return 1;
  }
  using Getter = const char *(*)();
  using Size = uint64_t (*)();
  auto json = reinterpret_cast<Getter>(dlsym(object, "kvgen_bundle_json"));
  auto size = reinterpret_cast<Size>(dlsym(object, "kvgen_bundle_json_size"));
  if (!json || !size) {
    std::fprintf(stderr,
                 "host_append: %s is not a kvgen host shared object "
                 "(kvgen --target=host --emit=shared-lib)\n",
                 path);
    return 1;
  }

  kvrt_bundle *bundle = nullptr;
  check(kvrt_bundle_load_memory(json(), size(), &bundle),
        "kvrt_bundle_load_memory");
  std::string append;
  for (size_t i = 0, e = kvrt_bundle_num_kernels(bundle); i < e; ++i) {
    std::string name = kvrt_bundle_kernel_name(bundle, i);
    auto fn = reinterpret_cast<kvrt_host_kernel>(
        dlsym(object, ("_mlir_" + name).c_str()));
    if (!fn) {
      std::fprintf(stderr, "host_append: %s has no _mlir_%s\n", path,
                   name.c_str());
      return 1;
    }
    check(kvrt_bundle_set_host_kernel(bundle, name.c_str(), fn),
          "kvrt_bundle_set_host_kernel");
    if (append.empty() &&
        std::strcmp(kvrt_bundle_kernel_kind(bundle, i), "append") == 0)
      append = name;
  }
  if (append.empty()) {
    std::fprintf(stderr, "host_append: %s has no append kernel\n", path);
    return 1;
  }

  const DLDataType f32 = {kDLFloat, 32, 1}, i64 = {kDLInt, 64, 1};
  const int64_t row = kHeads * kHeadDim;
  std::vector<float> key(kTokens * row), value(kTokens * row);
  for (size_t i = 0; i < key.size(); ++i) {
    key[i] = static_cast<float>(i);
    value[i] = -static_cast<float>(i) - 1;
  }
  std::vector<int64_t> slots = {3, 17, -1, 63, 40};
  std::vector<float> keyCache(kBlocks * kBlockSize * row, kPoison);
  std::vector<float> valueCache = keyCache;

  std::vector<int64_t> srcShape = {kTokens, kHeads, kHeadDim};
  std::vector<int64_t> slotShape = {kTokens};
  std::vector<int64_t> cacheShape = {kBlocks, kBlockSize, kHeads, kHeadDim};
  DLTensor k = cpuTensor(key.data(), f32, srcShape);
  DLTensor v = cpuTensor(value.data(), f32, srcShape);
  DLTensor s = cpuTensor(slots.data(), i64, slotShape);
  DLTensor kc = cpuTensor(keyCache.data(), f32, cacheShape);
  DLTensor vc = cpuTensor(valueCache.data(), f32, cacheShape);

  kvrt_append_args args = KVRT_ARGS_INIT(kvrt_append_args);
  args.kernel = append.c_str();
  args.key = &k;
  args.value = &v;
  args.slot_mapping = &s;
  args.key_cache = &kc;
  args.value_cache = &vc;
  args.variant = KVRT_VARIANT_AUTO;
  check(kvrt_append(bundle, &args, nullptr), "kvrt_append");

  // The expected caches: the slot rule as a plain loop.
  std::vector<float> expectedKey(keyCache.size(), kPoison);
  std::vector<float> expectedValue = expectedKey;
  for (int64_t t = 0; t < kTokens; ++t) {
    if (slots[t] < 0)
      continue;
    for (int64_t i = 0; i < row; ++i) {
      expectedKey[slots[t] * row + i] = key[t * row + i];
      expectedValue[slots[t] * row + i] = value[t * row + i];
    }
  }
  bool same = std::memcmp(keyCache.data(), expectedKey.data(),
                          keyCache.size() * sizeof(float)) == 0 &&
              std::memcmp(valueCache.data(), expectedValue.data(),
                          valueCache.size() * sizeof(float)) == 0;
  kvrt_bundle_destroy(bundle);
  dlclose(object);
  if (!same) {
    std::fprintf(stderr, "host_append: the caches differ from the reference\n");
    return 1;
  }
  std::printf("host_append: %lld tokens appended on the CPU through %s, "
              "every byte as expected\n",
              static_cast<long long>(kTokens), append.c_str());
  return 0;
}
