"""vllm.utils.deep_gemm: imported by tests/kernels/quant_utils.py for its
GEMM helpers, which the cache test does not use."""

from .._standin import placeholder

_ceil_to_ue8m0 = placeholder("vllm.utils.deep_gemm._ceil_to_ue8m0")


def is_deep_gemm_e8m0_used():
    """DeepGEMM is not part of the stand-in."""
    return False
