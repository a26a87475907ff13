"""A look at the checkpoint directory that fails (an inspector pod that crashes or never
ends, a volume that cannot be read) is retried after a doubling back-off, and never taken
for "no checkpoint": the checkpoints may be there. From the third failure in a row the
job says so in a condition."""

from __future__ import annotations

from datetime import timedelta

from ...api.reasons import ConditionType, EventType, Phase, Reason
from ...api.status import CheckpointLookup, find_condition
from ...api.timestamps import iso, parse_iso
from ..plan import Pass

LOOKUP_BACKOFF_SECONDS = 5
MAX_LOOKUP_BACKOFF_SECONDS = 300
LOOKUP_FAILURES_BEFORE_CONDITION = 3


def lookup_backing_off(p: Pass) -> bool:
    """Whether the last failed lookup's back-off still runs (then come back when it ends)."""
    last = p.status.checkpoint_lookup
    if last and last.retry_after and p.now < parse_iso(last.retry_after):
        p.requeue((parse_iso(last.retry_after) - p.now).total_seconds())
        return True
    return False


def lookup_failed(p: Pass, message: str) -> None:
    last = p.status.checkpoint_lookup
    failures = (last.failures if last else 0) + 1
    delay = min(LOOKUP_BACKOFF_SECONDS * 2 ** (failures - 1), MAX_LOOKUP_BACKOFF_SECONDS)
    record = CheckpointLookup(failures, message, iso(p.now + timedelta(seconds=delay)))
    p.update(checkpoint_lookup=record)
    p.event(EventType.WARNING, Reason.CHECKPOINT_LOOKUP_FAILED,
            f"{message} (failure {failures}; next try in {delay}s)")  # fmt: skip
    if not p.status.phase:
        p.phase(Phase.PENDING, Reason.CHECKPOINT_LOOKUP_FAILED,
                f"looking for a checkpoint failed: {message}")  # fmt: skip
    if failures >= LOOKUP_FAILURES_BEFORE_CONDITION:
        why = f"{failures} checkpoint lookups in a row failed; the last: {message}"
        p.condition(ConditionType.CHECKPOINT_LOOKUP_FAILED, True, Reason.LOOKUP_FAILED, why)
    p.requeue(delay)


def lookup_succeeded(p: Pass) -> None:
    p.update(checkpoint_lookup=None)
    if find_condition(p.status.conditions, ConditionType.CHECKPOINT_LOOKUP_FAILED):
        p.condition(ConditionType.CHECKPOINT_LOOKUP_FAILED, False, Reason.LOOKUP_SUCCEEDED,
                    "the checkpoint directory was read")  # fmt: skip
