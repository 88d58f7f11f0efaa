"""vllm.scalar_type: the NVFP4 test helpers (tests/kernels/quantization/
nvfp4_utils.py) read scalar_types.float4_e2m1f.max() when they are imported;
the other types are never used by the cache test."""

from ._standin import PlaceholderNamespace


class _Float4E2M1:
    """vLLM's float4_e2m1f: e2m1 (1 sign, 2 exponent, 1 mantissa bits, no
    infinities or NaN), largest magnitude 6."""

    def max(self):
        return 6.0

    def min(self):
        return -6.0


class _ScalarTypes(PlaceholderNamespace):
    float4_e2m1f = _Float4E2M1()


scalar_types = _ScalarTypes("vllm.scalar_type.scalar_types")
