"""The Megatron backend's checkpoint: megatron-core dist_checkpointing (torch_dist) in RLinf's
Megatron arrangement, sealed by the rljob manifest like every rljob checkpoint.

    global_step_N/
      actor/iter_{N:07d}/          dist_checkpointing: __<rank>_<i>.distcp and .metadata (DCP),
                                   common.pt (rank 0's plain objects), metadata.json (last)
        model                      GPTModel's sharded state dict (layers stacked, TP-split)
        optimizer                  Adam moments; the distributed optimizer's as `dp_reshardable`
        rng_state                  one ShardedObject per rank: CPU/CUDA/numpy/python generators,
                                   the sampling generator and megatron's RNG tracker states
        opt_param_scheduler, train_state, parallel   common: LR schedule, step and model
                                   config, the TP x PP x DP shape that wrote it
      actor/latest_checkpointed_iteration.txt        "N", once every rank's shards are on disk
      data/data.pt                 the prompt sampler
      rljob_manifest.json          written last by the checkpoint manager

Resuming with another shape follows `shape.resume_refusal`: what dist_checkpointing can
re-shard, with `runner.allow_world_size_change` (reseeded random state, no longer bit-exact);
anything else is refused with both shapes named.
"""

from __future__ import annotations

import multiprocessing
import signal
from concurrent.futures import Future, ThreadPoolExecutor
from multiprocessing.managers import SyncManager
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from megatron.core import dist_checkpointing, tensor_parallel
from megatron.core.dist_checkpointing.mapping import ShardedObject
from rljob_contract.manifest import Manifest

from rljob_trainer.checkpoint import (
    ACTOR_DIR,
    DATA_FILE,
    CheckpointError,
    check_step,
    warn_reseeded,
)
from rljob_trainer.data import PromptSampler
from rljob_trainer.megatron.shape import ParallelShape, resume_refusal
from rljob_trainer.state import RNGState, TrainState

TRACKER = "latest_checkpointed_iteration.txt"
# The only sharding of the distributed optimizer's state that loads without Apex or
# Transformer Engine.
OPTIMIZER_METADATA = {"distrib_optim_sharding_type": "dp_reshardable"}


def iteration_dir(step: int) -> str:
    return f"{ACTOR_DIR}/iter_{step:07d}"


def sealed_files(step: int) -> tuple[str, ...]:
    """What a Megatron checkpoint's manifest must list: its tracker and its finalized save."""
    return (f"{ACTOR_DIR}/{TRACKER}", f"{iteration_dir(step)}/metadata.json")


def start_writer_queue() -> SyncManager:
    """Start, ignoring SIGTERM, the process that megatron's checkpoint writer reports through.

    megatron spawns it (a multiprocessing Manager) at the first save. On SIGTERM torchrun
    signals each worker's whole process group, which holds that process too: it would die
    before the save the trainer makes on stop, and the save would fail with a broken pipe.
    Started here, it lives until the trainer exits (when its manager shuts it down).
    """
    from megatron.core.dist_checkpointing.strategies import filesystem_async

    manager = SyncManager(ctx=multiprocessing.get_context("spawn"))
    manager.start(signal.signal, (signal.SIGTERM, signal.SIG_IGN))
    filesystem_async._results_queue = manager.Queue()
    return manager


class MegatronFormat:
    """Writes and reads a `global_step_N` folder for the Megatron backend (every rank)."""

    def __init__(
        self,
        model: Any,  # megatron's DistributedDataParallel around the GPTModel
        optimizer: Any,  # megatron's (chained) optimizer
        scheduler: Any,  # OptimizerParamScheduler
        train_state: TrainState,
        rng: RNGState,
        sampler: PromptSampler,
        shape: ParallelShape,
        *,
        distributed_optimizer: bool,
        seed: int,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.train_state = train_state
        self.rng = rng
        self.sampler = sampler
        self.shape = shape
        self.distributed_optimizer = distributed_optimizer
        self.seed = seed
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self._writer_queue = start_writer_queue()

    def sealed_files(self, step: int) -> tuple[str, ...]:
        return sealed_files(step)

    # -------------------------------------------------------------------------------- write
    def write(self, folder: Path, step: int, background: ThreadPoolExecutor | None) -> list[Future]:
        assert background is None, "Megatron checkpoints are written synchronously"
        iteration = folder / iteration_dir(step)
        if self.rank == 0:
            iteration.mkdir(parents=True)
        dist.barrier()
        dist_checkpointing.save(self._sharded_state_dict(is_loading=False), str(iteration))
        dist.barrier()  # every rank's shards are on disk before the tracker says so
        if self.rank == 0:
            (folder / ACTOR_DIR / TRACKER).write_text(f"{step}\n")
            (folder / DATA_FILE).parent.mkdir(parents=True, exist_ok=True)
            torch.save(self.sampler.state_dict(), folder / DATA_FILE)
        return []

    # --------------------------------------------------------------------------------- read
    def read(
        self, folder: Path, manifest: Manifest, allow_world_size_change: bool, collective: bool
    ) -> None:
        """megatron's load is collective: a Megatron rank never holds its state (can_hold), so
        no rank of its gang reads alone."""
        if not collective:
            raise CheckpointError("a megatron checkpoint is loaded by every rank together")
        iteration = str(folder / iteration_dir(manifest.step))
        common = dist_checkpointing.load_common_state_dict(iteration)
        saved = ParallelShape.from_dict(common["parallel"])
        refusal = resume_refusal(
            saved,
            self.shape,
            distributed_optimizer=self.distributed_optimizer,
            allow_world_size_change=allow_world_size_change,
        )
        if refusal is not None:
            raise CheckpointError(f"refusing to resume from {folder}: {refusal}")
        same_shape = saved == self.shape
        self._init_optimizer_state()
        state = dist_checkpointing.load(
            self._sharded_state_dict(is_loading=True, with_rng=same_shape), iteration
        )
        self.model.module.load_state_dict(state["model"])
        with torch.no_grad():
            self.optimizer.load_state_dict(state["optimizer"])
        self.train_state.load_state_dict(state["train_state"])
        check_step(folder, manifest, self.train_state.step)
        self._restore_adam_steps(int(state["optimizer_steps"]))
        self.scheduler.load_state_dict(state["opt_param_scheduler"])
        self.sampler.load_state_dict(torch.load(folder / DATA_FILE, weights_only=True))
        if same_shape:
            saved_rng = state["rng_state"]
            self.rng.load_state_dict({self.rng.key: saved_rng["generators"]})
            tensor_parallel.get_cuda_rng_tracker().set_states(saved_rng["tracker"])
        else:
            warn_reseeded(f"the parallel shape changed from {saved} to {self.shape}", manifest.step)
            tensor_parallel.model_parallel_cuda_manual_seed(self.seed + manifest.step)
            self.rng.reseed(manifest.step)

    # ------------------------------------------------------------------------------ helpers
    def _sharded_state_dict(self, is_loading: bool, with_rng: bool = True) -> dict[str, Any]:
        model_state = self.model.module.sharded_state_dict()
        state: dict[str, Any] = {
            "model": model_state,
            "optimizer": self.optimizer.sharded_state_dict(
                model_state, is_loading=is_loading, metadata=OPTIMIZER_METADATA
            ),
            "optimizer_steps": self._adam_step_count(),
            "opt_param_scheduler": self.scheduler.state_dict(),
            "train_state": self.train_state.state_dict(),
            "parallel": self.shape.to_dict(),
        }
        if with_rng:
            generators = {
                "generators": self.rng.state_dict()[self.rng.key],
                "tracker": tensor_parallel.get_cuda_rng_tracker().get_states(),
            }
            state["rng_state"] = ShardedObject(
                "rng_state", generators, (self.world_size,), (self.rank,), replica_id=0
            )
        return state

    def _inner_optimizers(self) -> list[Any]:
        return list(getattr(self.optimizer, "chained_optimizers", [self.optimizer]))

    def _init_optimizer_state(self) -> None:
        """Adam's state exists only after a first update, and megatron's loading reads it
        (moments and `step`): allocate it as zeros for the checkpoint to overwrite."""
        for inner in self._inner_optimizers():
            for group in inner.optimizer.param_groups:
                for param in group["params"]:
                    state = inner.optimizer.state[param]
                    if not state:
                        state["step"] = torch.tensor(0.0)
                        state["exp_avg"] = torch.zeros_like(param.data)
                        state["exp_avg_sq"] = torch.zeros_like(param.data)

    def _adam_step_count(self) -> int:
        """How many updates torch's Adam has counted (the same for every parameter)."""
        for inner in self._inner_optimizers():
            for param_state in inner.optimizer.state.values():
                if "step" in param_state:
                    return int(param_state["step"])
        return 0

    def _restore_adam_steps(self, steps: int) -> None:
        """Give every parameter its own `step` tensor again: after megatron's load they may
        share one stale tensor, and Adam's bias correction would drift."""
        for inner in self._inner_optimizers():
            for param_state in inner.optimizer.state.values():
                param_state["step"] = torch.tensor(float(steps))
