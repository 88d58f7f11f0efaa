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


# (mantissa bits, exponent bias, largest finite) of vLLM's fp8 formats.
FP8_FORMATS = {"fp8_e4m3": (3, 7, 448.0), "fp8_e5m2": (2, 15, 57344.0)}


def fp8_bytes(q, kind):
    """The fp8 bytes of float32 `q`: rounded to nearest even (subnormals
    included), saturated to the largest finite value, the sign of a zero
    kept; integer arithmetic, no fp8 library. NaN is not handled."""
    mbits, bias, qmax = FP8_FORMATS[kind]
    q = np.asarray(q, np.float32).astype(np.float64)  # exact
    sign = np.signbit(q).astype(np.uint8) << 7
    a = np.abs(q)
    emin = 1 - bias
    # floor(log2(a)) of a nonzero a; the subnormals share emin's quantum.
    e = np.frexp(a)[1] - 1
    quantum = np.exp2(np.maximum(e, emin) - mbits)
    r = np.minimum(np.rint(a / quantum) * quantum, qmax)  # rint: half even
    e = np.frexp(r)[1] - 1
    normal = (r > 0) & (e >= emin)
    efield = np.where(normal, e + bias, 0)
    mant = np.where(normal, r / np.exp2(e - mbits) - (1 << mbits),
                    r / np.exp2(emin - mbits))
    return sign | (efield.astype(np.uint8) << mbits) | mant.astype(np.uint8)


def fp8_quantized(x, scale, kind):
    """vLLM's static fp8 quantization of [T, H, D] `x`: element (t, h, d)
    is fp8(float32(x) / scale[h]) for a [H] scale (per head), / scale[0]
    for a one-element scale (per tensor); IEEE float32 division."""
    scale = np.asarray(scale, np.float32).reshape(-1)
    s = scale.reshape(1, -1, 1) if scale.size > 1 else scale[0]
    return fp8_bytes(x.astype(np.float32) / s, kind)
