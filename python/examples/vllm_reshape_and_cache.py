"""kvgen as vLLM's reshape_and_cache_flash, in one minute.

Run:  KVGEN_CACHE_DIR=... python python/examples/vllm_reshape_and_cache.py
(on a GPU with torch; the kernels come from the cache, or from a kvgen
compiler on PATH, compiled once and cached on disk).
"""

import torch

import kvgen

num_blocks, block_size, num_kv_heads, head_size = 1024, 16, 8, 128
dtype = torch.bfloat16
device = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: host kernels

# vLLM's flash-attention caches: [num_blocks, block_size, num_kv_heads,
# head_size] (for HND, allocate [nb, H, bs, D] and .permute(0, 2, 1, 3)).
key_cache = torch.zeros(num_blocks, block_size, num_kv_heads, head_size,
                        dtype=dtype, device=device)
value_cache = torch.zeros_like(key_cache)

# This step's new K/V: 3 tokens, the last one padding (slot -1).
key = torch.randn(3, num_kv_heads, head_size, dtype=dtype, device=device)
value = torch.randn_like(key)
slot_mapping = torch.tensor([5 * block_size + 0, 9 * block_size + 7, -1],
                            dtype=torch.int64, device=device)
k_scale = v_scale = torch.ones(1, device=device)  # used by fp8 caches only

# The drop-in call: vLLM's signature, on torch's current stream.
kvgen.ops.reshape_and_cache_flash(key, value, key_cache, value_cache,
                                  slot_mapping, "auto", k_scale, v_scale)

# Read a row back: token 1 went to block 9, row 7.
assert torch.equal(key_cache[9, 7], key[1])
assert torch.equal(value_cache[9, 7], value[1])
print("token 1 is in block 9, row 7:", key_cache[9, 7, 0, :4].tolist())
