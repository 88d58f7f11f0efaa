"""vllm.model_executor.custom_op: op_registry (imported by
tests/kernels/utils.py for its MoE helpers; empty here)."""

op_registry = {}
