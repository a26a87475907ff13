"""The backends by `runner.backend` name, each imported only when a run picks it (megatron-core
is heavy, and an FSDP run never needs it), and the run itself around the chosen one.

A backend is a `Trainer` subclass: it builds the model, optimizer and checkpoint format in its
constructor (through `Trainer.set_up_state` for what every backend keeps alike) and implements
`train_step`. Adding one means a module and a line here; the shared loop stays as it is.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from importlib import import_module
from pathlib import Path

import rljob_contract as contract
from rljob_contract import progress
from rljob_contract.in_place import word_wait_seconds

from rljob_trainer import warm
from rljob_trainer.config import ConfigError, TrainerConfig
from rljob_trainer.faults import Faults
from rljob_trainer.gang import Gang, choose_device
from rljob_trainer.place import place_from_env
from rljob_trainer.train import DistEnv, Trainer, init_distributed

log = logging.getLogger(__name__)

BACKENDS: dict[str, str] = {
    "fsdp": "rljob_trainer.fsdp.trainer:FsdpTrainer",
    "megatron": "rljob_trainer.megatron.trainer:MegatronTrainer",
}


# The configuration a run's arguments and environment give (__main__'s parsing).
Reload = Callable[[Sequence[str], Mapping[str, str]], TrainerConfig]


def backend(name: str) -> type[Trainer]:
    module, _, cls = BACKENDS[name].partition(":")
    return getattr(import_module(module), cls)


def run(cfg: TrainerConfig, reload: Reload) -> int:
    """Train with the configured backend in this process's group; the process's exit code.

    The start's phases are logged as they end ("startup: ..."; the checkpoint's load is the
    "resumed from" line), so that where a start's time goes can be read from any run's log
    (benchmarks/first_step.py). In a warm gang (`rljob_trainer.gang`) a run that stopped on
    request may go on in this process as the next attempt (`hold`); `reload` reads the
    configuration of that attempt's arguments and environment."""
    trainer_class = backend(cfg.runner.backend)
    log.info("startup: imports done (torch, the %s backend)", cfg.runner.backend)
    place = place_from_env(os.environ)
    gang = Gang(place) if place is not None else None
    if gang is not None:
        env = join(gang, os.environ.get(contract.ENV_ATTEMPT), cfg.runner.device)
    else:
        env = init_distributed(cfg.runner.device)
    log.info("startup: process group up (%d ranks)", env.world_size)
    try:
        trainer = trainer_class(cfg, env, Faults.from_env())
        log.info("startup: model and optimizer built")
        code = trainer.train()
        while gang is not None and code == contract.EXIT_CHECKPOINTED_ON_REQUEST:
            rejoined = hold(trainer, gang, reload)
            if rejoined is None:
                break
            trainer = rejoined
            code = trainer.train()
        return code
    finally:
        Gang.leave()


def join(gang: Gang, attempt: str | None, device_pref: str) -> DistEnv:
    chosen = choose_device(device_pref)
    gang.join(int(attempt or 0), chosen.backend)
    return DistEnv(gang.place.rank, gang.place.world_size, chosen.device, warm=True)


def why_not_hold(trainer: Trainer, run_file: Path | None) -> str | None:
    if not trainer.can_hold:
        return f"the {trainer.cfg.runner.backend} backend cannot keep its state"
    if trainer.stop.signal_name is not None:
        return f"this rank's own pod was told to go ({trainer.stop.signal_name})"
    if run_file is None or trainer.attempt is None:
        return f"no run file ({contract.ENV_RUN_FILE}) or attempt ({contract.ENV_ATTEMPT})"
    return None


def hold(trainer: Trainer, gang: Gang, reload: Reload) -> Trainer | None:
    """Keep this rank's state of the saved step and wait for the operator's next run; this
    rank's trainer in that run's group, or None where the process ends as the run did."""
    run_file = warm.run_file_from_env(os.environ)
    why = why_not_hold(trainer, run_file)
    if why is not None:
        log.warning("not holding this rank's state: %s", why)
        return None
    assert run_file is not None and trainer.attempt is not None
    step = trainer.train_state.step
    progress.unmark_trained()  # holding is not training
    try:
        warm.record(contract.IN_PLACE_HOLDING_FILE, trainer.attempt, os.environ)
    except OSError as exc:  # the wrapper would stop a trainer it does not know to hold
        log.warning("not holding this rank's state: cannot say so in the pod's state dir (%s)",
                    exc)  # fmt: skip
        return None
    log.warning("holding step %d of attempt %d in memory; waiting for the next run in %s",
                step, trainer.attempt, run_file)  # fmt: skip
    word = warm.wait_for_run(
        run_file,
        trainer.attempt,
        word_wait_seconds(os.environ),
        warm.run_wait_seconds(trainer.cfg.runner.grace_seconds),
        lambda: trainer.stop.signal_name is not None,
    )
    if word is None:
        log.warning("no run named after attempt %d: ending as the run did", trainer.attempt)
        return None
    run_env = dict(os.environ)
    warm.take_env(word, run_env)
    try:  # the run's arguments are the trainer's (torchrun passes them on as they are)
        cfg = reload(word.args or (), run_env)
    except (ConfigError, SystemExit) as exc:  # argparse exits on arguments it cannot parse
        log.warning("attempt %d: its arguments are no configuration (%s); this process ends, a "
                    "new one starts it", word.attempt, exc)  # fmt: skip
        return None
    changed = warm.changed_keys(trainer.cfg, cfg)
    if changed:
        log.warning("attempt %d changes %s: this process ends, a new one starts it",
                    word.attempt, ", ".join(changed))  # fmt: skip
        return None
    try:
        warm.record(contract.IN_PLACE_STARTED_FILE, word.attempt, run_env)
    except OSError as exc:  # the wrapper would start the run again should this process end
        log.warning("attempt %d: cannot record it in the pod's state dir (%s); this process "
                    "ends, a new one starts it", word.attempt, exc)  # fmt: skip
        return None
    warm.take_env(word, os.environ)
    started = time.perf_counter()
    Gang.leave()
    env = join(gang, str(word.attempt), cfg.runner.device)
    rejoined = trainer.rejoined(cfg, env)
    log.warning("warm restart: attempt %d with step %d kept in memory, rejoined in %.2f s (the "
                "wait for the gang's other members included)", word.attempt, step,
                time.perf_counter() - started)  # fmt: skip
    return rejoined
