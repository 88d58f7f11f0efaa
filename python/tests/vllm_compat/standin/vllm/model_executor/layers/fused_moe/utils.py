"""vllm.model_executor.layers.fused_moe.utils (imported by
tests/kernels/utils.py for its MoE helpers)."""

from ...._standin import placeholder

moe_kernel_quantize_input = placeholder(
    "vllm.model_executor.layers.fused_moe.utils.moe_kernel_quantize_input")
