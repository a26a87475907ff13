"""What to write on the attempt's Workload for its boost now, and when to look again.

Writes are held back for the API server: a change smaller than minStep is not written
(except one that reaches 0 or maxBoost), and a job's Workload is written at most once per
minIntervalSeconds. The Workload carries the boost and the time of rljob's write
(rljob.io/priority-boost-time), so that the interval holds across the operator's restarts.
Nothing here does I/O; reconcile.act writes what the plan asks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ... import constants as c
from ...api.spec import JobSpec, PriorityBoostSpec
from ...api.status import BoostBasis, JobStatus
from ...api.timestamps import iso_precise, parse_iso
from ..settings import Settings
from .bounds import allowed
from .guards import Ceiling
from .pricing import Saved, at_risk, boost_for, points


@dataclass(frozen=True)
class Written:
    """The boost on the Workload now, and when rljob wrote it (None: never)."""

    value: int | None = None
    at: datetime | None = None


@dataclass(frozen=True)
class BoostWrite:
    value: int | None  # the boost to write now; None: write nothing
    wake_after: float | None  # seconds until the boost should be looked at again; None: never


def next_write(
    gpu_seconds: float, growing_gpus: int, written: Written, now: datetime,
    policy: PriorityBoostSpec,
) -> BoostWrite:  # fmt: skip
    """Whether to write a new boost for `gpu_seconds` at risk over what is `written`, and when
    to look again. `growing_gpus`: the GPUs whose lost work grows with time (0 where the save
    on notice caps it).

    A value is written when it has moved by minStep from the one on the Workload (or reached
    0 or maxBoost) and minIntervalSeconds have passed since rljob's last write. The next look
    is when the growing work at risk will have moved it by minStep, or when the interval
    ends for a value held back by it; while the Workload carries a boost above 0, at least
    every minIntervalSeconds, since a new checkpoint lowers it."""
    wanted = boost_for(gpu_seconds, policy)
    current = written.value or 0
    due = 0.0
    if written.at is not None:
        elapsed = (now - written.at).total_seconds()
        due = max(0.0, policy.min_interval_seconds - elapsed)
    edge = wanted in (0, policy.max_boost)
    moved = wanted != current and (abs(wanted - current) >= policy.min_step or edge)
    if moved and due > 0:
        return BoostWrite(None, due)
    value = wanted if moved else None
    after = current if value is None else value
    if value is not None:
        due = float(policy.min_interval_seconds)
    target = min(policy.max_boost, after + policy.min_step)
    growth = growing_gpus / policy.gpu_seconds_per_point  # points a second, nothing saved
    grow = math.inf
    if target > wanted and growth > 0:
        grow = (target - points(gpu_seconds, policy)) / growth
    recheck = policy.min_interval_seconds if after > 0 else math.inf
    wake = max(due, min(max(0.0, grow), recheck))
    return BoostWrite(value, None if math.isinf(wake) else wake)


@dataclass(frozen=True)
class BoostPlan:
    annotations: dict[str, str] | None  # to merge into the attempt's Workload; None: none
    wake_after: float | None  # seconds until the next look; None: not before something else
    basis: BoostBasis | None = None  # for status.priorityBoost, once the Workload carries them


def plan_boost(
    spec: JobSpec,
    status: JobStatus,
    saved: Saved,
    written: Written,
    now: datetime,
    settings: Settings,
    top: Ceiling | None = None,
    classes_known: bool = True,
) -> BoostPlan:
    """What to write for the boost now, and when to look again, within the administrator's
    `settings` (the limit, the floors); `top` is the ceiling below the next priority class
    up, and the boost is held at 0 where the classes are not known."""
    policy = allowed(spec.queueing.priority_boost, settings, top, classes_known)
    risk = at_risk(spec, status, saved, now)
    gpu_seconds = risk.gpu_seconds(now)
    growing = risk.gpus if risk.grows(now) else 0
    decided = next_write(gpu_seconds, growing, written, now, policy)
    if decided.value is None:
        return BoostPlan(None, decided.wake_after)
    annotations = {
        c.KUEUE_PRIORITY_BOOST_ANNOTATION: annotation_value(decided.value),
        c.PRIORITY_BOOST_TIME_ANNOTATION: iso_precise(now),
    }
    basis = BoostBasis(
        decided.value, round(gpu_seconds, 1), risk.gpus, round(risk.lost_work_seconds(now), 1),
        round(risk.restart_seconds, 1), iso_precise(now),
    )  # fmt: skip
    return BoostPlan(annotations, decided.wake_after, basis)


def annotation_value(value: int) -> str:
    """Kueue's format: a signed decimal integer ("0", never empty)."""
    return str(int(value))


def parse_written(annotations: dict[str, Any], boost_key: str, at_key: str) -> Written:
    """What the Workload carries; a value Kueue would refuse reads as none."""
    raw, at = annotations.get(boost_key), annotations.get(at_key)
    try:
        value = int(raw) if raw is not None else None
    except ValueError:
        value = None
    try:
        when = parse_iso(at) if at else None
    except ValueError:
        when = None
    return Written(value, when)


def written_on(annotations: dict[str, str]) -> Written:
    return parse_written(
        annotations, c.KUEUE_PRIORITY_BOOST_ANNOTATION, c.PRIORITY_BOOST_TIME_ANNOTATION
    )


def carries(written: Written, basis: BoostBasis) -> bool:
    """Whether the Workload carries the boost `basis` describes: its value, written by rljob
    at the basis's time."""
    return written == Written(basis.boost, parse_iso(basis.time))
