"""Threads: the first launches on one fresh Bundle from 8 threads at once,
and kvgen.ops.register() while other threads launch. Each stress runs in a
subprocess (a use-after-free may crash the interpreter) and reports how
many rounds went wrong; KVGEN_PY_THREAD_ROUNDS sets the rounds."""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import kvgen


PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROUNDS = int(os.environ.get("KVGEN_PY_THREAD_ROUNDS", "1000"))

FIRST_LAUNCH = """
import sys, threading, numpy as np, kvgen
rounds, threads, pool = int(sys.argv[1]), 8, sys.argv[2] == "pool"
gpu = sys.argv[3] == "gpu"
H, D = (8, 128) if gpu else (2, 32)  # the GPU run's precompiled geometry
if gpu:
    import torch
    major, minor = torch.cuda.get_device_capability()
    path = kvgen.compiler.cache_entry(
        target="gpu", chip="sm_%d%d" % (major, minor), layout="paged_nhd",
        block_size=16, num_kv_heads=H, head_dim=D, dtype="f16")
    load = kvgen.Bundle.load_json_file
    new = lambda a: torch.from_numpy(a).cuda()
else:
    path = kvgen.compiler.cache_entry(target="host", layout="paged_nhd",
                                      block_size=16, num_kv_heads=H,
                                      head_dim=D, dtype="f16")
    load = kvgen.Bundle.load_shared_lib
    new = lambda a: a
rng = np.random.default_rng(0)
keys = [new(rng.standard_normal((4, H, D)).astype(np.float16))
        for _ in range(threads)]
slots = new(np.array([0, 5, 17, 30], np.int64))
state = {}
start = threading.Barrier(threads + 1)
done = threading.Barrier(threads + 1)


def launch(i):
    bundle, caches, failed = state["bundle"], state["caches"], state["failed"]
    try:
        bundle.append(keys[i], keys[i], slots, caches[i],
                      caches[i].clone() if gpu else caches[i].copy())
    except Exception as e:
        failed.append("%s: %s" % (type(e).__name__, e))
        return
    if gpu:
        torch.cuda.synchronize()
    if not ((caches[i][0, 0] == keys[i][0]).all() and
            (caches[i][1, 14] == keys[i][3]).all()):
        failed.append("wrong bytes")


def worker(i):
    # Long-lived threads, as a server's: their per-thread state outlives
    # each round's bundle.
    for _ in range(rounds):
        start.wait()
        launch(i)
        done.wait()


if pool:
    workers = [threading.Thread(target=worker, args=(i,))
               for i in range(threads)]
    for w in workers:
        w.start()
bad_rounds, errors = 0, {}
for r in range(rounds):
    # A fresh bundle each round: every thread's launch is its first on it.
    state["bundle"] = load(path)
    state["caches"] = [new(np.zeros((2, 16, H, D), np.float16))
                       for _ in range(threads)]
    state["failed"] = failed = []
    if pool:
        start.wait()
        done.wait()
    else:
        ts = [threading.Thread(target=launch, args=(i,))
              for i in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    state["bundle"].close()
    if failed:
        bad_rounds += 1
        for f in failed:
            line = f.splitlines()[0][:160]
            errors[line] = errors.get(line, 0) + 1
print("rounds", rounds, "failed", bad_rounds)
for e, n in sorted(errors.items()):
    print("  %d x %s" % (n, e))
"""


def _run(code, *args, timeout=600):
    out = subprocess.run([sys.executable, "-c", code] + [str(a) for a in
                                                         args],
                         env=dict(os.environ), text=True,
                         capture_output=True, cwd=PYTHON_DIR,
                         timeout=timeout)
    return out


# First launches on one fresh bundle from several threads at once: each
# thread names the kernel first, and a name buffer that one thread replaced
# while another's remembered launch still pointed at it was freed under it
# (rounds failed with a wrong kernel name, or the process crashed).
# test_bundle_threads.py forces that interleaving; this is the stress.
@pytest.mark.parametrize("device", ["host", "gpu"])
@pytest.mark.parametrize("threads", ["pool", "fresh"])
def test_first_launch_on_a_fresh_bundle_from_8_threads(threads, device,
                                                       request):
    if device == "host":
        request.getfixturevalue("compiler_path")
    else:
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip("no CUDA device")
    out = _run(FIRST_LAUNCH, ROUNDS, threads, device)
    assert out.returncode == 0, "the process died (exit %d)\n%s%s" % (
        out.returncode, out.stdout, out.stderr[-3000:])
    first = out.stdout.splitlines()[0]
    assert first == "rounds %d failed 0" % ROUNDS, out.stdout


REGISTER_WHILE_LAUNCHING = """
import sys, threading, numpy as np, kvgen
rounds = int(sys.argv[1])
fields = dict(layout="paged_nhd", block_size=16, num_kv_heads=2, head_dim=32,
              dtype="f16", target="host")
path = kvgen.compiler.cache_entry(**fields)
stop = threading.Event()
failed = []

def launcher(seed):
    rng = np.random.default_rng(seed)
    key = rng.standard_normal((3, 2, 32)).astype(np.float16)
    slots = np.array([1, 20, 31], np.int64)
    while not stop.is_set():
        kc = np.zeros((2, 16, 2, 32), np.float16)
        vc = np.zeros_like(kc)
        try:
            kvgen.ops.reshape_and_cache_flash(key, key, kc, vc, slots)
        except Exception as e:
            failed.append("%s: %s" % (type(e).__name__, e))
            return
        if not ((kc[0, 1] == key[0]).all() and (vc[1, 15] == key[2]).all()):
            failed.append("wrong bytes")
            return

threads = [threading.Thread(target=launcher, args=(i,)) for i in range(6)]
for t in threads:
    t.start()
bundles = []
for r in range(rounds):
    b = kvgen.Bundle.load_shared_lib(path)
    bundles.append(b)
    kvgen.ops.register(b)
stop.set()
for t in threads:
    t.join()
print("rounds", rounds, "failed", len(failed))
for f in failed[:5]:
    print("  " + f.splitlines()[0][:200])
"""


def test_register_while_other_threads_launch(compiler_path):
    out = _run(REGISTER_WHILE_LAUNCHING, max(ROUNDS // 5, 50))
    assert out.returncode == 0, "the process died (exit %d)\n%s%s" % (
        out.returncode, out.stdout, out.stderr[-3000:])
    assert out.stdout.splitlines()[0].endswith("failed 0"), out.stdout


def test_plan_made_before_register_is_not_kept(compiler_path, monkeypatch):
    # A call that chose its kernel before register() returned must not
    # leave that choice behind for the calls after it: the interleaving,
    # made deterministic by pausing the first call inside its choice.
    from kvgen import ops

    fields = dict(layout="paged_nhd", block_size=16, num_kv_heads=2,
                  head_dim=32, dtype="f16", target="host")
    old = kvgen.compile(**fields)
    new = kvgen.Bundle.load_shared_lib(old.source)
    real = ops._kernel_for
    inside, go_on = threading.Event(), threading.Event()

    def slow_kernel_for(*a, **kw):
        result = real(*a, **kw)
        inside.set()
        go_on.wait(10)
        return result

    key = np.ones((1, 2, 32), np.float16)
    slots = np.array([0], np.int64)
    shape = (2, 16, 2, 32)
    monkeypatch.setattr(ops, "_kernel_for", slow_kernel_for)
    saved = list(ops._registered)
    ops._plans.clear()
    try:
        t = threading.Thread(target=ops.reshape_and_cache_flash, args=(
            key, key, np.zeros(shape, np.float16), np.zeros(shape, np.float16),
            slots))
        t.start()
        assert inside.wait(10)
        ops.register(new)  # while the first call holds its old choice
        go_on.set()
        t.join()
        monkeypatch.setattr(ops, "_kernel_for", real)
        used = []
        real_append = new._append
        monkeypatch.setattr(new, "_append", lambda *a: used.append(
            "new") or real_append(*a))
        kc = np.zeros(shape, np.float16)
        ops.reshape_and_cache_flash(key, key, kc, np.zeros_like(kc), slots)
        assert used == ["new"], "a call after register() used the old bundle"
        assert (kc[0, 0] == 1).all()
    finally:
        ops._registered = saved
        ops._plans.clear()
    