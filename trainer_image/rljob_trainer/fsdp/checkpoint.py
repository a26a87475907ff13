"""FSDP2's checkpoint format (RLinf's FSDP layout plus the manifest):

    global_step_N/
      actor/__<rank>_0.distcp, actor/.metadata   DCP shards: model, optimizer, lr_scheduler,
                                                 train_state, rng (one key per rank)
      actor/model/model.safetensors, config.json the full model, gathered by rank 0
      data/data.pt                               the prompt sampler (same on every rank)
      rljob_manifest.json                        written by rank 0 after every rank finished

With async saving the DCP write and rank 0's extra files run in the background, and the shared
`CheckpointManager` seals the folder once every rank has agreed that its part is on disk.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from rljob_contract.manifest import Manifest
from safetensors.torch import save_file
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.checkpoint.stateful import Stateful

from rljob_trainer.checkpoint import (
    ACTOR_DIR,
    DATA_FILE,
    CheckpointError,
    check_step,
    warn_reseeded,
)
from rljob_trainer.data import PromptSampler
from rljob_trainer.state import RNGState, TrainState

MODEL_DIR = "actor/model"
SAFETENSORS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"


def sealed_files(step: int) -> tuple[str, ...]:
    """An FSDP checkpoint seals its DCP metadata."""
    return (f"{ACTOR_DIR}/.metadata",)


def write_extras(
    folder: Path,
    data_state: Mapping[str, Any],
    full_model: dict[str, torch.Tensor] | None,
    model_config: Mapping[str, Any],
) -> None:
    """Rank 0's files: the sampler state, and the full model as safetensors + config.json."""
    (folder / DATA_FILE).parent.mkdir(parents=True, exist_ok=True)
    torch.save(dict(data_state), folder / DATA_FILE)
    if full_model is not None:
        model_dir = folder / MODEL_DIR
        model_dir.mkdir(parents=True, exist_ok=True)
        save_file(full_model, str(model_dir / SAFETENSORS_NAME), metadata={"format": "pt"})
        (model_dir / CONFIG_NAME).write_text(
            json.dumps(dict(model_config), indent=2, sort_keys=True) + "\n"
        )


class DcpFormat:
    """FSDP2's format: every state through DCP into `actor/`, and rank 0's extra files.

    `states` is the dict handed to DCP (model, optimizer, lr_scheduler, train_state, rng).
    With an executor (async saving), the DCP write runs on a process group of its own, so that
    its collectives do not interleave with the training collectives on the default group.
    """

    def __init__(
        self,
        states: dict[str, Stateful],
        sampler: PromptSampler,
        model: nn.Module,
        model_config: Mapping[str, Any],
        *,
        async_save: bool,
        save_full_model: bool,
    ) -> None:
        self.states = states
        self.sampler = sampler
        self.model = model
        self.model_config = model_config
        self.save_full_model = save_full_model
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.pg = dist.new_group(backend="gloo") if async_save else None

    def sealed_files(self, step: int) -> tuple[str, ...]:
        return sealed_files(step)

    def write(self, folder: Path, step: int, background: ThreadPoolExecutor | None) -> list[Future]:
        full_model = None
        if self.save_full_model:
            options = StateDictOptions(full_state_dict=True, cpu_offload=True)
            gathered = get_model_state_dict(self.model, options=options)
            # Cloned: with one rank the gathered tensors may alias the live parameters.
            full_model = {k: v.detach().clone().contiguous() for k, v in gathered.items()}
        data_state = self.sampler.state_dict()
        if background is None:
            dcp.save(self.states, checkpoint_id=folder / ACTOR_DIR)
            if self.rank == 0:
                write_extras(folder, data_state, full_model, self.model_config)
            return []
        running = [
            dcp.async_save(self.states, checkpoint_id=folder / ACTOR_DIR, process_group=self.pg)
        ]
        if self.rank == 0:
            running.append(
                background.submit(write_extras, folder, data_state, full_model, self.model_config)
            )
        return running

    def read(
        self, folder: Path, manifest: Manifest, allow_world_size_change: bool, collective: bool
    ) -> None:
        states = dict(self.states)
        rng = states["rng"]
        assert isinstance(rng, RNGState)
        if manifest.world_size != self.world_size:
            if not allow_world_size_change:
                raise CheckpointError(
                    f"{folder} was written by {manifest.world_size} ranks and this run has "
                    f"{self.world_size}: the model and optimizer would be re-sharded, but the "
                    "per-rank random state cannot carry over, so the run would not be bit-exact. "
                    "Set runner.allow_world_size_change=true to resume anyway with reseeded "
                    "random state, or run with the original number of ranks."
                )
            del states["rng"]
        dcp.load(states, checkpoint_id=folder / ACTOR_DIR, no_dist=not collective)
        self.sampler.load_state_dict(torch.load(folder / DATA_FILE, weights_only=True))
        train_state = self.states["train_state"]
        assert isinstance(train_state, TrainState)
        check_step(folder, manifest, train_state.step)
        if "rng" not in states:
            warn_reseeded(
                f"world size changed from {manifest.world_size} to {self.world_size}", manifest.step
            )
            rng.reseed(manifest.step)
