"""The backends by `runner.backend` name, each imported only when a run picks it (megatron-core
is heavy, and an FSDP run never needs it), and the run itself around the chosen one.

A backend is a `Trainer` subclass: it builds the model, optimizer and checkpoint format in its
constructor (through `Trainer.set_up_state` for what every backend keeps alike) and implements
`train_step`. Adding one means a module and a line here; the shared loop stays as it is.
"""

from __future__ import annotations

import logging
from importlib import import_module

import torch.distributed as dist

from rljob_trainer.config import TrainerConfig
from rljob_trainer.faults import Faults
from rljob_trainer.train import Trainer, init_distributed

log = logging.getLogger(__name__)

BACKENDS: dict[str, str] = {
    "fsdp": "rljob_trainer.fsdp.trainer:FsdpTrainer",
    "megatron": "rljob_trainer.megatron.trainer:MegatronTrainer",
}


def backend(name: str) -> type[Trainer]:
    module, _, cls = BACKENDS[name].partition(":")
    return getattr(import_module(module), cls)


def run(cfg: TrainerConfig) -> int:
    """Train with the configured backend in this process's group; the process's exit code.

    The start's phases are logged as they end ("startup: ..."; the checkpoint's load is the
    "resumed from" line), so that where a start's time goes can be read from any run's log
    (benchmarks/first_step.py)."""
    trainer_class = backend(cfg.runner.backend)
    log.info("startup: imports done (torch, the %s backend)", cfg.runner.backend)
    env = init_distributed(cfg.runner.device)
    log.info("startup: process group up (%d ranks)", env.world_size)
    try:
        trainer = trainer_class(cfg, env, Faults.from_env())
        log.info("startup: model and optimizer built")
        return trainer.train()
    finally:
        dist.destroy_process_group()
