//===- MakeReferenceBundle.cpp - wrap ReferenceKernels in a bundle --------===//
//
//   kvrt_make_reference_bundle <kernels.ptx> <kernels.cubin | -> <out.json>
//
// Writes the manifest of ReferenceKernels.cu: paged_nhd, block 16, 8 heads,
// head_dim 128, bf16, for sm_90; with the cubin when one is given.
//
//===----------------------------------------------------------------------===//

#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

using json = nlohmann::json;

static std::string readFile(const std::string &path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    std::cerr << "cannot read " << path << "\n";
    std::exit(1);
  }
  return std::string(std::istreambuf_iterator<char>(file),
                     std::istreambuf_iterator<char>());
}

static std::string base64(const std::string &bytes) {
  static const char alphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    uint32_t n = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) |
                 uint8_t(bytes[i + 2]);
    for (int shift = 18; shift >= 0; shift -= 6)
      out += alphabet[(n >> shift) & 63];
  }
  if (i < bytes.size()) {
    uint32_t n = uint8_t(bytes[i]) << 16;
    if (i + 1 < bytes.size())
      n |= uint8_t(bytes[i + 1]) << 8;
    out += alphabet[(n >> 18) & 63];
    out += alphabet[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? alphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    std::cerr << "usage: " << argv[0] << " <ptx> <cubin|-> <out.json>\n";
    return 2;
  }
  std::vector<std::string> strides = {
      "key_stride_token",         "key_stride_head",
      "key_stride_dim",           "value_stride_token",
      "value_stride_head",        "value_stride_dim",
      "key_cache_stride_block",   "key_cache_stride_head",
      "key_cache_stride_pos",     "key_cache_stride_dim",
      "value_cache_stride_block", "value_cache_stride_head",
      "value_cache_stride_pos",   "value_cache_stride_dim"};
  std::vector<std::string> append = {"key",       "value",       "slot_mapping",
                                     "key_cache", "value_cache", "num_tokens",
                                     "num_blocks"};
  std::vector<std::string> fused = {
      "key",          "value",     "block_table",        "query_start_loc",
      "context_lens", "key_cache", "value_cache",        "num_tokens",
      "num_blocks",   "num_reqs",  "block_table_stride", "max_blocks_per_req"};
  append.insert(append.end(), strides.begin(), strides.end());
  fused.insert(fused.end(), strides.begin(), strides.end());
  json cache = {{"layout", "paged_nhd"},
                {"block_size", 16},
                {"num_kv_heads", 8},
                {"head_dim", 128},
                {"dtype", "bf16"}};
  auto kernel = [&](const std::string &name, const std::string &kind,
                    bool vector, const std::vector<std::string> &params) {
    return json{{"name", name},
                {"kind", kind},
                {"variant", vector ? "vector" : "scalar"},
                {"description", "ReferenceKernels.cu"},
                {"cache", cache},
                {"source_dtype", "bf16"},
                {"alignment", vector ? 16 : 2},
                {"vector_elems", vector ? 8 : 1},
                {"vector_bytes", vector ? 16 : 2},
                {"launch",
                 {{"threads_x", 128},
                  {"tokens_per_block", 1},
                  {"chunks_per_token", vector ? 128 : 1024}}},
                {"params", params}};
  };
  json bundle = {{"format", "kvgen-bundle"},
                 {"version", 4},
                 {"target", {{"chip", "sm_90"}, {"features", "+ptx80"}}},
                 {"ptx", readFile(argv[1])},
                 {"kernels",
                  {kernel("kv_append", "append", true, append),
                   kernel("kv_append_scalar", "append", false, append),
                   {{"name", "kv_slots"},
                    {"kind", "slot_mapping"},
                    {"variant", "scalar"},
                    {"launch", {{"threads_x", 1}, {"tokens_per_block", 128}}},
                    {"params",
                     {"block_table", "query_start_loc", "context_lens",
                      "slot_mapping", "num_tokens", "num_reqs",
                      "block_table_stride", "max_blocks_per_req"}}},
                   kernel("kv_fused", "fused_append", true, fused),
                   kernel("kv_fused_scalar", "fused_append", false, fused)}}};
  if (std::string(argv[2]) != "-")
    bundle["cubin_base64"] = base64(readFile(argv[2]));
  std::ofstream out(argv[3]);
  out << bundle.dump(2) << "\n";
  return out ? 0 : 1;
}
