//===- paged_append.cpp - kvrt in an application: prefill and decode ------===//
//
// What a serving engine does with kvrt, and nothing else: load a bundle, make
// a paged NHD bf16 KV cache (block 16, 8 KV heads, head_dim 128) with the CUDA
// runtime, append one chunked prefill of two requests through
// kvrt_build_slot_mapping + kvrt_append, then three decode steps through
// kvrt_fused_append, and check the cache against a plain loop: every written
// row, and every other byte still holding its poison.
//
//   kvrt-example-paged-append [bundle.json]
//
// Without an argument it loads the default bundle the build writes
// (KVRT_EXAMPLE_DEFAULT_BUNDLE). Exit status: 0 when every byte matches, 1
// on a failure, 77 ("skipped", as ctest's SKIP_RETURN_CODE reads it) when
// there is no GPU or no bundle.
//
//===----------------------------------------------------------------------===//

#include <kvrt/kvrt.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#ifndef KVRT_EXAMPLE_DEFAULT_BUNDLE
#define KVRT_EXAMPLE_DEFAULT_BUNDLE "default.bundle.json"
#endif

namespace {

// The cache; the bundle's description must be the same one.
constexpr int64_t kBlockSize = 16, kHeads = 8, kHeadDim = 128;
constexpr int64_t kBlocks = 64, kRequests = 2, kMaxBlocksPerReq = 32;
// K and V are views into a fused QKV projection with 32 query heads, as in
// most models: their token stride is the whole QKV row.
constexpr int64_t kQueryHeads = 32;
constexpr int64_t kQkvRow = (kQueryHeads + 2 * kHeads) * kHeadDim;
constexpr uint16_t kPoison = 0xA5A5;

void check(cudaError_t error, const char *what) {
  if (error == cudaSuccess)
    return;
  std::fprintf(stderr, "paged_append: %s: %s\n", what,
               cudaGetErrorString(error));
  std::exit(1);
}

void check(kvrt_status status, const char *what) {
  if (status == KVRT_SUCCESS)
    return;
  // kvrt's message names the tensor and the rule it broke.
  std::fprintf(stderr, "paged_append: %s: %s: %s\n", what,
               kvrt_status_name(status), kvrt_last_error());
  std::exit(1);
}

/// A device buffer and the DLTensor that describes it to kvrt.
struct Tensor {
  Tensor(DLDataType dtype, std::vector<int64_t> dims) : shape(std::move(dims)) {
    bytes = dtype.bits / 8;
    for (int64_t extent : shape)
      bytes *= extent;
    check(cudaMalloc(&data, bytes), "cudaMalloc");
    dl.data = data;
    dl.device = {kDLCUDA, 0};
    dl.ndim = static_cast<int32_t>(shape.size());
    dl.dtype = dtype;
    dl.shape = shape.data();
  }
  Tensor(const Tensor &) = delete;
  ~Tensor() { cudaFree(data); }

  template <typename T> void upload(const std::vector<T> &host) {
    check(cudaMemcpy(data, host.data(), host.size() * sizeof(T),
                     cudaMemcpyHostToDevice),
          "cudaMemcpy");
  }
  template <typename T> std::vector<T> download() const {
    std::vector<T> host(bytes / sizeof(T));
    check(cudaMemcpy(host.data(), data, bytes, cudaMemcpyDeviceToHost),
          "cudaMemcpy");
    return host;
  }

  void *data = nullptr;
  size_t bytes = 0;
  std::vector<int64_t> shape;
  DLTensor dl = {};
};

constexpr DLDataType kBF16 = {kDLBfloat, 16, 1};
constexpr DLDataType kI32 = {kDLInt, 32, 1};
constexpr DLDataType kI64 = {kDLInt, 64, 1};

/// K and V as strided views into a QKV buffer: no copy.
struct QkvViews {
  QkvViews(const Tensor &qkv, int64_t tokens)
      : shape{tokens, kHeads, kHeadDim}, strides{kQkvRow, kHeadDim, 1} {
    key = value = qkv.dl;
    for (DLTensor *view : {&key, &value}) {
      view->ndim = 3;
      view->shape = shape.data();
      view->strides = strides.data();
    }
    key.byte_offset = kQueryHeads * kHeadDim * 2;
    value.byte_offset = (kQueryHeads + kHeads) * kHeadDim * 2;
  }
  std::vector<int64_t> shape, strides;
  DLTensor key, value;
};

/// The name of the bundle's `kind` kernel: its vector variant where it has
/// one (kvrt then picks the variant per launch), else its only one; empty if
/// the bundle has none.
std::string findKernel(const kvrt_bundle *bundle, const char *kind) {
  std::string found;
  for (size_t i = 0, e = kvrt_bundle_num_kernels(bundle); i < e; ++i) {
    if (std::strcmp(kvrt_bundle_kernel_kind(bundle, i), kind) != 0)
      continue;
    if (std::strcmp(kvrt_bundle_kernel_variant(bundle, i), "vector") == 0)
      return kvrt_bundle_kernel_name(bundle, i);
    if (found.empty())
      found = kvrt_bundle_kernel_name(bundle, i);
  }
  return found;
}

/// One step of the engine: which requests get how many new tokens.
struct Step {
  std::vector<int32_t> queryStartLoc; // [kRequests + 1]
  std::vector<int32_t> contextLens;   // tokens already cached per request
  int64_t numTokens;                  // padded, as a graph-captured step is
};

/// The expected cache after a step, written as a plain loop over
/// docs/KERNEL-ABI.md's slot rule.
void expect(const Step &step, const std::vector<int32_t> &blockTable,
            const std::vector<uint16_t> &qkv, std::vector<uint16_t> &key,
            std::vector<uint16_t> &value) {
  for (int64_t r = 0; r < kRequests; ++r) {
    for (int32_t t = step.queryStartLoc[r]; t < step.queryStartLoc[r + 1];
         ++t) {
      int64_t position = step.contextLens[r] + t - step.queryStartLoc[r];
      int64_t block = blockTable[r * kMaxBlocksPerReq + position / kBlockSize];
      int64_t slot = block * kBlockSize + position % kBlockSize;
      for (int64_t i = 0; i < kHeads * kHeadDim; ++i) {
        key[slot * kHeads * kHeadDim + i] =
            qkv[t * kQkvRow + kQueryHeads * kHeadDim + i];
        value[slot * kHeads * kHeadDim + i] =
            qkv[t * kQkvRow + (kQueryHeads + kHeads) * kHeadDim + i];
      }
    }
  }
}

std::vector<uint16_t> randomBF16(size_t count, std::mt19937 &random) {
  std::vector<uint16_t> values(count);
  for (uint16_t &value : values) // exponents near 1, random mantissas
    value = static_cast<uint16_t>(0x3F00 | (random() & 0x80FF));
  return values;
}

size_t countMismatches(const char *name, const std::vector<uint16_t> &actual,
                       const std::vector<uint16_t> &expected) {
  size_t mismatches = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (actual[i] == expected[i] || mismatches++ >= 5)
      continue;
    size_t slot = i / (kHeads * kHeadDim);
    std::fprintf(stderr,
                 "paged_append: %s slot %zu head %zu dim %zu: 0x%04x, "
                 "expected 0x%04x%s\n",
                 name, slot, (i / kHeadDim) % kHeads, i % kHeadDim, actual[i],
                 expected[i],
                 expected[i] == kPoison ? " (should not have been written)"
                                        : "");
  }
  return mismatches;
}

} // namespace

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : KVRT_EXAMPLE_DEFAULT_BUNDLE;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  if (!std::ifstream(path)) {
    std::printf("skipped: no bundle at %s (kvgen --emit=bundle writes one)\n",
                path);
    return 77;
  }

  kvrt_bundle *bundle = nullptr;
  check(kvrt_bundle_load_file(path, &bundle), "kvrt_bundle_load_file");
  std::string append = findKernel(bundle, "append");
  std::string slotMapping = findKernel(bundle, "slot_mapping");
  std::string fused = findKernel(bundle, "fused_append");
  if (append.empty() || slotMapping.empty() || fused.empty()) {
    std::fprintf(stderr,
                 "paged_append: %s lacks an append, slot_mapping or "
                 "fused_append kernel\n",
                 path);
    return 1;
  }
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");

  // The cache, poisoned so that a stray write shows.
  Tensor keyCache(kBF16, {kBlocks, kBlockSize, kHeads, kHeadDim});
  Tensor valueCache(kBF16, {kBlocks, kBlockSize, kHeads, kHeadDim});
  check(cudaMemset(keyCache.data, 0xA5, keyCache.bytes), "cudaMemset");
  check(cudaMemset(valueCache.data, 0xA5, valueCache.bytes), "cudaMemset");
  std::vector<uint16_t> expectedKey(keyCache.bytes / 2, kPoison);
  std::vector<uint16_t> expectedValue = expectedKey;

  // Each request owns 32 blocks, in a random order.
  std::mt19937 random(2026);
  std::vector<int32_t> hostBlockTable(kBlocks);
  std::iota(hostBlockTable.begin(), hostBlockTable.end(), 0);
  std::shuffle(hostBlockTable.begin(), hostBlockTable.end(), random);
  Tensor blockTable(kI32, {kRequests, kMaxBlocksPerReq});
  blockTable.upload(hostBlockTable);

  // Prefill: request 0 from position 0 (300 tokens), request 1 a chunk of
  // 229 after 5 cached tokens, padded to 536 tokens; then three decode steps
  // of one token per request, padded to 4.
  std::vector<Step> steps = {{{0, 300, 529}, {0, 5}, 536}};
  for (int i = 0; i < 3; ++i)
    steps.push_back({{0, 1, 2}, {300 + i, 234 + i}, 4});

  for (size_t s = 0; s < steps.size(); ++s) {
    const Step &step = steps[s];
    std::vector<uint16_t> hostQkv =
        randomBF16(step.numTokens * kQkvRow, random);
    Tensor qkv(kBF16, {step.numTokens, kQkvRow});
    qkv.upload(hostQkv);
    QkvViews kv(qkv, step.numTokens);
    Tensor queryStartLoc(kI32, {kRequests + 1});
    Tensor contextLens(kI32, {kRequests});
    queryStartLoc.upload(step.queryStartLoc);
    contextLens.upload(step.contextLens);

    if (s == 0) {
      // Prefill: build the slot mapping on the device, then append.
      Tensor slots(kI64, {step.numTokens});
      kvrt_slot_mapping_args slotArgs = KVRT_ARGS_INIT(kvrt_slot_mapping_args);
      slotArgs.kernel = slotMapping.c_str();
      slotArgs.block_table = &blockTable.dl;
      slotArgs.query_start_loc = &queryStartLoc.dl;
      slotArgs.context_lens = &contextLens.dl;
      slotArgs.slot_mapping = &slots.dl;
      check(kvrt_build_slot_mapping(bundle, &slotArgs, stream),
            "kvrt_build_slot_mapping");
      kvrt_append_args args = KVRT_ARGS_INIT(kvrt_append_args);
      args.kernel = append.c_str();
      args.key = &kv.key;
      args.value = &kv.value;
      args.slot_mapping = &slots.dl;
      args.key_cache = &keyCache.dl;
      args.value_cache = &valueCache.dl;
      check(kvrt_append(bundle, &args, stream), "kvrt_append");
      check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    } else {
      // Decode: one launch from the block table.
      kvrt_fused_append_args args = KVRT_ARGS_INIT(kvrt_fused_append_args);
      args.kernel = fused.c_str();
      args.key = &kv.key;
      args.value = &kv.value;
      args.block_table = &blockTable.dl;
      args.query_start_loc = &queryStartLoc.dl;
      args.context_lens = &contextLens.dl;
      args.key_cache = &keyCache.dl;
      args.value_cache = &valueCache.dl;
      check(kvrt_fused_append(bundle, &args, stream), "kvrt_fused_append");
      check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    }
    expect(step, hostBlockTable, hostQkv, expectedKey, expectedValue);
  }

  size_t mismatches =
      countMismatches("key_cache", keyCache.download<uint16_t>(), expectedKey) +
      countMismatches("value_cache", valueCache.download<uint16_t>(),
                      expectedValue);
  cudaStreamDestroy(stream);
  kvrt_bundle_destroy(bundle);
  if (mismatches) {
    std::fprintf(stderr, "paged_append: FAILED: %zu elements differ\n",
                 mismatches);
    return 1;
  }
  std::printf("paged_append: prefill (529 tokens + 7 padding) and 3 decode "
              "steps: K and V caches match byte for byte, every other byte "
              "kept its poison\n");
  return 0;
}
