"""A CPU platform for verl 0.9.1, test support only (never shipped in an image): verl knows
CUDA and NPU platforms, and with neither it falls back to CUDA (NCCL, `cuda:0`). Registered as
"cpu" in verl's `PlatformRegistry` and made the current platform on import, in every verl
process, through verl's own plugin switch (VERL_USE_EXTERNAL_MODULES=rljob_verl_cpu,
VERL_PLATFORM=cpu).

What it fakes: the accelerator. The device is the CPU (`current_device()` is "cpu", device
count 1; its device module is `torch.cpu` plus the `torch.cuda` memory, cache, IPC and RNG
calls verl makes, answered with 0, nothing, or torch's CPU generator), the
collectives gloo, and CUDA IPC is reported unsupported. Ray still has to offer "GPU"
resources, because verl's resource pools ask for them by that name (`ray_resource_name()`
stays "GPU"), so runs declare fake ones (`ray_init.num_gpus`, `ray start --num-gpus`).

Runtime patches (one): `verl.utils.distributed.initialize_global_process_group_ray` is
wrapped to default its backend to "gloo": verl builds the backend as
"cpu:gloo,<device>:<backend>", which torch refuses for device "cpu".
"""

from __future__ import annotations

import os

import torch
import verl.utils.distributed as verl_distributed
from verl.plugin.platform.platform_cuda import PlatformCUDA
from verl.plugin.platform.platform_manager import PlatformRegistry, set_platform


class CPUDeviceModule:
    """`torch.cpu` plus the `torch.cuda` calls verl makes on its device module: memory
    statistics read 0, cache and IPC calls do nothing, the RNG is torch's CPU generator."""

    def __getattr__(self, name):
        return getattr(torch.cpu, name)

    @staticmethod
    def memory_reserved(*args, **kwargs) -> int:
        return 0

    memory_allocated = max_memory_reserved = max_memory_allocated = memory_reserved

    @staticmethod
    def memory_stats(*args, **kwargs) -> dict:
        return {}

    @staticmethod
    def mem_get_info(*args, **kwargs) -> tuple[int, int]:
        page = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page

    @staticmethod
    def _nothing(*args, **kwargs) -> None:
        return None

    empty_cache = ipc_collect = set_per_process_memory_fraction = _nothing
    reset_peak_memory_stats = reset_accumulated_memory_stats = _nothing

    @staticmethod
    def get_device_name(*args, **kwargs) -> str:
        return "cpu"

    @staticmethod
    def get_rng_state(*args, **kwargs) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state, *args, **kwargs) -> None:
        torch.set_rng_state(state)


_DEVICE_MODULE = CPUDeviceModule()


@PlatformRegistry.register(platform="cpu")
class CPUPlatform(PlatformCUDA):
    device_name = property(lambda self: "cpu")
    vendor_name = property(lambda self: "cpu")
    device_module = property(lambda self: _DEVICE_MODULE)

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
