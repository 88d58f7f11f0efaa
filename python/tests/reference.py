"""The reference the CPU tests compare with: plain NumPy indexing."""

import numpy as np


def bits(a):
    """The bytes of an array as unsigned integers of its width (a NaN or a
    negative zero compares by its bits)."""
    return np.ascontiguousarray(a).view({2: np.uint16, 4: np.uint32,
                                         1: np.uint8}[a.dtype.itemsize])


def flash_reference(key, value, key_cache, value_cache, slots):
    """vLLM's reshape_and_cache_flash on [nb, bs, H, D] views."""
    nb, bs, H, D = key_cache.shape
    kc, vc = key_cache.copy(), value_cache.copy()
    for i, s in enumerate(slots):
        if s < 0 or s // bs >= nb:
            continue
        kc[s // bs, s % bs] = key[i].astype(kc.dtype)
        vc[s // bs, s % bs] = value[i].astype(vc.dtype)
    return kc, vc


def flashinfer_reference(key, value, batch_indices, positions, k_cache,
                         v_cache, kv_indices, kv_indptr, layout):
    """FlashInfer's append_paged_kv_cache, in plain Python: token i goes to
    row p % page of page kv_indices[kv_indptr[b] + p // page], b and p its
    batch index and position. Where any of those indices is out of range
    (b outside the batch, p negative or past the request's pages, a kv_indptr
    range outside kv_indices, a page id outside the cache) the token writes
    nothing."""
    kc, vc = k_cache.copy(), v_cache.copy()
    page = kc.shape[2] if layout == "HND" else kc.shape[1]
    num_pages, batch_size = kc.shape[0], len(kv_indptr) - 1
    for i, (b, p) in enumerate(zip(batch_indices, positions)):
        b, p = int(b), int(p)
        if not 0 <= b < batch_size or p < 0:
            continue
        start, end = int(kv_indptr[b]), int(kv_indptr[b + 1])
        if start < 0 or end > len(kv_indices):
            continue
        j = start + p // page
        if j >= end:  # past the request's last page
            continue
        pg, row = int(kv_indices[j]), p % page
        if not 0 <= pg < num_pages:
            continue
        if layout == "HND":
            kc[pg, :, row] = key[i]
            vc[pg, :, row] = value[i]
        else:
            kc[pg, row] = key[i]
            vc[pg, row] = value[i]
    return kc, vc
