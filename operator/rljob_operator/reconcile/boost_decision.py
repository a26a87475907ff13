"""The priority boost's part of a pass's plan: its condition, the write, the record of a write
the API server took, and the next look, from what the snapshot holds
(reconcile.snapshot.BoostFacts). The policy is in reconcile.priority_boost, the guards (the
next class up, the Workload's owners) in reconcile.boost_guards; the write itself is
reconcile.act's."""

from __future__ import annotations

from dataclasses import replace

from ..api.reasons import ConditionType
from ..api.spec import SpecError
from ..api.timestamps import iso
from ..launcher.identity import attempt_name
from .boost_guards import ceiling, not_owned
from .plan import Plan
from .priority_boost import boost_condition, carries, plan_boost, wants_boost, written_on
from .snapshot import Snapshot


def decide_boost(plan: Plan, snap: Snapshot) -> None:
    """Add the boost's condition, write and next look to the plan, where the job wants one,
    the operator allows it, no refused write waits out its back-off, and the attempt's Kueue
    Workload is known and owned by the attempt's pods; below the next priority class up, and
    0 while the classes are not known. status.priorityBoost takes the basis of a write once
    the API server took it and the Workload carries it: the pass after the write's."""
    spec, facts = snap.spec, snap.boost
    if isinstance(spec, SpecError) or not wants_boost(spec, snap.queue, plan.status):
        return
    if facts is None:  # the attempt runs from this pass on: the next pass reads for it
        plan.requeue(0)
        return
    settings = snap.settings
    attempt = plan.status.attempt
    found = facts.workload if facts.attempt == attempt else None
    top = foreign = None
    if found is not None:
        foreign = not_owned(found, snap.trainers, attempt)
        top = ceiling(found, facts.classes)
    condition = boost_condition(spec.queueing.priority_boost, settings, facts.refusal, top,
                                foreign, facts.classes_unknown)  # fmt: skip
    plan.status = plan.status.with_condition(
        ConditionType.PRIORITY_BOOST, *condition, iso(snap.now),
        snap.job["metadata"].get("generation"),
    )  # fmt: skip
    if settings.max_priority_boost <= 0:
        return
    annotations = (found or {}).get("metadata", {}).get("annotations") or {}
    taken = facts.accepted
    if found is not None and taken is not None and carries(written_on(annotations), taken):
        plan.status = replace(plan.status, priority_boost=taken)
    refusal = facts.refusal
    if refusal is not None and refusal.retry_at() > snap.now:
        plan.requeue((refusal.retry_at() - snap.now).total_seconds())
        return
    read = facts.saved
    if found is None or foreign is not None or read is None or read.attempt != attempt:
        return
    boost = plan_boost(spec, plan.status, read.saved, written_on(annotations), snap.now,
                       settings, top, facts.classes_unknown is None)  # fmt: skip
    if boost.annotations and boost.basis is not None:
        plan.annotate_workload = (attempt_name(snap.ref.name, attempt), boost.annotations,
                                  boost.basis)  # fmt: skip
        plan.requeue(0)  # to record the boost once the API server took it, or say it refused
    if boost.wake_after is not None:
        plan.requeue(boost.wake_after)
