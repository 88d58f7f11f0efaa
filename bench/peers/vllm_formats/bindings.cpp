// Registers the cache ops of vLLM that kvgen's new cache formats replace,
// compiled from vLLM's own source, as torch ops the way vLLM registers them:
// torch.ops._C_cache_ops.{ reshape_and_cache_flash, concat_and_cache_mla,
// gather_and_maybe_dequant_cache, cp_gather_cache, convert_fp8, swap_blocks},
// declared with the schemas of vLLM 0.26's
// csrc/libtorch_stable/torch_bindings.cpp through the libtorch stable ABI
// (STABLE_TORCH_LIBRARY_FRAGMENT / STABLE_TORCH_LIBRARY_IMPL and TORCH_BOX), so
// that an eager call pays vLLM's dispatch path.
//
// The kernels and their host functions are vLLM's
// csrc/libtorch_stable/cache_kernels.cu, third-party code that is not in this
// repository: build.py beside this file compiles it with this file from a copy
// kept in a folder that git ignores. This library and the two-op peer of the
// same ops define the same torch ops: load one of them per process.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include <optional>
#include <string>

// Defined in vLLM's cache_kernels.cu, with the signatures of vLLM 0.26's
// csrc/libtorch_stable/ops.h (the linker matches them by their mangled names).
void swap_blocks(torch::stable::Tensor &src, torch::stable::Tensor &dst,
                 int64_t block_size_in_bytes,
                 const torch::stable::Tensor &block_mapping);

void reshape_and_cache_flash(
    torch::stable::Tensor &key, torch::stable::Tensor &value,
    torch::stable::Tensor &key_cache, torch::stable::Tensor &value_cache,
    torch::stable::Tensor &slot_mapping, const std::string &kv_cache_dtype,
    torch::stable::Tensor &k_scale, torch::stable::Tensor &v_scale);

void concat_and_cache_mla(torch::stable::Tensor &kv_c,
                          torch::stable::Tensor &k_pe,
                          torch::stable::Tensor &kv_cache,
                          torch::stable::Tensor &slot_mapping,
                          const std::string &kv_cache_dtype,
                          torch::stable::Tensor &scale);

void convert_fp8(torch::stable::Tensor &dst_cache,
                 torch::stable::Tensor &src_cache, const double scale,
                 const std::string &kv_cache_dtype);

void gather_and_maybe_dequant_cache(
    torch::stable::Tensor const &src_cache, torch::stable::Tensor const &dst,
    torch::stable::Tensor const &block_table,
    torch::stable::Tensor const &cu_seq_lens,
    torch::stable::Tensor const &token_to_seq, int64_t num_tokens,
    const std::string &kv_cache_dtype, torch::stable::Tensor const &scale,
    std::optional<torch::stable::Tensor> seq_starts);

void cp_gather_cache(torch::stable::Tensor const &src_cache,
                     torch::stable::Tensor const &dst,
                     torch::stable::Tensor const &block_table,
                     torch::stable::Tensor const &cu_seq_lens,
                     int64_t batch_size,
                     std::optional<torch::stable::Tensor> seq_starts);

// The schemas of vLLM 0.26's _C_cache_ops library for these ops, word for word.
STABLE_TORCH_LIBRARY_FRAGMENT(_C_cache_ops, ops) {
  ops.def("swap_blocks(Tensor src, Tensor! dst,"
          "            int block_size_in_bytes, Tensor block_mapping) -> ()");
  ops.def("reshape_and_cache_flash(Tensor key, Tensor value,"
          "                        Tensor! key_cache,"
          "                        Tensor! value_cache,"
          "                        Tensor slot_mapping,"
          "                        str kv_cache_dtype,"
          "                        Tensor k_scale, Tensor v_scale) -> ()");
  ops.def("concat_and_cache_mla(Tensor kv_c, Tensor k_pe,"
          "                     Tensor! kv_cache,"
          "                     Tensor slot_mapping,"
          "                     str kv_cache_dtype,"
          "                     Tensor scale) -> ()");
  ops.def("convert_fp8(Tensor! dst_cache, Tensor src_cache, float scale, "
          "str kv_cache_dtype) -> ()");
  ops.def(
      "gather_and_maybe_dequant_cache(Tensor src_cache, Tensor! dst, "
      "                               Tensor block_table, Tensor cu_seq_lens, "
      "                               Tensor token_to_seq, "
      "                               int num_tokens, "
      "                               str kv_cache_dtype, "
      "                               Tensor scale, Tensor? seq_starts) -> ()");
  ops.def("cp_gather_cache(Tensor src_cache, Tensor! dst, Tensor block_table, "
          "Tensor cu_seq_lens, int batch_size, Tensor? seq_starts) -> ()");
}

STABLE_TORCH_LIBRARY_IMPL(_C_cache_ops, CUDA, ops) {
  ops.impl("swap_blocks", TORCH_BOX(&swap_blocks));
  ops.impl("reshape_and_cache_flash", TORCH_BOX(&reshape_and_cache_flash));
  ops.impl("concat_and_cache_mla", TORCH_BOX(&concat_and_cache_mla));
  ops.impl("convert_fp8", TORCH_BOX(&convert_fp8));
  ops.impl("gather_and_maybe_dequant_cache",
           TORCH_BOX(&gather_and_maybe_dequant_cache));
  ops.impl("cp_gather_cache", TORCH_BOX(&cp_gather_cache));
}
