"""What the cluster shows of a job's pods, sorted into the facts that the decisions read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

from rljob_contract import CHECKPOINT_REQUEST_ANNOTATION, RUN_ANNOTATION, progress
from rljob_contract.in_place import parse_word
from rljob_contract.request import parse_request

from .. import constants as c
from ..api.reasons import Reason
from ..api.spec import JobSpec
from ..api.status import JobStatus, RayStatus
from ..api.timestamps import parse_iso
from ..launcher.in_place import has_restart_rule
from ..launcher.launchers import launcher_of
from ..preemption.classify import Outcome, PodEnd, classify_facts
from ..preemption.facts import PodFacts, facts, restarts, run_ended, run_restarts
from ..preemption.nodes import RESTART_RULES_FEATURE, NodeState
from ..queueing import Admission


@dataclass(frozen=True)
class Stuck:
    """Pods that have not started, and why, sorted by pod name: the facts behind the
    conditions PodsUnschedulable and ContainersNotStarting."""

    unschedulable: tuple[tuple[str, str, str], ...] = ()  # (pod, scheduler reason, message)
    not_starting: tuple[tuple[str, str, str], ...] = ()  # (pod, kubelet reason, message)
    unseen: tuple[tuple[str, str, float], ...] = ()  # (pod, schedulerName, seconds waited)


def stuck(pods: list[PodFacts]) -> Stuck:
    """Why these pods, all still active, have not started, where they say."""
    return Stuck(
        tuple(sorted((f.name, *f.unschedulable) for f in pods if f.unschedulable)),
        tuple(sorted((f.name, *f.not_starting) for f in pods if f.not_starting)),
        tuple(sorted((f.name, *f.unseen) for f in pods if f.unseen)),
    )


def inspector_stuck(pod: dict[str, Any], now: datetime) -> Stuck:
    """Why an inspector pod that has not reported has not started, where it says."""
    return stuck([facts(pod, None, now)])


@dataclass(frozen=True)
class Kept:
    """A pod of an ended gang kept to run the next attempt in place (launcher.in_place)."""

    name: str
    rank: int
    run_ended: bool  # its run of the ended attempt is over: its wrapper waits for the next
    restarts: int  # its trainer container's restart count now
    unfit: str | None  # why it can no longer run the next attempt (None: it can)


def stays(pod: dict[str, Any], node: NodeState | None) -> str | None:
    """Why a pod cannot stay for the next attempt, restarted in place; None where it can: it
    runs, is not going, keeps rljob's restart rule, and its node is Ready, stays, and has a
    kubelet that restarts containers on such a rule."""
    meta, phase = pod["metadata"], (pod.get("status") or {}).get("phase")
    conditions = (pod.get("status") or {}).get("conditions") or []
    going = {x.get("type") for x in conditions if x.get("status") == "True"}
    if meta.get("deletionTimestamp"):
        return "it is being deleted"
    if phase != "Running":
        return f"it is {phase}"
    if going & {"DisruptionTarget", c.KUEUE_STOP_CONDITION}:
        return "it is to be stopped (its DisruptionTarget or Kueue's stop condition)"
    if not has_restart_rule(pod):
        return (
            "it has no restart rule of rljob's (its gang was made before inPlace was set, or "
            "where too few nodes declared the feature, or the API server dropped the rule: "
            "ContainerRestartRules off)"
        )
    if node is None:
        return "its node is gone"
    if node.not_ready_seconds is not None or node.termination is not None:
        return "its node is not Ready or is going away"
    if not node.restarts_in_place:
        where = pod["spec"].get("nodeName")
        return f"its node {where} does not declare {RESTART_RULES_FEATURE} (a kubelet before 1.36)"
    return None


@dataclass(frozen=True)
class Staying:
    """Whether a pod of the current attempt could stay for the next (launcher.in_place)."""

    name: str
    why_not: str | None  # None: it can
    run_restarts: int  # its container's restart count when it was given its run


def kept_for(pod: dict[str, Any], attempt: int) -> bool:
    """A pod of an ended gang that its run annotation keeps for `attempt`."""
    meta = pod["metadata"]
    run = parse_word((meta.get("annotations") or {}).get(RUN_ANNOTATION))
    return (run is not None and run.attempt == attempt
            and meta.get("labels", {}).get(c.LABEL_ATTEMPT) != str(attempt))  # fmt: skip


@dataclass(frozen=True)
class Observed:
    """The job's pods sorted into facts that the decisions read."""

    current: dict[int, PodEnd]  # rank -> state, for pods of the current attempt
    missing: tuple[int, ...]  # ranks of the current attempt with no pod
    stale: tuple[str, ...]  # pods of other attempts, still present
    running: int
    warned: tuple[str, ...] = ()  # active pods whose node says it is going away
    # When the first pod of the gang is killed, where known: its node goes, or its deletion
    # gave it less than its own grace period (the others' saves need it: they are collective).
    deadline: datetime | None = None
    cut_short: tuple[str, ...] = ()  # pods whose deletion gave them less than their grace
    unrequested: tuple[str, ...] = ()  # running pods not yet asked to checkpoint
    ready: frozenset[int] = frozenset()  # ranks whose pod is Ready
    stuck: Stuck = Stuck()  # active pods that have not started
    stale_unended: tuple[str, ...] = ()  # stale pods that may still run (has_stopped)
    # When rank 0's pod turned Ready: where the trainer marks its pod once a step of the
    # attempt is done (frameworks: reports_steps), the attempt's first step. Rank 0 runs the
    # trainer on every launcher (a Ray gang's workers, without a probe, are Ready as they run).
    ready_since: datetime | None = None
    # When rank 0's pod last turned not Ready: once the attempt trained, the end of its last
    # step (the trainer takes its mark back), or of its container.
    unready_since: datetime | None = None
    # Running pods asked to save by a later time than `deadline`, or by none: asked again.
    asked_for_later: tuple[str, ...] = ()
    # When rank 0's trainer finished its attempt's first and last step, as it timed them and
    # said in its termination message when it finished (Unix time).
    trained: tuple[float, float] | None = None
    # Pods of the current attempt that could stay for the next one, by rank.
    stay: dict[int, Staying] = field(default_factory=dict)
    kept: tuple[Kept, ...] = ()  # pods of an ended gang kept for the current attempt
    # Whether the current attempt's pods carry rljob's restart rule (None: it has none yet):
    # a gang's pods are all made alike, so its next pods follow them.
    restart_rule: bool | None = None

    @cached_property
    def disruptions(self) -> list[PodEnd]:
        return [e for e in self.current.values() if e.outcome is Outcome.DISRUPTED]

    @cached_property
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

    def finished(self, spec: JobSpec, attempt: int) -> tuple[Reason, str] | None:
        """(reason, message) when the attempt has done its work, else None.

        Where the driver runs on the head (Ray) it is the program: its exit 0 ends the job,
        and the worker pods, which never exit on their own, are stopped then.
        """
        if launcher_of(spec).DRIVER_ON_HEAD and self.head_succeeded:
            return (
                Reason.DRIVER_SUCCEEDED,
                f"attempt {attempt}: the Ray driver on the head exited 0",
            )
        if self.all_succeeded(spec.nnodes):
            return (
                Reason.ALL_PODS_SUCCEEDED,
                f"all {spec.nnodes} pods of attempt {attempt} completed",
            )
        return None


def has_stopped(pod: dict[str, Any]) -> bool:
    """Ended (Succeeded or Failed, as its kubelet says), or deleted without a grace period:
    its kubelet kills it at once, or none is left to (a lost node), and nothing waits for it.
    The next gang may start beside it, and its finalizer may go."""
    if (pod.get("status") or {}).get("phase") in c.POD_ENDED_PHASES:
        return True
    meta = pod["metadata"]
    return bool(meta.get("deletionTimestamp")) and meta.get("deletionGracePeriodSeconds") == 0


def sort_pods(
    spec: JobSpec,
    status: JobStatus,
    pods: list[dict[str, Any]],
    nodes: Mapping[str, NodeState | None],
    now: datetime,
    admission: Admission | None = None,
) -> Observed:
    """`admission`: why Kueue has not admitted the attempt's pod group, where it says."""
    attempt = status.attempt
    current: dict[int, PodEnd] = {}
    stale: list[str] = []
    stale_unended: list[str] = []
    warned: list[str] = []
    deadlines: list[datetime] = []
    cut_short: list[str] = []
    unrequested: list[str] = []
    asked_by: dict[str, datetime | None] = {}  # running pods asked: the deadline they were told
    ready: set[int] = set()
    head: PodFacts | None = None  # rank 0's pod: the trainer's on every launcher
    active: list[PodFacts] = []
    stay: dict[int, Staying] = {}
    kept: list[Kept] = []
    ruled: set[bool] = set()  # whether each pod of the current attempt has the restart rule
    in_place = spec.restart_policy.in_place
    for pod in pods:
        meta = pod["metadata"]
        labels = meta.get("labels", {})
        node_name = pod.get("spec", {}).get("nodeName")
        node = nodes.get(node_name) if node_name else None
        if labels.get(c.LABEL_ATTEMPT) != str(attempt):
            if in_place and kept_for(pod, attempt) and not meta.get("deletionTimestamp"):
                # A warm trainer holds its state instead of ending its run; its gang's next
                # group forms only once every rank of the next attempt joins it.
                ended = run_ended(pod) or spec.restart_policy.warm
                rank = int(labels[c.LABEL_NODE_RANK])
                kept.append(Kept(meta["name"], rank, ended, restarts(pod), stays(pod, node)))
                if not ended:
                    stale_unended.append(meta["name"])
                continue
            stale.append(meta["name"])
            if not has_stopped(pod):
                stale_unended.append(meta["name"])
            continue
        pod_facts = facts(pod, node, now, admission)
        end = classify_facts(pod_facts, spec.restart_policy)
        rank = int(labels[c.LABEL_NODE_RANK])
        current[rank] = end
        if in_place:  # what only an in-place restart reads: off the pass of any other job
            stay[rank] = Staying(meta["name"], stays(pod, node), run_restarts(pod))
            ruled.add(has_restart_rule(pod))
        if pod_facts.ready:
            ready.add(rank)
        if rank == 0:  # the trainer's pod on every launcher: a Ray gang's head has the probe
            head = pod_facts
        if end.outcome is Outcome.ACTIVE:
            active.append(pod_facts)
        going = pod_facts.node_termination
        if end.outcome is Outcome.ACTIVE and going:
            warned.append(meta["name"])
            deadlines += [going.deadline] if going.deadline else []
        short = pod_facts.short_grace
        if short and pod_facts.phase not in c.POD_ENDED_PHASES:
            cut_short.append(f"pod {meta['name']} is being deleted: {short}")
            deadlines.append(short.ends)
        request = (meta.get("annotations") or {}).get(CHECKPOINT_REQUEST_ANNOTATION)
        # A pod being deleted is not asked, nor asked again: its kubelet no longer refreshes its
        # volumes, so the request would never reach its trainer.
        if pod_facts.phase == "Running" and pod_facts.exit_code is None and not pod_facts.deleting:
            if request is None:
                unrequested.append(meta["name"])
            else:
                asked_by[meta["name"]] = parse_request(request).deadline
    created = bool(status.attempt_creation_time)
    missing = tuple(r for r in range(spec.nnodes) if r not in current) if created else ()
    for rank in missing:
        gone = "the pod is gone: deleted by someone other than rljob"
        current[rank] = PodEnd(Outcome.DISRUPTED, Reason.POD_DELETED, gone, f"rank {rank}", None)
    running = sum(
        1 for e in current.values() if e.outcome is Outcome.ACTIVE and e.reason == "Running"
    )
    deadline = min(deadlines, default=None)
    return Observed(
        current, missing, tuple(sorted(stale)), running, tuple(warned), deadline,
        tuple(cut_short), tuple(unrequested), frozenset(ready),
        ready_since=_time(head.ready_since if head else None),
        unready_since=_time(head.unready_since if head else None),
        trained=progress.parse_trained(head.termination_message) if head else None,
        stuck=stuck(active),
        stale_unended=tuple(sorted(stale_unended)),
        asked_for_later=asked_for_later(asked_by, deadline),
        stay=stay, kept=tuple(sorted(kept, key=lambda k: k.rank)),
        restart_rule=any(ruled) if ruled else None,
    )  # fmt: skip


def _time(stamp: str | None) -> datetime | None:
    return parse_iso(stamp) if stamp else None


def asked_for_later(asked_by: Mapping[str, datetime | None], deadline: datetime | None
                    ) -> tuple[str, ...]:  # fmt: skip
    """The pods whose request says a later deadline than the gang's, or none (a short-grace
    drain after a spot warning, a second node's sooner notice). The request carries the
    deadline to the second, so a deadline that moved within its second asks nobody again,
    nor does one that moved later (the pod side keeps the earliest it read): a pod is asked
    again when the deadline moves a second or more earlier, never at every pass."""
    if deadline is None:
        return ()
    due = deadline.replace(microsecond=0)
    return tuple(name for name, told in asked_by.items() if told is None or told > due)


def ray_status(seen: Observed, nnodes: int, reports_steps: bool) -> RayStatus:
    """What `kubectl get` shows of the Ray cluster: its nodes' pods and the driver.

    The head starts the driver only once every Ray node has joined, so a running
    driver means a whole cluster. Where rljob sees the framework's steps, the head is Ready
    once the driver has finished a step of the attempt ("Training"; "Starting" before);
    elsewhere once the driver runs ("Running"; "WaitingForNodes" before).
    """
    head = seen.current.get(0)
    if head is None or (head.outcome is Outcome.ACTIVE and head.reason != "Running"):
        driver = "Pending"
    elif head.outcome is Outcome.ACTIVE:
        seen_steps = ("Starting", "Training") if reports_steps else ("WaitingForNodes", "Running")
        driver = seen_steps[0 in seen.ready]
    else:
        driver = str(head.outcome)
    return RayStatus(nnodes, seen.running, driver)
