"""Pods that have not started, the gang's or an inspector's: while the scheduler cannot place
one, no scheduler has looked at one for a while, or the kubelet cannot start its containers,
the job says why in a condition, and once in an Event per new reason; the condition turns
False once none is stuck.

Nothing has ended, so no failure is counted: the kubelet keeps retrying a container (an image
pull backs off up to 5 minutes), the scheduler a pod; the user fixes the image, the reference,
the request or the scheduler, or room comes free, and the pod goes on.

A pod that no scheduler has looked at (no PodScheduled condition, no node) gets the
administrator's scheduler wait (`rljob operator --scheduler-wait-seconds`) before the job
says so: a scheduler that serves its schedulerName writes that condition, or binds the pod,
within seconds. No watch event marks the end of that wait, so the pass asks to come back then.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...api.reasons import ConditionType, EventType, Reason
from ...api.status import find_condition
from ..pod_facts import Stuck

if TYPE_CHECKING:
    from ..plan import Pass


@dataclass(frozen=True)
class Wording:
    """How the messages name the pods: `pod` before a stuck pod's name, and what the
    conditions say once none is stuck."""

    pod: str
    placed: str
    started: str


GANG = Wording(
    "pod", "every pod of the gang is on a node", "every container of the gang has started"
)


def inspector(name: str) -> Wording:
    return Wording("inspector pod", f"inspector pod {name} is on a node",
                   f"inspector pod {name} has started")  # fmt: skip


def report_stuck(p: Pass, stuck: Stuck, words: Wording = GANG) -> tuple[str, str] | None:
    """PodsUnschedulable from the scheduler's words, or from its silence once a pod has waited
    the administrator's scheduler wait for it; ContainersNotStarting from the kubelet's words.
    Returns the reason and message of the first True one, if one is."""
    unseen = []
    for pod, scheduler, waited in stuck.unseen:
        wait = p.snap.settings.scheduler_wait_seconds
        if waited < wait:
            p.requeue(wait - waited + 0.5)
            continue
        unseen.append((Reason.NOT_SEEN_BY_SCHEDULER, f"{words.pod} {pod} has not been seen by a "
                       f"scheduler for {wait:g} s (schedulerName {scheduler}): "
                       "is that scheduler running?"))  # fmt: skip
    unschedulable = [(r, f"{words.pod} {pod}: {why}") for pod, r, why in stuck.unschedulable]
    placed = (Reason.PODS_SCHEDULED, words.placed)
    _report(p, ConditionType.PODS_UNSCHEDULABLE, [*unschedulable, *unseen], placed)
    not_starting = [(r, f"{words.pod} {pod}: {why}") for pod, r, why in stuck.not_starting]
    started = (Reason.CONTAINERS_STARTED, words.started)
    _report(p, ConditionType.CONTAINERS_NOT_STARTING, not_starting, started)
    told = [*unschedulable, *unseen, *not_starting]
    return told[0] if told else None


def _report(
    p: Pass, condition: ConditionType, stuck: list[tuple[str, str]], cleared: tuple[Reason, str]
) -> None:
    """Say so, in the condition and once in an Event per new reason, while a pod is stuck
    (`stuck`: reason and message, the first is told); turn the condition False, with the
    `cleared` reason and message, once none is."""
    current = find_condition(p.status.conditions, condition)
    if stuck:
        reason, text = stuck[0]
        fresh = current is None or current["status"] != "True" or current["reason"] != reason
        p.condition(condition, True, reason, text)
        if fresh:  # waiting in a queue is no trouble (a queue that is not there is)
            queued = reason == Reason.WAITING_FOR_KUEUE
            p.event(EventType.NORMAL if queued else EventType.WARNING, reason, text)
    elif current is not None and current["status"] == "True":
        p.condition(condition, False, *cleared)
