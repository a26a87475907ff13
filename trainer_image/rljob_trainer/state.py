"""Everything a checkpoint holds, each as a `Stateful` that DCP saves and loads in one dict.

Model and optimizer go through `torch.distributed.checkpoint.state_dict`, so their shards are
DTensors that DCP can re-shard to another world size. DCP merges the state dicts of all ranks
by key, so the per-rank random state lives under a rank-specific key (`rank_<r>`).
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.checkpoint.stateful import Stateful

_OPTIM_OPTIONS = StateDictOptions(flatten_optimizer_state_dict=True)


class ModelState(Stateful):
    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def state_dict(self) -> dict[str, Any]:
        return get_model_state_dict(self.model)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        set_model_state_dict(self.model, state_dict)


class OptimizerState(Stateful):
    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.model = model
        self.optimizer = optimizer

    def state_dict(self) -> dict[str, Any]:
        return get_optimizer_state_dict(self.model, self.optimizer, options=_OPTIM_OPTIONS)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        set_optimizer_state_dict(self.model, self.optimizer, state_dict, options=_OPTIM_OPTIONS)


class SchedulerState(Stateful):
    def __init__(self, scheduler: torch.optim.lr_scheduler.LRScheduler) -> None:
        self.scheduler = scheduler

    def state_dict(self) -> dict[str, Any]:
        return self.scheduler.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state_dict)


class TrainState(Stateful):
    """The trainer's counters, and the model config the weights belong to (read by convert)."""

    def __init__(self, model_config: dict[str, Any]) -> None:
        self.step = 0
        self.model_config = model_config

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step, "model_config": json.dumps(self.model_config, sort_keys=True)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved = json.loads(state_dict["model_config"])
        if saved != self.model_config:
            changed = sorted(
                k
                for k in set(saved) | set(self.model_config)
                if saved.get(k) != self.model_config.get(k)
            )
            raise ValueError(f"the checkpoint's model differs from this run's in: {changed}")
        self.step = int(state_dict["step"])


def derive_seed(seed: int, rank: int, step: int) -> int:
    """A 63-bit seed for (run seed, rank, step), stable across Python versions and platforms."""
    digest = hashlib.sha256(f"rljob/{seed}/{rank}/{step}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


class RNGState(Stateful):
    """This rank's generators: torch CPU and CUDA, numpy, python `random`, and the sampler's."""

    def __init__(self, rank: int, seed: int, sampling_generator: torch.Generator) -> None:
        self.rank = rank
        self.seed = seed
        self.sampling_generator = sampling_generator

    @property
    def key(self) -> str:
        return f"rank_{self.rank}"

    def reseed(self, step: int) -> None:
        """Seed every generator from (seed, rank, step): a fresh start, or a new world size."""
        derived = derive_seed(self.seed, self.rank, step)
        random.seed(derived)
        np.random.seed(derived % 2**32)
        torch.manual_seed(derived)  # CPU and every CUDA device
        self.sampling_generator.manual_seed(derive_seed(self.seed + 1, self.rank, step))

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "python": random.getstate(),
            "numpy": np.random.get_state(),
            "torch_cpu": torch.get_rng_state(),
            "sampling": self.sampling_generator.get_state(),
        }
        if torch.cuda.is_available():
            state["torch_cuda"] = torch.cuda.get_rng_state_all()
        return {self.key: state}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = state_dict[self.key]
        random.setstate(state["python"])
        np.random.set_state(state["numpy"])
        torch.set_rng_state(state["torch_cpu"])
        self.sampling_generator.set_state(state["sampling"])
        if "torch_cuda" in state:
            torch.cuda.set_rng_state_all(state["torch_cuda"])
