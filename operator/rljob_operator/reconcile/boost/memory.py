"""What the operator keeps of a job's boost from one pass to the next.

A write the API server refuses (no RBAC for it, no Workload API, Kueue's webhook) is not
tried again at every pass: the operator keeps the refusal and tries again after a back-off
that doubles up to an hour, while the PriorityBoost condition says why. The checkpoint folder
is read at most once per job and minIntervalSeconds (and again when a new attempt runs), so
the read is kept for the passes in between. status.priorityBoost records a boost only once
the Workload carries it: the operator keeps the basis of a write the API server took, and the
next pass records it where the Workload still carries that boost.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from ...api.spec import PriorityBoostSpec
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
