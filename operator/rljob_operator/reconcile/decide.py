"""One reconcile pass as a pure function: what the cluster shows in, a Plan out.

The caller takes a snapshot of the job, its pods and their nodes (from the watch cache:
reconcile.run.Reconciler.observe), calls `decide`, and carries out the plan
(reconcile.act.apply: fence, create, record, then release, ask, delete and drop the old
PodGroups together, tell). Every decision reads the observed facts and the job's status, never
in-memory state, so an operator restarted at any moment picks up where it was.

A restart is a number: it bumps `status.attempt`. Pods of other attempts are stale
and are deleted; the next gang is created only once none of them runs (each is gone, or
has ended: Succeeded or Failed), so two gangs never run at once.

The pods are sorted into facts first (pod_facts). Each policy has its module in policies/:
failure (budgets and back-off), startup (resume target and the new gang), recovery (the record
of each new gang), suspicion (a checkpoint the trainer crashed on), under_way (an attempt under
way), stuck (pods that cannot be placed or started), finish (success, suspension, TTL),
pod_cleanup (how deletions meet the pods), save_on_notice (whether a job that rljob's bridge
saves can be saved on notice), goodput (where the wall time went); the look for the checkpoint
has lookup/ (finder: the look itself; backoff and wait: a look that fails, one that cannot
start), and Kueue's priority boost boost/ (boost.decide).
"""

from __future__ import annotations

from ..api.reasons import TERMINAL_PHASES, EventType, Phase, Reason
from ..api.spec import SpecError
from ..frameworks import framework
from ..launcher.launchers import launcher_of
from .boost.decide import decide_boost
from .plan import LookupPending, LookupResult, Pass, Plan, account
from .pod_facts import ray_status, sort_pods
from .policies.failure import attempt_ended
from .policies.finish import finished, suspend
from .policies.goodput import TrainedSpan, retimed_at_the_end
from .policies.in_place import drop_kept
from .policies.pod_cleanup import meet_the_pods
from .policies.save_on_notice import report_save_on_notice
from .policies.startup import start_attempt
from .policies.under_way import progress, request_checkpoint
from .snapshot import Snapshot


def decide(snap: Snapshot, lookup: LookupResult | LookupPending | None = None) -> Plan:
    """Drive the job one step towards its spec.

    `lookup` is what the caller found in the checkpoint directory, when it looked, or the
    inspector pod it waits for; a plan with `needs_checkpoint_lookup` asks it to look
    (skipping `lookup_exclude`).
    """
    p = Pass(snap)
    _decide(p, lookup)
    meet_the_pods(p)
    plan = p.done()
    decide_boost(plan, snap)
    account(plan, snap, p.lost, p.retiming)
    return plan


def _decide(p: Pass, lookup: LookupResult | LookupPending | None) -> None:
    spec, trainer_pods = p.snap.spec, list(p.snap.trainers)
    if isinstance(spec, SpecError):
        if p.status.phase != Phase.FAILED:
            p.fail(Reason.INVALID_SPEC, str(spec))
        p.plan.delete = [pod["metadata"]["name"] for pod in trainer_pods]
        return
    p.not_ready_tolerance = spec.restart_policy.node_not_ready_tolerance_seconds

    if p.status.phase in TERMINAL_PHASES:
        finished(p, spec, trainer_pods)
        return
    if spec.suspend:
        suspend(p, trainer_pods)
        return
    launcher = launcher_of(spec)
    if launcher.ALWAYS_BRIDGED or framework(spec.framework).save_on_notice == "bridge":
        report_save_on_notice(p, spec, lookup if isinstance(lookup, LookupResult) else None)

    seen = sort_pods(spec, p.status, trainer_pods, p.snap.nodes, p.now, p.snap.admission)
    if launcher.CLUSTER_STATUS:
        p.update(ray=ray_status(seen, spec.nnodes, framework(spec.framework).reports_steps))
    done = seen.finished(spec, p.status.attempt)
    if done:
        reason, message = done
        if framework(spec.framework).reports_steps:
            span = TrainedSpan.of(p.status.attempt, seen.trained)
            p.retiming = retimed_at_the_end(p.status, span, seen.unready_since, p.now)
        p.phase(Phase.SUCCEEDED, reason, message)
        p.event(EventType.NORMAL, Reason.SUCCEEDED, message)
        finished(p, spec, trainer_pods)
        if launcher.DRIVER_ON_HEAD:
            # Ray workers hold no state once the driver is done, and a worker told to stop
            # would spend its grace period draining towards a head that is gone.
            p.plan.force_delete, p.plan.delete = p.plan.delete, []
        return
    ended = bool(seen.disruptions or seen.failures)
    if ended:
        attempt_ended(p, spec, seen)
    if seen.disruptions or seen.warned:
        request_checkpoint(p, seen)  # after the deletes are planned: it skips those pods
    if ended:
        return
    p.plan.delete = list(seen.stale)
    dropped = drop_kept(p, spec, seen)
    if seen.stale_unended or dropped:  # the old gang may still run (a trainer saving on SIGTERM)
        p.old_gang_runs = True
        p.requeue(1)
    elif not p.status.attempt_creation_time:
        start_attempt(p, spec, lookup, seen)  # the old pods that are left have ended
    else:
        progress(p, spec, seen)


def fail(snap: Snapshot, reason: Reason, message: str) -> Plan:
    """A plan that fails the job for a reason found outside `decide` (for example at creation)."""
    p = Pass(snap)
    p.fail(reason, message)
    plan = p.done()
    account(plan, snap)
    return plan
