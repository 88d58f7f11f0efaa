"""vllm.scalar_type: imported by the NVFP4 test helpers, never used by the
cache test's cases that kvgen runs."""

from ._standin import PlaceholderNamespace

scalar_types = PlaceholderNamespace("vllm.scalar_type.scalar_types")
