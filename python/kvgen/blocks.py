"""kvgen.copy_blocks: kvrt's checked copy of whole cache blocks
(kvrt_copy_blocks), the one kvrt call with no bundle. vLLM's swap_blocks
(kvgen.vllm) is this copy with vLLM's arguments."""

import numbers

from . import _dlpack, _ext, _kvrt, errors
from .bundle import _stream_of


def copy_blocks(src, dst, block_bytes, block_mapping, stream=None):
    """For each pair (s, d) of block_mapping, block d of dst becomes a copy
    of block s of src. src and dst are caches of blocks along dimension 0
    (anything with __dlpack__: on the CPU, or one on a CUDA device and the
    other on the host or the same device), of one dtype and layout, each
    block `block_bytes` bytes; block_mapping is int64 [n, 2] (src block, dst
    block) on the CPU. kvrt checks all of it, every pair's range and that no
    dst block is written twice before it copies anything
    (docs/BAD-INPUT.md), then copies each block: a memcpy on the host,
    cuMemcpyAsync on `stream` where a cache is on a GPU. `stream` is the
    caller's (an int handle, or an object with cuda_stream or ptr), else the
    current stream of the GPU tensor's framework; the calling thread's
    current CUDA context must be the GPU's (torch.cuda.device, say)."""
    if (isinstance(block_bytes, bool) or
            not isinstance(block_bytes, numbers.Integral) or
            not 0 < block_bytes < 1 << 63):
        raise errors.InvalidArgumentError(
            "copy_blocks: block_bytes %r is not a positive 64-bit integer"
            % (block_bytes,))
    keep = []
    descs = _dlpack.describe_all([src, dst, block_mapping],
                                 ["src", "dst", "block_mapping"], keep,
                                 ("dst",))
    k = _kvrt.lib()
    if k.entry(_ext.COPY_BLOCKS) is None:
        raise errors.LibraryNotFoundError(
            "the libkvrt at %s lacks kvrt_copy_blocks; it is older than this "
            "package" % k.path)
    ext = _ext.get()
    gpu = [(o, d) for o, d in zip((src, dst), descs[:2])
           if d is not None and d[1] == _dlpack.CUDA]
    if gpu:
        stream = _stream_of(stream, *gpu[0])
    elif stream is not None:
        stream = _stream_of(stream, src, descs[0])
    _kvrt.check(ext.copy_blocks(descs[0], descs[1], int(block_bytes),
                                descs[2], stream or 0))
