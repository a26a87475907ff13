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

Where the trainer times its own steps (rljob_contract.progress.StepClock: rljob's trainer, and
rljob's bridges into TRL, verl and RLinf), an attempt's training is retimed to them once they
are known, finer than a pod's conditions (whole seconds, a probe a second apart) can say, and
the steps it finished after its end was seen (on notice) count as training: at a recovery
from the progress record the look for the checkpoint reads, at the job's end from the last
attempt's termination message (rljob's trainer, the Ray head).

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
from datetime import UTC, datetime
from typing import Any

from ...api.reasons import TERMINAL_PHASES, ConditionType, Phase
from ...api.status import JobStatus, find_condition
from ...api.timestamps import iso_precise, parse_iso

WAITING, POD_START, FRAMEWORK_START = "waiting", "podStart", "frameworkStart"
TRAINING, STOPPING = "training", "stopping"
BUCKETS = (WAITING, POD_START, FRAMEWORK_START, TRAINING, STOPPING)
# Seconds are stored to the millisecond: each status write stores the figures and the next
# pass reads them back, so a coarser rounding would drift from the wall over a job's writes.
MS = 3
# The keys an operator before 2026-12-06 wrote, read as the buckets they came closest to.
_OLDER_KEYS = {"runningSeconds": TRAINING, "recoveringSeconds": POD_START}


@dataclass(frozen=True)
class TrainedSpan:
    """When an attempt finished its first and its last training step, as its trainer timed
    them."""

    attempt: int | None
    first: datetime
    last: datetime

    @classmethod
    def of(cls, attempt: int | None, unix: tuple[float, float] | None) -> TrainedSpan | None:
        """The span of (first, last) in Unix seconds, as the pod-side writes them."""
        if unix is None:
            return None
        first, last = (datetime.fromtimestamp(t, UTC) for t in unix)
        return cls(attempt, first, last)


@dataclass(frozen=True)
class Move:
    """Seconds counted in one bucket that belong in another."""

    seconds: float
    source: str
    target: str


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

    def moved(self, move: Move) -> Goodput:
        """`move` carried out, never taking more than its source holds."""
        seconds = min(max(0.0, move.seconds), self[move.source])
        if seconds <= 0:
            return self
        changed = {
            move.source: self[move.source] - seconds,
            move.target: self[move.target] + seconds,
        }
        return replace(self, seconds={**self.seconds, **changed})

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
            "wallSeconds": round(self.wall, MS),
            **{f"{bucket}Seconds": round(self[bucket], MS) for bucket in BUCKETS},
            "lostSteps": self.lost_steps,
            "lostSeconds": round(self.lost_seconds, MS),
            "productiveSeconds": round(self.productive, MS),
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


def retimed(
    span: TrainedSpan, counted_from: datetime | None, counted_until: datetime, after: str
) -> tuple[Move, ...]:
    """The moves that make an attempt's training the trainer's `span`: its training was
    counted from `counted_from` (its pod's Ready transition; None where none was seen, and
    its time until `counted_until` went to framework start) until `counted_until`, and the
    time after that in `after` (stopping, or a recovery's pod start)."""
    start = (span.first - (counted_from or counted_until)).total_seconds()
    end = (span.last - counted_until).total_seconds()
    return (
        Move(start, TRAINING, FRAMEWORK_START) if start > 0 else
        Move(-start, FRAMEWORK_START, TRAINING),
        Move(end, after, TRAINING) if end > 0 else Move(-end, TRAINING, after),
    )  # fmt: skip


def retimed_at_the_end(
    status: JobStatus, span: TrainedSpan | None, unready_since: datetime | None, now: datetime
) -> tuple[Move, ...]:
    """The last attempt, seen finished at `now` (its training counted until then): trained
    as its trainer timed it (its termination message's `span`), else until its rank 0 pod
    turned not Ready (the trainer took its mark back after its last step)."""
    stepped = parse_iso(status.attempt_first_step_time) if status.attempt_first_step_time else None
    started = parse_iso(status.attempt_creation_time) if status.attempt_creation_time else None
    if span is not None and started is not None and started <= span.first and span.last <= now:
        return retimed(span, stepped, now, STOPPING)
    if stepped is not None and unready_since is not None:
        return (Move((now - max(unready_since, stepped)).total_seconds(), TRAINING, STOPPING),)
    return ()


def retimed_at_recovery(
    status: JobStatus, span: TrainedSpan | None, now: datetime
) -> tuple[Move, ...]:
    """The attempt that ended (status.lastEnd), trained as its trainer timed it (the progress
    record's `span`, of that attempt), as the gang that replaces it is created at `now`: its
    training was counted from its pod's Ready transition until the end was detected, and the
    time since in the bucket the job is in (a recovery's pod start, or waiting)."""
    end, records = status.last_end, status.recoveries
    if span is None or end is None or span.attempt != end.attempt or not records:
        return ()
    if records[-1].attempt != end.attempt + 1 or not records[-1].detected_at:
        return ()
    detected = parse_iso(records[-1].detected_at)
    since = parse_iso(status.goodput["since"]) if status.goodput else None
    if (since is not None and span.first < since) or span.last > now:
        return ()  # not this job's attempt, or a clock that is not the operator's
    trained_since = parse_iso(end.trained_since) if end.trained_since else None
    return retimed(span, trained_since, detected, bucket_of(status) or POD_START)


def brought_up_to_date(
    before: JobStatus,
    after: JobStatus,
    created: datetime,
    now: datetime,
    lost: tuple[int, float | None] | None,
    steps_seen: bool,
    moves: tuple[Move, ...] = (),
) -> dict[str, Any]:
    """What status.goodput becomes at `now`, the pass having turned `before` into `after`,
    with the (steps, seconds) a new gang `lost` and the `moves` that retime an attempt. A
    first step the pass learned of ends the framework start when it happened (the pod's Ready
    transition), not at the pass."""
    figures = replace(stored(before, created, now), steps_seen=steps_seen)
    bucket = bucket_of(before, steps_seen)
    stepped = after.attempt_first_step_time
    if stepped and stepped != before.attempt_first_step_time:
        at = min(max(parse_iso(stepped), figures.as_of), now)
        figures = figures.advanced(bucket, at).advanced(TRAINING, now)
    else:
        figures = figures.advanced(bucket, now)
    for move in moves:
        figures = figures.moved(move)
    return (figures.with_lost(*lost) if lost else figures).to_dict()
