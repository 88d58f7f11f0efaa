//===- TestSupport.h - bundles and host tensors for kvrt's tests ----------===//
//
// Bundle manifests are built as JSON objects, so that a test breaks exactly
// one field of a good one. The parameter lists are spelled out from
// docs/KERNEL-ABI.md here, independently of the runtime's own tables.
//
//===----------------------------------------------------------------------===//

#ifndef KVRT_TEST_TESTSUPPORT_H
#define KVRT_TEST_TESTSUPPORT_H

#include "kvrt/kvrt.h"
#include "kvrt/test/TensorArg.h"

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace kvrt::test {

using json = nlohmann::json;

inline std::vector<std::string> sourceStrides() {
  return {"key_stride_token",   "key_stride_head",   "key_stride_dim",
          "value_stride_token", "value_stride_head", "value_stride_dim"};
}

inline std::vector<std::string> cacheStrides() {
  return {"key_cache_stride_block",   "key_cache_stride_head",
          "key_cache_stride_pos",     "key_cache_stride_dim",
          "value_cache_stride_block", "value_cache_stride_head",
          "value_cache_stride_pos",   "value_cache_stride_dim"};
}

inline std::vector<std::string> appendStrides() {
  std::vector<std::string> strides = sourceStrides();
  for (const std::string &stride : cacheStrides())
    strides.push_back(stride);
  return strides;
}

/// The parameter list of docs/KERNEL-ABI.md; `mode` is "" (unquantized),
/// "static" or "dynamic".
inline std::vector<std::string> paramsFor(const std::string &kind,
                                          const std::string &mode = "") {
  std::vector<std::string> scales;
  if (mode == "static")
    scales = {"key_scale", "value_scale"};
  else if (mode == "dynamic")
    scales = {"key_scale_cache", "value_scale_cache"};
  std::vector<std::string> params;
  auto add = [&](std::vector<std::string> names) {
    for (const std::string &name : names)
      params.push_back(name);
  };
  if (kind == "append") {
    add({"key", "value", "slot_mapping", "key_cache", "value_cache"});
    add(scales);
    add({"num_tokens", "num_blocks"});
    add(appendStrides());
  } else if (kind == "slot_mapping") {
    add({"block_table", "query_start_loc", "context_lens", "slot_mapping",
         "num_tokens", "num_reqs", "block_table_stride", "max_blocks_per_req"});
  } else if (kind == "gather") {
    add({"key_cache", "value_cache", "slot_mapping", "key_out", "value_out"});
    add(scales);
    add({"num_tokens", "num_blocks", "key_out_stride_token",
         "key_out_stride_head", "key_out_stride_dim", "value_out_stride_token",
         "value_out_stride_head", "value_out_stride_dim"});
    add(cacheStrides());
  } else if (kind == "paged_kv_append") {
    add({"key", "value", "batch_indices", "positions", "kv_indices",
         "kv_indptr", "key_cache", "value_cache"});
    add(scales);
    add({"num_tokens", "num_blocks", "batch_size", "num_indices"});
    add(appendStrides());
  } else {
    add({"key", "value", "block_table", "query_start_loc", "context_lens",
         "key_cache", "value_cache"});
    add(scales);
    add({"num_tokens", "num_blocks", "num_reqs", "block_table_stride",
         "max_blocks_per_req"});
    add(appendStrides());
  }
  return params;
}

struct CacheConfig {
  std::string layout = "paged_nhd";
  int64_t blockSize = 4;
  int64_t heads = 2;
  int64_t headDim = 16;
  int64_t x = 8;
  std::string dtype = "bf16";
  std::string source = "bf16";
  /// gather's output_dtype.
  std::string output = "bf16";
  /// cache.quant, where `quant` is not empty.
  std::string quant;
  std::string granularity = "per_tensor";
  std::string mode = "static";
  /// Whether standardBundle adds a gather description ("kv_gather").
  bool gather = false;
};

inline json kernelJson(const std::string &name, const std::string &kind,
                       const std::string &variant,
                       const CacheConfig &config = CacheConfig()) {
  json kernel = {
      {"name", name},
      {"kind", kind},
      {"variant", variant},
      {"description", "kv." + kind + " @" + name},
      {"params",
       paramsFor(kind, config.quant.empty() ? std::string() : config.mode)}};
  if (kind == "slot_mapping") {
    kernel["launch"] = {{"threads_x", 1}, {"tokens_per_block", 256}};
    return kernel;
  }
  json cache = {{"layout", config.layout},
                {"num_kv_heads", config.heads},
                {"head_dim", config.headDim},
                {"dtype", config.dtype}};
  if (config.layout == "contiguous")
    cache["max_seq_len"] = config.blockSize;
  else
    cache["block_size"] = config.blockSize;
  if (config.layout == "vllm_vectorized")
    cache["x"] = config.x;
  if (!config.quant.empty())
    cache["quant"] = {{"kind", config.quant},
                      {"granularity", config.granularity},
                      {"mode", config.mode},
                      {"reciprocal", false}};
  kernel["cache"] = cache;
  if (kind == "gather")
    kernel["output_dtype"] = config.output;
  else
    kernel["source_dtype"] = config.source;
  bool vector = variant == "vector";
  kernel["alignment"] = vector ? 16 : 2;
  kernel["vector_elems"] = vector ? 8 : 1;
  kernel["vector_bytes"] = vector ? 16 : 2;
  kernel["launch"] = {{"threads_x", vector ? 4 : 32},
                      {"tokens_per_block", 2},
                      {"chunks_per_token", vector ? 4 : 32}};
  return kernel;
}

/// The wide variant of description `name`: a vector kernel of two chunks a
/// thread that kvrt picks from `minTokens` tokens on.
inline json wideKernelJson(const std::string &name, const std::string &kind,
                           int64_t minTokens,
                           const CacheConfig &config = CacheConfig()) {
  json kernel = kernelJson(name + "_wide", kind, "vector", config);
  kernel["variant"] = "wide";
  kernel["min_tokens"] = minTokens;
  kernel["launch"]["threads_x"] = 2;
  return kernel;
}

/// Both variants of one append-like description.
inline std::vector<json> describe(const std::string &name,
                                  const std::string &kind,
                                  const CacheConfig &config = CacheConfig()) {
  return {kernelJson(name, kind, "vector", config),
          kernelJson(name + "_scalar", kind, "scalar", config)};
}

inline json bundleJson(const std::vector<json> &kernels, bool withPtx = true) {
  json bundle = {{"format", "kvgen-bundle"}, {"version", 4}};
  if (withPtx) {
    bundle["target"] = {{"chip", "sm_90"}, {"features", "+ptx80"}};
    bundle["ptx"] = "// fake PTX\n.version 8.0\n.target sm_90\n";
  }
  bundle["kernels"] = kernels;
  return bundle;
}

/// The usual test bundle: one description of each kind.
inline json standardBundle(const CacheConfig &config = CacheConfig(),
                           bool withPtx = true) {
  std::vector<json> kernels = describe("kv_append", "append", config);
  kernels.push_back(kernelJson("kv_slots", "slot_mapping", "scalar"));
  for (json &kernel : describe("kv_fused", "fused_append", config))
    kernels.push_back(kernel);
  if (config.gather)
    for (json &kernel : describe("kv_gather", "gather", config))
      kernels.push_back(kernel);
  return bundleJson(kernels, withPtx);
}

/// Loads `manifest`; the caller destroys.
inline kvrt_status load(const json &manifest, kvrt_bundle **out) {
  std::string text = manifest.dump();
  return kvrt_bundle_load_memory(text.data(), text.size(), out);
}

struct BundleDeleter {
  void operator()(kvrt_bundle *bundle) const { kvrt_bundle_destroy(bundle); }
};
using BundlePtr = std::unique_ptr<kvrt_bundle, BundleDeleter>;

inline DLDataType bf16() { return {kDLBfloat, 16, 1}; }
inline DLDataType f16() { return {kDLFloat, 16, 1}; }
inline DLDataType f32() { return {kDLFloat, 32, 1}; }
inline DLDataType i32() { return {kDLInt, 32, 1}; }
inline DLDataType i64() { return {kDLInt, 64, 1}; }
inline DLDataType i8() { return {kDLInt, 8, 1}; }
inline DLDataType u8() { return {kDLUInt, 8, 1}; }
/// DLPack 1.1's float8 codes.
inline DLDataType f8e4m3() { return {10, 8, 1}; }
inline DLDataType f8e5m2() { return {12, 8, 1}; }

/// A DLTensor (TensorArg) over its own (or a shared) 256-byte-aligned host
/// buffer.
class HostTensor {
public:
  HostTensor() = default;

  /// A compact tensor (NULL strides) with fresh, zeroed storage.
  static HostTensor compact(DLDataType dtype, std::vector<int64_t> shape) {
    int64_t count = 1;
    for (int64_t extent : shape)
      count *= extent;
    HostTensor tensor;
    tensor.allocate(count * ((dtype.bits + 7) / 8) + 256);
    tensor.init(dtype, std::move(shape), {}, 0);
    return tensor;
  }

  /// A strided tensor with fresh storage covering its extent.
  static HostTensor strided(DLDataType dtype, std::vector<int64_t> shape,
                            std::vector<int64_t> strides,
                            uint64_t byteOffset = 0) {
    int64_t last = 0;
    for (size_t i = 0; i < shape.size(); ++i)
      last += (shape[i] > 0 ? shape[i] - 1 : 0) * strides[i];
    HostTensor tensor;
    tensor.allocate((last + 1) * ((dtype.bits + 7) / 8) + byteOffset + 256);
    tensor.init(dtype, std::move(shape), std::move(strides), byteOffset);
    return tensor;
  }

  /// Another view of this tensor's storage.
  HostTensor view(DLDataType dtype, std::vector<int64_t> shape,
                  std::vector<int64_t> strides, uint64_t byteOffset) const {
    HostTensor tensor;
    tensor.storage = storage;
    tensor.init(dtype, std::move(shape), std::move(strides), byteOffset);
    return tensor;
  }

  DLTensor *get() { return arg.get(); }
  const DLTensor *get() const { return arg.get(); }
  char *data() const { return static_cast<char *>(arg.data()); }
  std::vector<int64_t> &shapeRef() { return arg.shapeRef(); }
  std::vector<int64_t> &stridesRef() { return arg.stridesRef(); }

private:
  void allocate(int64_t bytes) {
    size_t rounded = (static_cast<size_t>(bytes) + 255) / 256 * 256;
    void *memory = std::aligned_alloc(256, rounded);
    std::memset(memory, 0, rounded);
    storage = std::shared_ptr<void>(memory, std::free);
  }
  void init(DLDataType dtype, std::vector<int64_t> shape,
            std::vector<int64_t> strides, uint64_t byteOffset) {
    arg = TensorArg(storage.get(), byteOffset, {kDLCPU, 0}, dtype,
                    std::move(shape), std::move(strides));
  }

  std::shared_ptr<void> storage;
  // Unset, an all-zero DLTensor (not an absent one).
  TensorArg arg{nullptr, 0, DLDevice{}, DLDataType{}, {}, {}};
};

/// What the recording host kernels saw.
struct Recorded {
  int vectorCalls = 0;
  int scalarCalls = 0;
  int wideCalls = 0;
  /// Every parameter of the last call, read as 8 bytes.
  std::vector<int64_t> params;
};

Recorded &recorded();
/// Registers recording host kernels for every kernel of `bundle` of the
/// variants asked for, each counting its own variant's calls (slot_mapping's
/// count as scalar); `count` params are kept.
void registerRecorders(kvrt_bundle *bundle, bool vector = true,
                       bool scalar = true, bool wide = true);

} // namespace kvrt::test

#endif // KVRT_TEST_TESTSUPPORT_H
