"""The fused prologue benchmark's report: each target MET or MISSED with its
number, and the markdown table."""

import math

from prologue_common import BYTES

# ----------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------

def find(results, group, n, system, key):
    for r in results:
        if (r["group"], r["tokens"], r["system"]) == (group, n, system):
            return r.get(key)
    return None


def targets(results, decode, prefill):
    """Each target of the prologue's issue: (name, MET|MISSED|n/a, text)."""
    out = []

    def add(name, ok, text):
        out.append(dict(target=name, status="n/a" if ok is None else
                        ("MET" if ok else "MISSED"), value=text))

    big = max(prefill) if prefill else None
    if big:
        pct = find(results, "bf16", big, "kvgen", "pct_of_copy")
        add("(a) prefill %d: kvgen >= 90%% of the copy ceiling" % big,
            None if pct is None else pct >= 90.0,
            "-" if pct is None else "%.1f%%" % pct)
        fused = find(results, "bf16", big, "kvgen", "cold_us")
        for unf in ("vllm-unfused", "unfused-kvgen"):
            u = find(results, "bf16", big, unf, "cold_us")
            ratio = u / fused if u and fused else None
            add("(a) prefill %d: kvgen >= 1.15x %s" % (big, unf),
                None if ratio is None else ratio >= 1.15,
                "-" if ratio is None else "%.3fx (%.1f vs %.1f us)" % (
                    ratio, u, fused))
    for n in decode:
        if n not in (1, 8, 32):
            continue
        f = find(results, "bf16", n, "kvgen", "graph_us")
        p = find(results, "bf16", n, "kvgen-plain", "graph_us")
        add("(b) decode %d in a graph: kvgen within 0.15 us of the plain "
            "append" % n, None if f is None or p is None else f - p <= 0.15,
            "-" if f is None or p is None else "+%.3f us (%.3f vs %.3f)" % (
                f - p, f, p))
        for unf in ("vllm-unfused", "unfused-kvgen"):
            u = find(results, "bf16", n, unf, "graph_us")
            add("(b) decode %d in a graph: kvgen >= 1.7x %s" % (n, unf),
                None if f is None or u is None else u / f >= 1.7,
                "-" if f is None or u is None else "%.2fx (%.3f vs %.3f us)"
                % (u / f, u, f))
    for n in list(decode) + list(prefill):
        for mode in ("graph", "cold"):
            k = find(results, "fp8", n, "kvgen-flashinfer-fp8", mode + "_us")
            fi = find(results, "fp8", n, "flashinfer-fp8", mode + "_us")
            if k is None and fi is None:
                continue
            add("(c) fp8 %d %s: kvgen faster than FlashInfer" % (n, mode),
                None if k is None or fi is None else k < fi,
                "-" if k is None or fi is None else "%.3f vs %.3f us (%.2fx)"
                % (k, fi, fi / k))
    return out


def fmt(v, f="%.2f"):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) \
        else f % v


def markdown(report):
    lines = ["# The fused prologue beside the unfused sequence and its peers",
             "", "%s, torch %s; copy ceiling (4 GiB D2D) %s GB/s; quick: %s."
             % (report["device"], report["torch"],
                fmt(report.get("copy_GBps"), "%.0f"), report["quick"]), "",
             "Peers: " + "; ".join("%s: %s" % kv for kv in
                                   report["peers"].items()) + ".", "",
             "kvgen bundle: %s." % report["bundle"], "",
             "| group | tokens | system | check | graph us | eager us | "
             "cold us | % of copy | B/token | note |",
             "|---|---:|---|---|---:|---:|---:|---:|---:|---|"]
    for r in report["rows"]:
        lines.append("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["group"], r["tokens"], r["system"],
            ("ok" if r["check_ok"] else "FAILED: ") + (
                "" if r["check_ok"] else r["check"]),
            fmt(r.get("graph_us"), "%.3f"), fmt(r.get("eager_us"), "%.2f"),
            fmt(r.get("cold_us"), "%.2f"), fmt(r.get("pct_of_copy"), "%.1f"),
            fmt(r.get("bytes_per_token"), "%d"), r.get("note", "")))
    lines += ["", "## Targets", "", "| target | status | value |",
              "|---|---|---|"]
    for t in report["targets"]:
        lines.append("| %s | %s | %s |" % (t["target"], t["status"],
                                           t["value"]))
    lines += ["", "fp8 bytes: kvgen-flashinfer-fp8 (kvgen.flashinfer's "
              "drop-in) and FlashInfer write Q in fp8 (4096 B a token) and "
              "read the cos/sin in fp32 (512 B): %d B a token each; "
              "kvgen-fp8, kvgen's kernel with Q out in bf16 (8192 B) and "
              "the bf16 cos/sin (256 B), moves %d." % (
                  BYTES["flashinfer-fp8"], BYTES["kvgen-fp8"]), ""]
    return "\n".join(lines)
