"""Replay stub of ``triton.runtime``: a driver that reports the declared GPU."""

from __future__ import annotations

from typing import Any

from _replay_stubkit import HARDWARE, module_getattr

__replay_stub__ = True
__getattr__ = module_getattr("triton.runtime")


class _Target:
    def __init__(self) -> None:
        vendor = HARDWARE.get("vendor")
        amd = vendor == "amd"
        self.backend = {"amd": "hip", "nvidia": "cuda"}.get(str(vendor), "cpu")
        sm = HARDWARE.get("sm") or 0
        self.arch = HARDWARE.get("gcn_arch", "gfx942") if amd else sm
        self.warp_size = 64 if amd else 32


class _Utils:
    def get_device_properties(self, device: int = 0) -> dict[str, Any]:
        return {
            "multiprocessor_count": HARDWARE.get("sm_count", 132),
            "max_shared_mem": HARDWARE.get("max_shared_mem", 232448),
            "max_num_regs": 65536,
            "warpSize": 64 if HARDWARE.get("vendor") == "amd" else 32,
        }


class _Active:
    def __init__(self) -> None:
        self.utils = _Utils()

    def get_current_target(self) -> _Target:
        return _Target()

    def get_current_device(self) -> int:
        return 0

    def get_active_torch_device(self) -> Any:
        import torch

        return torch.device("cuda", 0)


class _Driver:
    def __init__(self) -> None:
        self.active = _Active()


driver = _Driver()
