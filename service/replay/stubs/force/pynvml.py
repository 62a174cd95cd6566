"""Replay stub of ``pynvml`` (NVML needs the driver): answers from the declared profile."""

from __future__ import annotations

from typing import Any

import _replay_stubkit as kit

__version__ = kit.VERSIONS["pynvml"]
__replay_stub__ = True
__getattr__ = kit.module_getattr("pynvml")

NVML_P2P_STATUS_OK = 0
NVML_P2P_CAPS_INDEX_NVLINK = 2
NVML_CC_SYSTEM_FEATURE_DISABLED = 0
NVML_CC_SYSTEM_FEATURE_ENABLED = 1
NVML_CC_SYSTEM_MULTIGPU_NONE = 0
NVML_CC_SYSTEM_MULTIGPU_PROTECTED_PCIE = 1


class NVMLError(Exception):
    def __init__(self, value: int = 999) -> None:
        super().__init__(f"NVML error {value} (replay stub)")
        self.value = value


class NVMLError_NotSupported(NVMLError):
    def __init__(self, value: int = 3) -> None:
        super().__init__(value)


class _Memory:
    def __init__(self) -> None:
        kit.consulted("memory")
        total = int(kit.HARDWARE.get("memory_mib", 0)) * 1024 * 1024
        self.total, self.free, self.used = total, total, 0


class _CCState:
    ccFeature = NVML_CC_SYSTEM_FEATURE_DISABLED
    devToolsMode = 0
    environment = 0


def _require_nvidia() -> None:
    kit_fail = kit.FORCED_FAILURE
    if kit_fail == "call:nvml":
        raise kit.StubError(f"{kit.STUB_MARK}: forced NVML failure (test hook)")
    if kit.HARDWARE.get("vendor") != "nvidia":
        raise NVMLError(9)  # NVML_ERROR_DRIVER_NOT_LOADED


def nvmlInit() -> None:
    _require_nvidia()


def nvmlShutdown() -> None:
    return None


def nvmlDeviceGetCount() -> int:
    _require_nvidia()
    kit.consulted("count")
    return int(kit.HARDWARE.get("count", 0))


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    _require_nvidia()
    if not 0 <= int(index) < nvmlDeviceGetCount():
        raise NVMLError(2)
    return int(index)


def nvmlDeviceGetCudaComputeCapability(handle: Any) -> tuple[int, int]:
    kit.consulted("capability")
    cap = kit.HARDWARE.get("capability") or (0, 0)
    return int(cap[0]), int(cap[1])


def nvmlDeviceGetName(handle: Any) -> str:
    kit.consulted("name")
    return str(kit.HARDWARE.get("gpu", ""))


def nvmlDeviceGetMemoryInfo(handle: Any) -> _Memory:
    return _Memory()


def nvmlSystemGetDriverVersion() -> str:
    return str(kit.HARDWARE.get("driver", "580.82.07"))


def nvmlDeviceGetP2PStatus(a: Any, b: Any, index: Any) -> int:
    return NVML_P2P_STATUS_OK


def nvmlSystemGetConfComputeSettings(settings: Any) -> int:
    raise NVMLError_NotSupported()


def nvmlSystemGetConfComputeState() -> _CCState:
    return _CCState()


def _nvmlCheckReturn(ret: Any) -> Any:
    return ret


class c_nvmlSystemConfComputeSettings_v1_t:
    ccFeature = 0
    multiGpuMode = 0
