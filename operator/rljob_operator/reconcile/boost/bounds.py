"""The job's boost policy within the administrator's bounds.

The boost is never negative and never above maxBoost, which is never above the operator's
limit (`rljob operator --max-priority-boost`, the chart's kueue.maxPriorityBoost): the
cluster's administrator, not the job's author, decides how far a job can be lifted. Kueue
lets a preemptor take a candidate's place only when the preemptor's priority plus boost is
higher than the candidate's, so a limit below the gap between two priority classes lets a
boost reorder jobs of one class but never shield a job from a higher class; and the boost
never reaches the next class above the job's own (the ceiling, boost.guards), whatever the
limit. A job asking for more is clamped, and its PriorityBoost condition says so. While the
operator cannot list the classes (no RBAC for them) it cannot know that ceiling, so the boost
is held at 0 until it can.

The author sets the scale and the pace of their job's boost (gpuSecondsPerPoint,
minIntervalSeconds), but never below the administrator's floors (`--min-gpu-seconds-per-point`,
`--min-boost-interval-seconds`): a job's value below one is raised to it, and the condition
says so, so that no job can make the operator read its folder and patch its Workload every
second, or reach the limit with the first GPU-minutes at risk.
"""

from __future__ import annotations

from dataclasses import replace

from ...api.spec import PriorityBoostSpec
from ..settings import Settings
from .guards import Ceiling


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
    boost.guards) and 0 while the classes are not known; its interval and scale at least the
    floors."""
    limit = settings.max_priority_boost
    asked = limit if policy.max_boost is None else policy.max_boost
    cap = limit if top is None else min(limit, top.boost)
    if not classes_known:
        cap = 0
    return replace(floored(policy, settings), max_boost=max(0, min(asked, cap)))
