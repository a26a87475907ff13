"""One reconcile pass as a pure function: what the cluster shows in, a Plan out.

The caller lists the job's pods and their nodes, calls `decide`, and carries out
the plan: write the status first, then delete and create children, then send the
events. Every decision reads the observed facts and the job's status, never
in-memory state, so an operator restarted at any moment picks up where it was.

A restart is a number: it bumps `status.attempt`. Pods of other attempts are stale
and are deleted; the next gang is created only once none of them runs (each is gone, or
has ended: Succeeded or Failed), so two gangs never run at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from rljob_contract import CHECKPOINT_REQUEST_ANNOTATION

from .. import constants as c
from ..api.spec import JobSpec, RestartPolicy, SpecError, parse_spec
from ..api.status import find_condition, set_condition
from ..api.timestamps import iso, iso_precise, parse_iso
from ..launcher import gang
from ..launcher.pods import (
    JobRef,
    Placement,
    ResumeTarget,
    attempt_name,
    check_template,
    desired_pods,
    desired_service,
)
from ..preemption.classify import (
    QUEUED_REASON,
    Outcome,
    PodEnd,
    classify_facts,
    facts,
    not_ready_seconds,
)
from . import goodput

MAX_RECOVERIES = 20
# A checkpoint lookup that fails (an inspector pod that crashes or never ends) is retried
# after a doubling back-off; from the third failure in a row the job says so in a condition.
LOOKUP_BACKOFF_SECONDS = 5
MAX_LOOKUP_BACKOFF_SECONDS = 300
LOOKUP_FAILURES_BEFORE_CONDITION = 3
LOOKUP_FAILED_CONDITION = "CheckpointLookupFailed"
# True while the kubelet cannot start a container of the gang (a missing image, a bad
# volume or env reference, a container that crashes before the trainer runs).
NOT_STARTING_CONDITION = "ContainersNotStarting"
# True while the scheduler cannot place a pod of the gang (no node has room, a selector or
# affinity no node matches, a taint): its reason and message, so that `kubectl describe` says why.
UNSCHEDULABLE_CONDITION = "PodsUnschedulable"

# The condition types, one per phase that has one.
CONDITION_FOR_PHASE = {
    c.RUNNING: "Running",
    c.RESTARTING: "Restarting",
    c.SUSPENDED: "Suspended",
    c.SUCCEEDED: "Succeeded",
    c.FAILED: "Failed",
}


@dataclass(frozen=True)
class Event:
    type: str  # Normal or Warning
    reason: str
    message: str


@dataclass(frozen=True)
class LookupResult:
    """What a look at the checkpoint directory found (see reconcile.lookup)."""

    target: ResumeTarget | None
    last_finished_step: int | None = None  # from the trainer's progress.json, if any
    detail: str = ""  # what was rejected, or why nothing was found
    failure: str | None = None  # the look itself failed: nothing is known about the folders
    step_seconds: float | None = None  # the trainer's step time, from progress.json, if any


@dataclass
class Plan:
    status: dict[str, Any]
    create: list[dict[str, Any]] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)  # pod names, deleted with their grace period
    force_delete: list[str] = field(default_factory=list)  # on a node that is gone: grace 0
    request_checkpoint: list[str] = field(default_factory=list)  # pods to ask to save now
    release: list[str] = field(default_factory=list)  # pods whose end is recorded: drop finalizer
    delete_pod_groups: list[str] = field(default_factory=list)  # of attempts that are over
    events: list[Event] = field(default_factory=list)
    needs_checkpoint_lookup: bool = False
    delete_job: bool = False
    requeue_after: float | None = None

    @property
    def lookup_exclude(self) -> tuple[str, ...]:
        """Checkpoints a lookup must pass over: those marked bad."""
        return tuple(b["path"] for b in self.status.get("badCheckpoints", []))


@dataclass(frozen=True)
class Observed:
    """The job's pods sorted into facts that the decisions read."""

    current: dict[int, PodEnd]  # rank -> state, for pods of the current attempt
    missing: tuple[int, ...]  # ranks of the current attempt with no pod
    stale: tuple[str, ...]  # pods of other attempts, still present
    running: int
    warned: tuple[str, ...] = ()  # active pods whose node carries a termination taint
    unrequested: tuple[str, ...] = ()  # running pods not yet asked to checkpoint
    ready: frozenset[int] = frozenset()  # ranks whose pod is Ready
    not_starting: tuple[tuple[str, str, str], ...] = ()  # (pod, kubelet reason, message)
    unschedulable: tuple[tuple[str, str, str], ...] = ()  # (pod, scheduler reason, message)
    stale_unended: tuple[str, ...] = ()  # stale pods that may still run: not Succeeded/Failed

    @property
    def disruptions(self) -> list[PodEnd]:
        return [e for e in self.current.values() if e.outcome is Outcome.DISRUPTED]

    @property
    def failures(self) -> list[PodEnd]:
        return [e for e in self.current.values() if e.outcome is Outcome.FAILED]

    def all_succeeded(self, nnodes: int) -> bool:
        return len(self.current) == nnodes and all(
            e.outcome is Outcome.SUCCEEDED for e in self.current.values()
        )

    @property
    def head_succeeded(self) -> bool:
        head = self.current.get(0)
        return head is not None and head.outcome is Outcome.SUCCEEDED

    def finished(self, spec: JobSpec, attempt: int) -> tuple[str, str] | None:
        """(reason, message) when the attempt has done its work, else None.

        Under Ray the driver on the head is the program: its exit 0 ends the job, and the
        worker pods, which never exit on their own, are stopped then.
        """
        if spec.launcher == "ray" and self.head_succeeded:
            return "DriverSucceeded", f"attempt {attempt}: the Ray driver on the head exited 0"
        if self.all_succeeded(spec.nnodes):
            return "AllPodsSucceeded", f"all {spec.nnodes} pods of attempt {attempt} completed"
        return None


def observe(
    spec: JobSpec,
    status: dict[str, Any],
    pods: list[dict[str, Any]],
    nodes: dict[str, dict[str, Any] | None],
    now: datetime,
) -> Observed:
    attempt = status.get("attempt", 0)
    current: dict[int, PodEnd] = {}
    stale: list[str] = []
    stale_unended: list[str] = []
    warned: list[str] = []
    unrequested: list[str] = []
    ready: set[int] = set()
    not_starting: list[tuple[str, str, str]] = []
    unschedulable: list[tuple[str, str, str]] = []
    for pod in pods:
        meta = pod["metadata"]
        labels = meta.get("labels", {})
        if labels.get(c.LABEL_ATTEMPT) != str(attempt):
            stale.append(meta["name"])
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                stale_unended.append(meta["name"])
            continue
        node_name = pod.get("spec", {}).get("nodeName")
        pod_facts = facts(pod, nodes.get(node_name) if node_name else None, now)
        end = classify_facts(pod_facts, spec.restart_policy)
        rank = int(labels[c.LABEL_NODE_RANK])
        current[rank] = end
        if pod_facts.ready:
            ready.add(rank)
        if end.outcome is Outcome.ACTIVE and pod_facts.not_starting:
            not_starting.append((meta["name"], *pod_facts.not_starting))
        if end.outcome is Outcome.ACTIVE and pod_facts.unschedulable:
            unschedulable.append((meta["name"], *pod_facts.unschedulable))
        if end.outcome is Outcome.ACTIVE and pod_facts.node_termination_taint:
            warned.append(meta["name"])
        requested = CHECKPOINT_REQUEST_ANNOTATION in (meta.get("annotations") or {})
        if pod_facts.phase == "Running" and pod_facts.exit_code is None and not requested:
            unrequested.append(meta["name"])
    created = bool(status.get("attemptCreationTime"))
    missing = tuple(r for r in range(spec.nnodes) if r not in current) if created else ()
    for rank in missing:
        current[rank] = PodEnd(
            Outcome.DISRUPTED, "PodDeleted", "the pod is gone: deleted by someone other than rljob",
            f"rank {rank}", None,
        )  # fmt: skip
    running = sum(
        1 for e in current.values() if e.outcome is Outcome.ACTIVE and e.reason == "Running"
    )
    return Observed(
        current, missing, tuple(sorted(stale)), running, tuple(warned), tuple(unrequested),
        frozenset(ready), tuple(sorted(not_starting)), tuple(sorted(unschedulable)),
        tuple(sorted(stale_unended)),
    )  # fmt: skip


class _Pass:
    """The state of one decision: the status being built, and what to do."""

    def __init__(self, job: dict[str, Any], now: datetime, workload_api: bool = False) -> None:
        meta = job["metadata"]
        self.now = now
        self.workload_api = workload_api  # the API server serves gang scheduling
        self.queue: str | None = (meta.get("labels") or {}).get(c.KUEUE_QUEUE_LABEL)
        self.generation = meta.get("generation")
        self.ref = JobRef(meta["name"], meta["namespace"], meta.get("uid", ""))
        status = dict(job.get("status") or {})
        status.setdefault("attempt", 0)
        status.setdefault("preemptions", 0)
        status.setdefault("failures", 0)
        status.setdefault("conditions", [])
        status["observedGeneration"] = self.generation
        self.plan = Plan(status=status)
        self.not_ready_tolerance: float = RestartPolicy().node_not_ready_tolerance_seconds
        self.lost: tuple[int, float | None] | None = None  # (steps, seconds) a new gang lost

    @property
    def status(self) -> dict[str, Any]:
        return self.plan.status

    def event(self, type_: str, reason: str, message: str) -> None:
        self.plan.events.append(Event(type_, reason, message))

    def phase(self, phase: str, reason: str, message: str) -> None:
        """Set the phase and its condition; the other phase conditions become False."""
        changed = self.status.get("phase") != phase
        self.status["phase"] = phase
        conditions = self.status["conditions"]
        for name, cond_type in CONDITION_FOR_PHASE.items():
            if name == phase:
                conditions, _ = set_condition(
                    conditions, cond_type, True, reason, message, iso(self.now), self.generation
                )
            elif any(x["type"] == cond_type for x in conditions):
                conditions, _ = set_condition(
                    conditions, cond_type, False, reason, message, iso(self.now), self.generation
                )
        self.status["conditions"] = conditions
        if changed and phase in (c.SUCCEEDED, c.FAILED):
            self.status["completionTime"] = iso(self.now)

    def requeue(self, seconds: float) -> None:
        current = self.plan.requeue_after
        self.plan.requeue_after = seconds if current is None else min(current, seconds)

    def account(self, job: dict[str, Any]) -> None:
        """Bring status.goodput up to date, only when the pass writes the status anyway."""
        before = job.get("status") or {}

        def rest(status: dict[str, Any]) -> dict[str, Any]:
            return {k: v for k, v in status.items() if k != "goodput"}

        if "goodput" in before and rest(before) == rest(self.status) and not self.lost:
            return
        stamp = job["metadata"].get("creationTimestamp")
        created = parse_iso(stamp) if stamp else self.now
        figures = goodput.stored(before, created, self.now)
        figures = figures.advanced(goodput.bucket_of(before), self.now)
        if self.lost:
            figures = figures.with_lost(*self.lost)
        self.status["goodput"] = figures.to_dict()


def decide(
    job: dict[str, Any],
    pods: list[dict[str, Any]],
    nodes: dict[str, dict[str, Any] | None],
    now: datetime,
    lookup: LookupResult | None = None,
    workload_api: bool = False,
) -> Plan:
    """Drive the job one step towards its spec.

    `lookup` is what the caller found in the checkpoint directory, when it looked;
    a plan with `needs_checkpoint_lookup` asks it to look (skipping `lookup_exclude`).
    `workload_api`: the API server serves the Workload API, for all-or-nothing gangs.
    """
    p = _Pass(job, now, workload_api)
    pods = [
        pod for pod in pods if pod["metadata"].get("labels", {}).get(c.LABEL_ROLE) == c.ROLE_TRAINER
    ]
    _decide(p, job, pods, nodes, lookup)
    p.plan.release = _ends_recorded(p, pods)
    _no_grace_for_lost_nodes(p.plan, pods, nodes, now, p.not_ready_tolerance)
    _wake_when_tolerance_ends(p, pods, nodes)
    _skip_pods_already_going(p.plan, pods)
    p.account(job)
    return p.plan


def _skip_pods_already_going(plan: Plan, pods: list[dict[str, Any]]) -> None:
    """A pod being deleted needs no second delete of the same kind: every pass until it is
    gone would send one (a write each, many under a burst of recoveries)."""
    going = {pod["metadata"]["name"]: pod["metadata"] for pod in pods
             if pod["metadata"].get("deletionTimestamp")}  # fmt: skip
    plan.delete = [name for name in plan.delete if name not in going]
    plan.force_delete = [
        name for name in plan.force_delete
        if going.get(name, {}).get("deletionGracePeriodSeconds") != 0
    ]  # fmt: skip


def _wake_when_tolerance_ends(
    p: _Pass, pods: list[dict[str, Any]], nodes: dict[str, dict[str, Any] | None]
) -> None:
    """A pod's node is NotReady but within the job's tolerance: come back when that runs
    out, because no watch event will say so."""
    for pod in pods:
        node = nodes.get(pod.get("spec", {}).get("nodeName") or "")
        waited = not_ready_seconds(node, p.now) if node is not None else None
        if waited is not None and waited <= p.not_ready_tolerance:
            p.requeue(p.not_ready_tolerance - waited + 0.5)


def _no_grace_for_lost_nodes(
    plan: Plan,
    pods: list[dict[str, Any]],
    nodes: dict[str, dict[str, Any] | None],
    now: datetime,
    tolerance: float,
) -> None:
    """A pod whose node is gone, or NotReady for longer than the job tolerates, has no
    kubelet to end it: deleted with a grace period it would stay Terminating until the
    pod garbage collector (a gone node) or forever (a dead kubelet), and the next gang
    waits for it. Delete it at once, as that collector would.

    A NotReady node may only be cut off rather than down; its pods then go on until its
    kubelet returns and ends them. Set restartPolicy.nodeNotReadyToleranceSeconds above
    the partitions your network has.
    """

    def unreachable(node_name: str | None) -> bool:
        if node_name not in nodes:
            return False
        node = nodes[node_name]
        waited = not_ready_seconds(node, now) if node is not None else None
        return node is None or (waited is not None and waited > tolerance)

    lost = {
        pod["metadata"]["name"]
        for pod in pods
        if unreachable(pod.get("spec", {}).get("nodeName"))
        and (pod["metadata"]["name"] in plan.delete or pod["metadata"].get("deletionTimestamp"))
    }
    plan.delete = [name for name in plan.delete if name not in lost]
    plan.force_delete = sorted(lost.union(plan.force_delete))


def _decide(
    p: _Pass,
    job: dict[str, Any],
    trainer_pods: list[dict[str, Any]],
    nodes: dict[str, dict[str, Any] | None],
    lookup: LookupResult | None,
) -> None:
    try:
        spec = parse_spec(job.get("spec") or {})
        check_template(spec, p.ref)
        p.not_ready_tolerance = spec.restart_policy.node_not_ready_tolerance_seconds
    except SpecError as exc:
        if p.status.get("phase") != c.FAILED:
            p.phase(c.FAILED, "InvalidSpec", str(exc))
            p.event("Warning", "InvalidSpec", str(exc))
        p.plan.delete = [pod["metadata"]["name"] for pod in trainer_pods]
        return

    if p.status.get("phase") in c.TERMINAL_PHASES:
        _finished(p, spec, trainer_pods)
        return
    if spec.suspend:
        _suspend(p, trainer_pods)
        return

    seen = observe(spec, p.status, trainer_pods, nodes, p.now)
    if spec.launcher == "ray":
        p.status["ray"] = ray_status(seen, spec.nnodes)
    finished = seen.finished(spec, p.status["attempt"])
    if finished:
        reason, message = finished
        p.phase(c.SUCCEEDED, reason, message)
        p.event("Normal", "Succeeded", message)
        _finished(p, spec, trainer_pods)
        if spec.launcher == "ray":
            # Ray workers hold no state once the driver is done, and a worker told to stop
            # would spend its grace period draining towards a head that is gone.
            p.plan.force_delete, p.plan.delete = p.plan.delete, []
        return
    if seen.disruptions or seen.warned:
        _request_checkpoint(p, seen)
    if seen.disruptions or seen.failures:
        _attempt_ended(p, spec, seen)
        return
    p.plan.delete = list(seen.stale)
    if seen.stale_unended:  # the old gang may still run (a trainer saving on SIGTERM)
        p.requeue(1)
    elif not p.status.get("attemptCreationTime"):
        _start_attempt(p, spec, lookup)  # the old pods that are left have ended
    else:
        _progress(p, spec, seen)


def ray_status(seen: Observed, nnodes: int) -> dict[str, Any]:
    """What `kubectl get` shows of the Ray cluster: its nodes' pods and the driver.

    The head starts the driver only once every Ray node has joined, so a running
    driver means a whole cluster.
    """
    head = seen.current.get(0)
    if head is None or (head.outcome is Outcome.ACTIVE and head.reason != "Running"):
        driver = "Pending"
    elif head.outcome is Outcome.ACTIVE:
        driver = "Running" if 0 in seen.ready else "WaitingForNodes"
    else:
        driver = str(head.outcome)
    return {"nodes": nnodes, "nodesRunning": seen.running, "driver": driver}


def _ends_recorded(p: _Pass, pods: list[dict[str, Any]]) -> list[str]:
    """Pods whose end no longer needs keeping: of another attempt, or of a job at rest."""
    at_rest = p.status.get("phase") in (*c.TERMINAL_PHASES, c.SUSPENDED)
    attempt = str(p.status["attempt"])
    return [
        pod["metadata"]["name"]
        for pod in pods
        if c.FINALIZER in (pod["metadata"].get("finalizers") or [])
        and (at_rest or pod["metadata"].get("labels", {}).get(c.LABEL_ATTEMPT) != attempt)
    ]


def fail(job: dict[str, Any], now: datetime, reason: str, message: str) -> Plan:
    """A plan that fails the job for a reason found outside `decide` (for example at creation)."""
    p = _Pass(job, now)
    p.phase(c.FAILED, reason, message)
    p.event("Warning", reason, message)
    p.account(job)
    return p.plan


def _request_checkpoint(p: _Pass, seen: Observed) -> None:
    """Early warning: a node is going away, so ask every running trainer to save now."""
    if not seen.unrequested:
        return
    p.plan.request_checkpoint = list(seen.unrequested)
    why = f"pods {', '.join(seen.warned)} are on terminating nodes" if seen.warned else (
        f"{seen.disruptions[0].reason} on {seen.disruptions[0].pod}"
    )  # fmt: skip
    p.event(
        "Normal", "CheckpointRequested", f"asked {len(seen.unrequested)} pods to save now: {why}"
    )


def _not_deleting(pods: list[dict[str, Any]]) -> list[str]:
    return [pod["metadata"]["name"] for pod in pods if not pod["metadata"].get("deletionTimestamp")]


def _finished(p: _Pass, spec: JobSpec, trainer_pods: list[dict[str, Any]]) -> None:
    p.plan.delete = _not_deleting(
        [
            pod
            for pod in trainer_pods
            if pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")
        ]
    )
    ttl = spec.ttl_seconds_after_finished
    if ttl is None or not p.status.get("completionTime"):
        return
    expires = parse_iso(p.status["completionTime"]) + timedelta(seconds=ttl)
    if p.now >= expires:
        p.plan.delete_job = True
    else:
        p.requeue((expires - p.now).total_seconds())


def _suspend(p: _Pass, trainer_pods: list[dict[str, Any]]) -> None:
    """Suspended means no pods; the next attempt resumes from the newest checkpoint."""
    if p.status.get("attemptCreationTime"):
        p.status["attempt"] += 1
        p.status.pop("attemptCreationTime", None)
    p.plan.delete = _not_deleting(trainer_pods)
    if p.status.get("phase") != c.SUSPENDED:
        p.phase(c.SUSPENDED, "JobSuspended", "spec.suspend is true: the job has no pods")
        p.event("Normal", "Suspended", "the job is suspended; its pods are being stopped")


def _attempt_ended(p: _Pass, spec: JobSpec, seen: Observed) -> None:
    """One end of one attempt starts one recovery, however many pods went down with it.

    A disruption outranks failures seen alongside it: when one node is preempted,
    its peers usually crash on the broken collective, and that is not their fault.
    """
    disruptive = bool(seen.disruptions)
    decisive = (seen.disruptions or seen.failures)[0]
    status, policy = p.status, spec.restart_policy
    attempt = status["attempt"]
    kind = "Disruption" if disruptive else "Failure"
    status["lastEnd"] = {
        "attempt": attempt,
        "kind": kind,
        "reason": decisive.reason,
        "message": decisive.message,
        "pod": decisive.pod,
        "node": decisive.node or "",
        "time": iso(p.now),
    }
    where = f"pod {decisive.pod}" + (f" on node {decisive.node}" if decisive.node else "")
    if disruptive:
        status["preemptions"] += 1
        budget_left = (
            policy.max_preemptions is None or status["preemptions"] <= policy.max_preemptions
        )
        p.event("Warning", "Preempted", f"attempt {attempt} disrupted: {decisive.reason} "
                f"({decisive.message}; {where})")  # fmt: skip
    else:
        status["failures"] += 1
        budget_left = status["failures"] <= policy.max_failures
        p.event("Warning", "TrainerFailed", f"attempt {attempt} failed: {decisive.reason} "
                f"({decisive.message}; {where})")  # fmt: skip
    p.plan.delete = [name for name in _names(seen) if name] + list(seen.stale)
    if not budget_left:
        limit = "maxPreemptions" if disruptive else "maxFailures"
        count = status["preemptions"] if disruptive else status["failures"]
        message = (
            f"{count} attempts ended by {kind.lower()}, more than spec.restartPolicy.{limit} "
            f"allows; the last: {decisive.reason} ({decisive.message}; {where})"
        )
        p.phase(c.FAILED, f"{kind}BudgetExhausted", message)
        p.event("Warning", "JobFailed", message)
        return
    status["attempt"] = attempt + 1
    status.pop("attemptCreationTime", None)
    backoff = 0 if disruptive else policy.failure_backoff(status["failures"])
    if backoff:
        status["restartAfter"] = iso(p.now + timedelta(seconds=backoff))
        p.requeue(backoff)
    else:
        status.pop("restartAfter", None)
    recoveries = [*status.get("recoveries", []), {
        "attempt": attempt + 1,
        "kind": kind,
        "reason": decisive.reason,
        "pod": decisive.pod,
        "node": decisive.node or "",
        "detectedAt": iso_precise(p.now),
    }]  # fmt: skip
    status["recoveries"] = recoveries[-MAX_RECOVERIES:]
    p.phase(c.RESTARTING, decisive.reason, f"restarting as attempt {attempt + 1} after "
            f"{kind.lower()} of {where}: {decisive.message}")  # fmt: skip
    p.requeue(1)


def _names(seen: Observed) -> list[str]:
    return [e.pod for rank, e in seen.current.items() if rank not in seen.missing]


def _suspect_checkpoint(status: dict[str, Any], lookup: LookupResult) -> dict[str, Any] | None:
    """The checkpoint the last attempt crashed on while loading it, if that is what happened.

    The last attempt resumed from it, failed (not disrupted), finished no step after
    it (per the trainer's progress.json), and it is still the newest complete one.
    Without progress to read, nothing is suspected.
    """
    resumed, last = status.get("resumeFrom"), status.get("lastEnd") or {}
    if not resumed or last.get("kind") != "Failure" or last.get("attempt") != status["attempt"] - 1:
        return None
    if lookup.target is None or lookup.target.path != resumed["path"]:
        return None
    progress = lookup.last_finished_step
    if progress is None or progress > resumed["step"]:
        return None
    return {
        "path": resumed["path"],
        "step": resumed["step"],
        "reason": f"attempt {last['attempt']} failed ({last.get('reason')}) before finishing "
        f"a step after loading it",
    }


def _start_attempt(p: _Pass, spec: JobSpec, lookup: LookupResult | None) -> None:
    status = p.status
    restart_after = status.get("restartAfter")
    if restart_after and p.now < parse_iso(restart_after):
        p.requeue((parse_iso(restart_after) - p.now).total_seconds())
        if status.get("phase") != c.RESTARTING:
            p.phase(c.RESTARTING, "BackoffAfterFailure", f"waiting until {restart_after}")
        return
    attempt = status["attempt"]
    wanted = spec.checkpoint.resume
    resume: ResumeTarget | None = None
    if wanted != "never":
        if lookup is None:
            if not _lookup_backing_off(p):
                p.plan.needs_checkpoint_lookup = True
            return
        if lookup.failure is not None:
            _lookup_failed(p, lookup.failure)
            return
        _lookup_succeeded(p)
        named = explicit_resume(spec, attempt)
        if named and lookup.target is None:
            message = (f"spec.checkpoint.resume names {named}, which is {lookup.detail}: "
                       "no pod was created")  # fmt: skip
            p.phase(c.FAILED, "InvalidResumeTarget", message)
            p.event("Warning", "InvalidResumeTarget", message)
            return
        suspect = None if named else _suspect_checkpoint(status, lookup)
        if suspect:
            status["badCheckpoints"] = [*status.get("badCheckpoints", []), suspect]
            p.event("Warning", "CheckpointMarkedBad", f"{suspect['path']}: {suspect['reason']}; "
                    "resuming from an older one (the folder is kept)")  # fmt: skip
            p.plan.needs_checkpoint_lookup = True
            return
        resume = lookup.target
    group = attempt_name(p.ref.name, attempt) if gang.wanted(spec, p.workload_api) else None
    placement = Placement(pod_group=group, queue=p.queue)
    try:
        pods = desired_pods(spec, p.ref, attempt, resume, placement)
    except SpecError as exc:  # the template sets what this attempt's placement does
        p.phase(c.FAILED, "InvalidSpec", str(exc))
        p.event("Warning", "InvalidSpec", str(exc))
        return
    except ValueError as exc:
        message = f"cannot resume from {resume.path if resume else '-'}: {exc}"
        p.phase(c.FAILED, "InvalidResumeTarget", message)
        p.event("Warning", "InvalidResumeTarget", message)
        return
    scheduling = gang.desired_objects(spec, p.ref, attempt) if group else []
    p.plan.create = [desired_service(spec, p.ref), *scheduling, *pods]
    if status.get("podGroup") and status["podGroup"] != group:
        p.plan.delete_pod_groups = [status["podGroup"]]  # the last attempt's: its pods are gone
    if group:
        status["podGroup"] = group
    else:
        status.pop("podGroup", None)
    status["attemptCreationTime"] = iso(p.now)
    status.setdefault("startTime", iso(p.now))
    status.pop("restartAfter", None)
    if resume:
        status["resumeFrom"] = {"step": resume.step, "path": resume.path}
        where = f"resuming from {resume.path} (step {resume.step})"
    else:
        status.pop("resumeFrom", None)
        where = "starting fresh"
        if wanted == "never":
            where += ": spec.checkpoint.resume is 'never'"
        elif lookup is not None:
            where += f": {lookup.detail or 'no complete checkpoint yet'}"
        p.event("Normal", "FreshStart", f"attempt {attempt}: {where}")
    if lookup and resume:
        status["latestCheckpoint"] = {
            "step": resume.step, "path": resume.path, "layout": spec.checkpoint.layout,
            "time": iso(p.now),
        }  # fmt: skip
    p.lost = _record_gang_creation(status, attempt, resume, lookup, p.now)
    p.event("Normal", "GangCreated", f"attempt {attempt}: created {spec.nnodes} pods, {where}")
    if not status.get("phase") or status.get("phase") == c.SUSPENDED:
        p.phase(c.PENDING, "GangCreated", f"attempt {attempt}: waiting for its pods to run")
    p.requeue(1)


def explicit_resume(spec: JobSpec, attempt: int) -> str | None:
    """The folder spec.checkpoint.resume names, for the first attempt; every later one
    resumes from the newest complete checkpoint, which that first one went on writing."""
    wanted = spec.checkpoint.resume
    return wanted if attempt == 0 and wanted not in ("auto", "never") else None


def _lookup_backing_off(p: _Pass) -> bool:
    """Whether the last failed lookup's back-off still runs (then come back when it ends)."""
    retry_after = (p.status.get("checkpointLookup") or {}).get("retryAfter")
    if retry_after and p.now < parse_iso(retry_after):
        p.requeue((parse_iso(retry_after) - p.now).total_seconds())
        return True
    return False


def _lookup_failed(p: _Pass, message: str) -> None:
    """Never start fresh on a failed look: the checkpoints may be there. Back off, and from
    the third failure in a row say why in a condition."""
    failures = (p.status.get("checkpointLookup") or {}).get("failures", 0) + 1
    delay = min(LOOKUP_BACKOFF_SECONDS * 2 ** (failures - 1), MAX_LOOKUP_BACKOFF_SECONDS)
    p.status["checkpointLookup"] = {
        "failures": failures,
        "message": message,
        "retryAfter": iso(p.now + timedelta(seconds=delay)),
    }
    p.event("Warning", "CheckpointLookupFailed", f"{message} (failure {failures}; next try in "
            f"{delay}s)")  # fmt: skip
    if not p.status.get("phase"):
        p.phase(c.PENDING, "CheckpointLookupFailed", f"looking for a checkpoint failed: {message}")
    if failures >= LOOKUP_FAILURES_BEFORE_CONDITION:
        p.status["conditions"], _ = set_condition(
            p.status["conditions"], LOOKUP_FAILED_CONDITION, True, "LookupFailed",
            f"{failures} checkpoint lookups in a row failed; the last: {message}",
            iso(p.now), p.generation,
        )  # fmt: skip
    p.requeue(delay)


def _lookup_succeeded(p: _Pass) -> None:
    p.status.pop("checkpointLookup", None)
    if any(x["type"] == LOOKUP_FAILED_CONDITION for x in p.status["conditions"]):
        p.status["conditions"], _ = set_condition(
            p.status["conditions"], LOOKUP_FAILED_CONDITION, False, "LookupSucceeded",
            "the checkpoint directory was read", iso(p.now), p.generation,
        )  # fmt: skip


def _record_gang_creation(
    status: dict[str, Any],
    attempt: int,
    resume: ResumeTarget | None,
    lookup: LookupResult | None,
    now: datetime,
) -> tuple[int, float | None] | None:
    """Complete the recovery record: when the gang came back, from where, and what was lost.

    Returns the steps lost and what they cost to train again (None where the trainer's step
    time is unknown), if the lost steps are known.
    """
    recoveries = status.get("recoveries") or []
    if not recoveries or recoveries[-1]["attempt"] != attempt:
        return None
    last = dict(recoveries[-1], gangCreatedAt=iso_precise(now))
    resumed_step = resume.step if resume else 0
    lost: tuple[int, float | None] | None = None
    if resume:
        last["resumedFromStep"] = resume.step
    if lookup and lookup.last_finished_step is not None:
        steps = max(0, lookup.last_finished_step - resumed_step)
        seconds = steps * lookup.step_seconds if lookup.step_seconds else None
        last["lastFinishedStep"] = lookup.last_finished_step
        last["lostSteps"] = steps
        if seconds is not None:
            last["lostSeconds"] = round(seconds, 1)
        lost = (steps, seconds)
    status["recoveries"] = [*recoveries[:-1], last]
    return lost


def _progress(p: _Pass, spec: JobSpec, seen: Observed) -> None:
    status = p.status
    attempt = status["attempt"]
    recoveries = status.get("recoveries") or []
    latest = recoveries[-1] if recoveries else {}
    if seen.running and latest.get("attempt") == attempt and not latest.get("firstRunningAt"):
        status["recoveries"] = [*recoveries[:-1], dict(latest, firstRunningAt=iso_precise(p.now))]
    finished = sum(1 for e in seen.current.values() if e.outcome is Outcome.SUCCEEDED)
    if seen.running and seen.running + finished == spec.nnodes:
        phase, reason = c.RUNNING, "AllPodsRunning"
        message = f"attempt {attempt}: {seen.running} pods running, {finished} finished"
    else:
        phase = c.RESTARTING if attempt else c.PENDING
        reason, message = (
            "PodsNotRunning",
            f"attempt {attempt}: {seen.running} of {spec.nnodes} pods running",
        )
    if status.get("phase") != phase and phase == c.RUNNING:
        p.event("Normal", "Running", message)
    p.phase(phase, reason, message)
    _report_stuck(p, UNSCHEDULABLE_CONDITION, seen.unschedulable,
                  ("PodsScheduled", "every pod of the gang is on a node"))  # fmt: skip
    _report_stuck(p, NOT_STARTING_CONDITION, seen.not_starting,
                  ("ContainersStarted", "every container of the gang has started"))  # fmt: skip


def _report_stuck(
    p: _Pass,
    condition: str,
    stuck: tuple[tuple[str, str, str], ...],
    cleared: tuple[str, str],
) -> None:
    """Say so, in a condition and once in an Event per new reason, while a pod of the gang is
    stuck; turn the condition False, with the `cleared` reason and message, once none is.

    Nothing has ended, so no failure is counted: the kubelet keeps retrying a container (an
    image pull backs off up to 5 minutes), the scheduler a pod; the user fixes the image, the
    reference or the request, or room comes free, and the pod goes on.
    """
    conditions = p.status["conditions"]
    stamp = (iso(p.now), p.generation)
    current = find_condition(conditions, condition)
    if stuck:
        pod, reason, message = stuck[0]
        text = f"pod {pod}: {message}"
        fresh = current is None or current["status"] != "True" or current["reason"] != reason
        p.status["conditions"], _ = set_condition(conditions, condition, True, reason, text, *stamp)
        if fresh:  # waiting in a queue is no trouble
            p.event("Normal" if reason == QUEUED_REASON else "Warning", reason, text)
    elif current is not None and current["status"] == "True":
        p.status["conditions"], _ = set_condition(conditions, condition, False, *cleared, *stamp)


def with_status(job: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """The job as it will look once `status` is written (handy for tests and chained passes)."""
    return dict(job, status=status)
