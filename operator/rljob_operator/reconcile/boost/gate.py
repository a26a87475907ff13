"""The boost's one gate: the guards between a job and a write of its boost, in their order,
and the pass's look through them.

A pass goes through the gate twice: observe asks whether a write could follow, so that the
job's checkpoint folder is read only where it is worth it; decide asks whether to write. Both
ask the same guards in the same order, here. The folder is read at most once per job and
minIntervalSeconds (the policy's, at least the operator's floor), and again when a new
attempt runs: a write can come no more often, and a pass comes at every resync and pod event.
The look lives beside the gate so that a pass of a job without a boost asks one question of
one file and moves on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, Protocol, TypeGuard

from ...api.reasons import Phase
from ...api.spec import JobSpec, SpecError
from ...api.status import JobStatus
from ...launcher.identity import JobRef
from ...runtime.cache import KueueView
from ..settings import Settings
from .bounds import floored
from .facts import BoostFacts
from .guards import not_owned
from .memory import BoostMemory, Refusal, SavedRead
from .pricing import Saved


class Guard(Enum):
    """A guard that keeps the boost from being written, in the order the gate asks them."""

    NOT_ALLOWED = "the operator allows no boost"
    BACKING_OFF = "a refused write waits out its back-off"
    NO_WORKLOAD = "the attempt's Kueue Workload is not in the cache"
    NOT_OWNED = "the attempt's pods do not own that Workload"


def wants_boost(
    spec: JobSpec | SpecError, queue: str | None, status: JobStatus
) -> TypeGuard[JobSpec]:
    """The guard before anything is read: the job's spec holds, its boost is on, it is in a
    Kueue queue, and its attempt runs (a pending one has nothing at risk)."""
    if isinstance(spec, SpecError):
        return False
    running = status.phase == Phase.RUNNING
    return spec.queueing.priority_boost.enabled and bool(queue) and running


def closed_by(
    settings: Settings, refusal: Refusal | None, workload: dict[str, Any] | None,
    foreign: str | None, now: datetime,
) -> Guard | None:  # fmt: skip
    """The first guard that keeps a job that wants a boost from a write now; None where the
    gate is open. `workload`: the attempt's Kueue Workload; `foreign`: why it is not the
    job's (guards.not_owned)."""
    if settings.max_priority_boost <= 0:
        return Guard.NOT_ALLOWED
    if refusal is not None and refusal.retry_at() > now:
        return Guard.BACKING_OFF
    if workload is None:
        return Guard.NO_WORKLOAD
    if foreign is not None:
        return Guard.NOT_OWNED
    return None


class FolderReader(Protocol):
    """Reads the job's checkpoint folder for the boost
    (reconcile.lookup.finder.CheckpointFinder)."""

    def saved(self, spec: JobSpec) -> Saved | None: ...


@dataclass(frozen=True)
class BoostReads:
    """What the boost reads beside the cache: the operator's memory of each job's boost and
    the jobs' checkpoint folders. A pass reads through them into its snapshot (`facts`) and
    writes nothing; what it read is kept after (`keep`), so that the snapshot is taken once
    and its taking changes nothing."""

    memory: BoostMemory
    folder: FolderReader

    def facts(
        self, kueue: KueueView, job: JobRef, spec: JobSpec, attempt: int,
        trainers: Sequence[dict[str, Any]], settings: Settings, now: datetime,
    ) -> BoostFacts:  # fmt: skip
        """What the boost of a job that wants one (`wants_boost`) reads, for its `attempt`
        and the attempt's pods among its `trainers`. The checkpoint folder is read only
        through an open gate, where the last read is older than the policy's interval (at
        least the operator's floor) or of another attempt."""
        workload = kueue.workload
        kept = self.memory.recall(job)
        refusal, read = kept.refusal, kept.read
        policy = floored(spec.queueing.priority_boost, settings)
        foreign = None if workload is None else not_owned(workload, trainers, attempt)
        writable = closed_by(settings, refusal, workload, foreign, now) is None
        if writable and (read is None or not read.fresh(attempt, now, policy)):
            saved = self.folder.saved(spec)
            read = SavedRead(attempt, now, saved) if saved is not None else None
        return BoostFacts(attempt, workload, kueue.classes, refusal, read if writable else None,
                          kueue.classes_unknown, kept.accepted)  # fmt: skip

    def keep(self, job: JobRef, facts: BoostFacts | None) -> None:
        """Keep the folder's read a pass's snapshot holds, for the passes of the interval
        after it (one kept already is kept again, unchanged)."""
        if facts is not None and facts.saved is not None:
            self.memory.keep_read(job, facts.saved)
