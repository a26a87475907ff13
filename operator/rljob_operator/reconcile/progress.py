"""An attempt under way: its phase, its recovery's first running pod, the early warning of
a node going away, and pods stuck before they run."""

from __future__ import annotations

from ..api.reasons import ConditionType, EventType, Phase, Reason
from ..api.spec import JobSpec
from ..api.status import find_condition
from ..preemption.classify import Outcome
from .observe import Observed
from .plan import Pass
from .recovery import record_first_running


def progress(p: Pass, spec: JobSpec, seen: Observed) -> None:
    status = p.status
    attempt = status["attempt"]
    if seen.running:
        record_first_running(status, attempt, p.now)
    finished = sum(1 for e in seen.current.values() if e.outcome is Outcome.SUCCEEDED)
    if seen.running and seen.running + finished == spec.nnodes:
        phase, reason = Phase.RUNNING, Reason.ALL_PODS_RUNNING
        message = f"attempt {attempt}: {seen.running} pods running, {finished} finished"
    else:
        phase = Phase.RESTARTING if attempt else Phase.PENDING
        reason = Reason.PODS_NOT_RUNNING
        message = f"attempt {attempt}: {seen.running} of {spec.nnodes} pods running"
    if status.get("phase") != phase and phase == Phase.RUNNING:
        p.event(EventType.NORMAL, Reason.RUNNING, message)
    p.phase(phase, reason, message)
    placed = (Reason.PODS_SCHEDULED, "every pod of the gang is on a node")
    report_stuck(p, ConditionType.PODS_UNSCHEDULABLE, seen.unschedulable, placed)
    started = (Reason.CONTAINERS_STARTED, "every container of the gang has started")
    report_stuck(p, ConditionType.CONTAINERS_NOT_STARTING, seen.not_starting, started)


def report_stuck(
    p: Pass,
    condition: ConditionType,
    stuck: tuple[tuple[str, str, str], ...],
    cleared: tuple[Reason, str],
) -> None:
    """Say so, in a condition and once in an Event per new reason, while a pod of the gang is
    stuck; turn the condition False, with the `cleared` reason and message, once none is.

    Nothing has ended, so no failure is counted: the kubelet keeps retrying a container (an
    image pull backs off up to 5 minutes), the scheduler a pod; the user fixes the image, the
    reference or the request, or room comes free, and the pod goes on.
    """
    current = find_condition(p.status["conditions"], condition)
    if stuck:
        pod, reason, message = stuck[0]
        text = f"pod {pod}: {message}"
        fresh = current is None or current["status"] != "True" or current["reason"] != reason
        p.condition(condition, True, reason, text)
        if fresh:  # waiting in a queue is no trouble (a queue that is not there is)
            queued = reason == Reason.WAITING_FOR_KUEUE
            p.event(EventType.NORMAL if queued else EventType.WARNING, reason, text)
    elif current is not None and current["status"] == "True":
        p.condition(condition, False, *cleared)


def request_checkpoint(p: Pass, seen: Observed) -> None:
    """Early warning: a node is going away, so ask every running trainer to save now."""
    if not seen.unrequested:
        return
    p.plan.request_checkpoint = list(seen.unrequested)
    why = f"pods {', '.join(seen.warned)} are on terminating nodes" if seen.warned else (
        f"{seen.disruptions[0].reason} on {seen.disruptions[0].pod}"
    )  # fmt: skip
    p.event(EventType.NORMAL, Reason.CHECKPOINT_REQUESTED,
            f"asked {len(seen.unrequested)} pods to save now: {why}")  # fmt: skip
