#!/usr/bin/env python3
"""Times kvgen's generated append beside a peer's Triton append, in one run.

    python3 bench/side_by_side.py --peer PATH/kv_append_triton.py \\
        --bundle BUILD/bench/bench.bundle.json [--bundle more.bundle.json] \\
        [--kernel KERNEL] [--kvrt-lib BUILD/lib/libkvrt.so] [--quick] \\
        [--out OUT_DIR]

In one process, on the same data (random bf16 rows, 1 GiB K and V caches, far
past the L2, random blocks), with the same modes: cold (an L2 flush, then CUDA
events around one call; median), a CUDA graph of 100 calls replayed (decode;
us per call) and an eager Python loop (us per call, host clock). The
generated kernel is launched through kvrt's C API (ctypes, DLPack tensors),
the peer through its Python function `kv_append(k, v, key_cache,
value_cache, slot_mapping, k_scale, v_scale, variant=...)`. A device-to-device
copy of the same run gives the ceiling every prefill is a fraction of.

Writes OUT_DIR/side_by_side.json and OUT_DIR/side_by_side.md and prints the
table. The peer is a baseline, not a dependency: it is loaded from the path
given, and nothing of it is part of kvgen.

The pure parts (arguments, workloads, byte counts, the report) need only the
standard library; torch and triton are imported when a GPU run starts.
"""

import argparse
import json
import math
import os
import random
import sys

# The one layout the peer writes (vLLM's flash cache, NHD in memory), and
# bench/bench.mlir's kernel of it (named bench_<layout>).
PEER_LAYOUT = "paged_nhd"
DEFAULT_KERNEL = "bench_" + PEER_LAYOUT
DECODE_TOKENS = [1, 32, 128, 512]
PREFILL_TOKENS = [4096, 16384, 65536]
PREFILL_REQUEST_TOKENS = 1024
PAGED_MAX_CONTEXT = 8192
MIN_CACHE_BYTES = 1 << 30
MIN_TOUCH_BYTES = 256 << 20
FLUSH_BYTES = 1 << 30
COPY_BYTES = 4 << 30
GRAPH_CALLS = 100
DTYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "f8e4m3": 1, "f8e5m2": 1,
               "i8": 1, "i32": 4, "i64": 8}

# Exit statuses: 3 when a check failed (the numbers are flagged), 2 for a
# setup that cannot run at all.
EXIT_CHECK_FAILED = 3


def parse_sizes(text):
    """'1,32,128' -> [1, 32, 128]; positive integers only."""
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            "sizes are comma-separated token counts, not %r" % text)
    if not sizes or any(s <= 0 for s in sizes):
        raise argparse.ArgumentTypeError(
            "sizes must be positive token counts, not %r" % text)
    return sizes


MODES = ("cold", "eager", "graph")


def parse_modes(text):
    """'cold,graph' -> ['cold', 'graph']; known modes only."""
    modes = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if not modes or bad:
        raise argparse.ArgumentTypeError(
            "modes are a comma-separated list of %s, not %r" %
            (", ".join(MODES), text))
    return modes


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peer", required=True,
                        help="the peer's Python file (kv_append_triton.py)")
    parser.add_argument("--peer-variant", default="token",
                        choices=["token", "head"],
                        help="the peer's kernel: one program per token "
                             "(default) or per (token, head)")
    parser.add_argument("--bundle", action="append", default=[],
                        help="a kvgen bundle; repeat for several")
    parser.add_argument("--kernel", action="append", default=[],
                        help="a kernel to compare (default %s); "
                             % DEFAULT_KERNEL +
                             "repeat for several; one that no bundle has is "
                             "skipped with a message")
    parser.add_argument("--variant", default="auto",
                        choices=["auto", "vector"],
                        help="how a vector kernel's description is launched: "
                             "kvrt's choice (default; the wide kernel from its "
                             "min_tokens to its max_tokens) or its vector "
                             "kernel alone; a NAME_wide or NAME_scalar kernel "
                             "forces its own")
    parser.add_argument("--kvrt-lib",
                        help="libkvrt.so (default: BUILD/lib beside the "
                             "first bundle's bench/ folder)")
    parser.add_argument("--decode", type=parse_sizes, default=DECODE_TOKENS,
                        help="decode sizes, e.g. 1,32,128,512")
    parser.add_argument("--prefill", type=parse_sizes, default=PREFILL_TOKENS,
                        help="prefill sizes, multiples of %d"
                             % PREFILL_REQUEST_TOKENS)
    parser.add_argument("--modes", type=parse_modes, default=list(MODES),
                        help="modes to time, e.g. cold,graph (default: %s; "
                             "graph applies to decode sizes only)"
                        % ",".join(MODES))
    parser.add_argument("--prefill-blocks", default="random",
                        choices=PREFILL_BLOCK_ORDERS,
                        help="the blocks of a prefill set: drawn at random "
                             "(default: a paged cache in use) or consecutive "
                             "(a fresh cache; writes like a copy's)")
    parser.add_argument("--quick", action="store_true",
                        help="fewer repetitions: a smoke test, not a "
                             "measurement")
    parser.add_argument("--seed", type=int, default=20261203)
    parser.add_argument("--out", default=os.environ.get("OUT") or
                        "side-by-side-out")
    args = parser.parse_args(argv)
    if not args.bundle:
        parser.error("--bundle is required (a kvgen bundle with the kernel)")
    if not args.kernel:
        args.kernel = [DEFAULT_KERNEL]
    bad = [t for t in args.prefill if t % PREFILL_REQUEST_TOKENS]
    if bad:
        parser.error("prefill sizes must be multiples of %d tokens (requests "
                     "of %d): %s" % (PREFILL_REQUEST_TOKENS,
                                     PREFILL_REQUEST_TOKENS, bad))
    return args


def kvrt_call(name, manifest_variant, variant):
    """The description name and kvrt variant ('auto', 'vector', 'wide',
    'scalar') that launch manifest kernel `name` of variant
    `manifest_variant` under --variant `variant`: a scalar or wide kernel is
    its description's name plus a suffix, and naming it forces it."""
    suffix = {"scalar": "_scalar", "wide": "_wide"}.get(manifest_variant)
    if suffix is None:
        return name, variant
    if not name.endswith(suffix):
        raise ValueError("%s kernel %r does not end in %s"
                         % (manifest_variant, name, suffix))
    return name[:-len(suffix)], manifest_variant


def repetitions(quick):
    """How often each mode repeats: cold calls, graph samples, eager calls.
    Graph samples are odd and many enough that a median of interleaved
    samples (kvgen's and the peer's, the first alternating) is not the
    median of one order's samples alone: at 128 decode tokens a sample is
    only the one pass over the sets, 300 calls."""
    if quick:
        return {"cold": 15, "graph": 3, "eager_calls": 300, "eager": 2,
                "copy": 3, "max_graphs": 20}
    return {"cold": 100, "graph": 15, "eager_calls": 3000, "eager": 5,
            "copy": 10, "max_graphs": 400}


# ----------------------------------------------------------------------------
# The description and its bytes
# ----------------------------------------------------------------------------

def description_from_manifest(entry):
    """What the comparison needs of a manifest entry (docs/KERNEL-ABI.md)."""
    cache = entry["cache"]
    quant = cache.get("quant")
    return {
        "name": entry["name"],
        "layout": cache["layout"],
        "block_size": cache.get("block_size"),
        "num_kv_heads": cache["num_kv_heads"],
        "head_dim": cache["head_dim"],
        "dtype": cache["dtype"],
        "source_dtype": entry.get("source_dtype", cache["dtype"]),
        "quant": quant,
    }


def unsupported(desc):
    """Why the peer cannot do this description ('' if it can): it appends
    bf16 into a paged NHD cache, bf16 or fp8 e4m3 with one static scale."""
    if desc["layout"] != PEER_LAYOUT:
        return "the peer writes %s caches only, not %s" % (PEER_LAYOUT,
                                                           desc["layout"])
    if desc["source_dtype"] != "bf16":
        return "the peer is fed bf16, not %s" % desc["source_dtype"]
    quant = desc["quant"]
    if quant is None:
        if desc["dtype"] != "bf16":
            return "the peer writes bf16 caches, not %s" % desc["dtype"]
        return ""
    if (quant.get("kind") != "fp8_e4m3" or
            quant.get("granularity") != "per_tensor" or
            quant.get("mode") != "static" or quant.get("reciprocal")):
        return ("the peer quantizes fp8_e4m3 per_tensor static with IEEE "
                "division only, not %s" % json.dumps(quant, sort_keys=True))
    return ""


def reference_checkable(desc):
    """Whether a description the peer cannot do is timed alone and checked
    against a torch reference instead: int8 per (token, head) with dynamic
    scales, from bf16, into a paged NHD cache."""
    quant = desc["quant"]
    return (desc["layout"] == PEER_LAYOUT and desc["source_dtype"] == "bf16"
            and quant is not None and quant.get("kind") == "int8" and
            quant.get("granularity") == "per_token_head" and
            quant.get("mode") == "dynamic" and not quant.get("reciprocal"))


def bytes_per_token(desc):
    """Minimum bytes: K+V read in the source dtype, the 8-byte slot, K+V
    written in the cache dtype, plus a dynamic description's scales."""
    row = desc["num_kv_heads"] * desc["head_dim"]
    scales = 0
    quant = desc["quant"]
    if quant and quant.get("mode") == "dynamic":
        per = desc["num_kv_heads"] if quant.get(
            "granularity") == "per_token_head" else 1
        scales = 2 * 4 * per
    return (row * 2 * DTYPE_BYTES[desc["source_dtype"]] + 8 +
            row * 2 * DTYPE_BYTES[desc["dtype"]] + scales)


def num_blocks(desc):
    """Blocks of a cache of at least 1 GiB."""
    block_bytes = (desc["block_size"] * desc["num_kv_heads"] *
                   desc["head_dim"] * DTYPE_BYTES[desc["dtype"]])
    return -(-MIN_CACHE_BYTES // block_bytes)


def sets_for(tokens, per_token):
    """Input sets a size rotates through so one pass touches >= 256 MiB."""
    return max(1, -(-MIN_TOUCH_BYTES // (tokens * per_token)))


# ----------------------------------------------------------------------------
# Workloads: the slots of every set
# ----------------------------------------------------------------------------

def decode_slots(blocks, block_size, tokens, sets, rng):
    """One token per request, each in its own random block (distinct within
    a set) at a random position."""
    slots = []
    for _ in range(sets):
        for block in rng.sample(range(blocks), tokens):
            slots.append(block * block_size + rng.randrange(block_size))
    return slots


PREFILL_BLOCK_ORDERS = ("random", "sequential")


def prefill_slots(blocks, block_size, tokens, sets, rng, order="random"):
    """Requests of 1024 tokens at contiguous positions after a random
    context, each request's blocks drawn at random (distinct within a set).
    With order "sequential" a set's blocks are instead consecutive from a
    random first one, request after request, as a fresh cache's allocator
    hands them out: the writes then land like a copy's, which separates
    what the random blocks cost from what the append costs."""
    if order not in PREFILL_BLOCK_ORDERS:
        raise ValueError("prefill block order %r is not one of %s"
                         % (order, ", ".join(PREFILL_BLOCK_ORDERS)))
    requests = tokens // PREFILL_REQUEST_TOKENS
    slots = []
    for _ in range(sets):
        starts = [rng.randrange(PAGED_MAX_CONTEXT - PREFILL_REQUEST_TOKENS + 1)
                  for _ in range(requests)]
        spans = [(s // block_size,
                  (s + PREFILL_REQUEST_TOKENS - 1) // block_size)
                 for s in starts]
        needed = sum(l - f + 1 for f, l in spans)
        if order == "sequential":
            first = rng.randrange(blocks - needed + 1)
            drawn = list(range(first, first + needed))
        else:
            drawn = rng.sample(range(blocks), needed)
        next_block = 0
        for start, (first, last) in zip(starts, spans):
            table = drawn[next_block:next_block + last - first + 1]
            next_block += last - first + 1
            for pos in range(start, start + PREFILL_REQUEST_TOKENS):
                slots.append(table[pos // block_size - first] * block_size +
                             pos % block_size)
    return slots


def make_cases(desc, decode, prefill, seed, prefill_blocks="random"):
    """Every size: phase, tokens, sets and the slots of all its sets
    (`prefill_blocks`: prefill_slots' block order)."""
    rng = random.Random(seed)
    blocks, bs, per = num_blocks(desc), desc["block_size"], \
        bytes_per_token(desc)
    cases = []
    def prefill_in_order(blocks, bs, tokens, sets, rng):
        return prefill_slots(blocks, bs, tokens, sets, rng, prefill_blocks)
    for phase, sizes, make in (("decode", decode, decode_slots),
                               ("prefill", prefill, prefill_in_order)):
        for tokens in sizes:
            sets = sets_for(tokens, per)
            cases.append({"phase": phase, "tokens": tokens, "sets": sets,
                          "slots": make(blocks, bs, tokens, sets, rng)})
    return cases


# ----------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------

def turn_order(repetition, count):
    """The order `count` interleaved launchers take their turns in at a
    repetition: rotated by one each repetition, so that each takes every
    place equally often (for two, the order reversed every other
    repetition). A cold call's time depends on its place in the repetition
    by up to 5% under `ncu` (docs/dev/TUNING.md, "Reading the numbers")."""
    shift = repetition % count if count else 0
    order = list(range(count))
    return order[shift:] + order[:shift]


def median(samples):
    s = sorted(samples)
    if not s:
        return float("nan")
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def stats(samples):
    return {"median": median(samples),
            "min": min(samples) if samples else float("nan"),
            "max": max(samples) if samples else float("nan"),
            "n": len(samples)}


def fraction_of_copy(tokens, per_token, us, copy_gbps):
    """The share of the copy ceiling that `tokens` tokens in `us` reach."""
    if not us or math.isnan(us) or not copy_gbps:
        return float("nan")
    return tokens * per_token / us / 1e3 / copy_gbps


def headline_mode(phase):
    """The number each phase is judged by: graph us for decode, cold device
    time for prefill."""
    return "graph" if phase == "decode" else "cold"


def fmt(value, spec):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return spec % value


def markdown(report):
    """The side-by-side table: per kernel, every size in its headline mode,
    then every mode of every size."""
    lines = []
    copy = report.get("copy_GBps")
    lines.append("Side by side, one process: kvgen (kvrt_append) and the peer "
                 "(%s), device %s, copy ceiling %s GB/s%s." % (
                     report.get("peer_name", "peer"),
                     report.get("device", "?"), fmt(copy, "%.0f"),
                     " (QUICK: not for quoting)" if report.get("quick")
                     else ""))
    if report.get("prefill_blocks", "random") != "random":
        lines.append("Prefill blocks: %s (not the paged workload of "
                     "docs/PERFORMANCE.md)." % report["prefill_blocks"])
    for kernel in report.get("kernels", []):
        lines.append("")
        lines.append("### %s" % kernel["name"])
        if kernel.get("skipped"):
            lines.append("")
            lines.append("skipped: %s" % kernel["skipped"])
            continue
        lines.append("")
        lines.append("| size | kvgen | peer | kvgen / peer | kvgen % copy | "
                     "peer % copy |")
        lines.append("|---|---|---|---|---|---|")
        for row in kernel["rows"]:
            if row["mode"] != headline_mode(row["phase"]):
                continue
            unit = "us/call in a graph" if row["mode"] == "graph" else \
                "cold us"
            lines.append("| %s %d (%s) | %s | %s | %s | %s | %s |" % (
                row["phase"], row["tokens"], unit,
                fmt(row["kvgen_us"]["median"], "%.3f"),
                fmt(row["peer_us"]["median"], "%.3f"),
                fmt(row["ratio"], "%.3f"),
                fmt(100 * row["kvgen_fraction"], "%.1f"),
                fmt(100 * row["peer_fraction"], "%.1f")))
        lines.append("")
        lines.append("| size | mode | kvgen us | peer us | kvgen / peer |")
        lines.append("|---|---|---|---|---|")
        for row in kernel["rows"]:
            lines.append("| %s %d | %s | %s | %s | %s |" % (
                row["phase"], row["tokens"], row["mode"],
                fmt(row["kvgen_us"]["median"], "%.3f"),
                fmt(row["peer_us"]["median"], "%.3f"),
                fmt(row["ratio"], "%.3f")))
        for check in kernel.get("checks", []):
            lines.append("")
            lines.append("check: %s" % check)
    return "\n".join(lines) + "\n"


def make_row(phase, tokens, sets, mode, kvgen, peer, per_token, copy_gbps):
    """One (size, mode) of one kernel; kvgen and peer are sample lists."""
    k, p = stats(kvgen), stats(peer)
    ratio = k["median"] / p["median"] if p["median"] else float("nan")
    return {"phase": phase, "tokens": tokens, "sets": sets, "mode": mode,
            "bytes_per_call": tokens * per_token,
            "kvgen_us": k, "peer_us": p, "ratio": ratio,
            "kvgen_fraction": fraction_of_copy(tokens, per_token, k["median"],
                                               copy_gbps),
            "peer_fraction": fraction_of_copy(tokens, per_token, p["median"],
                                              copy_gbps)}


def write_report(report, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "side_by_side.json"), "w") as f:
        # NaN is not JSON: a number that was not measured is null.
        json.dump(_nan_to_none(report), f, indent=1)
        f.write("\n")
    text = markdown(report)
    with open(os.path.join(out_dir, "side_by_side.md"), "w") as f:
        f.write(text)
    return text


def _nan_to_none(value):
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _nan_to_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nan_to_none(v) for v in value]
    return value


def default_kvrt_lib(bundle):
    """BUILD/lib/libkvrt.so* for a bundle at BUILD/bench/NAME.bundle.json."""
    lib = os.path.join(os.path.dirname(os.path.abspath(bundle)), os.pardir,
                       "lib")
    if os.path.isdir(lib):
        # A copy (zip, cp without -P) may drop the soname links: any name
        # that opens will do.
        for name in sorted(os.listdir(lib)):
            path = os.path.join(lib, name)
            if name.startswith("libkvrt.so") and os.path.isfile(path):
                return os.path.normpath(path)
    return None


def missing_inputs(args):
    """What the run cannot start without, checked before torch is loaded:
    the peer's file and at least one bundle."""
    problems = []
    if not os.path.isfile(args.peer):
        problems.append("no peer file %s" % args.peer)
    if not any(os.path.isfile(b) for b in args.bundle):
        problems.append("none of the bundles exists: %s" %
                        ", ".join(args.bundle))
    return problems


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    problems = missing_inputs(args)
    if problems:
        for p in problems:
            print("side_by_side: %s" % p, file=sys.stderr)
        return 2
    # The GPU half lives beside this file; importing it pulls torch in.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import side_by_side_gpu
    return side_by_side_gpu.run(args)


if __name__ == "__main__":
    sys.exit(main())
