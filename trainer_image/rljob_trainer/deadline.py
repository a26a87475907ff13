"""What to do on a notice (SIGTERM or the checkpoint request) so that a save meets its deadline.

The deadline is the pod's grace period after the notice, or sooner where the checkpoint
request says when the node goes (a cloud's termination notice, which the operator reads).

Pure functions of the clock, the deadline and the trainer's own measurements: no torch, no
process group. The loop asks at every token of a rollout and at every step boundary; the ranks
then agree on the largest decision (`Decision` is ordered), so that one rank short of time is
enough for all of them.

A GRPO step changes no model, optimizer or sampler state until its update: during the rollout
the loop can rewind to the end of the last finished step (the sampler position and the random
generators of the step's start) and save that, instead of finishing a step that would end too
late. The update phase is short and cannot be rewound: it is finished, then saved.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Mapping
from dataclasses import dataclass

# torchrun's own variable: how long it waits for its workers after forwarding SIGTERM before it
# SIGKILLs them (the operator sets it from the grace period).
ENV_TORCHRUN_SHUTDOWN_TIMEOUT = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"
# Part of the budget kept for leaving: sealing, the last barrier, the process group's teardown.
EXIT_SHARE = 0.1
MIN_EXIT_SECONDS = 1.0


class Decision(enum.IntEnum):
    """Ordered by urgency: the ranks agree on the largest one any of them takes."""

    GO_ON = 0
    """No notice, or the current step can still end and be saved in time: save at its end."""
    SAVE = 1
    """Save the state of the last finished step now (rewinding the step's rollout first)."""
    SKIP = 2
    """The newest checkpoint is already of the last finished step: exit at once."""
    NO_TIME = 3
    """Not even a save of the last finished step fits before the deadline: exit at once."""


class Phase(enum.Enum):
    ROLLOUT = "rollout"
    """Inside the rollout: nothing saved has changed since the last finished step."""
    BOUNDARY = "boundary"
    """A step (and its update) just ended: the live state is of the last finished step."""


@dataclass(frozen=True)
class Situation:
    """What one rank knows when it decides; times in seconds on one monotonic clock."""

    now: float
    deadline: float | None
    """When the save must be sealed; None where no grace period is known (never short)."""
    phase: Phase
    step_rest: float | None
    """ROLLOUT: the seconds the current step still needs (`rest_of_step`); None if unknown."""
    save_seconds: float | None
    """How long this attempt's saves took; None before its first save."""
    last_finished: int
    newest_saved: int | None
    """The step of the newest checkpoint (saved or being saved), or the step this attempt
    started from; a fresh start counts as saved at step 0."""


def decide(s: Situation) -> Decision:
    """The decision of one rank that has a notice.

    In the rollout: go on only if the rest of the step and a save both fit, both measured; any
    doubt rewinds, which costs at most the part of one step done so far, while a step that ends
    too late loses every step since the last save. Then (or at a boundary): nothing to do if
    that step is saved already; save unless the measured save time is known not to fit.
    """
    if s.deadline is None:
        return Decision.GO_ON if s.phase is Phase.ROLLOUT else _save_or_skip(s, fits=True)
    left = s.deadline - s.now
    if s.phase is Phase.ROLLOUT:
        known = s.step_rest is not None and s.save_seconds is not None
        if known and s.step_rest + s.save_seconds <= left:  # type: ignore[operator]
            return Decision.GO_ON
    return _save_or_skip(s, fits=s.save_seconds is None or s.save_seconds <= left)


def _save_or_skip(s: Situation, fits: bool) -> Decision:
    if s.newest_saved == s.last_finished:
        return Decision.SKIP
    return Decision.SAVE if fits else Decision.NO_TIME


def rest_of_step(
    rollout_elapsed: float,
    tokens_done: int,
    tokens_total: int,
    rollout_seconds: float | None,
    update_seconds: float | None,
) -> float | None:
    """Seconds the current step still needs: the rest of its rollout at the pace of its own
    tokens so far (a slow step shows there, where a mean over earlier steps would miss it;
    before its first token, the measured length of a rollout), plus the measured length of the
    update phase. None while a needed measurement is missing."""
    if update_seconds is None:
        return None
    if tokens_done <= 0:
        if rollout_seconds is None:
            return None
        return max(rollout_seconds - rollout_elapsed, 0.0) + update_seconds
    per_token = rollout_elapsed / tokens_done
    return per_token * max(tokens_total - tokens_done, 0) + update_seconds


def notice_budget(grace_seconds: float | None, env: Mapping[str, str]) -> float | None:
    """Seconds from a notice until the trainer must be done: the grace period, or torchrun's
    shutdown timeout if that is shorter (it SIGKILLs the workers then), less a share for
    leaving. None where no grace period is known."""
    if grace_seconds is None:
        return None
    budget = grace_seconds
    torchrun = env.get(ENV_TORCHRUN_SHUTDOWN_TIMEOUT)
    if torchrun:
        with contextlib.suppress(ValueError):  # torchrun refuses it itself
            budget = min(budget, float(torchrun))
    return max(budget - _exit_share(budget), 0.0)


def notice_deadline(
    noticed_at: float,
    budget: float | None,
    node_ends_at: float | None,
    node_told_at: float | None = None,
) -> float | None:
    """When the save must be sealed: `budget` after the notice, or, where the checkpoint
    request says when the node goes (`node_ends_at`, on the same clock), before that less a
    share for leaving, whichever is first. None where neither is known.

    The share is of the time from when that deadline was read (`node_told_at`), not from the
    first notice: a request written again with a sooner deadline, long after a warning, leaves
    a tenth of what is left for leaving, not a tenth of the time since the warning, which could
    be more than is left."""
    ends = []
    if budget is not None:
        ends.append(noticed_at + budget)
    if node_ends_at is not None:
        told = noticed_at if node_told_at is None else max(noticed_at, node_told_at)
        ends.append(node_ends_at - _exit_share(max(node_ends_at - told, 0.0)))
    return min(ends, default=None)


def _exit_share(seconds: float) -> float:
    return max(MIN_EXIT_SECONDS, EXIT_SHARE * seconds)


def describe(decision: Decision, step: int, newest_saved: int | None, seconds: float) -> str:
    """The termination message's detail, for the operator's recovery record."""
    if decision is Decision.SKIP:
        return f"skipped: step {step} already saved" if step else "skipped: no step finished yet"
    if decision is Decision.NO_TIME:
        return f"no time: last save is step {newest_saved or 0}"
    return f"saved at step {step} in {seconds:.1f} s"
