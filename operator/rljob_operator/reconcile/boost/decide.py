"""The boost's part of a pass's plan: its condition, the write, the record of a write the API
server took, and the next look, from what the snapshot holds (boost.facts) and through the
gate observe went through (boost.gate). The write itself is reconcile.act's."""

from __future__ import annotations

from dataclasses import replace

from ...api.reasons import ConditionType
from ...api.timestamps import iso
from ...launcher.identity import attempt_name
from ..plan import Plan
from ..snapshot import Snapshot
from .condition import boost_condition
from .gate import Guard, closed_by, wants_boost
from .guards import ceiling, not_owned
from .writes import carries, plan_boost, written_on


def decide_boost(plan: Plan, snap: Snapshot) -> None:
    """Add the boost's condition, write and next look to the plan, where the job wants one and
    the gate is open: the operator allows it, no refused write waits out its back-off, and
    the attempt's Kueue Workload is known and owned by the attempt's pods; below the next
    priority class up, and 0 while the classes are not known. status.priorityBoost takes the
    basis of a write once the API server took it and the Workload carries it: the pass after
    the write's."""
    spec, facts = snap.spec, snap.boost
    if not wants_boost(spec, snap.queue, plan.status):
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
    closed = closed_by(settings, facts.refusal, found, foreign, snap.now)
    if closed is Guard.NOT_ALLOWED:
        return
    annotations = (found or {}).get("metadata", {}).get("annotations") or {}
    taken = facts.accepted
    if found is not None and taken is not None and carries(written_on(annotations), taken):
        plan.status = replace(plan.status, priority_boost=taken)
    if closed is Guard.BACKING_OFF:
        assert facts.refusal is not None  # what the gate backs off from
        plan.requeue((facts.refusal.retry_at() - snap.now).total_seconds())
        return
    read = facts.saved
    if closed is not None or read is None or read.attempt != attempt:
        return
    boost = plan_boost(spec, plan.status, read.saved, written_on(annotations), snap.now,
                       settings, top, facts.classes_unknown is None)  # fmt: skip
    if boost.annotations and boost.basis is not None:
        plan.annotate_workload = (attempt_name(snap.ref.name, attempt), boost.annotations,
                                  boost.basis)  # fmt: skip
        plan.requeue(0)  # to record the boost once the API server took it, or say it refused
    if boost.wake_after is not None:
        plan.requeue(boost.wake_after)
