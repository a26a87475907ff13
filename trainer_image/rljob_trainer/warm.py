"""A warm restart: a rank whose pod stays keeps its process and its state for the next attempt.

When a gang stops on request (a peer's notice, or the operator's word naming a newer attempt),
every rank saves the last finished step with the others and ends its run. A rank of a warm gang
(`rljob_trainer.gang`) whose own pod was not told to go then holds: its model, optimizer,
sampler and random state are the saved step's, bit for bit. It leaves the group and waits for
the operator's word in the run file (`rljob_contract.in_place`): a run of a newer attempt, whose
environment (the resume switch, the attempt) it takes, and whose group it joins in the same
process (`Trainer.rejoined`): no interpreter, no imports, no model initialisation, no load of
its own shard; the new member of a lost rank loads its shard from the checkpoint. Where it
cannot (no word in time, the pod told to go meanwhile, a run whose configuration differs, a
backend that cannot), the process ends as the run did, and the in-place restart (a new process
in the same pod) or a recreated gang takes over.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

import rljob_contract as contract
from rljob_contract.in_place import RunWord, parse_word, run_environment

from rljob_trainer.config import TrainerConfig

log = logging.getLogger(__name__)

POLL_SECONDS = 0.2
# Once a newer attempt is named, the operator keeps this pod: it names the run when every old
# run has ended and the lost ranks' pods exist, which takes a look for the checkpoint and a pod
# creation; it replaces a kept pod whose run has not come back within its grace period and 15 s.
RUN_WAIT_MARGIN_SECONDS = 15.0
DEFAULT_GRACE_SECONDS = 30.0  # Kubernetes' default terminationGracePeriodSeconds


def run_wait_seconds(grace_seconds: float | None) -> float:
    """How long a held rank waits for its run once a newer attempt is named."""
    return (grace_seconds or DEFAULT_GRACE_SECONDS) + RUN_WAIT_MARGIN_SECONDS


# What a run may change of a held rank's configuration: where it resumes from.
MAY_CHANGE = frozenset({"runner.resume_dir", "runner.auto_resume"})


def run_file_from_env(env: MutableMapping[str, str]) -> Path | None:
    path = env.get(contract.ENV_RUN_FILE)
    return Path(path) if path else None


def read_word(run_file: Path) -> RunWord | None:
    try:
        return parse_word(run_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None  # not projected yet


def newer_attempt_named(run_file: Path | None, attempt: int | None) -> int | None:
    """The attempt the run file names if it is newer than `attempt`: a stop of this run."""
    if run_file is None or attempt is None:
        return None
    word = read_word(run_file)
    return word.attempt if word is not None and word.attempt > attempt else None


def wait_for_run(
    run_file: Path,
    ended: int,
    word_wait: float,
    run_wait: float,
    told_to_go: Callable[[], bool],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> RunWord | None:
    """The run of an attempt newer than `ended` that the run file names; None when the pod is
    told to go, when no newer attempt is named within `word_wait` s (nothing was lost: the run
    ends as it did), or when a named attempt's run does not come within `run_wait` s of it."""
    deadline = clock() + word_wait
    named: int | None = None
    while not told_to_go():
        word = read_word(run_file)
        if word is not None and word.attempt > ended:
            if word.runs:
                return word
            if named != word.attempt:  # a stop: this pod stays, its run comes later
                named = word.attempt
                deadline = max(deadline, clock() + run_wait)
        if clock() >= deadline:
            return None
        sleep(POLL_SECONDS)
    return None


def record(name: str, attempt: int, env: MutableMapping[str, str]) -> None:
    """Tell the pod-side wrapper, in the state dir it keeps, which attempt this process holds
    (IN_PLACE_HOLDING_FILE: so that it does not stop it) or has taken (IN_PLACE_STARTED_FILE:
    so that it starts no run of its own for it should this process end)."""
    folder = env.get(contract.ENV_IN_PLACE_STATE_DIR)
    if not folder:
        return
    path = Path(folder) / name
    part = path.with_name(f".{path.name}.trainer")
    part.write_text(f"{attempt}\n", encoding="utf-8")
    part.replace(path)


def take_env(word: RunWord, env: MutableMapping[str, str]) -> None:
    """The run's environment, as a new process of it would have it."""
    taken = run_environment(env, word.attempt, word.env)
    for name in set(env) - set(taken):
        del env[name]
    env.update(taken)


def changed_keys(held: TrainerConfig, run: TrainerConfig) -> list[str]:
    """The dotted keys whose values the run changes, other than those a run may change."""
    old, new = _flat(held.to_dict()), _flat(run.to_dict())
    return sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k) and
                  k not in MAY_CHANGE)  # fmt: skip


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
