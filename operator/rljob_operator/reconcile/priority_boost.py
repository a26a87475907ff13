"""Kueue's priority boost from the work a preemption would lose (spec.queueing.priorityBoost).

Kueue (v0.17, feature gate PriorityBoost, alpha) orders a ClusterQueue's preemption
candidates, and its queue, by the Workload's priority plus the signed integer in its
annotation `kueue.x-k8s.io/priority-boost`. rljob puts there what the running attempt would
lose if it were stopped now, so that of two jobs of one priority the one that would lose
least goes first:

    at risk (GPU-seconds) = GPUs of the gang x (lost work seconds + restart seconds)
    unsaved seconds       = (last finished step - newest complete checkpoint's step)
                            x the trainer's step time, where progress.json gives both;
                            else now - (the newest checkpoint's time, or the time the
                            attempt's gang was all running, whichever is later)
    lost work seconds     = 0 where a save on notice fits the grace period with the step in
                            progress (step time + save time <= grace: the trainer ends the step
                            and saves it); at most one step time where only the save fits and
                            the trainer abandons the step in progress (rljob's own);
                            else the unsaved seconds (no save on notice, a save that does not
                            fit, or times not measured yet)
    restart seconds       = the median time from a past end of this job to its next gang all
                            running (status.recoveries), 0 until one was measured
    boost                 = min(maxBoost, the ceiling, floor(at risk / gpuSecondsPerPoint))
    the ceiling           = (the lowest priority class value above the job's priority)
                            - (the job's priority) - 1, none without a class above
                            (reconcile.boost_guards)

A preemption of a job that saves on notice loses about nothing but its restart, which a
big gang pays on every GPU: a 64-GPU gang that just saved is therefore no cheap victim.

The boost is never negative and never above maxBoost, which is never above the operator's
limit (`rljob operator --max-priority-boost`, the chart's kueue.maxPriorityBoost): the
cluster's administrator, not the job's author, decides how far a job can be lifted. Kueue
lets a preemptor take a candidate's place only when the preemptor's priority plus boost is
higher than the candidate's, so a limit below the gap between two priority classes lets a
boost reorder jobs of one class but never shield a job from a higher class; and the boost
never reaches the next class above the job's own (the ceiling, read from the cluster's
classes), whatever the limit. A job asking for more is clamped, and its PriorityBoost
condition says so. While the operator cannot list the classes (no RBAC for them) it cannot
know that ceiling, so the boost is held at 0 until it can. A Workload under the attempt's name
that the attempt's pods do not own is not written at all.

The author sets the scale and the pace of their job's boost (gpuSecondsPerPoint,
minIntervalSeconds), but never below the administrator's floors (`--min-gpu-seconds-per-point`,
`--min-boost-interval-seconds`): a job's value below one is raised to it, and the condition
says so, so that no job can make the operator read its folder and patch its Workload every
second, or reach the limit with the first GPU-minutes at risk.

The checkpoint volume is read for the boost at most once per job and minIntervalSeconds (and
again when a new attempt runs): a write can come no more often, and a pass comes at every
resync and pod event.

A write the API server refuses (no RBAC for it, no Workload API, Kueue's webhook) is not
tried again at every pass: the operator keeps the refusal (ClusterCache) and tries again
after a back-off that doubles up to an hour, while the PriorityBoost condition says why.
status.priorityBoost records a boost only once the Workload carries it: the write is made
with its basis, the operator keeps the basis of a write the API server took (ClusterCache),
and the next pass, at once, records it where the Workload still carries that boost.

Writes are held back for the API server: a change smaller than minStep is not written
(except one that reaches 0 or maxBoost), and a job's Workload is written at most once per
minIntervalSeconds. Nothing here does I/O; reconcile.run writes what `next_write` asks.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from .. import constants as c
from ..api.reasons import ConditionType, Phase, Reason
from ..api.spec import JobSpec, PriorityBoostSpec
from ..api.status import BoostBasis, JobStatus, find_condition
from ..api.timestamps import iso_precise, parse_iso
from ..frameworks import framework
from .boost_guards import Ceiling
from .settings import Settings

GPU_SUFFIX = "/gpu"  # nvidia.com/gpu, amd.com/gpu, ...
REFUSAL_BACKOFF_SECONDS = 60.0  # after the first refused write; doubling up to the next
MAX_REFUSAL_BACKOFF_SECONDS = 3600.0


def gang_gpus(spec: JobSpec) -> int:
    """GPUs the gang holds: its pods' GPU limits (else requests), or one per pod without any,
    so that a gang of CPU pods is ranked by pod-seconds."""
    amounts = spec.resources.get("limits") or spec.resources.get("requests") or {}
    per_pod = sum(int(float(v)) for k, v in amounts.items() if str(k).endswith(GPU_SUFFIX))
    return spec.nnodes * (per_pod or 1)


@dataclass(frozen=True)
class AtRisk:
    """What the running attempt has done since its newest complete checkpoint."""

    gpus: int
    running_since: datetime  # the attempt's gang was all running
    saved_at: datetime | None = None  # the newest complete checkpoint's time
    saved_step: int | None = None  # and its step
    finished_step: int | None = None  # the last finished step, from progress.json
    step_seconds: float | None = None  # the trainer's step time, from progress.json
    save_seconds: float | None = None  # a save's mean time, from progress.json
    grace_seconds: float | None = None  # for a save on notice; None: the job has none
    abandons_step: bool = False  # the trainer can drop the step in progress to save in time
    restart_seconds: float = 0.0  # the job's measured restart

    def _cap(self) -> float | None:
        """The most a preemption can lose, given the save on notice; None: all unsaved work."""
        step, save, grace = self.step_seconds, self.save_seconds, self.grace_seconds
        if grace is None or step is None or save is None:
            return None
        if step + save <= grace:
            return 0.0
        if self.abandons_step and save <= grace:
            return step
        return None

    def lost_work_seconds(self, now: datetime) -> float:
        """The work a preemption now would lose."""
        unsaved, cap = self.unsaved_seconds(now), self._cap()
        return unsaved if cap is None else min(unsaved, cap)

    def grows(self, now: datetime) -> bool:
        """Whether the lost work grows as time passes and nothing is saved."""
        cap = self._cap()
        return cap is None or self.unsaved_seconds(now) < cap

    def unsaved_seconds(self, now: datetime) -> float:
        saved, finished, pace = self.saved_step, self.finished_step, self.step_seconds
        if saved is not None and finished is not None and pace and finished >= saved:
            return (finished - saved) * pace
        since = max(self.running_since, self.saved_at or self.running_since)
        return max(0.0, (now - since).total_seconds())

    def gpu_seconds(self, now: datetime) -> float:
        return self.gpus * (self.lost_work_seconds(now) + self.restart_seconds)


def points(gpu_seconds: float, policy: PriorityBoostSpec) -> float:
    """Work at risk in points of boost, unbounded and fractional."""
    if not math.isfinite(gpu_seconds) or gpu_seconds <= 0:
        return 0.0
    return gpu_seconds / policy.gpu_seconds_per_point


def boost_for(gpu_seconds: float, policy: PriorityBoostSpec) -> int:
    """The boost for `gpu_seconds` of work at risk: bounded by 0 and maxBoost."""
    return min(policy.max_boost, math.floor(points(gpu_seconds, policy)))


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


@dataclass(frozen=True)
class Refusal:
    """The API server refused the job's last boost write(s): when, how often in a row, why."""

    at: datetime
    count: int
    why: str

    def retry_at(self) -> datetime:
        backoff = REFUSAL_BACKOFF_SECONDS * 2 ** min(self.count - 1, 16)
        return self.at + timedelta(seconds=min(backoff, MAX_REFUSAL_BACKOFF_SECONDS))


def floored(policy: PriorityBoostSpec, settings: Settings) -> PriorityBoostSpec:
    """The job's policy with minIntervalSeconds and gpuSecondsPerPoint at least the
    administrator's floors: the pace of the operator's reads and writes for the job, and the
    scale of its boost, are never the author's alone."""
    return replace(
        policy,
        min_interval_seconds=max(policy.min_interval_seconds, settings.min_boost_interval_seconds),
        gpu_seconds_per_point=max(policy.gpu_seconds_per_point, settings.min_gpu_seconds_per_point),
    )


def raised(policy: PriorityBoostSpec, settings: Settings) -> str | None:
    """What the floors raised in the job's policy, in words; None where nothing."""
    fields = [
        (name, asked, floor)
        for name, asked, floor in (
            ("minIntervalSeconds", policy.min_interval_seconds,
             settings.min_boost_interval_seconds),
            ("gpuSecondsPerPoint", policy.gpu_seconds_per_point,
             settings.min_gpu_seconds_per_point),
        )
        if asked < floor
    ]  # fmt: skip
    if not fields:
        return None
    asked = " and ".join(f"{name} {value}" for name, value, _ in fields)
    floors = " and ".join(str(floor) for _, _, floor in fields)
    one = len(fields) == 1
    said = "is below the operator's floor" if one else "are below the operator's floors"
    return f"spec.queueing.priorityBoost.{asked} {said}: {floors} {'applies' if one else 'apply'}"


def allowed(
    policy: PriorityBoostSpec, settings: Settings, top: Ceiling | None = None,
    classes_known: bool = True,
) -> PriorityBoostSpec:  # fmt: skip
    """The job's policy within the administrator's bounds: its maxBoost within the operator's
    limit (unset: the limit), below the next priority class above the job's (`top`,
    reconcile.boost_guards) and 0 while the classes are not known; its interval and scale at
    least the floors."""
    limit = settings.max_priority_boost
    asked = limit if policy.max_boost is None else policy.max_boost
    cap = limit if top is None else min(limit, top.boost)
    if not classes_known:
        cap = 0
    return replace(floored(policy, settings), max_boost=max(0, min(asked, cap)))


def boost_condition(
    policy: PriorityBoostSpec,
    settings: Settings,
    refusal: Refusal | None,
    top: Ceiling | None = None,
    foreign: str | None = None,
    classes_unknown: str | None = None,
) -> tuple[bool, Reason, str]:
    """The PriorityBoost condition of a job that wants a boost: (status, reason, message).
    `top`: the ceiling below the next class up; `foreign`: why the attempt's Workload is not
    the job's (reconcile.boost_guards); `classes_unknown`: why the operator does not know the
    cluster's priority classes. A field of the job's that a floor raised is said in every
    message but BoostNotAllowed's."""
    limit = settings.max_priority_boost
    if limit <= 0:
        return (False, Reason.BOOST_NOT_ALLOWED,
                "the operator allows no priority boost (its --max-priority-boost is 0; the "
                "chart's kueue.priorityBoost and kueue.maxPriorityBoost set it)")  # fmt: skip
    status, reason, message = _boost_state(policy, settings, refusal, top, foreign,
                                           classes_unknown)  # fmt: skip
    note = raised(policy, settings)
    if note is None:
        return status, reason, message
    if reason == Reason.BOOSTING:
        reason = Reason.BOOST_POLICY_RAISED
    return status, reason, f"{message}; {note}"


def _boost_state(
    policy: PriorityBoostSpec,
    settings: Settings,
    refusal: Refusal | None,
    top: Ceiling | None,
    foreign: str | None,
    classes_unknown: str | None,
) -> tuple[bool, Reason, str]:
    limit = settings.max_priority_boost
    if foreign is not None:
        return (False, Reason.BOOST_WORKLOAD_NOT_OWNED,
                f"the Kueue Workload under the attempt's name is not the job's pod group "
                f"({foreign}): rljob writes no priority boost on it")  # fmt: skip
    if refusal is not None:
        return (False, Reason.BOOST_WRITE_REFUSED,
                f"the API server refused the priority boost on the attempt's Workload "
                f"{refusal.count} time(s) in a row ({refusal.why}); the next try is at "
                f"{iso_precise(refusal.retry_at())}. The operator needs patch on "
                "workloads.kueue.x-k8s.io (the chart's kueue.priorityBoost: true)")  # fmt: skip
    if classes_unknown is not None:
        return (False, Reason.BOOST_CEILING_UNKNOWN,
                f"the operator cannot list the cluster's priority classes ({classes_unknown}), "
                "so it cannot keep the boost below the next class above the job's: the boost "
                "is held at 0 until a list succeeds (the operator lists them at its start and "
                "every 10 minutes). It needs list and watch on priorityclasses.scheduling.k8s.io "
                "and workloadpriorityclasses.kueue.x-k8s.io, which the chart grants")  # fmt: skip
    unclassed = allowed(policy, settings).max_boost
    if top is not None and top.boost < unclassed:
        return (True, Reason.BOOST_CLAMPED,
                f"the boost goes up to {top.boost}, {top.describe()}: Kueue preempts the job "
                "for a higher class only while the job's priority plus boost is below "
                "it")  # fmt: skip
    if policy.max_boost is not None and policy.max_boost > limit:
        return (True, Reason.BOOST_CLAMPED,
                f"spec.queueing.priorityBoost.maxBoost {policy.max_boost} is above the "
                f"operator's limit: the boost goes up to {limit}")  # fmt: skip
    return (
        True,
        Reason.BOOSTING,
        f"the boost follows the work at risk, up to {allowed(policy, settings, top).max_boost}",
    )


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


@dataclass(frozen=True)
class Saved:
    """What the job's checkpoint folder says: its newest complete checkpoint (step, time) and
    the trainer's progress.json (last finished step, step time). Read by the caller."""

    step: int | None = None
    at: datetime | None = None
    finished_step: int | None = None
    step_seconds: float | None = None
    save_seconds: float | None = None


@dataclass(frozen=True)
class SavedRead:
    """What a pass read from the job's checkpoint folder for the boost, kept for the next."""

    attempt: int
    at: datetime
    saved: Saved

    def fresh(self, attempt: int, now: datetime, policy: PriorityBoostSpec) -> bool:
        age = (now - self.at).total_seconds()
        return attempt == self.attempt and 0 <= age < policy.min_interval_seconds


def saves_on_notice(spec: JobSpec, status: JobStatus) -> bool:
    """Whether the job's trainer saves when its pods are told to go: by itself (rljob's own);
    through rljob's bridge (RLinf, verl) unless turned off or the SaveOnNotice condition says
    it cannot; anything else is not known to."""
    how = framework(spec.framework).save_on_notice
    if how != "bridge":
        return how == "trainer"
    if not spec.ray.save_on_notice:
        return False
    said = find_condition(status.conditions, ConditionType.SAVE_ON_NOTICE)
    return said is None or said.get("status") != "False"


def restart_seconds(status: JobStatus) -> float:
    """The median time from an end of the job to its next gang all running, over the
    recoveries the status keeps; 0 before the first."""
    spans = []
    for record in status.recoveries:
        detected, running = record.detected_at, record.first_running_at
        if detected and running:
            spans.append(max(0.0, (parse_iso(running) - parse_iso(detected)).total_seconds()))
    return statistics.median(spans) if spans else 0.0


def wants_boost(spec: JobSpec, queue: str | None, status: JobStatus) -> bool:
    """Whether a pass should look at the job's checkpoints for its boost: it is on, the job
    is in a Kueue queue, and its attempt runs (a pending one has nothing at risk)."""
    running = status.phase == Phase.RUNNING
    return spec.queueing.priority_boost.enabled and bool(queue) and running


def running_since(status: JobStatus, now: datetime) -> datetime:
    """When the attempt's gang was all running (its recovery record), else created."""
    records = [r for r in status.recoveries if r.attempt == status.attempt]
    stamp = (records[-1].first_running_at if records else None) or status.attempt_creation_time
    return parse_iso(stamp) if stamp else now


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
    risk = AtRisk(
        gang_gpus(spec), running_since(status, now), saved.at, saved.step, saved.finished_step,
        saved.step_seconds, saved.save_seconds,
        grace_seconds=spec.grace_seconds if saves_on_notice(spec, status) else None,
        abandons_step=framework(spec.framework).abandons_step,
        restart_seconds=restart_seconds(status),
    )  # fmt: skip
    at_risk = risk.gpu_seconds(now)
    growing = risk.gpus if risk.grows(now) else 0
    decided = next_write(at_risk, growing, written, now, policy)
    if decided.value is None:
        return BoostPlan(None, decided.wake_after)
    annotations = {
        c.KUEUE_PRIORITY_BOOST_ANNOTATION: annotation_value(decided.value),
        c.PRIORITY_BOOST_TIME_ANNOTATION: iso_precise(now),
    }
    basis = BoostBasis(
        decided.value, round(at_risk, 1), risk.gpus, round(risk.lost_work_seconds(now), 1),
        round(risk.restart_seconds, 1), iso_precise(now),
    )  # fmt: skip
    return BoostPlan(annotations, decided.wake_after, basis)


def carries(written: Written, basis: BoostBasis) -> bool:
    """Whether the Workload carries the boost `basis` describes: its value, written by rljob
    at the basis's time."""
    return written == Written(basis.boost, parse_iso(basis.time))


def written_on(annotations: dict[str, str]) -> Written:
    return parse_written(
        annotations, c.KUEUE_PRIORITY_BOOST_ANNOTATION, c.PRIORITY_BOOST_TIME_ANNOTATION
    )
