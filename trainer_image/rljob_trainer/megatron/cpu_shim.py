"""megatron-core on CPU: the patches that let it train and checkpoint with gloo, CPU only.

megatron-core 0.16.1 is written for CUDA. Installed only when the trainer runs on CPU (the
test environment, a laptop); on a GPU the trainer runs megatron-core exactly as it is. What
is patched, and why:

- `torch.cuda.current_device` answers "cpu", and `synchronize` / `empty_cache` do nothing:
  megatron allocates its buffers and collective scratch tensors on the current device.
- In the modules that write `device='cuda'` (the pipeline schedules, gradient clipping, the
  optimizer wrappers, the DDP buffers, the checkpoint saver's liveness all-reduce) the
  tensor factories put such tensors on the CPU instead.
- Gradient clipping and the distributed optimizer assert `Tensor.type() ==
  'torch.cuda.FloatTensor'`, and the tied embedding of the first and last pipeline stages is
  moved with `.cuda()` to be summed; during those calls a CPU float32 tensor reports a CUDA
  type name, and `.cuda()` leaves a tensor on the CPU.
- The model-parallel RNG tracker keeps CPU generator states instead of CUDA ones, so that
  `model_parallel_cuda_manual_seed` seeds it and dropout forks it as on a GPU.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import torch

# Modules that create tensors with a literal device='cuda'.
_CUDA_LITERAL_MODULES = (
    "megatron.core.pipeline_parallel.schedules",
    "megatron.core.optimizer.clip_grads",
    "megatron.core.optimizer.optimizer",
    "megatron.core.distributed.param_and_grad_buffer",
    "megatron.core.dist_checkpointing.exchange_utils",
    "megatron.core.utils",
)
_FACTORIES = ("tensor", "zeros", "ones", "empty", "full", "empty_like", "zeros_like")
_installed = False


def _to_cpu_device(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    @functools.wraps(fn)
    def factory(*args: Any, **kwargs: Any) -> torch.Tensor:
        device = kwargs.get("device")
        if device is not None and torch.device(device).type == "cuda":
            kwargs["device"] = "cpu"
        return fn(*args, **kwargs)

    return factory


class _TorchOnCpu(ModuleType):
    """`torch` as one megatron module sees it: the same, but its tensors land on the CPU."""

    def __init__(self) -> None:
        super().__init__("torch")
        for name in _FACTORIES:
            setattr(self, name, _to_cpu_device(getattr(torch, name)))

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


_real_type = torch.Tensor.type
_real_cuda = torch.Tensor.cuda


def _type_as_on_cuda(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    if args or kwargs or self.device.type != "cpu":
        return _real_type(self, *args, **kwargs)
    return _real_type(self).replace("torch.", "torch.cuda.", 1)


def _stay_on_cpu(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    return self


@contextlib.contextmanager
def _cpu_tensors_pass_as_cuda() -> Iterator[None]:
    """Within: `t.type()` names a CPU tensor as a CUDA one, and `t.cuda()` leaves it where it is."""
    torch.Tensor.type = _type_as_on_cuda  # type: ignore[method-assign]
    torch.Tensor.cuda = _stay_on_cpu  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.Tensor.type = _real_type  # type: ignore[method-assign]
        torch.Tensor.cuda = _real_cuda  # type: ignore[method-assign]


def _as_if_on_cuda(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _cpu_tensors_pass_as_cuda():
            return fn(*args, **kwargs)

    return wrapper


def _cpu_rng_tracker_class() -> type:
    from megatron.core.tensor_parallel import random as mp_random

    class CpuRNGStatesTracker(mp_random.CudaRNGStatesTracker):
        """Named CPU generator states, forked into torch's default CPU generator."""

        def add(self, name: str, seed: int) -> None:
            self._is_initialized = True
            if seed in self.seeds_:
                raise Exception(f"seed {seed} already exists")
            if name in self.states_:
                raise Exception(f"rng state {name} already exists")
            self.seeds_.add(seed)
            self.states_[name] = torch.Generator().manual_seed(seed).get_state()

        @contextlib.contextmanager
        def fork(self, name: str = mp_random._MODEL_PARALLEL_RNG_TRACKER_NAME) -> Iterator[None]:
            if name not in self.states_:
                raise Exception(f"rng state {name} is not added")
            outside = torch.get_rng_state()
            torch.set_rng_state(self.states_[name])
            try:
                yield
            finally:
                self.states_[name] = torch.get_rng_state()
                torch.set_rng_state(outside)

    return CpuRNGStatesTracker


def install() -> None:
    """Patch megatron-core (and torch.cuda's device queries) for a CPU-only process. Idempotent."""
    global _installed
    if _installed:
        return
    from megatron.core.models.common.language_module.language_module import LanguageModule
    from megatron.core.optimizer import optimizer as optimizer_module
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer
    from megatron.core.tensor_parallel import random as mp_random

    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment]
    torch.cuda.synchronize = lambda *args, **kwargs: None  # type: ignore[assignment]
    torch.cuda.empty_cache = lambda: None  # type: ignore[assignment]
    for name in _CUDA_LITERAL_MODULES:
        importlib.import_module(name).torch = _TorchOnCpu()  # type: ignore[attr-defined]
    # Bound by name into the optimizer module, which is where it is called from.
    optimizer_module.clip_grad_by_total_norm_fp32 = _as_if_on_cuda(
        optimizer_module.clip_grad_by_total_norm_fp32
    )
    build = DistributedOptimizer._build_model_and_main_param_groups  # a classmethod, bound
    DistributedOptimizer._build_model_and_main_param_groups = staticmethod(_as_if_on_cuda(build))
    # Moves the tied embedding of the first and last pipeline stages with .cuda() to sum it.
    LanguageModule.setup_embeddings_and_output_layer = _as_if_on_cuda(
        LanguageModule.setup_embeddings_and_output_layer
    )
    mp_random._CUDA_RNG_STATE_TRACKER = _cpu_rng_tracker_class()()
    mp_random._CUDA_RNG_STATE_TRACKER_INITIALIZED = True
    _installed = True
