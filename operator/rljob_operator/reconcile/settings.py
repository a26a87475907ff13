"""What the operator's administrator sets for every pass (`rljob operator`'s flags, the chart's
values), in one frozen object that the snapshot carries, so that no setting is threaded
through the layers one by one."""

from __future__ import annotations

from dataclasses import dataclass

# How long a pod may go unseen by any scheduler before its job says so (reconcile.stuck).
SCHEDULER_WAIT_SECONDS = 60.0
# The largest Kueue priority boost any job may have (reconcile.priority_boost). Kueue lets a
# preemptor in only when its priority is strictly higher than a candidate's priority plus
# boost, so a boost below the gap between two WorkloadPriorityClasses reorders jobs of one
# class and never shields one from the next class up; 0 turns boosts off.
MAX_PRIORITY_BOOST = 0


@dataclass(frozen=True)
class Settings:
    scheduler_wait_seconds: float = SCHEDULER_WAIT_SECONDS
    max_priority_boost: int = MAX_PRIORITY_BOOST


DEFAULT_SETTINGS = Settings()
