"""The GPU half of side_by_side.py: kvrt through ctypes, the peer through its
Python function, the same buffers for both, and the timing modes.

Needs torch (with CUDA) and triton; imported only when a GPU run starts.
"""

import ctypes
import importlib.util
import json
import os
import sys
import time

import torch

import side_by_side as sbs
from kvgen import capi

# ----------------------------------------------------------------------------
# kvrt's C API (runtime/include/kvrt/kvrt.h) through ctypes, with the structs
# of the Python package (kvgen.capi; run with PYTHONPATH=python)
# ----------------------------------------------------------------------------

class Kvrt:
    """The few kvrt calls the comparison makes."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        lib = self.lib
        lib.kvrt_last_error.restype = ctypes.c_char_p
        lib.kvrt_bundle_load_file.argtypes = [
            ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
        lib.kvrt_bundle_num_kernels.restype = ctypes.c_size_t
        lib.kvrt_bundle_num_kernels.argtypes = [ctypes.c_void_p]
        lib.kvrt_bundle_kernel_name.restype = ctypes.c_char_p
        lib.kvrt_bundle_kernel_name.argtypes = [ctypes.c_void_p,
                                                ctypes.c_size_t]
        lib.kvrt_append.argtypes = [ctypes.c_void_p] * 3
        lib.kvrt_bundle_destroy.argtypes = [ctypes.c_void_p]
        self.has_manifest = hasattr(lib, "kvrt_bundle_kernel_manifest")
        if self.has_manifest:
            lib.kvrt_bundle_kernel_manifest.restype = ctypes.c_char_p
            lib.kvrt_bundle_kernel_manifest.argtypes = [ctypes.c_void_p,
                                                        ctypes.c_size_t]

    def error(self):
        return self.lib.kvrt_last_error().decode()

    def load(self, path):
        handle = ctypes.c_void_p()
        if self.lib.kvrt_bundle_load_file(path.encode(), ctypes.byref(handle)):
            raise RuntimeError("kvrt cannot load %s: %s" % (path, self.error()))
        return handle

    def kernels(self, bundle):
        n = self.lib.kvrt_bundle_num_kernels(bundle)
        return [self.lib.kvrt_bundle_kernel_name(bundle, i).decode()
                for i in range(n)]

    def manifest(self, bundle, path, index):
        """Kernel `index`'s manifest entry: from kvrt where it hands it out,
        else from the bundle file kvrt loaded."""
        if self.has_manifest:
            return json.loads(
                self.lib.kvrt_bundle_kernel_manifest(bundle, index).decode())
        with open(path) as f:
            return json.load(f)["kernels"][index]


def dl_dtype(torch_dtype):
    """DLPack's (code, bits) of a torch dtype, as kvrt takes it."""
    return {torch.bfloat16: (capi.BFLOAT, 16),
            torch.float16: (capi.FLOAT, 16),
            torch.float32: (capi.FLOAT, 32),
            torch.int64: (capi.INT, 64),
            # fp8 caches go to kvrt as uint8, one of the forms it accepts.
            torch.float8_e4m3fn: (capi.UINT, 8),
            torch.int8: (capi.INT, 8)}[torch_dtype]


class Tensors:
    """Keeps every DLTensor and its shape alive while kvrt may read them."""

    def __init__(self):
        self.keep = []

    def __call__(self, t):
        d = capi.torch_tensor(t, *dl_dtype(t.dtype))
        self.keep.append(d)
        return d.ref()


# ----------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------

class Timer:
    """The modes of kvbench, in Python: cold (flush, events around one call),
    graph (replays of graphs of 100 calls) and eager (a Python loop). Each
    has a _pair form that times two launchers with their samples
    interleaved, for a ratio that drift over the run does not bias."""

    def __init__(self, stream, reps):
        self.stream = stream
        self.reps = reps
        self.flush_buffer = torch.ones(sbs.FLUSH_BYTES // 4,
                                       dtype=torch.float32, device="cuda")

    def flush(self):
        # A read-only pass over 1 GiB evicts every line of the L2.
        self.flush_buffer.sum()

    @staticmethod
    def _turns(count, launches):
        """Per sample, the order the launchers take their turns in
        (sbs.turn_order: rotated every sample, so that none always goes
        first)."""
        for r in range(count):
            yield r, sbs.turn_order(r, len(launches))

    def cold(self, launch, sets):
        return self._cold((launch,), sets)[0]

    def cold_pair(self, first, second, sets):
        """cold() of two launchers at once, their repetitions interleaved
        (and which goes first alternating), so that whatever drifts over a
        run hits both alike: timed one after the other, one kernel's cold
        median moved by up to 10% between two blocks of one process
        (docs/dev/TUNING.md, "Reading the numbers")."""
        return self._cold((first, second), sets)

    def cold_interleaved(self, launches, sets):
        """cold() of any number of launchers, their repetitions interleaved
        as cold_pair's are."""
        return self._cold(tuple(launches), sets)

    def _cold(self, launches, sets):
        """Per repetition, for each launcher (in turn order, rotated every
        repetition): the L2 flush, then events around one call. Every
        launch is enqueued before the first synchronize, so no host gap is
        timed. A list of us samples per launcher."""
        n = self.reps["cold"]
        events = [[(torch.cuda.Event(enable_timing=True),
                    torch.cuda.Event(enable_timing=True)) for _ in range(n)]
                  for _ in launches]
        for launch in launches:
            launch(0)
        for r, turns in self._turns(n, launches):
            for w in turns:
                self.flush()
                start, stop = events[w][r]
                start.record(self.stream)
                launches[w](r % sets)
                stop.record(self.stream)
        torch.cuda.synchronize()
        return [[s.elapsed_time(e) * 1e3 for s, e in per] for per in events]

    def graph(self, launch, sets):
        """us per call over replays of graphs that together cover the sets
        (at most max_graphs graphs)."""
        return self._graph((launch,), sets)[0]

    def graph_pair(self, first, second, sets):
        """graph() of two launchers at once, their samples interleaved (and
        which goes first alternating) for cold_pair's reason: drift over a
        run then hits both alike (docs/dev/TUNING.md, "Reading the numbers")."""
        return self._graph((first, second), sets)

    def graph_interleaved(self, launches, sets):
        """graph() of any number of launchers, their samples interleaved as
        graph_pair's are (the turn order rotated every sample)."""
        return self._graph(tuple(launches), sets)

    def _capture(self, launch, sets, count):
        """`count` graphs of GRAPH_CALLS calls of one launcher, the sets in
        turn, sharing one memory pool (the launcher's own)."""
        graphs = []
        for g in range(count):
            graph = torch.cuda.CUDAGraph()
            graph.capture_begin(pool=graphs[0].pool() if graphs else None)
            try:
                for j in range(sbs.GRAPH_CALLS):
                    launch((g * sbs.GRAPH_CALLS + j) % sets)
            finally:
                graph.capture_end()
            graphs.append(graph)
        return graphs

    def _graph(self, launches, sets):
        """Every launcher's graphs are captured, uploaded and warmed before
        the first sample; then per sample, for each launcher (in turn
        order, rotated every sample), events around the replay of
        all its graphs. Each block starts on an idle device (its stop
        event is waited for before the next start), as it did before the
        pairs, so the launcher that goes second does not find the first's
        work queued ahead of its start event. A list of us-per-call samples
        per launcher."""
        count = min(-(-sets // sbs.GRAPH_CALLS), self.reps["max_graphs"])
        torch.cuda.synchronize()
        # capture_begin/end on the current (non-default) stream, not
        # torch.cuda.graph(), which collects garbage before every capture:
        # hundreds of graphs would spend seconds in the collector.
        assert torch.cuda.current_stream() == self.stream
        graphs = [self._capture(launch, sets, count) for launch in launches]
        for per in graphs:  # upload and warm up
            for graph in per:
                graph.replay()
        torch.cuda.synchronize()
        samples = [[] for _ in launches]
        for _, turns in self._turns(self.reps["graph"], launches):
            for w in turns:
                start = torch.cuda.Event(enable_timing=True)
                stop = torch.cuda.Event(enable_timing=True)
                start.record(self.stream)
                for graph in graphs[w]:
                    graph.replay()
                stop.record(self.stream)
                stop.synchronize()
                samples[w].append(start.elapsed_time(stop) * 1e3 /
                                  (count * sbs.GRAPH_CALLS))
        del graphs
        return samples

    def eager(self, launch, sets):
        return self._eager((launch,), sets)[0]

    def eager_pair(self, first, second, sets):
        """eager() of two launchers at once, their samples interleaved (and
        which goes first alternating) for cold_pair's reason: drift over a
        run then hits both alike (docs/dev/TUNING.md, "Reading the numbers")."""
        return self._eager((first, second), sets)

    def _eager(self, launches, sets):
        """Every launcher warmed up first; then per sample, for each
        launcher (in turn order, rotated every sample), the host
        clock around a Python loop of calls and the synchronize after it. A
        list of us-per-call samples per launcher."""
        calls = max(min(sets, self.reps["eager_calls"]), 50)
        for launch in launches:
            for i in range(min(calls, 50)):
                launch(i % sets)
        torch.cuda.synchronize()
        samples = [[] for _ in launches]
        for _, turns in self._turns(self.reps["eager"], launches):
            for w in turns:
                launch = launches[w]
                t0 = time.perf_counter()
                for i in range(calls):
                    launch(i % sets)
                torch.cuda.synchronize()
                samples[w].append((time.perf_counter() - t0) * 1e6 / calls)
        return samples

    def copy_ceiling(self):
        """GB/s of a device-to-device copy of 4 GiB, read + written."""
        src = torch.ones(sbs.COPY_BYTES, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        dst.copy_(src)
        samples = []
        for _ in range(self.reps["copy"]):
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            start.record(self.stream)
            dst.copy_(src)
            stop.record(self.stream)
            stop.synchronize()
            samples.append(start.elapsed_time(stop) * 1e3)
        del src, dst
        us = sbs.median(samples)
        return 2 * sbs.COPY_BYTES / us / 1e3, samples


# ----------------------------------------------------------------------------
# One kernel beside the peer
# ----------------------------------------------------------------------------

def load_peer(path):
    if not os.path.isfile(path):
        raise SystemExit("side_by_side: no peer file %s" % path)
    spec = importlib.util.spec_from_file_location("kvbench_peer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "kv_append"):
        raise SystemExit("side_by_side: %s has no kv_append function" % path)
    return module


class Setup:
    """The buffers both kernels share: input pools, caches, scales."""

    def __init__(self, desc, cases):
        h, d, bs = desc["num_kv_heads"], desc["head_dim"], desc["block_size"]
        self.desc = desc
        self.blocks = sbs.num_blocks(desc)
        pool = max(c["sets"] * c["tokens"] for c in cases)
        gen = torch.Generator(device="cuda").manual_seed(1)
        self.key_pool = torch.randn(pool, h, d, generator=gen, device="cuda",
                                    dtype=torch.bfloat16)
        self.value_pool = torch.randn(pool, h, d, generator=gen, device="cuda",
                                      dtype=torch.bfloat16)
        quant = desc["quant"]
        dynamic = quant is not None and quant.get("mode") == "dynamic"
        fp8 = quant is not None and not dynamic
        cache_dtype = torch.int8 if dynamic else (
            torch.float8_e4m3fn if fp8 else torch.bfloat16)
        shape = (self.blocks, bs, h, d)
        self.key_cache = torch.randn(shape, generator=gen, device="cuda",
                                     dtype=torch.bfloat16).to(cache_dtype)
        self.value_cache = torch.randn(shape, generator=gen, device="cuda",
                                       dtype=torch.bfloat16).to(cache_dtype)
        self.scale = torch.full((1,), 1.0 / 128, dtype=torch.float32,
                                device="cuda") if fp8 else None
        # Dynamic per (token, head) scales: [num_blocks, block_size, H].
        self.scale_caches = tuple(
            torch.rand((self.blocks, bs, h), generator=gen, device="cuda")
            for _ in range(2)) if dynamic else None

    def sets(self, case):
        t = case["tokens"]
        slots = torch.tensor(case["slots"], dtype=torch.int64, device="cuda")
        return [(self.key_pool[s * t:(s + 1) * t],
                 self.value_pool[s * t:(s + 1) * t],
                 slots[s * t:(s + 1) * t]) for s in range(case["sets"])]


VARIANTS = {"auto": capi.VARIANT_AUTO, "vector": capi.VARIANT_VECTOR,
            "wide": capi.VARIANT_WIDE, "scalar": capi.VARIANT_SCALAR}


def kvgen_launcher(kvrt, bundle, call, setup, sets, stream):
    """`call`: the description's name and the kvrt variant (kvrt_call)."""
    name, variant = call
    tensors = Tensors()
    key_cache, value_cache = tensors(setup.key_cache), tensors(
        setup.value_cache)
    scale = tensors(setup.scale) if setup.scale is not None else None
    scale_caches = tuple(tensors(c) for c in setup.scale_caches) \
        if setup.scale_caches is not None else None
    args = []
    for k, v, s in sets:
        scs = scale_caches if scale_caches is not None else (None, None)
        a = capi.append_args(name.encode(), tensors(k), tensors(v),
                             tensors(s), key_cache, value_cache,
                             VARIANTS[variant], scale, scale, *scs)
        args.append(a)
    refs = [a.address for a in args]
    handle = ctypes.c_void_p(stream.cuda_stream)
    append = kvrt.lib.kvrt_append

    def launch(i):
        if append(bundle, refs[i], handle):
            raise RuntimeError("kvrt_append: %s" % kvrt.error())
    launch.keep = (tensors, args)
    return launch


def peer_launcher(peer, variant, setup, sets):
    kc, vc, scale = setup.key_cache, setup.value_cache, setup.scale

    def launch(i):
        k, v, s = sets[i]
        peer.kv_append(k, v, kc, vc, s, scale, scale, variant=variant)
    return launch


def check(setup, kvgen, peer, sets):
    """Both write set 0 into the caches; the rows must agree byte for byte,
    and for an unquantized cache equal the source rows."""
    k, v, slots = sets[0]
    h, d = setup.desc["num_kv_heads"], setup.desc["head_dim"]

    def rows():
        kc = setup.key_cache.view(torch.uint8).view(-1, h, d * (
            setup.key_cache.element_size()))
        vc = setup.value_cache.view(torch.uint8).view(-1, h, d * (
            setup.value_cache.element_size()))
        return kc[slots].clone(), vc[slots].clone()
    kvgen(0)
    torch.cuda.synchronize()
    kvgen_rows = rows()
    peer(0)
    torch.cuda.synchronize()
    peer_rows = rows()
    same = all(torch.equal(a, b) for a, b in zip(kvgen_rows, peer_rows))
    exact = True
    if setup.desc["quant"] is None:
        exact = (torch.equal(kvgen_rows[0], k.view(torch.uint8).view(
            k.shape[0], h, -1)) and torch.equal(
                kvgen_rows[1], v.view(torch.uint8).view(v.shape[0], h, -1)))
    if setup.desc["quant"] is None:
        source = "kvgen rows %s the source" % ("equal" if exact else
                                              "DIFFER from")
    else:
        source = "quantized: compared with the peer's bytes only"
    return same and exact, "set 0 of %d tokens: kvgen and peer rows %s; %s" % (
        k.shape[0], "agree" if same else "DIFFER", source)


def check_dynamic_int8(setup, kvgen, sets):
    """kvgen alone writes set 0; its int8 rows and scales must equal a torch
    reference of the convention (docs/CONTRACT.md): per (token, head), scale
    = amax of the finite |x| / 127 (1 where that is 0), q = x / scale in
    IEEE fp32, clamped to +-127, rounded to nearest even, NaN to 0."""
    k, v, slots = sets[0]
    kvgen(0)
    torch.cuda.synchronize()
    ok = True
    for x, cache, scales in ((k, setup.key_cache, setup.scale_caches[0]),
                             (v, setup.value_cache, setup.scale_caches[1])):
        xf = x.float()
        a = xf.abs()
        amax = torch.where(torch.isfinite(a), a, torch.zeros_like(a)).amax(-1)
        # A tensor divisor: torch multiplies by the reciprocal of a scalar.
        s = torch.where(amax > 0, amax / torch.full_like(amax, 127.0),
                        torch.ones_like(amax))
        q = (xf / s[..., None]).clamp(-127.0, 127.0)
        q = torch.round(torch.where(torch.isnan(q), torch.zeros_like(q), q))
        h = cache.shape[2]
        rows = cache.view(-1, h, cache.shape[3])[slots]
        ok = ok and torch.equal(rows, q.to(torch.int8)) and torch.equal(
            scales.view(-1, h)[slots].view(torch.int32),
            s.view(torch.int32))
    return ok, "set 0 of %d tokens: kvgen int8 rows and scales %s the torch " \
        "reference" % (k.shape[0], "equal" if ok else "DIFFER from")


def compare(args, kvrt, bundle, name, manifest, timer, copy_gbps):
    call = sbs.kvrt_call(name, manifest.get("variant"), args.variant)
    desc = sbs.description_from_manifest(manifest)
    why = sbs.unsupported(desc)
    alone = bool(why) and sbs.reference_checkable(desc)
    if why and not alone:
        return {"name": name, "skipped": why}
    per_token = sbs.bytes_per_token(desc)
    cases = sbs.make_cases(desc, args.decode, args.prefill, args.seed,
                           args.prefill_blocks)
    setup = Setup(desc, cases)
    peer = load_peer(args.peer)
    result = {"name": name, "kvrt_variant": call[1], "description": desc,
              "bytes_per_token": per_token, "num_blocks": setup.blocks,
              "rows": [], "checks": [], "ok": True}
    # The check writes the largest size's first set: the most rows.
    largest = max(cases, key=lambda c: c["tokens"])
    if alone:
        result["peer"] = "none: %s" % why
    for case in cases:
        sets = setup.sets(case)
        kvgen = kvgen_launcher(kvrt, bundle, call, setup, sets, timer.stream)
        other = None if alone else peer_launcher(peer, args.peer_variant,
                                                 setup, sets)
        if case is largest:
            ok, detail = check_dynamic_int8(setup, kvgen, sets) if alone \
                else check(setup, kvgen, other, sets)
            result["checks"].append(detail)
            result["ok"] = result["ok"] and ok
            print("  check: %s" % detail, flush=True)
        modes = [m for m in args.modes
                 if m != "graph" or case["phase"] == "decode"]
        for mode in modes:
            if other:
                # Sample by sample in every mode, which goes first
                # alternating: kvgen's and the peer's samples come from the
                # same stretch of the run, so drift over it hits both alike.
                # Timed one block after the other, a cold median moved by
                # up to 10% (docs/dev/TUNING.md, "Reading the numbers"); graph and
                # eager, once timed kvgen then peer, are now interleaved the
                # same way.
                k, p = getattr(timer, mode + "_pair")(kvgen, other,
                                                      case["sets"])
            else:
                k, p = getattr(timer, mode)(kvgen, case["sets"]), []
            row = sbs.make_row(case["phase"], case["tokens"], case["sets"],
                               mode, k, p, per_token, copy_gbps)
            result["rows"].append(row)
            print("  %-7s %6d %-5s kvgen %9s us  peer %9s us  kvgen/peer %s"
                  % (case["phase"], case["tokens"], mode,
                     sbs.fmt(row["kvgen_us"]["median"], "%.3f"),
                     sbs.fmt(row["peer_us"]["median"], "%.3f"),
                     sbs.fmt(row["ratio"], "%.3f")), flush=True)
    return result


def run(args):
    if not torch.cuda.is_available():
        print("side_by_side: no CUDA device visible to torch", file=sys.stderr)
        return 2
    lib = args.kvrt_lib or sbs.default_kvrt_lib(args.bundle[0])
    if not lib:
        print("side_by_side: no libkvrt.so beside %s; give --kvrt-lib"
              % args.bundle[0], file=sys.stderr)
        return 2
    if os.environ.pop("KVRT_CHECKED", None):
        # Checked mode copies slots to the host before each launch and
        # cannot be captured: time kvrt's plain path.
        print("side_by_side: KVRT_CHECKED unset for the comparison")
    kvrt = Kvrt(lib)
    torch.cuda.init()
    stream = torch.cuda.Stream()
    reps = sbs.repetitions(args.quick)
    report = {"tool": "side_by_side", "quick": args.quick,
              "device": torch.cuda.get_device_name(),
              "torch": torch.__version__,
              "peer_name": "%s, variant %s" % (os.path.basename(args.peer),
                                               args.peer_variant),
              "kvrt_lib": os.path.basename(lib), "reps": reps,
              "prefill_blocks": args.prefill_blocks, "kernels": []}
    try:
        import triton
        report["triton"] = triton.__version__
    except ImportError:
        pass
    bundles = []
    for path in args.bundle:
        if not os.path.isfile(path):
            print("side_by_side: no bundle %s: its kernels are skipped" % path)
            continue
        handle = kvrt.load(path)
        bundles.append((path, handle, kvrt.kernels(handle)))
    with torch.cuda.stream(stream):
        timer = Timer(stream, reps)
        copy_gbps, copy_us = timer.copy_ceiling()
        report["copy_GBps"] = copy_gbps
        report["copy_us"] = sbs.stats(copy_us)
        print("side_by_side: %s, copy ceiling %.0f GB/s" %
              (report["device"], copy_gbps), flush=True)
        for name in args.kernel:
            found = [(p, h, names.index(name)) for p, h, names in bundles
                     if name in names]
            if not found:
                report["kernels"].append(
                    {"name": name, "skipped": "no bundle given has it"})
                print("side_by_side: %s: skipped, no bundle given has it"
                      % name)
                continue
            path, handle, index = found[0]
            print("side_by_side: %s (%s)" % (name, os.path.basename(path)),
                  flush=True)
            try:
                result = compare(args, kvrt, handle, name,
                                 kvrt.manifest(handle, path, index), timer,
                                 copy_gbps)
            except (RuntimeError, ValueError) as e:
                result = {"name": name, "skipped": str(e)}
            if result.get("skipped"):
                print("  skipped: %s" % result["skipped"])
            report["kernels"].append(result)
            sbs.write_report(report, args.out)
            torch.cuda.empty_cache()
    text = sbs.write_report(report, args.out)
    print(text)
    print("side_by_side: wrote %s/side_by_side.{json,md}" % args.out)
    for _, handle, _ in bundles:
        kvrt.lib.kvrt_bundle_destroy(handle)
    failed = any(not k.get("ok", True) for k in report["kernels"])
    return sbs.EXIT_CHECK_FAILED if failed else 0
