"""Fill a kernel cache ahead of time, for machines without the compiler.

    python -m kvgen precompile --cache-dir DIR --model config.json --tp 1,2
    python -m kvgen precompile --cache-dir DIR --num-kv-heads 8 \\
        --head-dim 128 --block-size 16 --dtypes bf16,f16 \\
        --kv-cache-dtypes auto,fp8 --scales per_tensor,per_head

    python -m kvgen precompile --cache-dir DIR --mla 512+64 --block-size 64 \\
        --dtypes bf16 --kv-cache-dtypes auto,fp8

Every combination of the lists is compiled (each description's kernels as
kvgen.describe generates them: those the ops look up; with --mla, a latent
cache's). A
model config is a Hugging Face config.json: num_key_value_heads (else
num_attention_heads), head_dim (else hidden_size / num_attention_heads) and
torch_dtype; --tp divides the KV heads as tensor parallelism does. A config
with kv_lora_rank (DeepSeek's MLA) gets the latent cache of kv_lora_rank +
qk_rope_head_dim instead, one head whatever the TP degree. --scales says
which static fp8 scales the fp8 descriptions take: per_tensor (the
default: vLLM's [1] k_scale and v_scale) and per_head ([num_kv_heads]).

Exit status: 0 when every description is cached; 2 for a bad flag or
config (one line naming the flag or field and its value, nothing compiled);
1 when a compilation failed (each failure is reported; a compiler crash is
a failure, never a skip).
"""

import argparse
import itertools
import json
import os
import re
import subprocess
import sys

from . import compiler, errors

_FP8 = {"fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
_SCALES = ("per_tensor", "per_head")
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}
# The layouts a description of block_size takes (include/kvgen/ABI/
# Layouts.def less contiguous, which takes max_seq_len).
_CHIP = re.compile(r"^sm_[0-9]{2,3}[af]?$")
_PROG = "python -m kvgen precompile"


class BadInput(Exception):
    """A bad flag or config: one line, exit status 2."""


def _list(flag, text):
    items = [x.strip() for x in str(text).split(",")]
    if not items or any(not x for x in items):
        raise BadInput("%s: %r is not a comma-separated list of values"
                       % (flag, text))
    return items


def _check_layout(layout):
    """A layout the compiler knows, of a paged cache (one with blocks): the
    layouts are the compiler's vocabulary, so the compiler is asked."""
    path = compiler.find_compiler()
    if path is None:
        return  # the compilations below report the missing compiler
    out = subprocess.run([path, "--layout=%s" % layout, "--block-size=16",
                          "--emit=kv"], capture_output=True, text=True)
    # Only the compiler's refusal of the flag is a bad flag; anything else
    # (a crash, another refusal) is left to the compilations to report.
    for line in out.stderr.splitlines():
        if out.returncode == 1 and line.startswith(
                ("kvgen: --layout=", "kvgen: --block-size is for")):
            raise BadInput("--layouts: %r: %s" % (layout, line[7:]))


def _positive_ints(flag, text):
    out = []
    for x in _list(flag, text):
        try:
            n = int(x, 10)
        except ValueError:
            n = 0
        if n <= 0:
            raise BadInput("%s: %r is not a positive integer" % (flag, x))
        out.append(n)
    return out


def _describe_value(v):
    try:
        return json.dumps(v)
    except (TypeError, ValueError):
        return repr(v)


def _load_config(path):
    try:
        with open(path, "rb") as f:
            raw = f.read(1 << 24)
    except OSError as e:
        raise BadInput("--model %s: cannot be read: %s"
                       % (path, e.strerror or e)) from None
    try:
        cfg = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise BadInput("--model %s: not a JSON config: %s"
                       % (path, str(e).splitlines()[0][:200])) from None
    if not isinstance(cfg, dict):
        raise BadInput("--model %s: a JSON %s, not a config object"
                       % (path, type(cfg).__name__))
    if "text_config" in cfg and cfg["text_config"] is not None:
        if not isinstance(cfg["text_config"], dict):
            raise BadInput("--model %s: text_config is %s; expected an "
                           "object" % (path, _describe_value(
                               cfg["text_config"])))
        cfg = cfg["text_config"]
    return cfg


def _positive_field(path, cfg, name, required):
    """cfg[name] as a positive int; None if absent (or null) and not
    required."""
    v = cfg.get(name)
    if v is None:
        if required:
            raise BadInput("--model %s: %s is missing" % (path, name))
        return None
    if type(v) is not int or v <= 0:
        raise BadInput("--model %s: %s is %s; expected a positive integer"
                       % (path, name, _describe_value(v)))
    return v


def model_shapes(path, tps, dtype_given=False):
    """(num_kv_heads, head_dim, dtype, latent) of a config.json per TP
    degree, latent being (kv_lora_rank, rope_dim) for an MLA model, else
    None; dtype None when `dtype_given` (the --dtypes flag decides). Raises
    BadInput naming the field and its value for a config kvgen cannot
    serve."""
    cfg = _load_config(path)
    heads = _positive_field(path, cfg, "num_attention_heads", True)
    dtype = None
    if not dtype_given:
        name = "torch_dtype" if "torch_dtype" in cfg else "dtype"
        value = cfg.get(name)
        if value is None:
            raise BadInput("--model %s: torch_dtype is missing; give the "
                           "K/V dtype with --dtypes" % path)
        dtype = _TORCH_DTYPES.get(value) if isinstance(value, str) else None
        if dtype is None:
            raise BadInput("--model %s: %s is %s; kvgen's K/V sources are "
                           "float32, float16 or bfloat16 (or give --dtypes)"
                           % (path, name, _describe_value(value)))
    for tp in tps:
        if heads % tp:
            raise BadInput("--tp %d does not divide num_attention_heads %d "
                           "of %s" % (tp, heads, path))
    rank = _positive_field(path, cfg, "kv_lora_rank", False)
    if rank is not None:
        # MLA: the cache holds one latent head of kv_lora_rank +
        # qk_rope_head_dim, the same on every TP rank.
        rope = _positive_field(path, cfg, "qk_rope_head_dim", True)
        return [(1, rank + rope, dtype, (rank, rope)) for _ in tps]
    kv = _positive_field(path, cfg, "num_key_value_heads", False) or heads
    if kv > heads or heads % kv:
        raise BadInput("--model %s: num_key_value_heads %d does not divide "
                       "num_attention_heads %d" % (path, kv, heads))
    dim = _positive_field(path, cfg, "head_dim", False)
    if dim is None:
        hidden = _positive_field(path, cfg, "hidden_size", True)
        if hidden % heads:
            raise BadInput("--model %s: hidden_size %d is not a multiple of "
                           "num_attention_heads %d (and there is no head_dim)"
                           % (path, hidden, heads))
        dim = hidden // heads
    out = []
    for tp in tps:
        # Each rank holds kv / tp heads; past kv ranks, each holds one
        # replicated head (vLLM's rule): either way one must divide the
        # other.
        if kv >= tp and kv % tp or kv < tp and tp % kv:
            raise BadInput("--tp %d: num_key_value_heads %d of %s is neither "
                           "a multiple nor a divisor of it" % (tp, kv, path))
        out.append((max(1, kv // tp), dim, dtype, None))
    return out


def descriptions(args):
    """The fields of every combination the arguments ask for; raises
    BadInput for a bad flag or config."""
    model = args.model is not None
    if args.mla is not None and model:
        raise BadInput("--mla and --model: give one (a config with "
                       "kv_lora_rank makes the latent cache by itself)")
    for flag, value in (("--num-kv-heads", args.num_kv_heads),
                        ("--head-dim", args.head_dim)):
        if value is not None and (model or args.mla is not None):
            raise BadInput("%s %s with %s: the %s gives it" % (
                flag, value, "--model" if model else "--mla",
                "config" if model else "latent shape"))
    if args.tp is not None and not model:
        raise BadInput("--tp %s needs --model" % args.tp)
    dtypes = None
    if args.dtypes is not None:
        dtypes = []
        for d in _list("--dtypes", args.dtypes):
            try:
                dtypes.append(compiler._dtype(d, compiler._SOURCE_DTYPES,
                                              "--dtypes"))
            except ValueError:
                raise BadInput("--dtypes: %r is not one of bf16, f16, f32"
                               % d) from None
    block_sizes = _positive_ints("--block-size", args.block_size)
    layouts = (_list("--layouts", args.layouts) if args.layouts is not None
               else [compiler._VLLM_LAYOUTS["NHD"],
                     compiler._VLLM_LAYOUTS["HND"]])
    for layout in layouts:
        _check_layout(layout)
    quants = []
    for kvd in _list("--kv-cache-dtypes", args.kv_cache_dtypes):
        if kvd != "auto" and kvd not in _FP8:
            raise BadInput("--kv-cache-dtypes: %r is not auto, fp8, fp8_e4m3 "
                           "or fp8_e5m2" % kvd)
        quants.append(None if kvd == "auto" else _FP8[kvd])
    scales = _list("--scales", args.scales)
    for g in scales:
        if g not in _SCALES:
            raise BadInput("--scales: %r is not per_tensor or per_head" % g)
    if "per_head" in scales and not any(quants):
        raise BadInput("--scales per_head needs an fp8 --kv-cache-dtypes "
                       "(an unquantized cache takes no scales)")

    if model:
        tps = _positive_ints("--tp", "1" if args.tp is None else
                             args.tp)
        shapes = model_shapes(args.model, tps, dtypes is not None)
        shapes = [(h, d, t, lat) for h, d, t0, lat in shapes
                  for t in (dtypes or [t0])]
    elif args.mla is not None:
        shapes = []
        for pair in _list("--mla", args.mla):
            parts = pair.split("+")
            if len(parts) != 2:
                raise BadInput("--mla: %r is not a kv_lora_rank+rope_dim "
                               "pair such as 512+64" % pair)
            r, p = (_positive_ints("--mla", x)[0] for x in parts)
            shapes += [(1, r + p, t, (r, p)) for t in (dtypes or ["bf16"])]
    else:
        shapes = [(h, d, t, None) for h, d, t in itertools.product(
            _positive_ints("--num-kv-heads", args.num_kv_heads or "8"),
            _positive_ints("--head-dim", args.head_dim or "128"),
            dtypes or ["bf16"])]
    if any(lat for *_, lat in shapes):
        # A latent cache is one NHD head of kv_lora_rank + rope_dim.
        nhd = compiler._VLLM_LAYOUTS["NHD"]
        if args.layouts is not None and layouts != [nhd]:
            raise BadInput("--layouts %s: a latent (MLA) cache is %s"
                           % (args.layouts, nhd))
        layouts = [nhd]
        if "per_head" in scales:
            # concat_and_cache_mla takes one scale.
            raise BadInput("--scales per_head: a latent (MLA) cache takes "
                           "one per_tensor scale")
    # The quant field of each description: the kind alone is per_tensor
    # (the text the ops compile for a [1] scale); per_head names it.
    quants = [q if q is None or g == "per_tensor" else q + ",per_head,static"
              for q in quants for g in scales]
    out, seen = [], set()
    for (heads, dim, dtype, latent), layout, bs, quant in itertools.product(
            shapes, layouts, block_sizes, quants):
        fields = dict(layout=layout, block_size=bs, num_kv_heads=heads,
                      head_dim=dim, dtype=dtype)
        if latent:
            fields.update(kv_lora_rank=latent[0], rope_dim=latent[1])
        if quant:
            fields["quant"] = quant
        key = tuple(sorted(fields.items()))
        if key not in seen:
            seen.add(key)
            out.append(fields)
    return out


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        # One line, as every other refusal of precompile.
        raise BadInput(message)


def main(argv=None):
    p = _Parser(prog=_PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--cache-dir", help="the cache to fill (default: "
                   "$KVGEN_CACHE_DIR or ~/.cache/kvgen)")
    p.add_argument("--model", help="a Hugging Face config.json")
    p.add_argument("--tp", default=None, help="tensor-parallel degrees (with "
                   "--model), e.g. 1,2,4,8 (default 1)")
    p.add_argument("--num-kv-heads", default=None, help="default 8")
    p.add_argument("--head-dim", default=None, help="default 128")
    p.add_argument("--block-size", default="16")
    p.add_argument("--dtypes", default=None,
                   help="K/V dtypes, e.g. bf16,f16,f32 (default: the model's, "
                   "else bf16)")
    p.add_argument("--layouts", default=None,
                   help="kvgen layout names of paged caches (default: "
                   "vLLM's, %s and %s)" % (compiler._VLLM_LAYOUTS["NHD"],
                                           compiler._VLLM_LAYOUTS["HND"]))
    p.add_argument("--mla", default=None,
                   help="MLA latent caches instead: kv_lora_rank+rope_dim "
                   "pairs, e.g. 512+64 (one head)")
    p.add_argument("--kv-cache-dtypes", default="auto",
                   help="auto,fp8,fp8_e4m3,fp8_e5m2")
    p.add_argument("--scales", default="per_tensor",
                   help="the fp8 descriptions' static scales: per_tensor "
                   "([1] k_scale/v_scale), per_head ([num_kv_heads]), or "
                   "both (default per_tensor)")
    p.add_argument("--target", default="gpu", help="gpu,host")
    p.add_argument("--chip", default=None, help="GPU chip (default sm_90)")
    try:
        args = p.parse_args(argv)
        targets = _list("--target", args.target)
        for t in targets:
            if t not in ("gpu", "host"):
                raise BadInput("--target: %r is not gpu or host" % t)
        if args.chip is not None:
            if not _CHIP.match(args.chip):
                raise BadInput("--chip: %r is not a chip such as sm_90"
                               % args.chip)
            if "gpu" not in targets:
                raise BadInput("--chip %s with --target %s: a chip is for "
                               "the gpu target" % (args.chip, args.target))
        if args.cache_dir is not None:
            try:
                compiler._cache_root(args.cache_dir)
            except errors.CacheError as e:
                raise BadInput("--cache-dir: %s" % e) from None
        else:
            try:
                compiler._cache_root(None)
            except errors.CacheError as e:
                raise BadInput(str(e)) from None
        todo = descriptions(args)
        if compiler.find_compiler() is None:
            raise BadInput("no kvgen compiler (set KVGEN_COMPILER or put "
                           "kvgen on PATH)")
    except BadInput as e:
        print("%s: %s" % (_PROG, e), file=sys.stderr)
        return 2
    except errors.CompilerNotFoundError as e:  # KVGEN_COMPILER not a file
        print("%s: %s" % (_PROG, e), file=sys.stderr)
        return 2

    made = failed = 0
    for target in targets:
        for fields in todo:
            label = "%s %s" % (target, " ".join(
                "%s=%s" % kv for kv in sorted(fields.items())))
            try:
                path = compiler.cache_entry(target=target, chip=args.chip,
                                            cache=args.cache_dir, **fields)
            except errors.CacheError as e:
                # The cache itself: every further description would fail
                # the same way.
                print("%s: %s" % (_PROG, e), file=sys.stderr)
                return 1
            except errors.KvgenError as e:
                # A refusal (CompilerError) or a crash (CompilerFailedError):
                # either way this description is not cached.
                failed += 1
                print("FAILED  %s: %s: %s" % (label, type(e).__name__,
                                              str(e).splitlines()[0]),
                      file=sys.stderr)
                continue
            made += 1
            print("cached  %s -> %s" % (label, os.path.dirname(path)))
    print("precompile: %d descriptions cached, %d failed, in %s"
          % (made, failed, args.cache_dir or compiler.cache_dir()))
    return 1 if failed else 0
