"""What the operator keeps of a job's boost from one pass to the next.

A write the API server refuses (no RBAC for it, no Workload API, Kueue's webhook) is not
tried again at every pass: the operator keeps the refusal and tries again after a back-off
that doubles up to an hour, while the PriorityBoost condition says why. The checkpoint folder
is read at most once per job and minIntervalSeconds (and again when a new attempt runs), so
the read is kept for the passes in between. status.priorityBoost records a boost only once
the Workload carries it: the operator keeps the basis of a write the API server took, and the
next pass records it where the Workload still carries that boost.

The reconciler keeps this memory (run.Reconciler), beside the specs it checked: the watch
cache holds only what the watches deliver.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from ...api.spec import PriorityBoostSpec
from ...api.status import BoostBasis
from ...launcher.identity import JobRef
from .pricing import Saved

REFUSAL_BACKOFF_SECONDS = 60.0  # after the first refused write; doubling up to the next
MAX_REFUSAL_BACKOFF_SECONDS = 3600.0


@dataclass(frozen=True)
class Refusal:
    """The API server refused the job's last boost write(s): when, how often in a row, why."""

    at: datetime
    count: int
    why: str

    def retry_at(self) -> datetime:
        backoff = REFUSAL_BACKOFF_SECONDS * 2 ** min(self.count - 1, 16)
        return self.at + timedelta(seconds=min(backoff, MAX_REFUSAL_BACKOFF_SECONDS))


@dataclass(frozen=True)
class SavedRead:
    """What a pass read from the job's checkpoint folder for the boost, kept for the next."""

    attempt: int
    at: datetime
    saved: Saved

    def fresh(self, attempt: int, now: datetime, policy: PriorityBoostSpec) -> bool:
        age = (now - self.at).total_seconds()
        return attempt == self.attempt and 0 <= age < policy.min_interval_seconds


@dataclass(frozen=True)
class Remembered:
    """What the operator keeps of one job's boost (of the job with `uid`): a refused write
    that waits out its back-off, the checkpoint folder's last read, and the basis of the last
    write the API server took."""

    uid: str
    refusal: Refusal | None = None
    read: SavedRead | None = None
    accepted: BoostBasis | None = None


class BoostMemory:
    """Each job's Remembered by namespace and name, for the uid it was kept for: a job deleted
    and made again under its name starts with a clean memory, even where no pass saw it gone.
    A job's entry is read and written only by the job's own passes, which the work queue runs
    one at a time, so no lock is needed (as for the reconciler's checked specs)."""

    def __init__(self) -> None:
        self._jobs: dict[tuple[str, str], Remembered] = {}  # (namespace, name) -> its memory

    def recall(self, job: JobRef) -> Remembered:
        kept = self._jobs.get((job.namespace, job.name))
        return kept if kept is not None and kept.uid == job.uid else Remembered(job.uid)

    def keep_refusal(self, job: JobRef, refusal: Refusal | None) -> None:
        """Keep the job's refused boost writes (None: its last write went through)."""
        self._keep(job, replace(self.recall(job), refusal=refusal))

    def keep_read(self, job: JobRef, read: SavedRead) -> None:
        self._keep(job, replace(self.recall(job), read=read))

    def keep_accepted(self, job: JobRef, basis: BoostBasis) -> None:
        """The API server took a boost write of the job's: its basis, for the job's status."""
        self._keep(job, replace(self.recall(job), accepted=basis))

    def forget(self, namespace: str, name: str) -> None:
        """The job is gone: its memory goes with it."""
        self._jobs.pop((namespace, name), None)

    def _keep(self, job: JobRef, remembered: Remembered) -> None:
        self._jobs[(job.namespace, job.name)] = remembered
