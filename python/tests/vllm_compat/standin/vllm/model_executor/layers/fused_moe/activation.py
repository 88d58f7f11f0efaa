"""vllm.model_executor.layers.fused_moe.activation (imported by
tests/kernels/utils.py as a default argument of a MoE helper)."""

import enum


class MoEActivation(enum.Enum):
    """The names only: the MoE kernels are not part of the stand-in."""

    SILU = "silu"
    GELU = "gelu"
    SITU = "situ"
    SWIGLUOAI = "swigluoai"
    SWIGLUOAI_UNINTERLEAVE = "swigluoai_uninterleave"
