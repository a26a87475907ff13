"""Goodput: where a job's wall time went, and its effective-training-time ratio (ETTR).

The time between two updates goes to the bucket of the phase the job was in:
- running: phase Running;
- recovering: from detecting an attempt's end until its next gang runs (phase Restarting,
  a failure's back-off aside);
- waiting: Pending, a failure's back-off, Suspended.

ETTR = (running - lost steps x the trainer's step time) / wall, the wall running from the
job's creation. Steps are lost when a new gang resumes from a checkpoint older than the
last finished step; their time is known where the trainer writes its step time to
progress.json (rljob's own trainer does).

The operator brings the figures up to date only when it writes the job's status anyway (a
phase change, a recovery), never on a timer: a timer would write every job's status over
and over, and the operator's API traffic would grow with the number of jobs. `asOf` says
when they were last brought up to date; `current` extends them to any later moment, for the
Prometheus gauge and for reports.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from ..api.reasons import TERMINAL_PHASES, Phase
from ..api.status import JobStatus
from ..api.timestamps import iso_precise, parse_iso

RUNNING, RECOVERING, WAITING = "running", "recovering", "waiting"


@dataclass(frozen=True)
class Goodput:
    since: datetime  # the job's creation (or when an older operator's job was first accounted)
    as_of: datetime
    running: float = 0.0
    recovering: float = 0.0
    waiting: float = 0.0
    lost_steps: int = 0
    lost_seconds: float = 0.0  # lost steps whose step time is known, times that step time

    @property
    def wall(self) -> float:
        return max(0.0, (self.as_of - self.since).total_seconds())

    @property
    def ettr(self) -> float | None:
        """Productive training time over wall time; None before any time has passed."""
        if self.wall <= 0:
            return None
        return max(0.0, self.running - self.lost_seconds) / self.wall

    def advanced(self, bucket: str | None, now: datetime) -> Goodput:
        """The figures at `now`, the time since `as_of` spent in `bucket`; None means the job
        has finished, and its clock stopped."""
        elapsed = (now - self.as_of).total_seconds()
        if bucket is None or elapsed <= 0:
            return self
        return replace(self, as_of=now, **{bucket: getattr(self, bucket) + elapsed})

    def with_lost(self, steps: int, seconds: float | None) -> Goodput:
        return replace(
            self,
            lost_steps=self.lost_steps + steps,
            lost_seconds=self.lost_seconds + (seconds or 0.0),
        )

    def to_dict(self) -> dict[str, Any]:
        ettr = self.ettr
        return {
            "since": iso_precise(self.since),
            "asOf": iso_precise(self.as_of),
            "wallSeconds": round(self.wall, 1),
            "runningSeconds": round(self.running, 1),
            "recoveringSeconds": round(self.recovering, 1),
            "waitingSeconds": round(self.waiting, 1),
            "lostSteps": self.lost_steps,
            "lostSeconds": round(self.lost_seconds, 1),
            **({"ettr": round(ettr, 4)} if ettr is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Goodput:
        return cls(
            since=parse_iso(data["since"]),
            as_of=parse_iso(data["asOf"]),
            running=float(data.get("runningSeconds", 0)),
            recovering=float(data.get("recoveringSeconds", 0)),
            waiting=float(data.get("waitingSeconds", 0)),
            lost_steps=int(data.get("lostSteps", 0)),
            lost_seconds=float(data.get("lostSeconds", 0)),
        )


def bucket_of(status: JobStatus) -> str | None:
    """Where the time goes while the job has this status; None once it has finished."""
    phase = status.phase
    if phase in TERMINAL_PHASES:
        return None
    if phase == Phase.RUNNING:
        return RUNNING
    if phase == Phase.RESTARTING and not status.restart_after:
        return RECOVERING
    return WAITING


def stored(status: JobStatus, created: datetime, now: datetime) -> Goodput:
    """The figures in the status; a job without any (new, or from an older operator) starts
    from its creation if it has no phase yet, else from now."""
    if status.goodput:
        return Goodput.from_dict(status.goodput)
    start = created if not status.phase else now
    return Goodput(since=start, as_of=start)


def current(status: JobStatus, created: datetime, now: datetime) -> Goodput:
    """The figures extended from the last update to `now`, for gauges and reports."""
    return stored(status, created, now).advanced(bucket_of(status), now)


def brought_up_to_date(
    status: JobStatus, created: datetime, now: datetime, lost: tuple[int, float | None] | None
) -> dict[str, Any]:
    """What status.goodput becomes at `now`, with the (steps, seconds) a new gang `lost`."""
    figures = current(status, created, now)
    return (figures.with_lost(*lost) if lost else figures).to_dict()
