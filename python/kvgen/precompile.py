"""Fill a kernel cache ahead of time, for machines without the compiler.

    python -m kvgen precompile --cache-dir DIR --model config.json --tp 1,2
    python -m kvgen precompile --cache-dir DIR --num-kv-heads 8 \\
        --head-dim 128 --block-size 16 --dtypes bf16,f16 \\
        --kv-cache-dtypes auto,fp8

    python -m kvgen precompile --cache-dir DIR --mla 512+64 --block-size 64 \
        --dtypes bf16 --kv-cache-dtypes auto,fp8

Every combination of the lists is compiled (the kernels the ops look up:
append, slot_mapping, fused_append and paged_kv_append of one description;
with --mla, the latent caches' mla_append, slot_mapping and mla_fused_append
instead). A model config is
a Hugging Face config.json: num_key_value_heads (else num_attention_heads),
head_dim (else hidden_size / num_attention_heads) and torch_dtype; --tp
divides the KV heads as tensor parallelism does. An fp8 description the
compiler cannot generate yet is reported and skipped, not fatal.
"""

import argparse
import itertools
import json
import os
import sys

from . import compiler, errors

_FP8 = {"fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}


def _list(text, cast=str):
    return [cast(x) for x in str(text).split(",") if x]


def model_shapes(path, tps):
    """(num_kv_heads, head_dim, dtype) of a config.json, per TP degree."""
    with open(path) as f:
        cfg = json.load(f)
    cfg = cfg.get("text_config", cfg)
    heads = cfg.get("num_attention_heads")
    kv = cfg.get("num_key_value_heads") or heads
    dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    dtype = _TORCH_DTYPES.get(cfg.get("torch_dtype", "bfloat16"), "bf16")
    out = []
    for tp in tps:
        # KV heads are replicated when TP exceeds them (vLLM does the same).
        out.append((max(1, kv // tp), dim, dtype))
    return out


def descriptions(args):
    """(fields, label) for every combination the arguments ask for."""
    if args.model:
        shapes = model_shapes(args.model, _list(args.tp, int))
        if args.dtypes:
            shapes = [(h, d, t) for h, d, _ in shapes
                      for t in _list(args.dtypes)]
    else:
        shapes = list(itertools.product(_list(args.num_kv_heads, int),
                                        _list(args.head_dim, int),
                                        _list(args.dtypes or "bf16")))
    layouts = _list(args.layouts)
    if args.mla:
        # A latent cache is one NHD head of kv_lora_rank + rope_dim.
        try:
            pairs = [tuple(int(x) for x in p.split("+")) for p in
                     _list(args.mla)]
        except ValueError:
            pairs = [()]
        if any(len(p) != 2 for p in pairs):
            raise SystemExit("precompile: --mla: expected kv_lora_rank+rope_dim "
                             "pairs such as 512+64, got %r" % args.mla)
        shapes = [((1, r + p, t), (r, p)) for r, p in pairs
                  for t in _list(args.dtypes or "bf16")]
        layouts = [compiler._VLLM_LAYOUTS["NHD"]]
    else:
        shapes = [(s, None) for s in shapes]
    seen = set()
    for ((heads, dim, dtype), latent), layout, bs, kvd in itertools.product(
            shapes, layouts, _list(args.block_size, int),
            _list(args.kv_cache_dtypes)):
        fields = dict(layout=layout, block_size=bs, num_kv_heads=heads,
                      head_dim=dim, dtype=dtype)
        if latent:
            fields.update(kv_lora_rank=latent[0], rope_dim=latent[1])
        if kvd != "auto":
            if kvd not in _FP8:
                raise SystemExit("precompile: --kv-cache-dtypes: %r is not "
                                 "auto, fp8, fp8_e4m3 or fp8_e5m2" % kvd)
            fields["quant"] = _FP8[kvd]
        key = tuple(sorted(fields.items()))
        if key not in seen:
            seen.add(key)
            yield fields


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m kvgen precompile",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--cache-dir", help="the cache to fill (default: "
                   "$KVGEN_CACHE_DIR or ~/.cache/kvgen)")
    p.add_argument("--model", help="a Hugging Face config.json")
    p.add_argument("--tp", default="1", help="tensor-parallel degrees (with "
                   "--model), e.g. 1,2,4,8")
    p.add_argument("--num-kv-heads", default="8")
    p.add_argument("--head-dim", default="128")
    p.add_argument("--block-size", default="16")
    p.add_argument("--dtypes", default=None,
                   help="K/V dtypes, e.g. bf16,f16,f32 (default: the model's, "
                   "else bf16)")
    p.add_argument("--layouts", default=",".join(
        compiler._VLLM_LAYOUTS.values()),
        help="kvgen layout names (default: vLLM's, NHD and HND)")
    p.add_argument("--mla", default=None,
                   help="MLA latent caches instead: kv_lora_rank+rope_dim "
                   "pairs, e.g. 512+64 (one head)")
    p.add_argument("--kv-cache-dtypes", default="auto",
                   help="auto,fp8,fp8_e4m3,fp8_e5m2")
    p.add_argument("--target", default="gpu", help="gpu,host")
    p.add_argument("--chip", default=None, help="GPU chip (default sm_90)")
    args = p.parse_args(argv)

    if compiler.find_compiler() is None:
        print("precompile: no kvgen compiler (set KVGEN_COMPILER or put kvgen "
              "on PATH)", file=sys.stderr)
        return 2
    made = skipped = 0
    for target in _list(args.target):
        for fields in descriptions(args):
            label = "%s %s" % (target, " ".join(
                "%s=%s" % kv for kv in sorted(fields.items())))
            try:
                path = compiler.cache_entry(target=target, chip=args.chip,
                                            cache=args.cache_dir, **fields)
            except errors.CompilerError as e:
                if "quant" not in fields:
                    print("precompile: FAILED %s\n%s" % (label, e),
                          file=sys.stderr)
                    return 1
                skipped += 1
                print("skipped %s: %s" % (label, str(e).splitlines()[0]))
                continue
            made += 1
            print("cached  %s -> %s" % (label, os.path.dirname(path)))
    print("precompile: %d descriptions cached, %d skipped, in %s"
          % (made, skipped, args.cache_dir or compiler.cache_dir()))
    return 0
