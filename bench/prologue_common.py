"""The fused prologue benchmark's shapes, inputs and byte counts, shared by
prologue_gpu.py and its parts (prologue_check, prologue_peers,
prologue_report)."""

import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


QH, KH, D = 32, 8, 128
PAGE, NUM_PAGES = 16, 32768
ROT = 128
MAX_POS = 32768
EPS = 1e-6
ROPE_BASE = 1e6
FP8_SCALE = 1.0 / 32  # a power of two: x / s and x * (1 / s) are the same
DECODE = (1, 8, 32, 128, 512)
PREFILL = (1024, 4096, 16384, 65536)
QUICK_DECODE = (1, 32)
QUICK_PREFILL = (4096, 65536)
DRY_SIZES = (1, 5, 33)
# One decode graph's inputs are rotated over this many sets at most (a timing
# loop touches 256 MB or this many sets, whichever comes first).
MAX_SETS = 100
ROTATE_BYTES = 256 << 20

# Bytes per token each system must move (see the docstring). Q, K, V bf16.
_QB, _KB = QH * D * 2, KH * D * 2
_IDX, _COS, _W = 16, ROT * 2, 2 * D * 2
BYTES = {
    "kvgen": 2 * _QB + 4 * _KB + _IDX + _COS + _W,
    "kvgen-dropin": 2 * _QB + 4 * _KB + _IDX + _COS + _W,
    "kvgen-inplace": 2 * _QB + 4 * _KB + _IDX + _COS + _W,
    "kvgen-plain": 4 * _KB + 8,
    "vllm-unfused": (2 * _QB + 2 * _KB + 8 + _COS + _W) + (4 * _KB + 8),
    "unfused-kvgen": (2 * _QB + 2 * _KB + 8 + _COS + _W) + (4 * _KB + 8),
    # Reads qkv, writes Q, K and V out and K and V into the cache.
    "vllm-fused": 2 * _QB + 6 * _KB + _IDX + _COS + _W,
    # fp8: K and V written as one byte an element; no norm weights.
    "kvgen-fp8": 2 * _QB + 3 * _KB + _IDX + _COS,
    "kvgen-fp8-plain": 3 * _KB + 8,
    # Q written as fp8; cos/sin in fp32; int32 batch index and position, an
    # int64 pos_id (the page table's few bytes are left out).
    "flashinfer-fp8": _QB + _QB // 2 + 3 * _KB + 8 + 8 + 2 * _COS,
    # kvgen's drop-in of it: the same call, the same bytes.
    "kvgen-flashinfer-fp8": _QB + _QB // 2 + 3 * _KB + 8 + 8 + 2 * _COS,
    "kvgen-fp8-norm": 2 * _QB + 3 * _KB + _IDX + _COS + _W,
    "vllm-unfused-fp8": (2 * _QB + 2 * _KB + 8 + _COS + _W) + (3 * _KB + 8),
    "unfused-kvgen-fp8": (2 * _QB + 2 * _KB + 8 + _COS + _W) + (3 * _KB + 8),
    "vllm-fused-fp8": 2 * _QB + 5 * _KB + _IDX + _COS + _W,
    "kvgen-dropin-fp8": 2 * _QB + 3 * _KB + _IDX + _COS + _W,
}


def log(msg=""):
    print(msg, flush=True)


# ----------------------------------------------------------------------------
# Inputs
# ----------------------------------------------------------------------------

def cos_sin_cache(dev, dtype=torch.bfloat16):
    """vLLM's RotaryEmbedding._compute_cos_sin_cache, in the source dtype."""
    inv_freq = 1.0 / (ROPE_BASE ** (torch.arange(0, ROT, 2, dtype=torch.float)
                                    / ROT))
    t = torch.arange(MAX_POS, dtype=torch.float)
    freqs = torch.einsum("i,j -> ij", t, inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(dtype).to(dev)


def workload(n, gen, num_pages):
    """One input set's page table, slots and positions (int64 for kvgen and
    vLLM, int32 for FlashInfer), on the host."""
    if n <= 512:
        reqs, fresh = n, [1] * n
    else:
        reqs, fresh = 4, [n // 4] * 4
    seq_lens = [int(torch.randint(1, 32 * PAGE, (1,), generator=gen)) + f
                for f in fresh]
    pages = [(s + PAGE - 1) // PAGE for s in seq_lens]
    assert sum(pages) <= num_pages, "the cache is too small for the workload"
    perm = torch.randperm(num_pages, generator=gen)
    indptr = [0]
    for p in pages:
        indptr.append(indptr[-1] + p)
    batch, pos, slots = [], [], []
    for r in range(reqs):
        for i in range(fresh[r]):
            p = seq_lens[r] - fresh[r] + i
            batch.append(r)
            pos.append(p)
            slots.append(int(perm[indptr[r] + p // PAGE]) * PAGE + p % PAGE)
    assert max(pos) < MAX_POS
    return dict(batch=batch, pos=pos, slots=slots, indices=perm[:indptr[-1]],
                indptr=indptr)


class Inputs:
    """Per size: `sets` input sets over one qkv pool, and the tensors every
    system shares (weights, cos/sin, epsilon, scale)."""

    def __init__(self, n, sets, shared, dev, gen, num_pages):
        self.n, self.sets = n, sets
        i64, i32 = torch.int64, torch.int32
        dg = torch.Generator(device=dev).manual_seed(1000 + n)
        self.pool = torch.randn(sets * n, (QH + 2 * KH) * D, generator=dg,
                                device=dev).to(torch.bfloat16)
        self.work = None  # vLLM's in-place norm + RoPE runs on this copy
        self.s = []
        for i in range(sets):
            w = workload(n, gen, num_pages)
            qkv = self.pool[i * n:(i + 1) * n]
            self.s.append(dict(
                qkv=qkv,
                slots=torch.tensor(w["slots"], dtype=i64, device=dev),
                pos=torch.tensor(w["pos"], dtype=i64, device=dev),
                pos32=torch.tensor(w["pos"], dtype=i32, device=dev),
                batch=torch.tensor(w["batch"], dtype=i32, device=dev),
                indices=w["indices"].to(i32).to(dev),
                indptr=torch.tensor(w["indptr"], dtype=i32, device=dev)))
        self.q_out = torch.empty(n, QH, D, dtype=torch.bfloat16, device=dev)
        self.shared = shared

    def work_copy(self):
        if self.work is None:
            self.work = self.pool.clone()
        return self.work

    def work_set(self, i):
        n = self.n
        return self.work_copy()[i * n:(i + 1) * n]

    def release(self):
        self.pool = self.work = self.q_out = None
        self.s = []


def split(qkv):
    n = qkv.shape[0]
    q = qkv[:, :QH * D].view(n, QH, D)
    k = qkv[:, QH * D:(QH + KH) * D].view(n, KH, D)
    v = qkv[:, (QH + KH) * D:].view(n, KH, D)
    return q, k, v


class System:
    """One way to do the work: `launch(i)` runs it on input set i; `check()`
    runs it once on set 0 and compares its outputs."""

    def __init__(self, name, launch, check, note=""):
        self.name, self.launch, self.check, self.note = name, launch, check, note
