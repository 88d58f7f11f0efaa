"""kvgen: KV-cache append kernels generated from a cache description.

    import kvgen
    kvgen.ops.reshape_and_cache_flash(key, value, key_cache, value_cache,
                                      slot_mapping, "auto", k_scale, v_scale)

    bundle = kvgen.Bundle.load("kernels.json")          # made ahead of time
    bundle = kvgen.compile(block_size=16, num_kv_heads=8, head_dim=128,
                           dtype="bf16")                 # cached on disk

The runtime is kvrt (C ABI, through ctypes); tensors are anything with
__dlpack__. See docs/PYTHON.md.
"""

from . import errors, ops
from .blocks import copy_blocks
from .bundle import Bundle
from .compiler import cache_dir, compile, describe, find_compiler
from .errors import (BundleIOError, CacheError, CompilerError,
                     CompilerFailedError, CompilerNotFoundError,
                     DriverError, InternalError, InvalidArgumentError,
                     InvalidBundleError, KernelNotAvailableError, KvgenError,
                     KvrtError, LibraryNotFoundError, NoDeviceError,
                     NoDriverError, NotFoundError, OutOfMemoryError,
                     UnsupportedDeviceError)

__version__ = "0.1.0"

__all__ = [
    "Bundle", "compile", "describe", "cache_dir", "find_compiler", "ops",
    "copy_blocks",
    "errors", "KvgenError", "KvrtError", "InvalidArgumentError",
    "InvalidBundleError", "NotFoundError", "NoDriverError", "NoDeviceError",
    "UnsupportedDeviceError", "DriverError", "BundleIOError", "InternalError",
    "OutOfMemoryError", "LibraryNotFoundError", "CompilerError",
    "CompilerNotFoundError", "KernelNotAvailableError", "CompilerFailedError",
    "CacheError",
]
