"""Goodput measured with one ruler for every system: from what the trainer itself did.

benchmarks/spot_trace.py runs the same trainer under rljob and under JobSet. Neither system's
own record is read: each gang (an *attempt*) is what a watch on the pods saw (created, every pod
on a node, every pod running, ended) and the steps its rank 0 logged, with their times. Every
second of the run then goes to one cause, as Google's ml-goodput-measurement names them:

- waiting for nodes: no gang placed, and fewer nodes that take pods than the gang needs;
- waiting with nodes free: no gang placed although there are nodes for it (the old gang still
  stopping, the controller, the pod garbage collector);
- pod start: every pod of the gang on a node, until every one runs;
- framework start: the gang running, until its first step (torchrun, the process group, the
  model, the checkpoint's load), and all of an attempt that never finished a step;
- steps trained again: the steps a gang finished after the newest save there was when it
  ended, which the next gang trains once more (a step's time runs from the attempt's previous
  step), and the step cut short when a gang ends without saving;
- stopping: from the last step of a gang that stopped on a notice (having saved it, or
  finding no time to) until it ended;
- productive: every other step, and the step in progress when the run ends.

Lost steps are those steps: trained twice, or, for a gang that ends near the end of the run,
to be trained again after it. Saves are read from rank 0's log too ("saved checkpoint ...",
written once the folder is sealed); where a next gang trained, the step it resumed after is
kept beside (`Interruption.resumed_after`), and is the newest save unless something else went
wrong. A step's number is all that tells a step trained again from a new one: it is the same
model state only because the trainer resumes bit-exactly.

The projection (`project`) reads a compressed run at the trace's real tick: see its docstring.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import pairwise


class Cause(StrEnum):
    WAITING_FOR_NODES = "waiting for nodes"
    WAITING = "waiting with nodes free"
    POD_START = "pod start"
    FRAMEWORK_START = "framework start"
    TRAINED_AGAIN = "steps trained again"
    STOPPING = "stopping"
    PRODUCTIVE = "productive"


# What a trace's clock stretches (the nodes' coming and going, the notice, the steps, and with
# them the work lost since the last save), against what a restart costs whatever the tick.
TICK_BOUND = frozenset({Cause.WAITING_FOR_NODES, Cause.TRAINED_AGAIN, Cause.PRODUCTIVE})


@dataclass(frozen=True)
class Attempt:
    """One gang, as observed; times in seconds on one clock."""

    name: str
    created: float  # its first pod seen
    placed: float | None  # every pod of the gang on a node
    running: float | None  # every pod running
    ended: float | None  # a pod of it ended or its node went; None: it still ran at the end
    steps: tuple[tuple[int, float], ...]  # (step, when rank 0 logged it finished), in order
    saves: tuple[tuple[int, float], ...] = ()  # (step, when rank 0 logged it sealed)
    saved_on_notice: bool = False  # it stopped on a notice, as its rank 0 logged
    noticed: float | None = None  # when a node of it was told it goes, if one was


@dataclass(frozen=True)
class Segment:
    start: float
    end: float
    cause: Cause
    attempt: str  # "" where no gang was placed

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class Interruption:
    """An attempt's end before the run's, and what it cost in steps."""

    attempt: str
    ended: float
    last_step: int | None  # the last step it finished
    saved: int  # the newest save when it ended (0: none, the next gang starts afresh)
    resumed_after: int | None  # the step the next gang that trained resumed after
    lost_steps: int  # its steps after that save
    noticed: float | None  # when it was told a node goes
    longest_step: float | None  # its longest step after the first, a periodic save included

    def covered(self, notice: float) -> bool:
        """Whether a notice of `notice` seconds had room for one of its steps and a save."""
        return self.longest_step is not None and self.longest_step <= notice


@dataclass(frozen=True)
class Ruling:
    start: float
    end: float
    segments: tuple[Segment, ...]
    lost_steps: int
    interruptions: tuple[Interruption, ...]

    @property
    def wall(self) -> float:
        return self.end - self.start

    def seconds(self) -> dict[Cause, float]:
        totals = dict.fromkeys(Cause, 0.0)
        for segment in self.segments:
            totals[segment.cause] += segment.seconds
        return totals

    @property
    def productive(self) -> float:
        return self.seconds()[Cause.PRODUCTIVE]


def nodes_at(capacity: Sequence[tuple[float, int]], t: float) -> int:
    """The count in force at `t` of a step function given as (from when, count), in order."""
    count = 0
    for since, n in capacity:
        if since > t:
            break
        count = n
    return count


def waiting(
    start: float, end: float, capacity: Sequence[tuple[float, int]], gang: int
) -> list[Segment]:
    """[start, end) with no gang placed, cut where the nodes that take pods reach or leave
    `gang`."""
    cuts = sorted({start, end, *(t for t, _ in capacity if start < t < end)})
    segments: list[Segment] = []
    for a, b in pairwise(cuts):
        cause = Cause.WAITING if nodes_at(capacity, a) >= gang else Cause.WAITING_FOR_NODES
        if segments and segments[-1].cause == cause:
            segments[-1] = Segment(segments[-1].start, b, cause, "")
        else:
            segments.append(Segment(a, b, cause, ""))
    return segments


# A save logged this soon after the gang's end as the pod watch saw it was sealed before it: the
# log's time and the watch's are two reads of one clock, each a little late.
SAVE_SLACK_SECONDS = 0.5


def newest_save(attempts: Sequence[Attempt], at: float) -> int:
    """The newest step any gang had sealed by `at` (0: none)."""
    return max((s for a in attempts for s, t in a.saves if t <= at + SAVE_SLACK_SECONDS), default=0)


def lost_steps(attempts: Sequence[Attempt], end: float) -> list[set[int]]:
    """For each attempt, its steps after the newest save when it ended: the next gang trains
    them again; none for a gang that still ran at the end."""
    return [
        set()
        if a.ended is None or a.ended >= end
        else {step for step, _ in a.steps if step > newest_save(attempts, a.ended)}
        for a in attempts
    ]


def rule(
    attempts: Sequence[Attempt],
    start: float,
    end: float,
    capacity: Sequence[tuple[float, int]],
    gang: int,
) -> Ruling:
    """Every second of [start, end) to one cause, from the attempts (in the order they were
    created) and the nodes that took pods (`capacity`: from when, how many)."""
    attempts = sorted(attempts, key=lambda a: a.created)
    lost = lost_steps(attempts, end)
    segments: list[Segment] = []
    cursor = start

    def emit(a: float, b: float, cause: Cause, name: str) -> None:
        a, b = max(a, cursor, start), min(b, end)
        if b > a:
            segments.append(Segment(a, b, cause, name))

    for attempt, again in zip(attempts, lost, strict=True):
        steps = [(s, t) for s, t in attempt.steps if t <= end]
        last = steps[-1][1] if steps else attempt.created
        stop = end if attempt.ended is None else min(max(attempt.ended, last), end)
        if stop <= cursor:
            continue
        placed = min(attempt.placed if attempt.placed is not None else stop, stop)
        running = min(attempt.running if attempt.running is not None else stop, stop)
        segments.extend(waiting(cursor, max(placed, cursor), capacity, gang))
        cursor = max(cursor, placed)
        emit(placed, running, Cause.POD_START, attempt.name)
        cursor = max(cursor, running)
        for index, (step, at) in enumerate(steps):
            if index == 0:
                cause = Cause.FRAMEWORK_START
            else:
                cause = Cause.TRAINED_AGAIN if step in again else Cause.PRODUCTIVE
            emit(cursor, at, cause, attempt.name)
            cursor = max(cursor, at)
        if attempt.ended is None or attempt.ended >= end:
            tail = Cause.PRODUCTIVE if steps else Cause.FRAMEWORK_START
        elif not steps:
            tail = Cause.FRAMEWORK_START
        else:
            tail = Cause.STOPPING if attempt.saved_on_notice else Cause.TRAINED_AGAIN
        emit(cursor, stop, tail, attempt.name)
        cursor = max(cursor, stop)
    segments.extend(waiting(cursor, end, capacity, gang) if cursor < end else [])
    found = tuple(interruptions(attempts, lost, end))
    return Ruling(start, end, tuple(segments), sum(map(len, lost)), found)


def interruptions(
    attempts: Sequence[Attempt], lost: Sequence[set[int]], end: float
) -> list[Interruption]:
    found = []
    for index, (attempt, again) in enumerate(zip(attempts, lost, strict=True)):
        if attempt.ended is None or attempt.ended >= end:
            continue
        steps = [s for s, _ in attempt.steps]
        gaps = [b - a for (_, a), (_, b) in pairwise(attempt.steps)]
        after = next((a.steps[0][0] - 1 for a in attempts[index + 1 :] if a.steps), None)
        found.append(Interruption(
            attempt.name, attempt.ended, max(steps, default=None),
            newest_save(attempts, attempt.ended), after, len(again), attempt.noticed,
            max(gaps, default=None),
        ))  # fmt: skip
    return found


@dataclass(frozen=True)
class Projection:
    """The window at the trace's real tick: each cause's seconds, and goodput."""

    scale: float  # the real tick over the run's
    wall: float
    enough: float  # the seconds with enough nodes for the gang
    seconds: dict[Cause, float]

    @property
    def productive(self) -> float:
        return self.seconds[Cause.PRODUCTIVE]

    @property
    def goodput(self) -> float:
        return self.productive / self.wall if self.wall else 0.0

    @property
    def goodput_enough(self) -> float:
        return self.productive / self.enough if self.enough else 0.0


def project(
    seconds: Mapping[Cause, float],
    tick_seconds: float,
    real_tick_seconds: float,
    ticks: int,
    enough_ticks: int,
) -> Projection:
    """What a run of `ticks` ticks of `tick_seconds` means at the trace's real tick.

    Assumes that what the trace's clock sets stretches with it, and that a restart costs
    what it cost in the run:
    - waiting for nodes, the notice, the steps and the work lost since the last save stretch
      by real / run tick (a real job's step and save interval are as many ticks long as the
      run's were);
    - waiting with nodes free (the old gang's stop, the controller, a garbage collector), pod
      start, framework start and stopping keep the seconds measured;
    - the time these no longer take of the longer tick trains: productive is the rest.
    """
    scale = real_tick_seconds / tick_seconds
    projected = {
        cause: seconds.get(cause, 0.0) * (scale if cause in TICK_BOUND else 1.0) for cause in Cause
    }
    wall = ticks * real_tick_seconds
    projected[Cause.PRODUCTIVE] = max(
        wall - sum(s for cause, s in projected.items() if cause != Cause.PRODUCTIVE), 0.0
    )
    return Projection(scale, wall, enough_ticks * real_tick_seconds, projected)
