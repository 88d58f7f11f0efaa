"""vllm.platforms.current_platform: CUDA where torch sees a CUDA device,
else the CPU (KVGEN_VLLM_DEVICE=cpu|cuda overrides), with the queries the
cache test makes."""

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
        """(major, minor) of a CUDA device; None on the CPU."""
        if not self.is_cuda():
            return None
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


def _device_type():
    forced = os.environ.get("KVGEN_VLLM_DEVICE")
    if forced:
        if forced not in ("cpu", "cuda"):
            raise ValueError("KVGEN_VLLM_DEVICE=%s: expected cpu or cuda"
                             % forced)
        return forced
    return "cuda" if torch.cuda.is_available() else "cpu"


current_platform = _Platform(_device_type())
