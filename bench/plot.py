#!/usr/bin/env python3
"""Plots kvbench's JSON: us and fraction of the copy ceiling against tokens.

    python3 bench/plot.py OUT/kvbench-KERNEL.json [more.json ...]
        [--summary OUT/kvbench-summary.png]

Writes one PNG next to each JSON (same name, .png): decode (us per call in a
CUDA graph of 100 calls) and prefill (cold device time), the generated kernel
beside the hand-written reference, with the targets and peer numbers that
kvbench judged the run against (its JSON's "targets") drawn in. With several
JSONs it also writes a summary of every kernel (--summary, default
kvbench-summary.png beside the first JSON). --print-summary prints one table
of every JSON, each run's targets as kvbench judged them (the count met and
every miss), and the comparisons between kernels that bench/targets.json
lists (e.g. block 528 against 512); it needs no matplotlib.
Runs on the GPU machine: matplotlib only, no display.
"""

import argparse
import json
import math
import os
import sys


def pyplot():
    """matplotlib's pyplot without a display, imported when a PNG is drawn."""
    import matplotlib
    matplotlib.use("Agg")  # no display on the GPU machine
    import matplotlib.pyplot as plt
    return plt


def headline(doc, phase, tokens):
    """The generated kernel's headline us at one size (NaN if absent)."""
    for r in doc["rows"]:
        if (r["impl"] == "generated" and r["phase"] == phase and
                r["tokens"] == tokens):
            return number(r["headline_us"])
    return float("nan")


def compare_kernels(docs, comparisons):
    """The comparisons of bench/targets.json between kernels of this run:
    lines 'MET'/'MISS' per size where both kernels were measured."""
    by_tag = {d["tag"]: d for d in docs}
    lines = []
    for c in comparisons:
        doc, base = by_tag.get(c["kernel"]), by_tag.get(c["against"])
        if doc is None or base is None:
            lines.append("  -    %s against %s: not both measured" %
                         (c["kernel"], c["against"]))
            continue
        for phase in c.get("phases", ["decode", "prefill"]):
            sizes = sorted({r["tokens"] for r in doc["rows"]
                            if r["phase"] == phase})
            for tokens in sizes:
                a, b = headline(doc, phase, tokens), headline(base, phase,
                                                              tokens)
                if c["metric"] == "ratio":
                    value = a / b if b else float("nan")
                else:  # "difference_us"
                    value = a - b
                ok = not math.isnan(value) and value <= c["at_most"]
                lines.append("  %-4s %s / %s %s %d: %s %s (at most %s)" % (
                    "MET" if ok else "MISS", c["kernel"], c["against"],
                    phase, tokens, c["metric"], fmt(value, "%.3f"),
                    c["at_most"]))
    return lines



def judged(doc, phase, metric, peer):
    """{tokens: limit} of the targets (peer=False) or the peer numbers
    (peer=True) kvbench judged `phase`'s `metric` against (bench/targets.json,
    as the JSON records them)."""
    out = {}
    prefix = "%s " % phase
    for t in doc.get("targets") or []:
        what = t.get("target", "")
        if not what.startswith(prefix) or (" vs " in what) != peer:
            continue
        size, _, rest = what[len(prefix):].partition(": ")
        if rest.split(" vs ")[0] == metric and t.get("limit") is not None:
            out[int(size)] = float(t["limit"])
    return dict(sorted(out.items()))


def number(value):
    """JSON null (a NaN kvbench could not measure) -> nan."""
    return float("nan") if value is None else float(value)


def series(doc, impl, phase):
    rows = sorted(
        (r for r in doc["rows"] if r["impl"] == impl and r["phase"] == phase),
        key=lambda r: r["tokens"],
    )
    tokens = [r["tokens"] for r in rows]
    us = [number(r["headline_us"]) for r in rows]
    fraction = [number(r["fraction_of_copy"]) for r in rows]
    return tokens, us, fraction


def title_of(doc):
    d = doc["description"]
    ceiling = number(doc.get("ceilings", {}).get("copy_GBps"))
    return "%s: %s, %s %s, %dx%d %s (copy ceiling %.0f GB/s, %s)%s" % (
        doc["tag"],
        d["layout"],
        "block" if d.get("paged", True) else "max_seq_len",
        d["block_size_or_max_seq_len"],
        d["num_kv_heads"],
        d["head_dim"],
        d["dtype"],
        ceiling,
        doc["device"]["name"],
        "  [QUICK: smoke test]" if doc.get("quick") else "",
    )


def plot_one(doc, path):
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    impls = [i for i in ("generated", "reference")
             if any(r["impl"] == i for r in doc["rows"])]
    styles = {"generated": dict(marker="o", color="C0"),
              "reference": dict(marker="s", color="C1", linestyle="--")}
    for col, phase in enumerate(("decode", "prefill")):
        ax_us, ax_frac = axes[0][col], axes[1][col]
        for impl in impls:
            tokens, us, fraction = series(doc, impl, phase)
            label = impl if impl == "generated" else "hand-written reference"
            ax_us.plot(tokens, us, label=label, **styles[impl])
            ax_frac.plot(tokens, fraction, label=label, **styles[impl])
        if phase == "decode":
            node = number(doc.get("launch", {}).get("empty_graph_node_us"))
            if not math.isnan(node):
                ax_us.axhline(node, color="grey", linestyle=":",
                              label="empty kernel, graph node")
            target = judged(doc, "decode", "graph_us", False)
            peer = judged(doc, "decode", "graph_us", True)
            ax_us.plot(list(target), list(target.values()),
                       "v", color="green", label="target (max)")
            ax_us.plot(list(peer), list(peer.values()), "x", color="red",
                       label="best peer (anchor run)")
            ax_us.set_title("decode: us per call in a CUDA graph of 100")
        else:
            peer = judged(doc, "prefill", "cold_us", True)
            target = judged(doc, "prefill", "fraction_of_copy", False)
            ax_us.plot(list(peer), list(peer.values()), "x", color="red",
                       label="best peer (anchor run)")
            ax_frac.plot(list(target), list(target.values()), "^",
                         color="green", label="target (min)")
            ax_us.set_title("prefill: cold device time, L2 flushed")
        ax_frac.axhline(1.0, color="grey", linestyle=":")
        ax_frac.set_ylim(0, 1.1)
        ax_frac.set_title(phase + ": fraction of the D2D copy ceiling")
        for ax in (ax_us, ax_frac):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("tokens")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        ax_us.set_yscale("log")
        ax_us.set_ylabel("us")
        ax_frac.set_ylabel("fraction of copy GB/s")
    fig.suptitle(title_of(doc), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_summary(docs, path):
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for n, doc in enumerate(docs):
        impl = ("generated" if any(r["impl"] == "generated"
                                   for r in doc["rows"]) else "reference")
        label = doc["description"]["layout"] + (
            "" if impl == "generated" else " (reference only)")
        tokens, us, _ = series(doc, impl, "decode")
        axes[0].plot(tokens, us, marker="o", color="C%d" % n, label=label)
        tokens, _, fraction = series(doc, impl, "prefill")
        axes[1].plot(tokens, fraction, marker="o", color="C%d" % n,
                     label=label)
    axes[0].set_title("decode: us per call in a graph of 100")
    axes[0].set_yscale("log")
    axes[0].set_ylabel("us")
    axes[1].set_title("prefill: fraction of the copy ceiling (cold)")
    axes[1].set_ylim(0, 1.1)
    axes[1].axhline(1.0, color="grey", linestyle=":")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tokens")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("kvbench: every layout, generated kernels (%s)"
                 % docs[0]["device"]["name"], fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def target_lines(docs):
    """Per run with targets: how many were met, and every miss."""
    lines = []
    for doc in docs:
        targets = doc.get("targets") or []
        if not targets:
            continue
        met = sum(1 for t in targets if t.get("pass"))
        lines.append("  %s: %d/%d met" % (doc["tag"], met, len(targets)))
        for t in targets:
            if not t.get("pass"):
                lines.append("    MISS %s: %s (%s %s)" % (
                    t.get("target", "?"), fmt(number(t.get("value")), "%.3f"),
                    "<=" if t.get("at_most") else ">=", t.get("limit")))
    return lines


def fmt(value, spec):
    return "n/a" if value is None or math.isnan(value) else spec % value


def print_summary(docs, comparisons=()):
    """One compact table of every run: what the end of a log must show."""
    print("\n=== kvbench summary (decode: us/call in a graph of 100; prefill: "
          "cold % of the copy ceiling; gen/ref: time ratio at 65536;"
          " launch/empty: eager 1-token loop over the empty kernel's)")
    print("%-28s %-5s %-34s %-22s %-22s %-7s %s" % (
        "kernel", "impl", "decode us  1 / 8 / 32 / 128 / 512",
        "prefill %  1k/4k/16k/64k", "ref prefill %", "gen/ref", "launch/empty"))
    for doc in docs:
        impl = ("generated" if any(r["impl"] == "generated"
                                   for r in doc["rows"]) else "reference")
        _, decode_us, _ = series(doc, impl, "decode")
        _, _, prefill = series(doc, impl, "prefill")
        _, _, ref_prefill = series(doc, "reference", "prefill")
        ratio = float("nan")
        for c in doc.get("generated_vs_reference", []):
            if c["phase"] == "prefill" and c["tokens"] == 65536:
                ratio = number(c["generated_over_reference_time"])
        launch = number(doc.get("launch", {}).get(
            "kvrt_over_empty_eager" if impl == "generated"
            else "reference_over_empty_eager"))
        print("%-28s %-5s %-34s %-22s %-22s %-7s %s" % (
            doc["tag"], impl[:5],
            " / ".join(fmt(v, "%.2f") for v in decode_us),
            "/".join(fmt(100 * v, "%.0f") for v in prefill),
            "/".join(fmt(100 * v, "%.0f") for v in ref_prefill),
            fmt(ratio, "%.3f"), fmt(launch, "%.3f")))
        if doc.get("failures"):
            print("   FAILURES: " + "; ".join(doc["failures"])[:300])
    print("copy ceilings (GB/s): " + ", ".join(
        fmt(number(d.get("ceilings", {}).get("copy_GBps")), "%.0f")
        for d in docs))
    lines = target_lines(docs)
    if lines:
        print("targets (bench/targets.json, as kvbench judged them):")
        print("\n".join(lines))
    lines = compare_kernels(docs, comparisons)
    if lines:
        print("between kernels (bench/targets.json, headline us):")
        print("\n".join(lines))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", nargs="+", help="kvbench JSON files")
    parser.add_argument("--summary", help="PNG of every layout (several JSONs)")
    parser.add_argument("--print-summary", action="store_true",
                        help="also print one compact table of every JSON")
    parser.add_argument("--targets", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "targets.json"),
        help="the comparisons between kernels (default bench/targets.json)")
    args = parser.parse_args()
    comparisons = []
    if os.path.isfile(args.targets):
        with open(args.targets) as f:
            comparisons = json.load(f).get("comparisons", [])
    drawing = True
    docs = []
    for name in args.json:
        try:
            with open(name) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            print("plot.py: skipping %s: %s" % (name, e), file=sys.stderr)
            continue
        if not doc.get("rows"):
            print("plot.py: skipping %s: no rows (the run stopped early)"
                  % name, file=sys.stderr)
            continue
        docs.append(doc)
        if not drawing:
            continue
        png = os.path.splitext(name)[0] + ".png"
        try:
            plot_one(doc, png)
        except ImportError as e:
            print("plot.py: no PNGs without matplotlib (%s)" % e,
                  file=sys.stderr)
            drawing = False
            continue
        print("plot.py: wrote " + png)
    if args.print_summary and docs:
        print_summary(docs, comparisons)
    if len(docs) > 1 and drawing:
        summary = args.summary or os.path.join(
            os.path.dirname(args.json[0]) or ".", "kvbench-summary.png")
        plot_summary(docs, summary)
        print("plot.py: wrote " + summary)
    return 0 if docs else 1


if __name__ == "__main__":
    sys.exit(main())
