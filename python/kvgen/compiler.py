"""kvgen.compile: kernels from a cache description, cached on disk.

The kvgen compiler ($KVGEN_COMPILER, else `kvgen` on PATH) turns a
description into a bundle; the result is kept under a key of the description,
the compiler (its --version and a hash of its binary) and the target, as
Triton and FlashInfer keep their JIT output, in the kernel cache on disk
(its layout, entries and their checks: kvgen/_disk_cache.py).

A machine without the compiler (a serving machine) uses entries made ahead
of time (``python -m kvgen precompile``): it looks the description up under
its target and takes the newest entry, whichever compiler made it.
"""

import hashlib
import numbers
import os
import platform
import signal
import subprocess
import threading

from . import _disk_cache, _kinds, _paths, errors
from ._disk_cache import (_ARTIFACTS, _MAX_FILE_BYTES, _MISSING,
                          _artifact_problem, _bundle_problem, _cache_root,
                          _cache_write_error, _check_entry, _discard,
                          _newest_entry, _read_checked, _words)
from .bundle import Bundle

# kvgen.cache_dir: where the kernel cache lives unless `cache=` says.
cache_dir = _disk_cache.cache_dir

_CACHE_DTYPES = {
    "f32": "f32", "float32": "f32", "float": "f32",
    "f16": "f16", "float16": "f16", "half": "f16",
    "bf16": "bf16", "bfloat16": "bf16",
    "f8e4m3": "f8E4M3FN", "f8E4M3FN": "f8E4M3FN", "fp8_e4m3": "f8E4M3FN",
    "float8_e4m3fn": "f8E4M3FN", "fp8": "f8E4M3FN",
    "f8e5m2": "f8E5M2", "f8E5M2": "f8E5M2", "fp8_e5m2": "f8E5M2",
    "float8_e5m2": "f8E5M2",
    "i8": "i8", "int8": "i8",
}
_SOURCE_DTYPES = ("f32", "f16", "bf16")
_QUANT_STORAGE = {"fp8_e4m3": "f8E4M3FN", "fp8_e5m2": "f8E5M2", "int8": "i8"}
# The order of describe()'s kernels: by slot rule (one this list lacks
# last), the kind that builds slot_mapping from the block table before the
# one that writes through it. The order is part of the module text, and so
# of the disk cache's keys.
_SLOT_ORDER = ("Mapping", "BlockTable", "PageTable")


def _slot_rank(kind):
    return (_SLOT_ORDER.index(kind.slot) if kind.slot in _SLOT_ORDER else
            len(_SLOT_ORDER))


def _kernels_for(latent):
    """The kinds describe() generates for a cache (their traits say which):
    each that writes rows into a cache of its entry (a K and a V row, or a
    latent cache's kv_c then k_pe), and each that touches no cache."""
    entry = "Latent" if latent else "KV"
    kinds = [k for k in _kinds.all_kinds()
             if k.rows != "OutOf" and k.entry in (entry, "None")]
    kinds.sort(key=lambda k: (_slot_rank(k), k.rows == "Into"))
    return kinds


def _dtype(value, allowed, what):
    name = str(value).replace("torch.", "")
    name = _CACHE_DTYPES.get(name, name)
    if name not in allowed:
        raise ValueError("%s: %r is not one of %s" % (what, value,
                                                      ", ".join(allowed)))
    return name


def _integer(value, what):
    """`value` as an int, refused (ValueError) when it is not an integer: a
    16.5 would otherwise become 16 without a word. The compiler checks the
    range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError("%s: expected an integer, got %r" % (what, value))
    return int(value)


def normalize_quant(quant, cache_dtype=None):
    """(kind, granularity, mode) from "kind[,granularity[,mode]]", a tuple or
    a dict; granularity defaults to per_tensor and mode to static."""
    if quant is None:
        if cache_dtype in ("f8E4M3FN", "f8E5M2"):
            quant = "fp8_e4m3" if cache_dtype == "f8E4M3FN" else "fp8_e5m2"
        elif cache_dtype == "i8":
            quant = "int8"
        else:
            return None
    if isinstance(quant, dict):
        parts = [quant.get("kind"), quant.get("granularity", "per_tensor"),
                 quant.get("mode", "static")]
    else:
        if isinstance(quant, str):
            quant = [p.strip() for p in quant.split(",") if p.strip()]
        parts = list(quant) + ["per_tensor", "static"][len(quant) - 1:]
    if len(parts) != 3 or parts[0] not in _QUANT_STORAGE:
        raise ValueError("quant: expected kind[,granularity[,mode]] with kind "
                         "one of %s, got %r" % (", ".join(_QUANT_STORAGE),
                                                quant))
    return tuple(parts)


# vLLM's [num_blocks, block_size, num_kv_heads, head_dim] caches, token-major
# (NHD) or head-major (HND) in memory: the layouts the adapters of ops.py
# produce, and describe's default; and vLLM's x-vectorized cache (x), which
# kvgen.vllm's reshape_and_cache writes. Every other layout is kvgen's to know
# (include/kvgen/ABI/Layouts.def): an unknown name is its diagnostic.
_VLLM_LAYOUTS = {"NHD": "paged_nhd", "HND": "paged_hnd", "x": "vllm_vectorized"}


def describe(layout=_VLLM_LAYOUTS["NHD"], block_size=16, num_kv_heads=8, head_dim=128,
             dtype="bf16", cache_dtype=None, quant=None, max_seq_len=None,
             kernels=None, name="kv", kv_lora_rank=None, rope_dim=None,
             v_head_dim=None, prologue=None):
    """The kv module text (kvgen's input) of one cache description. A
    layout without blocks takes max_seq_len instead of block_size (kvgen
    says which). With kv_lora_rank and rope_dim it is an MLA latent cache
    (one head of kv_lora_rank + rope_dim). `v_head_dim` gives V a head size
    of its own (left out, or equal to head_dim: V's is head_dim). `kernels` names kinds of those
    that write rows into a cache of its entry and those that touch no cache
    (default: all of them; for a K/V cache append, slot_mapping,
    fused_append and paged_kv_append). `prologue` (a dict of q_heads, norm,
    rope, rotary_dim, each optional) gives the kinds that take a fused
    prologue (append, fused_append, paged_kv_append; mla_append,
    mla_fused_append: rope on k_pe and q_pe) the #kv.prologue<...> of
    docs/CONTRACT.md; with it, `kernels` defaults to those kinds."""
    latent = kv_lora_rank is not None or rope_dim is not None
    kinds = {k.name: k for k in _kernels_for(latent)}
    allowed = tuple(kinds)
    prologue_text = _prologue(prologue)
    if kernels is None:
        kernels = tuple(k for k in allowed if not prologue_text
                        or kinds[k].prologue)
    src = _dtype(dtype, _SOURCE_DTYPES, "dtype")
    q = normalize_quant(quant, _dtype(cache_dtype, list(_CACHE_DTYPES.values()),
                                      "cache_dtype") if cache_dtype else None)
    if cache_dtype is None:
        cache = _QUANT_STORAGE[q[0]] if q else src
    else:
        cache = _dtype(cache_dtype, list(_CACHE_DTYPES.values()),
                       "cache_dtype")
    if max_seq_len:
        extent = "max_seq_len = %d" % _integer(max_seq_len, "max_seq_len")
    else:
        extent = "block_size = %d" % _integer(block_size, "block_size")
    text = ("!kv.cache<layout = %s, %s, num_kv_heads = %d, head_dim = %d, "
            "dtype = %s" % (layout, extent,
                            _integer(num_kv_heads, "num_kv_heads"),
                            _integer(head_dim, "head_dim"),
                            cache))
    if v_head_dim is not None and v_head_dim != head_dim:
        text = text.replace(
            ", dtype = ", ", v_head_dim = %d, dtype = "
            % _integer(v_head_dim, "v_head_dim"), 1)
    if q:
        text += (", quant = #kv.quant<kind = %s, granularity = %s, mode = %s>"
                 % q)
    if latent:
        if kv_lora_rank is None or rope_dim is None:
            raise ValueError("a latent cache needs both kv_lora_rank and "
                             "rope_dim")
        text += (", latent = #kv.latent<kv_lora_rank = %d, rope_dim = %d>"
                 % (_integer(kv_lora_rank, "kv_lora_rank"),
                    _integer(rope_dim, "rope_dim")))
    text += ">"
    lines = ["module {"]
    for k in kernels:
        if k not in allowed:
            raise ValueError("kernels: %r is not one of %s%s"
                             % (k, ", ".join(allowed),
                                " (a latent cache)" if latent else ""))
        lines.append("  kv.%s @%s_%s : %s%s%s" % (
            k, name, k, text,
            " from " + src if kinds[k].rows == "Into" else "",
            _prologue_clause(prologue_text, latent)
            if prologue_text and kinds[k].prologue else ""))
    lines.append("}")
    return "\n".join(lines) + "\n"


_PROLOGUE_KEYS = ("q_heads", "norm", "rope", "rotary_dim", "q_quant",
                  "cos_sin")
_PROLOGUE_KEYWORDS = {"norm": "rms", "rope": "neox or gptj",
                      "q_quant": "fp8_e4m3", "cos_sin": "f32"}


def _prologue_clause(text, latent):
    """The op's prologue: a keyword of kv.append's and kv.fused_append's
    syntax, an attribute of the MLA appends' (whose syntax has no keyword
    for it)."""
    return " {prologue = %s}" % text if latent else " prologue " + text


def _prologue(prologue):
    """The #kv.prologue<...> text of a dict of its parts ("" for None or an
    empty dict); the compiler's verifier checks the values."""
    if not prologue:
        return ""
    if not isinstance(prologue, dict):
        raise ValueError("prologue: expected a dict of %s, got %r"
                         % (", ".join(_PROLOGUE_KEYS), prologue))
    unknown = sorted(set(prologue) - set(_PROLOGUE_KEYS))
    if unknown:
        raise ValueError("prologue: unknown part %r (the parts: %s)"
                         % (unknown[0], ", ".join(_PROLOGUE_KEYS)))
    parts = []
    for key in _PROLOGUE_KEYS:
        value = prologue.get(key)
        if value is None:
            continue
        if key in ("q_heads", "rotary_dim"):
            parts.append("%s = %d" % (key, _integer(value, "prologue." + key)))
        elif not isinstance(value, str) or not value.isidentifier():
            raise ValueError(
                "prologue.%s: expected a keyword (%s), got %r"
                % (key, _PROLOGUE_KEYWORDS[key], value))
        else:
            parts.append("%s = %s" % (key, value))
    return "#kv.prologue<%s>" % ", ".join(parts)


def find_compiler():
    """The kvgen compiler's path, or None (the order: kvgen/_paths.py)."""
    return _paths.compiler()


_identities = {}
_identity_lock = threading.Lock()


def compiler_identity(path):
    """What the cache keys the compiler on: `kvgen --version` and a hash of
    the binary (a rebuilt compiler of the same version is another one)."""
    st = os.stat(path)
    stamp = (path, st.st_size, st.st_mtime_ns)
    with _identity_lock:
        if stamp in _identities:
            return _identities[stamp]
    proc = subprocess.run([path, "--version"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise errors.CompilerError("%s --version failed: %s"
                                   % (path, proc.stderr.strip()))
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    version = proc.stdout.strip()
    identity = (version, hashlib.sha256(
        (version + "\n" + h.hexdigest()).encode()).hexdigest()[:16])
    with _identity_lock:
        _identities[stamp] = identity
    return identity


def _target(target, chip):
    if target in ("gpu", "cuda"):
        chip = chip or os.environ.get("KVGEN_CHIP") or "sm_90"
        return "gpu", chip, "gpu-" + chip
    if target in ("host", "cpu"):
        return "host", None, "host-" + platform.machine()
    raise ValueError("target: expected gpu or host, got %r" % (target,))


def cache_entry(description=None, *, target="gpu", chip=None, cache=None,
                compiler=None, **fields):
    """The path of the cached bundle (bundle.json) or host object
    (kernels.so) of a description, compiling it on a miss; arguments as for
    ``compile``. Needs no libkvrt (precompile uses it). Every entry is
    checked before it is used (see _check_entry): a bad one is rebuilt where
    there is a compiler, refused (CacheError) where there is none."""
    return _entry(description, target, chip, cache, compiler, fields)[0]


def _entry(description, target, chip, cache, compiler, fields,
           rebuild=False):
    """(artifact path, whether a compiler was at hand)."""
    if description is None:
        description = describe(**fields)
    elif fields:
        raise TypeError("give a description or its fields, not both")
    kind, chip, tag = _target(target, chip)
    root = _cache_root(cache)
    desc_key = hashlib.sha256(description.encode()).hexdigest()[:24]
    desc_dir = os.path.join(root, tag, desc_key)
    artifact = _ARTIFACTS[kind]
    want = (artifact, description, tag, kind, chip)

    path = compiler or find_compiler()
    if path is None:
        entry = _newest_entry(desc_dir, want)
        if entry is None:
            raise errors.KernelNotAvailableError(
                "no kvgen compiler (set KVGEN_COMPILER or put kvgen on PATH) "
                "and no cached kernels for target %s in %s for:\n%s"
                "fill the cache ahead of time with python -m kvgen precompile"
                % (tag, root, description))
        return os.path.join(entry, artifact), False
    version, ident = compiler_identity(path)
    entry = os.path.join(desc_dir, ident)
    problem = _MISSING if rebuild else _check_entry(entry, want)
    if problem is not None:
        if problem is not _MISSING or rebuild:
            _discard(entry)
        _compile_into(path, version, description, kind, chip, entry,
                      artifact, tag)
        problem = _check_entry(entry, want)
        if problem is not None:
            raise errors.CacheError(
                "the kernel cache entry %s, just written, fails its check: "
                "%s" % (entry, _words(problem)), entry)
    return os.path.join(entry, artifact), True


_loaded = {}
_loaded_lock = threading.Lock()


def compile(description=None, *, target="gpu", chip=None, cache=None,
            compiler=None, **fields):
    """A Bundle for `description` (kv module text) or for the fields of
    ``describe`` (layout=, block_size=, num_kv_heads=, head_dim=, dtype=,
    cache_dtype=, quant=, max_seq_len=, kernels=, kv_lora_rank=, rope_dim=,
    v_head_dim=).
    `target` is "gpu" (PTX for
    `chip`, default $KVGEN_CHIP or sm_90) or "host" (a shared object for this
    CPU). `cache` overrides the cache folder. Compiles only on a miss. The
    loaded bundle must describe the description's kernels for the target it
    is filed under, or the entry is rebuilt (or refused, without a
    compiler)."""
    if description is None:
        description = describe(**fields)
        fields = {}
    kind = _target(target, chip)[0]
    file, rebuilt = None, False
    while True:
        file, have_compiler = _entry(description, target, chip, cache,
                                     compiler, fields, rebuild=rebuilt)
        with _loaded_lock:
            bundle = _loaded.get(file)
        if bundle is not None:
            return bundle
        bundle = (Bundle.load_shared_lib(file) if kind == "host" else
                  Bundle.load_json_file(file))
        problem = _bundle_problem(bundle, description, kind,
                                  _target(target, chip)[1])
        if problem is None:
            break
        bundle.close()
        entry = os.path.dirname(file)
        if not have_compiler or rebuilt:
            raise errors.CacheError(
                "the kernel cache entry %s does not hold the kernels it is "
                "filed for: %s" % (entry, problem), entry)
        rebuilt = True
    with _loaded_lock:
        return _loaded.setdefault(file, bundle)


_SIGNAL_NOTES = {"SIGXFSZ": " (a file size limit, ulimit -f)",
                 "SIGKILL": " (killed from outside, e.g. out of memory)"}
# kvgen's own words for an OS error while writing its output
# (tools/kvgen/kvgen.cpp), and the OS's for a few that may reach it.
_OS_FAILURES = ("kvgen: cannot write", "No space left on device",
                "Disk quota exceeded", "Read-only file system",
                "File too large", "Input/output error")


def _compile_into(compiler, version, description, kind, chip, entry, artifact,
                  tag):
    """Runs the compiler into a fresh folder beside `entry`, records every
    file's size and sha256 in manifest.json (written last), then renames it
    into place: a reader sees a whole entry or none (_disk_cache._work_dir,
    _disk_cache._seal_entry)."""
    with _disk_cache._work_dir(entry) as work:
        desc_file = os.path.join(work, "description.mlir")
        out = os.path.join(work, artifact)
        try:
            _disk_cache._write_file(desc_file, description.encode())
        except OSError as e:
            raise _cache_write_error(desc_file, e) from None
        cmd = [compiler, desc_file, "-o", out]
        if kind == "host":
            cmd += ["--target=host", "--emit=shared-lib"]
        else:
            cmd += ["--emit=bundle", "--chip=" + chip]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True,
                                  errors="replace")
        except OSError as e:
            raise errors.CompilerFailedError(
                "the kvgen compiler %s could not be run: %s"
                % (compiler, e.strerror or e)) from None
        stderr = proc.stderr.strip()
        if proc.returncode < 0:
            try:
                sig = signal.Signals(-proc.returncode).name
            except ValueError:
                sig = "signal %d" % -proc.returncode
            raise errors.CompilerFailedError(
                "the kvgen compiler crashed: killed by %s%s while compiling "
                "for %s; not a refusal of the description\n%s\n(%s)"
                % (sig, _SIGNAL_NOTES.get(sig, ""), tag, stderr,
                   " ".join(cmd)), signal=-proc.returncode)
        if proc.returncode != 0:
            failure = [l for l in stderr.splitlines()
                       if any(w in l for w in _OS_FAILURES)]
            if failure or proc.returncode != 1:
                raise errors.CompilerFailedError(
                    "the kvgen compiler failed (exit status %d): %s\n%s\n(%s)"
                    % (proc.returncode, (failure or [stderr or "no "
                                                     "message"])[0],
                       stderr, " ".join(cmd)))
            # The first error first (without the temporary file's name), then
            # everything kvgen said and the command.
            first = [l.split("error:", 1)[1].strip()
                     for l in stderr.splitlines() if "error:" in l]
            raise errors.CompilerError(
                "kvgen refused the description: %s\n%s\n(%s)"
                % ((first or [stderr])[0], stderr, " ".join(cmd)))
        try:
            data = _read_checked(out, _MAX_FILE_BYTES)
        except ValueError as e:
            raise errors.CompilerFailedError(
                "the kvgen compiler %s exited 0 but its output is unusable: "
                "%s\n(%s)" % (compiler, e, " ".join(cmd))) from None
        problem = _artifact_problem(data, kind, chip) if data else \
            "is empty"
        if problem:
            raise errors.CompilerFailedError(
                "the kvgen compiler %s exited 0 but its %s %s\n(%s)"
                % (compiler, artifact, problem, " ".join(cmd)))
        _disk_cache._seal_entry(work, entry, tag, artifact, data, description,
                                version, compiler)
