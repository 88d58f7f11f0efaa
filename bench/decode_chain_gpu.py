#!/usr/bin/env python3
"""Where a decode append's graph node spends its time.

    PYTHONPATH=python python3 bench/decode_chain_gpu.py --bundle B \\
        --kvrt-lib LIB --peer PEER [--kernel NAME] \\
        [--decode 1,32,128,512] [--json OUT.json]

On the decode sets of side_by_side.py (the bundle kernel's description, a
paged NHD cache of 16-bit elements, caches of at least 1 GiB, one token a
request in its own random block, input sets rotated over 256 MiB), graphs of
100 calls of each launcher below, every launcher's replays interleaved with
the others' (Timer.graph_interleaved), us per call, medians of 15:

- kvgen: the generated append through kvrt_append;
- peer: the Triton append of the peer file;
- empty: a kernel of the append's grid (a block of 128 threads a token) that
  does nothing: the node's own cost at that grid;
- slot: each block loads its token's slot and, if the slot is in the cache,
  stores a constant K and V row there: the slot's round trip and the stores,
  no K/V load;
- chain: what the kernel contract leaves of an append with nothing else:
  the slot, then, if it is in the cache, the K and V rows, then the stores
  (shapes constant, no strides, no parameters but the pointers and the slot
  count): the floor of an append that keeps the contract, in Triton;
- unchained: chain with the K and V rows loaded at once with the slot, before
  it is known. Outside the contract (it reads a padded token's rows); never
  an append, only the price of the slot-first order.

Before timing, chain and unchained write set 0 and their rows are compared
with the peer's (exit 1 on a difference). Needs torch and Triton on a CUDA
machine; not part of any test.
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import side_by_side as sbs  # noqa: E402

LAUNCHERS = ("kvgen", "peer", "empty", "slot", "chain", "unchained")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", required=True)
    parser.add_argument("--kvrt-lib", required=True)
    parser.add_argument("--peer", required=True)
    parser.add_argument("--kernel", default=sbs.DEFAULT_KERNEL,
                        help="the bundle's append (default %s)"
                        % sbs.DEFAULT_KERNEL)
    parser.add_argument("--decode", type=sbs.parse_sizes,
                        default=[1, 32, 128, 512])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args(argv)
    try:
        import torch
        import triton
        import triton.language as tl
        import side_by_side_gpu as gpu
    except ImportError as e:
        print("decode_chain_gpu: needs torch, triton and the kvgen package "
              "(PYTHONPATH=python): %s" % e, file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("decode_chain_gpu: no CUDA device", file=sys.stderr)
        return 2

    @triton.jit
    def empty(slots):
        pass

    @triton.jit
    def slot(kc, vc, slots, num_slots, ROW: tl.constexpr):
        t = tl.program_id(0)
        s = tl.load(slots + t)
        if (s >= 0) & (s < num_slots):
            r = tl.arange(0, ROW)
            zero = tl.zeros((ROW,), dtype=kc.dtype.element_ty)
            tl.store(kc + s * ROW + r, zero)
            tl.store(vc + s * ROW + r, zero)

    @triton.jit
    def chain(k, v, kc, vc, slots, num_slots, ROW: tl.constexpr):
        t = tl.program_id(0)
        s = tl.load(slots + t)
        if (s >= 0) & (s < num_slots):
            r = tl.arange(0, ROW)
            kx = tl.load(k + t * ROW + r)
            vx = tl.load(v + t * ROW + r)
            tl.store(kc + s * ROW + r, kx)
            tl.store(vc + s * ROW + r, vx)

    @triton.jit
    def unchained(k, v, kc, vc, slots, num_slots, ROW: tl.constexpr):
        t = tl.program_id(0)
        r = tl.arange(0, ROW)
        # Issued together: nothing orders the rows' loads after the slot's.
        kx = tl.load(k + t * ROW + r)
        vx = tl.load(v + t * ROW + r)
        s = tl.load(slots + t)
        ok = (s >= 0) & (s < num_slots)
        tl.store(kc + s * ROW + r, kx, mask=ok)
        tl.store(vc + s * ROW + r, vx, mask=ok)

    kvrt = gpu.Kvrt(args.kvrt_lib)
    bundle = kvrt.load(args.bundle)
    names = kvrt.kernels(bundle)
    if args.kernel not in names:
        print("decode_chain_gpu: %s has no kernel %s" %
              (args.bundle, args.kernel), file=sys.stderr)
        return 2
    manifest = kvrt.manifest(bundle, args.bundle, names.index(args.kernel))
    desc = sbs.description_from_manifest(manifest)
    # The floor kernels write the peer's layout with constant strides.
    why = sbs.unsupported(desc)
    if why or desc.get("quant") is not None:
        print("decode_chain_gpu: %s: %s" % (args.kernel, why or
              "a quantized cache; the floor kernels copy bytes"),
              file=sys.stderr)
        return 2
    row = desc["num_kv_heads"] * desc["head_dim"]
    cases = sbs.make_cases(desc, args.decode, [], args.seed)
    peer = gpu.load_peer(args.peer)
    torch.cuda.init()
    stream = torch.cuda.Stream()
    reps = sbs.repetitions(False)
    report = {"tool": "decode_chain_gpu",
              "device": torch.cuda.get_device_name(),
              "torch": torch.__version__, "triton": triton.__version__,
              "kernel": args.kernel, "description": desc, "reps": reps,
              "rows": []}
    failed = False
    with torch.cuda.stream(stream):
        timer = gpu.Timer(stream, reps)
        setup = gpu.Setup(desc, cases)
        kc, vc = setup.key_cache, setup.value_cache
        num_slots = setup.blocks * desc["block_size"]
        for case in cases:
            sets = setup.sets(case)
            n = case["tokens"]
            kvgen = gpu.kvgen_launcher(kvrt, bundle, sbs.kvrt_call(
                args.kernel, manifest.get("variant"), "auto"), setup, sets,
                stream)
            theirs = gpu.peer_launcher(peer, "token", setup, sets)

            def triton_launcher(kernel, with_rows):
                def launch(i):
                    k, v, s = sets[i]
                    if kernel is empty:
                        empty[(n,)](s, num_warps=4)
                    elif with_rows:
                        kernel[(n,)](k, v, kc, vc, s, num_slots, ROW=row,
                                     num_warps=4)
                    else:
                        kernel[(n,)](kc, vc, s, num_slots, ROW=row,
                                     num_warps=4)
                return launch

            launchers = [kvgen, theirs, triton_launcher(empty, False),
                         triton_launcher(slot, False),
                         triton_launcher(chain, True),
                         triton_launcher(unchained, True)]
            if case is cases[-1]:
                for name, launch in (("chain", launchers[4]),
                                     ("unchained", launchers[5])):
                    ok, detail = gpu.check(setup, launch, theirs, sets)
                    detail = detail.replace("kvgen", name)
                    print("  check %s: %s" % (name, detail), flush=True)
                    report.setdefault("checks", []).append(detail)
                    failed = failed or not ok
            # Compile and load every kernel before the first capture.
            for launch in launchers:
                launch(0)
            torch.cuda.synchronize()
            samples = timer.graph_interleaved(launchers, case["sets"])
            medians = {name: sbs.median(s)
                       for name, s in zip(LAUNCHERS, samples)}
            report["rows"].append({"tokens": n, "sets": case["sets"],
                                   "us": medians,
                                   "samples": dict(zip(LAUNCHERS, samples))})
            print("decode %4d: %s" % (n, "  ".join(
                "%s %.3f" % (name, medians[name]) for name in LAUNCHERS)),
                flush=True)
    kvrt.lib.kvrt_bundle_destroy(bundle)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
