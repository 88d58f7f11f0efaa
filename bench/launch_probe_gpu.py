#!/usr/bin/env python3
"""A decode node's launcher and assembler taken apart (a probe).

    PYTHONPATH=python python3 bench/launch_probe_gpu.py --bundle B \\
        [--bundle-as NAME=B2 ...] [--variants-ptxas PTXAS] \\
        [--ptxas NAME=PTXAS ...] --kvrt-lib LIB --peer PEER \\
        [--decode 1,32,128,512] [--json OUT.json]

On side_by_side.py's decode sets, graphs of 100 calls, replays of every
launcher interleaved, us per call, medians of 15:

- kvgen: the bundle's append through kvrt_append;
- each --bundle-as NAME=PATH: the same append from another bundle (the same
  PTX assembled otherwise), through kvrt_append;
- with --variants-ptxas PTXAS, four such bundles made from the bundle's PTX:
  sm90a (assembled again by PTXAS for sm_90a), jit (no cubin: the driver
  compiles the PTX), reqntid (.maxntid replaced by .reqntid) and regs24
  (--maxrregcount 24);
- peer: the Triton append through Triton's own launcher;
- peer_cu: the same compiled Triton kernel (its CUfunction) launched by
  cuLaunchKernel from ctypes, as kvrt launches;
- peer_PTXAS (per --ptxas NAME=PATH): Triton's PTX assembled by that ptxas
  for sm_90a, loaded with cuModuleLoadData and launched as peer_cu;
- with --module-ptxas PTXAS (the paged NHD append only), three bundles that
  take the node apart by module and instruction stream, each assembled by
  PTXAS for the bundle's chip and launched through kvrt_append: alone (the
  append's entry the only one in its module), peer_body (Triton's
  instructions under the append's name and parameter list, in the bundle's
  module: kvrt's launch and parameter block, Triton's instruction stream)
  and peer_body_alone (the same, alone in its module).

With --modes cold (or graph,cold), each size is also timed cold: --cold N
repetitions (100 by default) of an L2 flush and one call of each launcher
(the turns rotated every repetition, as side_by_side.py's), events around
every call. Under `ncu
--cache-control all` the rows of one kernel name are told apart by launch
order: --json records every launcher's launches in the order made (the
checks, the cold warm-ups, the repetitions), and --attribute-ncu CSV (no
GPU needed) reads that record beside `ncu --csv --page raw` output of the
same run and prints each launcher's cold device time. --modes picks graph,
cold or both (graph replays under ncu would be profiled node by node).

Every launcher writes set 0 into poisoned rows first, which must equal the
source rows (exit 1 otherwise). Needs torch and Triton on a CUDA machine.
"""

import argparse
import ctypes
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import side_by_side as sbs  # noqa: E402


def entry_params(ptx):
    """The .param types of the PTX's single .entry, in order."""
    m = re.search(r"\.entry\s+\w+\s*\((.*?)\)", ptx, re.S)
    return re.findall(r"\.param\s+\.(\w+)", m.group(1))


def assembled(bundle, name, text, ptxas, chip, flags, tmp):
    """`bundle` with PTX `text` and its cubin, assembled by `ptxas` for
    `chip` under tmp. The PTX goes in too: a driver that refused the cubin
    would JIT it."""
    import base64
    src = os.path.join(tmp, name + ".ptx")
    cubin = os.path.join(tmp, name + ".cubin")
    with open(src, "w") as f:
        f.write(text)
    subprocess.run([ptxas, "--gpu-name", chip, "-O3", *flags, src, "-o",
                    cubin], check=True)
    with open(cubin, "rb") as f:
        return dict(bundle, ptx=text,
                    cubin_base64=base64.b64encode(f.read()).decode())


def written(specs, tmp):
    """NAME=PATH specs of (name, bundle) pairs, each written under tmp."""
    out = []
    for name, variant in specs:
        target = os.path.join(tmp, name + ".bundle.json")
        with open(target, "w") as f:
            json.dump(variant, f)
        out.append("%s=%s" % (name, target))
    return out


def variant_bundles(path, ptxas, tmp):
    """NAME=PATH specs of the --variants-ptxas bundles, written under tmp."""
    with open(path) as f:
        bundle = json.load(f)
    ptx = bundle["ptx"]
    reqntid = re.sub(r"\.maxntid\s+(\d+),\s*(\d+),\s*(\d+)",
                     r".reqntid \1, \2, \3", ptx)
    specs = [(name, assembled(bundle, name, text, ptxas, "sm_90a", flags,
                              tmp))
             for name, text, flags in [
                 ("sm90a", ptx, []), ("reqntid", reqntid, []),
                 ("regs24", ptx, ["--maxrregcount", "24"])]]
    jit = dict(bundle)
    jit.pop("cubin_base64", None)
    specs.append(("jit", jit))
    return written(specs, tmp)


def ptx_entries(ptx):
    """(header, [(name, text)]): the module's text before its first entry
    and each .entry with its directives and body (braces balance per
    instruction, so counting them finds the body's end)."""
    starts = [m.start() for m in re.finditer(r"^\.visible \.entry ", ptx,
                                             re.M)]
    entries = []
    for begin in starts:
        depth, i, seen = 0, ptx.index(")", begin), False
        while True:
            c = ptx[i]
            if c == "{":
                depth, seen = depth + 1, True
            elif c == "}":
                depth -= 1
                if seen and depth == 0:
                    break
            i += 1
        name = re.match(r"\.visible \.entry (\w+)", ptx[begin:]).group(1)
        entries.append((name, ptx[begin:i + 1]))
    header = ptx[:starts[0]] if starts else ptx
    return header, entries


# Triton's token kernel's parameters (kv_append_triton.py: k, v, kc, vc,
# slot, k_scale, v_scale, stride_kt, _kh, _vt, _vh, stride_cb, _cs, _ch)
# and the generated append's that carry the same value (docs/KERNEL-ABI.md:
# key, value, slot_mapping, key_cache, value_cache, num_tokens, num_blocks,
# key_stride_token, _head, _dim, value_stride_..., key_cache_stride_block,
# _head, _pos, _dim, value_cache_stride_...). The scales are not read by a
# bf16 kernel; the cache strides are K's, which V's equal in the bench.
PEER_TO_APPEND = {0: 0, 1: 1, 2: 3, 3: 4, 4: 2, 7: 7, 8: 8, 9: 10, 10: 11,
                  11: 13, 12: 15, 13: 14}


def peer_body_entry(peer_ptx, append_entry, name):
    """Triton's entry's body under the append entry's name, parameter list
    and directives."""
    _, peer_entries = ptx_entries(peer_ptx)
    peer_name, peer_text = peer_entries[0]
    body = peer_text[peer_text.index("{", peer_text.index(")")):]
    body = "\n".join(line for line in body.split("\n")
                     if not line.strip().startswith(".loc") and
                     not line.strip().startswith("$L__func_"))

    def rename(m):
        index = int(m.group(1))
        if index not in PEER_TO_APPEND:
            raise ValueError("launch_probe: Triton's body reads parameter "
                             "%d, which the append has no match for" % index)
        return "%s_param_%d" % (name, PEER_TO_APPEND[index])
    body = re.sub(re.escape(peer_name) + r"_param_(\d+)", rename, body)
    head = append_entry[:append_entry.index("{", append_entry.index(")"))]
    return head + body


def module_bundles(path, kernel, peer_ptx, ptxas, tmp):
    """NAME=PATH specs of --module-ptxas's bundles, written under tmp."""
    with open(path) as f:
        bundle = json.load(f)
    header, entries = ptx_entries(bundle["ptx"])
    # Triton's PTX states a newer ISA; the body needs nothing past the
    # bundle's, whose header stays.
    texts = dict(entries)
    swapped = peer_body_entry(peer_ptx, texts[kernel], kernel)
    modules = {
        "alone": header + texts[kernel] + "\n",
        "peer_body": header + "\n".join(
            swapped if name == kernel else text
            for name, text in entries) + "\n",
        "peer_body_alone": header + swapped + "\n",
    }
    chip = bundle["target"]["chip"]
    return written([(name, assembled(bundle, name, text, ptxas, chip, [],
                                     tmp))
                    for name, text in modules.items()], tmp)


def cold_launch_order(names, reps):
    """The launchers' names in the order the cold mode launches them: one
    warm-up call each, then per repetition in sbs.turn_order's order."""
    order = list(names)
    for r in range(reps):
        order += [names[i] for i in sbs.turn_order(r, len(names))]
    return order


def ncu_rows(path):
    """(kernel name, grid size, ns) per profiled launch of an `ncu --csv
    --page raw --metrics gpu__time_duration.sum,launch__grid_size` file, in
    launch order. Numbers may carry thousands separators."""
    import csv
    with open(path) as f:
        rows = list(csv.reader(f))
    head = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if head is None:
        raise ValueError("%s has no 'Kernel Name' header: not the output of "
                         "ncu --csv --page raw" % path)
    cols = rows[head]
    missing = [c for c in ("gpu__time_duration.sum", "launch__grid_size")
               if c not in cols]
    if missing:
        raise ValueError("%s has no %s column (ncu --metrics)"
                         % (path, " or ".join(missing)))
    name = cols.index("Kernel Name")
    time = cols.index("gpu__time_duration.sum")
    grid = cols.index("launch__grid_size")
    out = []
    for r in rows[head + 1:]:
        try:
            out.append((r[name], int(float(r[grid].replace(",", ""))),
                        float(r[time].replace(",", ""))))
        except (ValueError, IndexError):
            continue  # the units row
    return out


def attribute_ncu(rows, record):
    """{tokens: {launcher: [ns of its cold repetitions]}}: the ncu rows of
    a --modes cold run, matched launch by launch with the record's
    `launches` (whose first `skip` are the checks and warm-ups). The rows
    must be the appends' launches only (`ncu -k regex:...`)."""
    out = {}
    i = record.get("launches_before", 0)
    for size in record["rows"]:
        if "us" in size:
            raise ValueError("attribute_ncu: the record has graph samples; "
                             "under ncu, run --modes cold alone")
        seq = size["launches"]
        mine = rows[i:i + len(seq)]
        i += len(seq)
        if len(mine) < len(seq):
            raise ValueError("attribute_ncu: the ncu rows end before the "
                             "record's launches at %d tokens" % size["tokens"])
        times = {}
        for name, (_, _, ns) in list(zip(seq, mine))[size["skip"]:]:
            times.setdefault(name, []).append(ns)
        out[size["tokens"]] = times
    if i != len(rows):
        raise ValueError("attribute_ncu: %d ncu rows past the record's "
                         "launches" % (len(rows) - i))
    return out


def print_attributed(times):
    for n, per in times.items():
        print("cold (ncu) %4d: %s" % (n, "  ".join(
            "%s med %.0f mean %.1f n %d" % (k, sbs.median(v),
                                           sum(v) / len(v), len(v))
            for k, v in per.items())))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle")
    parser.add_argument("--bundle-as", action="append", default=[])
    parser.add_argument("--variants-ptxas")
    parser.add_argument("--ptxas", action="append", default=[])
    parser.add_argument("--module-ptxas")
    parser.add_argument("--kvrt-lib")
    parser.add_argument("--peer")
    parser.add_argument("--kernel", default=sbs.DEFAULT_KERNEL)
    parser.add_argument("--decode", type=sbs.parse_sizes,
                        default=[1, 32, 128, 512])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json")
    parser.add_argument("--modes", default="graph",
                        help="graph, cold or both (graph,cold)")
    parser.add_argument("--cold", type=int, default=100,
                        help="cold repetitions a size (with --modes cold)")
    parser.add_argument("--attribute-ncu",
                        help="no GPU: an ncu CSV of a run whose --json is "
                        "given; prints each launcher's cold device time")
    args = parser.parse_args(argv)
    if args.attribute_ncu:
        if not args.json:
            parser.error("--attribute-ncu needs the run's record: --json")
        try:
            with open(args.json) as f:
                record = json.load(f)
            print_attributed(attribute_ncu(ncu_rows(args.attribute_ncu),
                                           record))
        except (OSError, ValueError, KeyError) as e:
            print("launch_probe: %s" % e, file=sys.stderr)
            return 2
        return 0
    for name in ("bundle", "kvrt_lib", "peer"):
        if not getattr(args, name):
            parser.error("--%s is required" % name.replace("_", "-"))
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in ("graph", "cold") for m in modes):
        parser.error("--modes takes graph, cold or graph,cold")
    if args.cold < 1:
        parser.error("--cold takes a positive number of repetitions")
    import torch
    import side_by_side_gpu as gpu

    cu = ctypes.CDLL("libcuda.so.1")
    cu.cuLaunchKernel.argtypes = [
        ctypes.c_void_p] + [ctypes.c_uint] * 6 + [
        ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    cu.cuModuleLoadData.argtypes = [ctypes.POINTER(ctypes.c_void_p),
                                    ctypes.c_void_p]
    cu.cuModuleGetFunction.argtypes = [ctypes.POINTER(ctypes.c_void_p),
                                       ctypes.c_void_p, ctypes.c_char_p]

    kvrt = gpu.Kvrt(args.kvrt_lib)
    bundles = [("kvgen", kvrt.load(args.bundle))]
    variants_dir = tempfile.TemporaryDirectory()
    if args.variants_ptxas:
        args.bundle_as += variant_bundles(args.bundle, args.variants_ptxas,
                                          variants_dir.name)
    for spec in args.bundle_as:
        name, path = spec.split("=", 1)
        bundles.append((name, kvrt.load(path)))
    names = kvrt.kernels(bundles[0][1])
    manifest = kvrt.manifest(bundles[0][1], args.bundle,
                             names.index(args.kernel))
    desc = sbs.description_from_manifest(manifest)
    cases = sbs.make_cases(desc, args.decode, [], args.seed)
    peer = gpu.load_peer(args.peer)
    torch.cuda.init()
    stream = torch.cuda.Stream()
    reps = dict(sbs.repetitions(False), cold=args.cold)
    h, d = desc["num_kv_heads"], desc["head_dim"]
    report = {"tool": "launch_probe_gpu",
              "device": torch.cuda.get_device_name(), "rows": [],
              # --module-ptxas compiles the peer by one call first.
              "launches_before": 1 if args.module_ptxas else 0}
    failed = False
    with torch.cuda.stream(stream):
        timer = gpu.Timer(stream, reps)
        setup = gpu.Setup(desc, cases)
        kc, vc = setup.key_cache, setup.value_cache
        if args.module_ptxas:
            k0, v0, s0 = setup.sets(cases[0])[0]
            compiled = peer.kv_append(k0, v0, kc, vc, s0, variant="token")
            for spec in module_bundles(args.bundle, args.kernel,
                                       compiled.asm["ptx"], args.module_ptxas,
                                       variants_dir.name):
                name, path = spec.split("=", 1)
                bundles.append((name, kvrt.load(path)))
        for case in cases:
            sets = setup.sets(case)
            n = case["tokens"]
            launchers = []
            for name, b in bundles:
                launchers.append((name, gpu.kvgen_launcher(
                    kvrt, b, sbs.kvrt_call(args.kernel,
                                           manifest.get("variant"), "auto"),
                    setup, sets, stream)))
            theirs = gpu.peer_launcher(peer, "token", setup, sets)
            launchers.append(("peer", theirs))
            k0, v0, s0 = sets[0]
            compiled = peer.kv_append(k0, v0, kc, vc, s0, variant="token")
            compiled._init_handles()
            ptx = compiled.asm["ptx"]
            types = entry_params(ptx)
            grid = (n, 1, 1)
            threads = 32 * compiled.metadata.num_warps
            shared = compiled.metadata.shared
            sc = kc.stride()

            def packer(types):
                if len(types) < 14:
                    return None
                packed = []
                for k, v, s in sets:
                    vals = [k.data_ptr(), v.data_ptr(), kc.data_ptr(),
                            vc.data_ptr(), s.data_ptr(), s.data_ptr(),
                            s.data_ptr(), k.stride(0), k.stride(1),
                            v.stride(0), v.stride(1), sc[0], sc[1], sc[2]]
                    vals += [0] * (len(types) - len(vals))
                    cs = [ctypes.c_uint64(x) if t in ("u64", "b64", "s64")
                          else ctypes.c_uint32(x) for x, t in zip(vals, types)]
                    arr = (ctypes.c_void_p * len(cs))(
                        *[ctypes.cast(ctypes.byref(c), ctypes.c_void_p)
                          for c in cs])
                    packed.append((cs, arr))
                return packed

            def ctypes_launcher(function, packed):
                def launch(i):
                    r = cu.cuLaunchKernel(
                        function, grid[0], 1, 1, threads, 1, 1, shared,
                        ctypes.c_void_p(torch.cuda.current_stream()
                                        .cuda_stream), packed[i][1], None)
                    if r:
                        raise RuntimeError("cuLaunchKernel: %d" % r)
                launch.keep = packed
                return launch

            packed = packer(types)
            if packed is None:
                print("  peer_cu: Triton's entry has %d params; skipped" %
                      len(types))
            else:
                launchers.append(("peer_cu", ctypes_launcher(
                    ctypes.c_void_p(compiled.function), packed)))
                for spec in args.ptxas:
                    pname, ptxas = spec.split("=", 1)
                    with tempfile.TemporaryDirectory() as tmp:
                        src = os.path.join(tmp, "k.ptx")
                        out = os.path.join(tmp, "k.cubin")
                        with open(src, "w") as f:
                            f.write(ptx)
                        subprocess.run([ptxas, "--gpu-name", "sm_90a", "-O3",
                                        src, "-o", out], check=True)
                        with open(out, "rb") as f:
                            cubin = f.read()
                    module = ctypes.c_void_p()
                    fn = ctypes.c_void_p()
                    image = ctypes.create_string_buffer(cubin)
                    assert cu.cuModuleLoadData(ctypes.byref(module),
                                               image) == 0
                    assert cu.cuModuleGetFunction(
                        ctypes.byref(fn), module,
                        compiled.metadata.name.encode()) == 0
                    launchers.append(("peer_" + pname,
                                      ctypes_launcher(fn, packed)))
            # Each launcher writes set 0 into poisoned rows.
            for name, launch in launchers:
                kc.view(-1, h, d)[s0] = 0
                vc.view(-1, h, d)[s0] = 0
                torch.cuda.synchronize()
                launch(0)
                torch.cuda.synchronize()
                ok = (torch.equal(kc.view(-1, h, d)[s0], k0) and
                      torch.equal(vc.view(-1, h, d)[s0], v0))
                if not ok:
                    print("  check %s at %d tokens: rows DIFFER" % (name, n))
                    failed = True
            row = {"tokens": n}
            if "graph" in modes:
                samples = timer.graph_interleaved([l for _, l in launchers],
                                                  case["sets"])
                row["us"] = {name: sbs.median(s)
                             for (name, _), s in zip(launchers, samples)}
                print("decode %4d: %s" % (n, "  ".join(
                    "%s %.3f" % (k, v) for k, v in row["us"].items())),
                    flush=True)
            if "cold" in modes:
                names = [name for name, _ in launchers]
                samples = timer.cold_interleaved(
                    [l for _, l in launchers], case["sets"])
                row["cold_us"] = {name: sbs.median(s)
                                  for name, s in zip(names, samples)}
                row["cold_mean_us"] = {name: sum(s) / len(s)
                                       for name, s in zip(names, samples)}
                # Every append launched at this size, in order: the peer's
                # call that compiled it (above), the checks, then the cold
                # mode's warm-ups and repetitions.
                row["launches"] = (["peer"] + names +
                                   cold_launch_order(names, args.cold))
                row["skip"] = 1 + 2 * len(names)
                print("cold %4d: %s" % (n, "  ".join(
                    "%s %.3f" % (k, v) for k, v in row["cold_us"].items())),
                    flush=True)
            report["rows"].append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
