"""An attempt under way: its phase, its recovery's first running pod, its first finished
step, the early warning of a node going away, and pods stuck before they run
(reconcile.policies.stuck)."""

from __future__ import annotations

from datetime import datetime

from ...api.reasons import EventType, Phase, Reason
from ...api.spec import JobSpec
from ...api.status import Recovery
from ...api.timestamps import iso, iso_precise, parse_iso
from ...frameworks import framework
from ...preemption.classify import Outcome
from ..plan import Pass
from ..pod_facts import Observed
from .recovery import record_first_running, record_first_step
from .stuck import report_stuck


def progress(p: Pass, spec: JobSpec, seen: Observed) -> None:
    attempt = p.status.attempt
    if seen.running:
        p.update(recoveries=record_first_running(p.status.recoveries, attempt, p.now))
        if seen.ready_since and framework(spec.framework).reports_steps:
            first_step(p, seen.ready_since)
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


def first_step(p: Pass, ready_since: datetime) -> None:
    """The attempt has finished its first training step (its trainer pod turned Ready): the
    end of its framework start, and of the recovery that led to it (once each)."""
    if p.status.attempt_first_step_time:
        return
    created = parse_iso(p.status.attempt_creation_time or iso(ready_since))
    at = min(max(ready_since, created), p.now)
    p.update(attempt_first_step_time=iso_precise(at))
    recovered = record_first_step(p.status.recoveries, p.status.attempt, at)
    if recovered is None:
        message = (f"first step of attempt {p.status.attempt}: "
                   f"{(at - created).total_seconds():.0f}s after its gang was created")  # fmt: skip
    else:
        p.update(recoveries=(*p.status.recoveries[:-1], recovered))
        message = first_step_after_resume(recovered, at)
    p.event(EventType.NORMAL, Reason.FIRST_STEP, message)


def first_step_after_resume(record: Recovery, at: datetime) -> str:
    """'first step after resume: 103s after detection (pod start 7s, framework start 96s)'."""
    detected = parse_iso(record.detected_at)
    running = parse_iso(record.first_running_at) if record.first_running_at else at
    return (f"first step after resume: {(at - detected).total_seconds():.0f}s after detection "
            f"(pod start {(running - detected).total_seconds():.0f}s, framework start "
            f"{(at - running).total_seconds():.0f}s)")  # fmt: skip


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
    is killed, which the SIGTERM does not (a trainer counts its own grace period from it).

    A pod asked before by a later time, or by none, is asked again when that time moves
    earlier (pod_facts.asked_for_later): its trainer takes the earliest deadline it reads. A pod
    being deleted is not: its kubelet no longer refreshes its volumes. Nor is its deletion
    shortened to the deadline, which a DELETE with a smaller grace period would do: that tells
    its trainer nothing (it counts its grace from its own SIGTERM) and only kills it sooner,
    overriding the grace its template or an admin's drain gave it. Where a peer is told it needs
    neither: rljob's trainer decides with all its ranks at once, so the peers bring it along."""
    going = set() if seen.deadline else set(p.plan.delete)
    going |= set(p.plan.stop_in_place)  # told to stop by their run annotation instead
    asked = [pod for pod in seen.unrequested if pod not in going]
    again = [pod for pod in seen.asked_for_later if pod not in p.plan.stop_in_place]
    if not asked and not again:
        return
    p.plan.request_checkpoint = asked + again
    p.plan.checkpoint_deadline = seen.deadline
    if seen.cut_short:
        why = "; ".join(seen.cut_short)
    elif seen.warned:
        why = f"pods {', '.join(seen.warned)} are on terminating nodes"
    else:
        why = f"{seen.disruptions[0].reason} on {seen.disruptions[0].pod}"
    by = f", by {iso(seen.deadline)}" if seen.deadline else ""
    sooner = f" ({len(again)} of them again, sooner than before)" if again else ""
    p.event(EventType.NORMAL, Reason.CHECKPOINT_REQUESTED,
            f"asked {len(asked) + len(again)} pods to save now{by}{sooner}: {why}")  # fmt: skip
