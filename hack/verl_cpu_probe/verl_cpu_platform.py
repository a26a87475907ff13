"""A CPU platform for verl 0.9.1, for the probe only: verl knows CUDA and NPU platforms, and
with neither it falls back to CUDA (NCCL, `cuda:0`). Loaded into every verl process through
verl's own plugin switch (VERL_USE_EXTERNAL_MODULES=verl_cpu_platform, VERL_PLATFORM=cpu).

What it fakes: the accelerator. Ray still has to offer "GPU" resources (verl's resource pools
ask for them by that name), so the probe declares fake ones; the device is the CPU, the
collectives gloo. One runtime patch is unavoidable: verl builds its process group's backend
as "cpu:gloo,<device>:<backend>", which torch refuses for device "cpu".
"""

from __future__ import annotations

import torch
import verl.utils.distributed as verl_distributed
from verl.plugin.platform.platform_cuda import PlatformCUDA
from verl.plugin.platform.platform_manager import PlatformRegistry, set_platform


@PlatformRegistry.register(platform="cpu")
class CPUPlatform(PlatformCUDA):
    device_name = property(lambda self: "cpu")
    vendor_name = property(lambda self: "cpu")
    device_module = property(lambda self: torch.cpu)

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return True

    def current_device(self) -> str:
        return "cpu"  # verl's device id; an int 0 would mean cuda:0

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index) -> None:
        pass

    def synchronize(self, device_index=None) -> None:
        pass

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    def set_allocator_settings(self, settings) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def get_device_capability(self, device_index: int = 0):
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def ray_resource_name(self) -> str:
        return "GPU"

    def is_ipc_supported(self) -> bool:
        return False

    def rollout_env_vars(self) -> dict:
        return {}

    def get_collective_module(self):
        return None


set_platform(CPUPlatform())

_init_process_group = verl_distributed.initialize_global_process_group_ray


def _init_with_gloo(timeout_second=None, backend=None):
    return _init_process_group(timeout_second=timeout_second, backend=backend or "gloo")


verl_distributed.initialize_global_process_group_ray = _init_with_gloo
