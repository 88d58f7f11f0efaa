"""vllm.utils.math_utils (imported by tests/kernels/quant_utils.py)."""


def cdiv(a, b):
    return -(a // -b)


def round_up(x, multiple):
    """The smallest multiple of `multiple` that is >= x."""
    return cdiv(x, multiple) * multiple
