"""What a preemption of the running attempt would lose now: the measure the boost follows.

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
                            (boost.guards)

A preemption of a job that saves on notice loses about nothing but its restart, which a
big gang pays on every GPU: a 64-GPU gang that just saved is therefore no cheap victim.
Pure functions; the folder is read by the caller (boost.gate).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from datetime import datetime

from ...api.reasons import ConditionType
from ...api.spec import JobSpec, PriorityBoostSpec
from ...api.status import JobStatus, find_condition
from ...api.timestamps import parse_iso
from ...frameworks import framework

GPU_SUFFIX = "/gpu"  # nvidia.com/gpu, amd.com/gpu, ...


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
class Saved:
    """What the job's checkpoint folder says: its newest complete checkpoint (step, time) and
    the trainer's progress.json (last finished step, step time). Read by the caller."""

    step: int | None = None
    at: datetime | None = None
    finished_step: int | None = None
    step_seconds: float | None = None
    save_seconds: float | None = None


def saves_on_notice(spec: JobSpec, status: JobStatus) -> bool:
    """Whether the job's trainer saves when its pods are told to go: by itself (rljob's own);
    through rljob's bridge (RLinf, verl, TRL) unless spec.saveOnNotice turns it off or the
    SaveOnNotice condition says it cannot; anything else is not known to."""
    how = framework(spec.framework).save_on_notice
    if how != "bridge":
        return how == "trainer"
    if not spec.save_on_notice:
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


def running_since(status: JobStatus, now: datetime) -> datetime:
    """When the attempt's gang was all running (its recovery record), else created."""
    records = [r for r in status.recoveries if r.attempt == status.attempt]
    stamp = (records[-1].first_running_at if records else None) or status.attempt_creation_time
    return parse_iso(stamp) if stamp else now


def at_risk(spec: JobSpec, status: JobStatus, saved: Saved, now: datetime) -> AtRisk:
    """The running attempt's work at risk, from its spec, status and checkpoint folder."""
    return AtRisk(
        gang_gpus(spec), running_since(status, now), saved.at, saved.step, saved.finished_step,
        saved.step_seconds, saved.save_seconds,
        grace_seconds=spec.grace_seconds if saves_on_notice(spec, status) else None,
        abandons_step=framework(spec.framework).abandons_step,
        restart_seconds=restart_seconds(status),
    )  # fmt: skip
