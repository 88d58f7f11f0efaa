"""vllm.platforms.current_platform: CUDA where torch sees a CUDA device,
else the CPU (KVGEN_VLLM_DEVICE=cpu|cuda overrides), with the queries the
cache test makes.

On the CPU the platform reports compute capability 10.0 (an sm_100 device,
not of the 12.x family): vLLM's file runs its NVFP4 cases only there, and
kvgen's host kernels write the NVFP4 page with the bits its sm_100 kernels
write (docs/CONTRACT.md, "NVFP4"), K's scales linear and V's swizzled, as
vLLM's test expects of sm_100. KVGEN_VLLM_CPU_CAPABILITY=MAJOR.MINOR reports
another, =none none (the NVFP4 cases then skip themselves)."""

import os
from collections import namedtuple

import torch

DeviceCapability = namedtuple("DeviceCapability", "major minor")


class _Platform:
    def __init__(self, device_type):
        self.device_type = device_type
        self.device_name = device_type

    def is_cuda(self):
        return self.device_type == "cuda"

    def is_cpu(self):
        return self.device_type == "cpu"

    def is_rocm(self):
        return False

    def is_xpu(self):
        return False

    def is_fp8_fnuz(self):
        return False

    def fp8_dtype(self):
        return torch.float8_e4m3fn

    def get_device_capability(self, device_id=0):
        """(major, minor) of a CUDA device; on the CPU 10.0, or
        KVGEN_VLLM_CPU_CAPABILITY's (module docstring)."""
        if not self.is_cuda():
            return _cpu_capability()
        return DeviceCapability(*torch.cuda.get_device_capability(device_id))

    def has_device_capability(self, capability, device_id=0):
        """Whether the device's capability (major * 10 + minor, or a
        (major, minor) pair) is at least `capability`."""
        cap = self.get_device_capability(device_id)
        if cap is None:
            return False
        if isinstance(capability, tuple):
            return tuple(cap) >= capability
        return cap.major * 10 + cap.minor >= capability

    def is_device_capability(self, capability, device_id=0):
        cap = self.get_device_capability(device_id)
        if cap is None:
            return False
        if isinstance(capability, tuple):
            return tuple(cap) == capability
        return cap.major * 10 + cap.minor == capability

    def is_device_capability_family(self, capability, device_id=0):
        """Whether the device's major version is capability // 10 (100:
        SM 10.x)."""
        cap = self.get_device_capability(device_id)
        return cap is not None and cap.major == capability // 10

    def manual_seed_all(self, seed):
        if self.is_cuda():
            torch.cuda.manual_seed_all(seed)


def _cpu_capability():
    given = os.environ.get("KVGEN_VLLM_CPU_CAPABILITY", "10.0")
    if given == "none":
        return None
    try:
        major, minor = (int(x) for x in given.split("."))
    except ValueError:
        raise ValueError("KVGEN_VLLM_CPU_CAPABILITY=%s: expected MAJOR.MINOR "
                         "(10.0) or none" % given) from None
    return DeviceCapability(major, minor)


def _device_type():
    forced = os.environ.get("KVGEN_VLLM_DEVICE")
    if forced:
        if forced not in ("cpu", "cuda"):
            raise ValueError("KVGEN_VLLM_DEVICE=%s: expected cpu or cuda"
                             % forced)
        return forced
    return "cuda" if torch.cuda.is_available() else "cpu"


current_platform = _Platform(_device_type())
