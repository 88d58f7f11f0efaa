// Registers vLLM's two QK-norm + RoPE ops, compiled from vLLM's own source, as
// torch ops the way vLLM registers them: torch.ops._C.fused_qk_norm_rope (the
// in-place QK-norm and RoPE over the packed qkv that vLLM runs before
// reshape_and_cache_flash) and torch.ops._C.fused_qknorm_rope_cache (norm,
// RoPE and the cache write in one kernel), with vLLM's schemas, through the
// libtorch stable ABI (STABLE_TORCH_LIBRARY_FRAGMENT /
// STABLE_TORCH_LIBRARY_IMPL and TORCH_BOX, as vLLM's csrc/torch_bindings.cpp
// does), so that an eager call pays vLLM's dispatch path.
//
// The kernels and their host functions are vLLM's
// csrc/fused_qknorm_rope_kernel.cu and csrc/fused_qknorm_rope_cache_kernel.cu,
// third-party code that is not in this repository: build_vllm_prologue.py
// beside this file extracts them from vLLM's release sdist into a folder that
// git ignores and compiles them together with this file. It is a peer to
// measure against, never a dependency of kvgen.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include <optional>
#include <string>

// Defined in vLLM's sources (the signatures of vLLM's csrc/ops.h).
void fused_qk_norm_rope(torch::stable::Tensor &qkv, int64_t num_heads_q,
                        int64_t num_heads_k, int64_t num_heads_v,
                        int64_t head_dim, double eps,
                        torch::stable::Tensor &q_weight,
                        torch::stable::Tensor &k_weight,
                        torch::stable::Tensor &cos_sin_cache, bool is_neox,
                        torch::stable::Tensor &position_ids,
                        int64_t forced_token_heads_per_warp);

#ifdef KVBENCH_VLLM_QKNORM_ROPE_CACHE
namespace vllm {
void fused_qknorm_rope_cache(
    torch::stable::Tensor &q_out, torch::stable::Tensor &k_out,
    torch::stable::Tensor &v_out, torch::stable::Tensor &qkv,
    torch::stable::Tensor &q_weight, torch::stable::Tensor &k_weight,
    torch::stable::Tensor &cos, torch::stable::Tensor &sin,
    torch::stable::Tensor &positions, torch::stable::Tensor &slot_mapping,
    torch::stable::Tensor &k_cache, torch::stable::Tensor &v_cache,
    int64_t head_dim, int64_t num_q_heads, int64_t num_kv_heads,
    int64_t rotary_pairs, double epsilon, double norm_weight_bias,
    const std::string &kv_cache_dtype,
    std::optional<torch::stable::Tensor> k_scale,
    std::optional<torch::stable::Tensor> v_scale);
} // namespace vllm
#endif

// vLLM 0.34.0's schemas for these ops (csrc/torch_bindings.cpp, library _C).
STABLE_TORCH_LIBRARY_FRAGMENT(_C, ops) {
  ops.def("fused_qk_norm_rope(Tensor! qkv, int num_heads_q, "
          "int num_heads_k, int num_heads_v, int head_dim, float eps, "
          "Tensor q_weight, Tensor k_weight, Tensor cos_sin_cache, "
          "bool is_neox, Tensor position_ids, "
          "int forced_token_heads_per_warp=-1) -> ()");
#ifdef KVBENCH_VLLM_QKNORM_ROPE_CACHE
  ops.def("fused_qknorm_rope_cache("
          "Tensor! q_out, Tensor! k_out, Tensor! v_out, Tensor qkv, "
          "Tensor q_weight, Tensor k_weight, Tensor cos, Tensor sin, "
          "Tensor positions, Tensor slot_mapping, Tensor! k_cache, "
          "Tensor! v_cache, int head_dim, int num_q_heads, int num_kv_heads, "
          "int rotary_pairs, float epsilon, float norm_weight_bias, "
          "str kv_cache_dtype=\"auto\", Tensor? k_scale=None, Tensor? "
          "v_scale=None) -> ()");
#endif
}

STABLE_TORCH_LIBRARY_IMPL(_C, CUDA, ops) {
  ops.impl("fused_qk_norm_rope", TORCH_BOX(&fused_qk_norm_rope));
#ifdef KVBENCH_VLLM_QKNORM_ROPE_CACHE
  ops.impl("fused_qknorm_rope_cache",
           TORCH_BOX(&vllm::fused_qknorm_rope_cache));
#endif
}
