"""A stand-in for the few parts of vLLM 0.34.0 that vLLM's cache test
(tests/kernels/attention/test_cache.py) and the test helpers it imports use:
the cache ops of ``vllm._custom_ops``, routed to kvgen.vllm; the platform;
the helpers that build the test's caches. Written from vLLM's documented
behaviour; it is not vLLM. Anything else imported from it is a placeholder
that raises when used (``vllm._standin.placeholder``)."""

__version__ = "0.34.0+kvgen-standin"
