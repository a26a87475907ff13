"""The word of an in-place restart, as the operator writes it and the pod-side wrapper
(rljob_podside/rljob_in_place.py) reads it: the run annotation's value (names in
rljob_contract)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from rljob_contract import ENV_ATTEMPT, ENV_IN_PLACE_WAIT

DEFAULT_WORD_WAIT_SECONDS = 10.0


@dataclass(frozen=True)
class RunWord:
    """What a pod is to run: `attempt`, with `args` replacing the pod's own arguments and
    `env` set (None: removed); without `args`, stop what runs and wait. `restarts` is the
    operator's own note: the trainer container's restart count when the run was given, so
    that a higher count says the run has ended."""

    attempt: int
    args: tuple[str, ...] | None = None
    env: dict[str, str | None] = field(default_factory=dict)
    restarts: int = 0

    @property
    def runs(self) -> bool:
        return self.args is not None


def format_word(run: RunWord) -> str:
    body: dict[str, object] = {"attempt": run.attempt, "restarts": run.restarts}
    if run.args is not None:
        body.update(args=list(run.args), env=run.env)
    return json.dumps(body, sort_keys=True)


def parse_word(text: str | None) -> RunWord | None:
    """The run a value names; None for an empty, unreadable or malformed one."""
    try:
        body = json.loads(text or "")
    except (ValueError, RecursionError):
        return None
    if not isinstance(body, dict):
        return None
    attempt, restarts = body.get("attempt"), body.get("restarts", 0)
    args, env = body.get("args"), body.get("env") or {}
    if not _count(attempt) or not _count(restarts):
        return None
    if args is not None and not (isinstance(args, list) and all(isinstance(a, str) for a in args)):
        return None
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and k and (v is None or isinstance(v, str)) for k, v in env.items()
    ):
        return None
    return RunWord(attempt, tuple(args) if args is not None else None, dict(env), restarts)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def run_environment(
    base: Mapping[str, str], attempt: int, changes: Mapping[str, str | None]
) -> dict[str, str]:
    """The environment of a run of `attempt`: `base` with the run's `changes` (None: removed),
    as the wrapper starts a new process with it and a warm trainer takes it in its own."""
    env = {name: value for name, value in base.items() if changes.get(name, "") is not None}
    env.update({name: value for name, value in changes.items() if value is not None})
    env[ENV_ATTEMPT] = str(attempt)
    return env


def word_wait_seconds(env: Mapping[str, str]) -> float:
    """How long a run that ended by itself (the wrapper's) or a warm trainer that holds waits
    for the operator's word naming a newer attempt (ENV_IN_PLACE_WAIT; a bad value: the
    default)."""
    try:
        wait = float(env.get(ENV_IN_PLACE_WAIT) or DEFAULT_WORD_WAIT_SECONDS)
    except ValueError:
        return DEFAULT_WORD_WAIT_SECONDS
    return wait if math.isfinite(wait) and wait >= 0 else DEFAULT_WORD_WAIT_SECONDS
