"""The end of an attempt: which budget it spends, and when the next attempt may start.

A disruption (preemption, eviction, a lost node) spends spec.restartPolicy.maxPreemptions
(unlimited unless set) and restarts at once; a failure of the trainer spends maxFailures
and waits out a back-off that grows with the failures so far. Either, past its budget,
fails the job.
"""

from __future__ import annotations

from datetime import timedelta

from ...api.reasons import BUDGET_EXHAUSTED, EndKind, EventType, Phase, Reason
from ...api.spec import JobSpec
from ...api.status import AttemptEnd
from ...api.timestamps import iso
from ..plan import Pass
from ..pod_facts import Observed
from .in_place import keep_survivors
from .recovery import record_detection


def attempt_ended(p: Pass, spec: JobSpec, seen: Observed) -> None:
    """One end of one attempt starts one recovery, however many pods went down with it.

    A disruption outranks failures seen alongside it: when one node is preempted,
    its peers usually crash on the broken collective, and that is not their fault.
    """
    disruptive = bool(seen.disruptions)
    decisive = (seen.disruptions or seen.failures)[0]
    policy, attempt = spec.restart_policy, p.status.attempt
    end = AttemptEnd(
        attempt=attempt,
        kind=EndKind.DISRUPTION if disruptive else EndKind.FAILURE,
        reason=decisive.reason,
        message=decisive.message,
        pod=decisive.pod,
        node=decisive.node or "",
        time=iso(p.now),
        trained_since=p.status.attempt_first_step_time,
    )
    p.update(last_end=end)
    where = f"pod {end.pod}" + (f" on node {end.node}" if end.node else "")
    what = f"{end.reason} ({end.message}; {where})"
    if disruptive:
        limit, count = "maxPreemptions", p.status.preemptions + 1
        p.update(preemptions=count)
        budget_left = policy.max_preemptions is None or count <= policy.max_preemptions
        p.event(EventType.WARNING, Reason.PREEMPTED, f"attempt {attempt} disrupted: {what}")
    else:
        limit, count = "maxFailures", p.status.failures + 1
        p.update(failures=count)
        budget_left = count <= policy.max_failures
        p.event(EventType.WARNING, Reason.TRAINER_FAILED, f"attempt {attempt} failed: {what}")
    kept = keep_survivors(p, spec, seen) if disruptive and budget_left else []
    p.plan.delete = [
        e.pod for rank, e in seen.current.items()
        if rank not in seen.missing and e.pod and e.pod not in kept
    ]  # fmt: skip
    p.plan.delete += list(seen.stale)
    kind = end.kind.lower()
    if not budget_left:
        message = (f"{count} attempts ended by {kind}, more than spec.restartPolicy.{limit} "
                   f"allows; the last: {what}")  # fmt: skip
        p.phase(Phase.FAILED, BUDGET_EXHAUSTED[end.kind], message)
        p.event(EventType.WARNING, Reason.JOB_FAILED, message)
        return
    backoff = 0 if disruptive else policy.failure_backoff(p.status.failures)
    p.update(
        attempt=attempt + 1,
        attempt_creation_time=None,
        attempt_first_step_time=None,
        restart_after=iso(p.now + timedelta(seconds=backoff)) if backoff else None,
        recoveries=record_detection(p.status.recoveries, end, p.now),
    )
    if backoff:
        p.requeue(backoff)
    p.phase(Phase.RESTARTING, end.reason, f"restarting as attempt {attempt + 1} after {kind} "
            f"of {where}: {end.message}")  # fmt: skip
    p.requeue(1)
