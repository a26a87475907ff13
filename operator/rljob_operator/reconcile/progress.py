"""An attempt under way: its phase, its recovery's first running pod, the early warning of
a node going away, and pods stuck before they run (reconcile.stuck)."""

from __future__ import annotations

from ..api.reasons import EventType, Phase, Reason
from ..api.spec import JobSpec
from ..api.timestamps import iso
from ..preemption.classify import Outcome
from .observe import Observed
from .plan import Pass
from .recovery import record_first_running
from .stuck import report_stuck


def progress(p: Pass, spec: JobSpec, seen: Observed) -> None:
    attempt = p.status.attempt
    if seen.running:
        p.update(recoveries=record_first_running(p.status.recoveries, attempt, p.now))
    finished = sum(1 for e in seen.current.values() if e.outcome is Outcome.SUCCEEDED)
    if seen.running and seen.running + finished == spec.nnodes:
        phase, reason = Phase.RUNNING, Reason.ALL_PODS_RUNNING
        message = f"attempt {attempt}: {seen.running} pods running, {finished} finished"
        if p.status.phase != phase:
            p.event(EventType.NORMAL, Reason.RUNNING, message)
        p.phase(phase, reason, message)
    else:
        waiting_for_the_gang(p, spec)
    report_stuck(p, seen.stuck)


def waiting_for_the_gang(p: Pass, spec: JobSpec) -> None:
    """The phase while the attempt's pods do not all run yet. Set as the gang is created too,
    so that the passes that see its pods Pending write nothing. No count of the pods running
    so far: each new count would be one more status write per pod of the gang as it comes up
    (the Running Event says when all run)."""
    attempt = p.status.attempt
    p.phase(
        Phase.RESTARTING if attempt else Phase.PENDING,
        Reason.PODS_NOT_RUNNING,
        f"attempt {attempt}: waiting for its {spec.nnodes} pods to run",
    )


def request_checkpoint(p: Pass, seen: Observed) -> None:
    """Early warning: a node is going away, or a pod's deletion gave it less than its own
    grace period, so ask every running trainer to save now, by the time the first pod of the
    gang is killed where that is known (the save is collective).

    A pod this pass deletes is not asked: its SIGTERM is the same notice, a moment later, and
    the request would be one more write per pod; unless the request says when the first pod
    is killed, which the SIGTERM does not (a trainer counts its own grace period from it)."""
    going = set() if seen.deadline else set(p.plan.delete)
    asked = [pod for pod in seen.unrequested if pod not in going]
    if not asked:
        return
    p.plan.request_checkpoint = asked
    p.plan.checkpoint_deadline = seen.deadline
    if seen.cut_short:
        why = "; ".join(seen.cut_short)
    elif seen.warned:
        why = f"pods {', '.join(seen.warned)} are on terminating nodes"
    else:
        why = f"{seen.disruptions[0].reason} on {seen.disruptions[0].pod}"
    by = f", by {iso(seen.deadline)}" if seen.deadline else ""
    p.event(EventType.NORMAL, Reason.CHECKPOINT_REQUESTED,
            f"asked {len(asked)} pods to save now{by}: {why}")  # fmt: skip
