"""Goodput: where a job's wall time went, by a cause a user can act on, and its
effective-training-time ratio (ETTR).

The time between two updates goes to the bucket of the state the job was in:
- waiting: Pending or Restarting while its pods cannot be placed (no room, a Kueue queue),
  a failure's back-off, Suspended;
- pod start: from an attempt's end being seen (or, for the first attempt, from the gang's
  creation) until all its pods run: the old gang saving and stopping, the look for the
  checkpoint, the scheduler, images, volumes, containers starting;
- framework start: from the pods running until the attempt has finished its first training
  step (imports, process groups, Ray, model build, the checkpoint load, the first step's own
  compile and compute). Its end is the trainer pod turning Ready: the pod-side marks it once
  a step of this attempt is done (launcher: readiness probe), so the pod watch delivers it
  and no request is made per step;
- training: from that first step on, until the attempt ends;
- stopping: the last attempt's end, from its last step (the trainer takes its mark back, the
  pod turns not Ready) until the job has finished (the last save sealed, processes ending);
- and, inside training, the steps trained again: lost steps (a new gang resumed from a
  checkpoint older than the last finished step) times the trainer's step time.

productive = training - steps trained again; ETTR = productive / wall, the wall running
from the job's creation. Where rljob cannot see a step (a framework without a progress
signal: `custom`, OpenRLHF), framework start is counted as training and the figures say
they are an upper bound (`ettrIsUpperBound`).

The operator brings the figures up to date only when it writes the job's status anyway (a
phase change, a condition, a recovery, a first step), never on a timer: a timer would write
every job's status over and over, and the operator's API traffic would grow with the number
of jobs. `asOf` says when they were last brought up to date; `current` extends them to any
later moment, for the Prometheus gauge and for reports.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from ..api.reasons import TERMINAL_PHASES, ConditionType, Phase
from ..api.status import JobStatus, find_condition
from ..api.timestamps import iso_precise, parse_iso

WAITING, POD_START, FRAMEWORK_START = "waiting", "podStart", "frameworkStart"
TRAINING, STOPPING = "training", "stopping"
BUCKETS = (WAITING, POD_START, FRAMEWORK_START, TRAINING, STOPPING)
# The keys an operator before 2026-12-06 wrote, read as the buckets they came closest to.
_OLDER_KEYS = {"runningSeconds": TRAINING, "recoveringSeconds": POD_START}


@dataclass(frozen=True)
class Goodput:
    since: datetime  # the job's creation (or when an older operator's job was first accounted)
    as_of: datetime
    seconds: Mapping[str, float] = field(default_factory=dict)  # by bucket
    lost_steps: int = 0
    lost_seconds: float = 0.0  # lost steps whose step time is known, times that step time
    steps_seen: bool = True  # False: framework start counted as training (an upper bound)

    def __getitem__(self, bucket: str) -> float:
        return self.seconds.get(bucket, 0.0)

    @property
    def wall(self) -> float:
        return max(0.0, (self.as_of - self.since).total_seconds())

    @property
    def productive(self) -> float:
        return max(0.0, self[TRAINING] - self.lost_seconds)

    @property
    def ettr(self) -> float | None:
        """Productive training time over wall time; None before any time has passed."""
        if self.wall <= 0:
            return None
        return self.productive / self.wall

    def advanced(self, bucket: str | None, now: datetime) -> Goodput:
        """The figures at `now`, the time since `as_of` spent in `bucket`; None means the job
        has finished, and its clock stopped."""
        elapsed = (now - self.as_of).total_seconds()
        if bucket is None or elapsed <= 0:
            return self
        return replace(self, as_of=now, seconds={**self.seconds, bucket: self[bucket] + elapsed})

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
            **{f"{bucket}Seconds": round(self[bucket], 1) for bucket in BUCKETS},
            "lostSteps": self.lost_steps,
            "lostSeconds": round(self.lost_seconds, 1),
            "productiveSeconds": round(self.productive, 1),
            **({"ettr": round(ettr, 4)} if ettr is not None else {}),
            **({} if self.steps_seen else {"ettrIsUpperBound": True}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Goodput:
        seconds = {bucket: float(data.get(f"{bucket}Seconds", 0)) for bucket in BUCKETS}
        for key, bucket in _OLDER_KEYS.items():
            seconds[bucket] += float(data.get(key, 0))
        return cls(
            since=parse_iso(data["since"]),
            as_of=parse_iso(data["asOf"]),
            seconds={bucket: value for bucket, value in seconds.items() if value},
            lost_steps=int(data.get("lostSteps", 0)),
            lost_seconds=float(data.get("lostSeconds", 0)),
            steps_seen=not data.get("ettrIsUpperBound", False),
        )


def unplaced(status: JobStatus) -> bool:
    """Whether the attempt's pods wait for room (the scheduler, a Kueue queue)."""
    said = find_condition(status.conditions, ConditionType.PODS_UNSCHEDULABLE)
    return said is not None and said.get("status") == "True"


def bucket_of(status: JobStatus, steps_seen: bool = True) -> str | None:
    """Where the time goes while the job has this status; None once it has finished."""
    phase = status.phase
    if phase in TERMINAL_PHASES:
        return None
    if phase == Phase.RUNNING:
        trained = status.attempt_first_step_time or not steps_seen
        return TRAINING if trained else FRAMEWORK_START
    if phase in (Phase.PENDING, Phase.RESTARTING) and not status.restart_after:
        return WAITING if unplaced(status) else POD_START
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
    figures = stored(status, created, now)
    return figures.advanced(bucket_of(status, figures.steps_seen), now)


def brought_up_to_date(
    before: JobStatus,
    after: JobStatus,
    created: datetime,
    now: datetime,
    lost: tuple[int, float | None] | None,
    steps_seen: bool,
    trained_until: datetime | None = None,
) -> dict[str, Any]:
    """What status.goodput becomes at `now`, the pass having turned `before` into `after`,
    with the (steps, seconds) a new gang `lost`. A first step the pass learned of ends the
    framework start when it happened (the pod's Ready transition), not at the pass; so does
    the last step of a job that the pass sees finished (`trained_until`) end its training."""
    figures = replace(stored(before, created, now), steps_seen=steps_seen)
    bucket = bucket_of(before, steps_seen)
    stepped = after.attempt_first_step_time
    if stepped and stepped != before.attempt_first_step_time:
        at = min(max(parse_iso(stepped), figures.as_of), now)
        figures = figures.advanced(bucket, at).advanced(TRAINING, now)
    elif bucket == TRAINING and trained_until is not None and after.phase in TERMINAL_PHASES:
        at = min(max(trained_until, figures.as_of), now)
        figures = figures.advanced(TRAINING, at).advanced(STOPPING, now)
    else:
        figures = figures.advanced(bucket, now)
    return (figures.with_lost(*lost) if lost else figures).to_dict()
