"""pytest plugin for running vLLM's cache test against kvgen
(scripts/vllm-tests.sh loads it with ``-p kvgen_vllm_plugin``).

- The markers of vLLM's pytest configuration.
- ``--kvgen-device=cpu``: the test file's devices ("cuda:0") resolve to the
  CPU. The file picks ``cuda:{i}`` for ``torch.accelerator.device_count()``
  devices (two names when it is not 1); here it is 1, so the cases and
  their ids are those of a one-GPU machine, and a torch function mode turns
  every "cuda" device argument into "cpu" (factory functions,
  ``Tensor.to``, ``torch.set_default_device``); selecting and synchronizing
  the accelerator do nothing.
- A case whose failure comes from kvgen.vllm.NotProvidedError (an op or a
  format kvgen does not provide), or from kvgen's compiler refusing a
  description, is reported as xfailed with kvgen's message, and listed per
  test function at the end; every other failure stays a failure.
- ``--kvgen-summary=FILE``: the per-case outcomes and reasons as JSON.
"""

import collections
import json
import os

import pytest
import torch

_MARKERS = (
    "slow_test", "skip_global_cleanup", "core_model", "hybrid_model",
    "cpu_model", "cpu_test", "split", "distributed", "optional",
)
_cpu_mode = None
_results = {}


def pytest_addoption(parser):
    group = parser.getgroup("kvgen-vllm")
    group.addoption("--kvgen-device", choices=("cpu", "cuda"), default=None,
                    help="where the test file's cuda:N devices run (default: "
                    "cuda when torch sees a CUDA device, else cpu)")
    group.addoption("--kvgen-summary", default=None,
                    help="write the per-case outcomes as JSON to this file")


def _is_cuda(device):
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device == "cuda" or device.startswith("cuda:")
    return False


_HALF = (torch.bfloat16, torch.float16)


class _CudaToCpu(torch.overrides.TorchFunctionMode):
    """Every "cuda" device argument of a torch call becomes "cpu"; a 16-bit
    float randn draws as CUDA's does (below)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if "device" in kwargs and _is_cuda(kwargs["device"]):
            kwargs = dict(kwargs, device="cpu")
        # CUDA rounds fp32 normals to a 16-bit dtype, which is never exactly
        # 0; the CPU draws them in the 16-bit dtype itself, where about 0.6%
        # of bf16 draws are 0. A test that counts the nonzero elements it
        # wrote (the asymmetric head size tests) needs CUDA's draws.
        if func is torch.randn and kwargs.get("dtype") in _HALF:
            dtype = kwargs["dtype"]
            return func(*args, **dict(kwargs, dtype=torch.float32)).to(dtype)
        if func is torch.Tensor.cuda:
            return args[0].to("cpu", copy=True)
        if func is torch.Tensor.to:
            args = tuple("cpu" if _is_cuda(a) else a for a in args)
        return func(*args, **kwargs)


def _install_cpu_mode():
    global _cpu_mode
    os.environ["KVGEN_VLLM_DEVICE"] = "cpu"
    torch.accelerator.device_count = lambda: 1
    torch.accelerator.set_device_index = lambda device: None
    torch.accelerator.synchronize = lambda device=None: None
    set_default_device = torch.set_default_device

    def cpu_default_device(device):
        set_default_device("cpu" if _is_cuda(device) else device)

    torch.set_default_device = cpu_default_device
    _cpu_mode = _CudaToCpu()
    _cpu_mode.__enter__()


def pytest_configure(config):
    for m in _MARKERS:
        config.addinivalue_line("markers", m)
    device = config.getoption("--kvgen-device")
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        _install_cpu_mode()
    else:
        os.environ["KVGEN_VLLM_DEVICE"] = "cuda"
    config._kvgen_device = device


def _kvgen_refusal(exc):
    """kvgen's message when `exc` (or what caused it) is an op or format
    that kvgen does not provide, else None."""
    import kvgen.errors
    import kvgen.vllm

    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, kvgen.vllm.NotProvidedError):
            return exc.op, exc.format, str(exc)
        if (isinstance(exc, kvgen.errors.KernelNotAvailableError) and
                isinstance(exc.__cause__, kvgen.errors.CompilerError)):
            return "compiler", "refused the description", str(exc).split(
                "\n", 1)[0]
        exc = exc.__cause__ or exc.__context__
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    refusal = None
    if call.excinfo is not None and report.failed and call.when == "call":
        refusal = _kvgen_refusal(call.excinfo.value)
        if refusal is not None:
            report.outcome = "skipped"
            report.wasxfail = refusal[2]
            item.user_properties.append(("kvgen_not_provided", refusal[2]))
    if call.when == "call" or report.outcome != "passed":
        function = getattr(item, "originalname", None) or item.name
        if report.passed:
            state = "passed"
        elif refusal is not None:
            state = "not provided"
        elif report.skipped:
            state = "skipped"
        else:
            state = "failed" if call.when == "call" else "error"
        reason = None
        if refusal is not None:
            reason = refusal[2]
        elif report.skipped and isinstance(report.longrepr, tuple):
            reason = report.longrepr[2]
        elif report.failed:
            reason = str(call.excinfo.value).split("\n", 1)[0][:300] \
                if call.excinfo else None
        if item.nodeid not in _results or state != "passed":
            _results[item.nodeid] = {
                "function": function, "state": state, "reason": reason,
                "refusal": list(refusal[:2]) if refusal else None,
                "seconds": round(getattr(report, "duration", 0.0), 3)}


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _results:
        return
    tr = terminalreporter
    counts = collections.Counter(r["state"] for r in _results.values())
    tr.section("kvgen: vLLM cache test on %s" % config._kvgen_device)
    tr.write_line("cases: %d; passed %d, failed %d, not provided by kvgen "
                  "%d, skipped by the test %d, errors %d" % (
                      len(_results), counts["passed"], counts["failed"],
                      counts["not provided"], counts["skipped"],
                      counts["error"]))
    per_function = collections.OrderedDict()
    for r in _results.values():
        per_function.setdefault(r["function"], collections.Counter())[
            r["state"]] += 1
    tr.write_line("")
    tr.write_line("%-60s %6s %6s %6s %6s %6s" % (
        "test function", "pass", "fail", "n/p", "skip", "error"))
    for f, c in per_function.items():
        tr.write_line("%-60s %6d %6d %6d %6d %6d" % (
            f, c["passed"], c["failed"], c["not provided"], c["skipped"],
            c["error"]))
    groups = collections.OrderedDict()
    for r in _results.values():
        if r["state"] == "not provided":
            op, fmt = r["refusal"]
            # One line per kind of refusal: the format up to its details.
            key = (r["function"], op, fmt.split(" (")[0])
            entry = groups.setdefault(key, [0, r["reason"]])
            entry[0] += 1
    if groups:
        tr.write_line("")
        tr.write_line("cases kvgen cannot run, per test function (kvgen's "
                      "message for the first of each):")
        for (f, op, fmt), (n, reason) in groups.items():
            tr.write_line("  %s: %d x %s" % (f, n, reason))
    path = config.getoption("--kvgen-summary")
    if path:
        with open(path, "w") as out:
            json.dump({"device": config._kvgen_device, "counts": dict(counts),
                       "cases": _results}, out, indent=1, sort_keys=True)
