"""What the operator's administrator sets for every pass (`rljob operator`'s flags, the chart's
values), in one frozen object that the snapshot carries, so that no setting is threaded
through the layers one by one."""

from __future__ import annotations

from dataclasses import dataclass

# How long a pod may go unseen by any scheduler before its job says so (reconcile.policies.stuck).
SCHEDULER_WAIT_SECONDS = 60.0
# The largest Kueue priority boost any job may have (reconcile.boost.bounds). Kueue lets a
# preemptor in only when its priority is strictly higher than a candidate's priority plus
# boost, so a boost below the gap between two WorkloadPriorityClasses reorders jobs of one
# class and never shields one from the next class up; 0 turns boosts off.
MAX_PRIORITY_BOOST = 0
# The administrator's floors under two fields of every job's spec.queueing.priorityBoost, which
# set the operator's own work and the boost's scale: minIntervalSeconds (how often the operator
# reads the job's checkpoint folder and may patch its Workload) and gpuSecondsPerPoint (how soon
# the work at risk reaches the limit). A job's value below a floor is raised to it, and its
# PriorityBoost condition says so.
MIN_BOOST_INTERVAL_SECONDS = 60
MIN_GPU_SECONDS_PER_POINT = 60  # one point per GPU-minute at risk


@dataclass(frozen=True)
class Settings:
    scheduler_wait_seconds: float = SCHEDULER_WAIT_SECONDS
    max_priority_boost: int = MAX_PRIORITY_BOOST
    min_boost_interval_seconds: int = MIN_BOOST_INTERVAL_SECONDS
    min_gpu_seconds_per_point: int = MIN_GPU_SECONDS_PER_POINT


DEFAULT_SETTINGS = Settings()
