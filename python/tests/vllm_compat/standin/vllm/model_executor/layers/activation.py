"""vllm.model_executor.layers.activation (imported by tests/kernels/utils.py
for its MoE helpers, which the cache test does not use)."""

from ..._standin import placeholder

SiluAndMul = placeholder("vllm.model_executor.layers.activation.SiluAndMul")
