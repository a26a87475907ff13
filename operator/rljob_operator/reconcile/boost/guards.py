"""What keeps a job's priority boost its own (boost.bounds and boost.gate apply these):

- **Never over the next class up.** Kueue lets a preemptor take a candidate's place under
  `LowerPriority` only when the preemptor's effective priority is strictly higher than the
  candidate's (`SatisfiesPreemptionPolicy`, pkg/scheduler/preemption/common; effective =
  `spec.priority` + the boost, pkg/util/priority `EffectivePriority`). A Workload of
  priority p below the lowest class value v above it therefore stays preemptible by every
  Workload of that class while its boost is at most v - p - 1: the ceiling. Kueue compares
  the numbers whatever their source, so the classes are those of both:
  WorkloadPriorityClasses (kueue.x-k8s.io) and PriorityClasses (scheduling.k8s.io, which
  Workloads that name no WorkloadPriorityClass take from their pods): a PriorityClass between
  a job of a WorkloadPriorityClass and the next WorkloadPriorityClass is the ceiling too. No
  class above: no ceiling (the operator's limit still bounds the boost).
- **Only on the job's own Workload.** Kueue's pod integration makes every pod of a pod group
  an owner of the group's Workload (`EnsureWorkloadOwnedByAllMembers`, `constructGroup`, in
  pkg/controller/jobs/pod). A Workload under the attempt's name whose owners are not all the
  attempt's pods (none, or another's pod joined the group) is someone else's, or shared with
  someone else: rljob writes no boost there.

Plain functions over the Workload as the cache keeps it; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ... import constants as c

# kueue.x-k8s.io/v1beta1's spec.priorityClassSource, for a Workload written in that version.
V1BETA1_SOURCES = {
    "kueue.x-k8s.io/workloadpriorityclass": c.KUEUE_GROUP,
    "scheduling.k8s.io/priorityclass": c.POD_PRIORITY_GROUP,
}
# The classes of the cluster by group: {group: {class name: value}}.
Classes = Mapping[str, Mapping[str, int]]


def priority_of(workload: dict[str, Any]) -> int:
    """The Workload's own priority (Kueue's `Priority`: spec.priority, else 0)."""
    value = (workload.get("spec") or {}).get("priority")
    return int(value) if isinstance(value, int) else 0


def class_group(workload: dict[str, Any]) -> str:
    """The API group of the classes the Workload's priority comes from: its priorityClassRef
    (v1beta2), its priorityClassSource (v1beta1), else the pods' PriorityClasses."""
    spec = workload.get("spec") or {}
    group = (spec.get("priorityClassRef") or {}).get("group")
    if group in c.PRIORITY_CLASS_KINDS:
        return str(group)
    return V1BETA1_SOURCES.get(spec.get("priorityClassSource") or "", c.POD_PRIORITY_GROUP)


@dataclass(frozen=True)
class Ceiling:
    """The largest boost that keeps the job below the next class above its priority."""

    boost: int
    kind: str  # of that class: WorkloadPriorityClass or PriorityClass
    name: str
    value: int
    priority: int  # the job's Workload's

    def describe(self) -> str:
        return (
            f"below {self.kind} {self.name} ({self.value}), the next class above the job's "
            f"{self.priority}"
        )


def ceiling(workload: dict[str, Any], classes: Classes) -> Ceiling | None:
    """The boost's ceiling: (the lowest class value of either source above the job's
    priority) - (the job's priority) - 1, never below 0; None where no class is above it.
    Of two classes of one value, the one of the Workload's own source is named."""
    own, priority = class_group(workload), priority_of(workload)
    above = [
        (value, group != own, name, group)
        for group, named in classes.items()
        for name, value in named.items()
        if value > priority
    ]
    if not above:
        return None
    value, _, name, group = min(above)
    return Ceiling(
        max(0, value - priority - 1), c.PRIORITY_CLASS_KINDS[group], name, value, priority
    )


def not_owned(workload: dict[str, Any], pods: Iterable[dict[str, Any]], attempt: int) -> str | None:
    """Why the Workload is not the pod group of the job's `attempt` (`pods`: the job's, of any
    attempt); None where it is: it has owners, and every one is a pod of that attempt."""
    owners = workload["metadata"].get("ownerReferences") or []
    if not owners:
        return "it has no owner, and Kueue makes a pod group's pods the owners of its Workload"
    ours = {
        pod["metadata"].get("uid")
        for pod in pods
        if (pod["metadata"].get("labels") or {}).get(c.LABEL_ATTEMPT) == str(attempt)
    } - {None, ""}
    for owner in owners:
        pod = owner.get("kind") == "Pod" and owner.get("apiVersion") == "v1"
        if not pod or owner.get("uid") not in ours:
            return (
                f"its owner {owner.get('kind')} {owner.get('name')} (uid {owner.get('uid')}) is "
                f"not a pod of the job's attempt {attempt}"
            )
    return None
