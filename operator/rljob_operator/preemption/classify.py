"""Classify the end of one pod of the current attempt, from what the cluster shows.

A table of rules, checked in order; the first that matches decides. Disruptions
(preemption, eviction, a lost or terminating node, a stop the trainer was asked
for) restart the gang without spending the failure budget; anything else that
exits non-zero is a failure of the trainer itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

import rljob_contract as contract

from .. import constants as c
from ..api.reasons import Reason
from ..api.spec import RestartPolicy
from ..api.status import find_condition
from ..api.timestamps import parse_iso

# Taints that cloud providers and autoscalers put on a node that is about to go away, and how
# many seconds after the taint the node goes where the provider documents one (None: no fixed
# time, the pods get their grace period). AWS gives a spot instance two minutes' notice (the
# node termination handler taints on it); GKE gives a spot VM 30 s (the kubelet's graceful
# node shutdown taints on it). A rebalance recommendation is only a hint.
TERMINATION_TAINTS: dict[str, float | None] = {
    "aws-node-termination-handler/spot-itn": 120.0,
    "aws-node-termination-handler/rebalance-recommendation": None,
    "karpenter.sh/disrupted": None,
    "karpenter.sh/disruption": None,
    "cloud.google.com/impending-node-termination": 30.0,
    "node.kubernetes.io/out-of-service": None,
    "ToBeDeletedByClusterAutoscaler": None,
}
SIGNAL_EXIT_CODES = frozenset({137, 143})  # 128 + SIGKILL, 128 + SIGTERM
# Why the kubelet cannot start a container: it retries these by itself, so the pod stays
# Pending and nothing ends; the job reports them instead of waiting in silence.
NOT_STARTING_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "CrashLoopBackOff",
    }
)


class Outcome(StrEnum):
    ACTIVE = "Active"
    SUCCEEDED = "Succeeded"
    DISRUPTED = "Disrupted"
    FAILED = "Failed"


@dataclass(frozen=True)
class PodEnd:
    outcome: Outcome
    reason: str
    message: str
    pod: str
    node: str | None


@dataclass(frozen=True)
class NodeTermination:
    """A node that says it is going away: the taint or annotation that says so, and when it
    goes, where that is known."""

    sign: str  # "taint <key>" or "annotation <key>"
    deadline: datetime | None


def node_termination(node: dict[str, Any], now: datetime) -> NodeTermination | None:
    """Whether the node is going away, and when.

    The annotation `rljob.io/termination-time` (an RFC 3339 time, set by whatever learns it
    from the cloud, such as a termination handler reading the instance's metadata) says both;
    otherwise a known termination taint says so, and when the node goes is the taint's
    `timeAdded` (or, for taints that carry none, `now`: when rljob saw it) plus the
    provider's notice, where it has one.
    """
    annotated = (node.get("metadata", {}).get("annotations") or {}).get(c.NODE_TERMINATION_TIME)
    if annotated:
        try:
            return NodeTermination(f"annotation {c.NODE_TERMINATION_TIME}", parse_iso(annotated))
        except ValueError:
            pass  # an unreadable time says nothing; a taint may still say the node goes
    for taint in node.get("spec", {}).get("taints") or []:
        key = taint.get("key")
        if key not in TERMINATION_TAINTS:
            continue
        notice = TERMINATION_TAINTS[key]
        if notice is None:
            return NodeTermination(f"taint {key}", None)
        added = taint.get("timeAdded")
        since = parse_iso(added) if added else now
        return NodeTermination(f"taint {key}", since + timedelta(seconds=notice))
    return None


@dataclass(frozen=True)
class PodFacts:
    """Everything the rules read about one pod, pulled out of the raw objects once."""

    name: str
    node_name: str | None
    phase: str
    status_reason: str | None
    deleting: bool
    disruption_reason: str | None
    exit_code: int | None
    termination_reason: str | None
    termination_message: str
    node_known: bool  # False when the pod names a node that no longer exists
    node_termination: NodeTermination | None
    node_not_ready_seconds: float | None
    ready: bool = False  # the pod's Ready condition (its readiness probe, if it has one)
    not_starting: tuple[str, str] | None = None  # (kubelet reason, message) of a stuck container
    unschedulable: tuple[str, str] | None = None  # (scheduler reason, message) of a pending pod
    # (schedulerName, seconds since the pod was created) of a pod that no scheduler has
    # looked at: no PodScheduled condition and no node
    unseen: tuple[str, float] | None = None
    stopped_by_kueue: tuple[str, str] | None = None  # (Kueue's reason, message): it evicted


def _trainer_termination(pod: dict[str, Any]) -> dict[str, Any] | None:
    """How the trainer container ended: the one named `trainer`, or the pod's only one."""
    statuses = pod.get("status", {}).get("containerStatuses") or []
    named = [s for s in statuses if s.get("name") == c.TRAINER_CONTAINER]
    trainer = named or (statuses if len(statuses) == 1 else [])
    return (trainer[0].get("state") or {}).get("terminated") if trainer else None


def _not_starting(status: dict[str, Any]) -> tuple[str, str] | None:
    """The first container (init containers first) that the kubelet cannot start, and why."""
    for container in [*(status.get("initContainerStatuses") or []),
                      *(status.get("containerStatuses") or [])]:  # fmt: skip
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in NOT_STARTING_REASONS:
            message = waiting.get("message") or waiting["reason"]
            return waiting["reason"], f"container {container.get('name')}: {message}"
    return None


Admission = tuple[str, str]  # (reason, message) of Kueue's QuotaReserved=False condition


def queue_wait(queue: str | None, admission: Admission | None) -> tuple[str, str]:
    """Why a gang gated by Kueue waits, in Kueue's words where its Workload says them: a
    queue that does not exist (or is stopped) is the user's to fix; quota is a wait."""
    waiting = f"Kueue has not admitted the gang yet (queue {queue})"
    if admission is None:
        return Reason.WAITING_FOR_KUEUE, waiting
    reason, message = admission
    if reason == c.KUEUE_INADMISSIBLE_REASON:
        return Reason.QUEUE_INADMISSIBLE, f"Kueue cannot admit the gang (queue {queue}): {message}"
    return Reason.WAITING_FOR_KUEUE, f"{waiting}: {message}"


def _unschedulable(pod: dict[str, Any], admission: Admission | None) -> tuple[str, str] | None:
    """Why the scheduler cannot place the pod, from its PodScheduled=False condition, or why
    Kueue has not let it be scheduled yet (`admission`: its Workload's condition, if known)."""
    status = pod.get("status") or {}
    scheduled = find_condition(status.get("conditions") or [], "PodScheduled")
    if scheduled is None or scheduled.get("status") != "False":
        return None
    reason = scheduled.get("reason") or "Unschedulable"
    gates = {g.get("name") for g in (pod.get("spec") or {}).get("schedulingGates") or []}
    if c.KUEUE_ADMISSION_GATE in gates:
        return queue_wait((pod.get("metadata") or {}).get("labels", {}).get(c.KUEUE_QUEUE_LABEL),
                          admission)  # fmt: skip
    return reason, scheduled.get("message") or reason


def _unseen(pod: dict[str, Any], now: datetime) -> tuple[str, float] | None:
    """(schedulerName, seconds it has waited) of a pod that no scheduler has looked at yet.

    A scheduler writes PodScheduled on every pod of its own that it tries (the API server
    writes it on a gated one), so a pod without it and without a node has been seen by none:
    its scheduler may be slow, or may not exist at all (a schedulerName nothing serves).
    """
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    created = meta.get("creationTimestamp")
    if (spec.get("nodeName") or not created or meta.get("deletionTimestamp")
            or find_condition(status.get("conditions") or [], "PodScheduled")):  # fmt: skip
        return None
    waited = (now - parse_iso(created)).total_seconds()
    return spec.get("schedulerName") or c.DEFAULT_SCHEDULER, max(waited, 0.0)


def _stopped_by_kueue(status: dict[str, Any]) -> tuple[str, str] | None:
    """Kueue marks each pod of a workload it evicts (preempted, say) before deleting it."""
    stop = find_condition(status.get("conditions") or [], c.KUEUE_STOP_CONDITION)
    if stop is None or stop.get("status") != "True":
        return None
    return stop.get("reason") or "Stopped", stop.get("message") or ""


def node_ready_condition(node: dict[str, Any] | None) -> dict[str, Any] | None:
    """The node's Ready condition, if it reports one."""
    return find_condition(((node or {}).get("status") or {}).get("conditions") or [], "Ready")


def not_ready_seconds(node: dict[str, Any], now: datetime) -> float | None:
    """How long the node has not been Ready (None while it is)."""
    ready = node_ready_condition(node)
    if not ready or ready.get("status") == "True":
        return None
    since = ready.get("lastTransitionTime")
    return (now - parse_iso(since)).total_seconds() if since else 0.0


def facts(
    pod: dict[str, Any],
    node: dict[str, Any] | None,
    now: datetime,
    admission: Admission | None = None,
) -> PodFacts:
    meta, status = pod.get("metadata", {}), pod.get("status", {})
    node_name = pod.get("spec", {}).get("nodeName")
    disruption = next(
        (
            cond
            for cond in status.get("conditions") or []
            if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True"
        ),
        None,
    )
    terminated = _trainer_termination(pod)
    not_ready_for = not_ready_seconds(node, now) if node is not None else None
    return PodFacts(
        name=meta.get("name", ""),
        node_name=node_name,
        phase=status.get("phase", "Pending"),
        status_reason=status.get("reason"),
        deleting=meta.get("deletionTimestamp") is not None,
        disruption_reason=(disruption.get("reason") or "DisruptionTarget") if disruption else None,
        exit_code=terminated.get("exitCode") if terminated else None,
        termination_reason=terminated.get("reason") if terminated else None,
        termination_message=(terminated.get("message") or "") if terminated else "",
        node_known=node is not None or node_name is None,
        node_termination=node_termination(node, now) if node is not None else None,
        node_not_ready_seconds=not_ready_for,
        ready=any(
            cond.get("type") == "Ready" and cond.get("status") == "True"
            for cond in status.get("conditions") or []
        ),
        not_starting=_not_starting(status),
        unschedulable=_unschedulable(pod, admission),
        unseen=_unseen(pod, now),
        stopped_by_kueue=_stopped_by_kueue(status),
    )


Rule = Callable[[PodFacts, RestartPolicy], tuple[Outcome, str, str] | None]


def _disruption_target(f: PodFacts, _: RestartPolicy):
    if f.disruption_reason:
        return Outcome.DISRUPTED, f.disruption_reason, "the pod has the DisruptionTarget condition"


def _kueue(f: PodFacts, _: RestartPolicy):
    if f.stopped_by_kueue:
        reason, message = f.stopped_by_kueue
        return (
            Outcome.DISRUPTED,
            Reason.STOPPED_BY_KUEUE,
            f"Kueue stopped the pod ({reason}): {message}",
        )


def _evicted(f: PodFacts, _: RestartPolicy):
    if f.status_reason == "Evicted":
        return Outcome.DISRUPTED, "Evicted", "the kubelet evicted the pod"


def _node_lost(f: PodFacts, _: RestartPolicy):
    if not f.node_known:
        return Outcome.DISRUPTED, Reason.NODE_LOST, f"the pod's node {f.node_name} no longer exists"


def _node_not_ready(f: PodFacts, policy: RestartPolicy):
    waited = f.node_not_ready_seconds
    if waited is not None and waited > policy.node_not_ready_tolerance_seconds:
        return (
            Outcome.DISRUPTED,
            Reason.NODE_NOT_READY,
            f"node {f.node_name} has not been Ready for {waited:.0f}s",
        )


def _deleted_by_someone_else(f: PodFacts, _: RestartPolicy):
    if f.deleting:
        return (
            Outcome.DISRUPTED,
            Reason.POD_DELETED,
            "the pod was deleted by someone other than rljob",
        )


def _succeeded(f: PodFacts, _: RestartPolicy):
    # A sidecar that is a plain container keeps the pod Running after the trainer is done.
    if f.phase == "Succeeded" or (f.phase == "Running" and f.exit_code == 0):
        return Outcome.SUCCEEDED, Reason.COMPLETED, "the trainer exited 0"


def _exit(f: PodFacts, policy: RestartPolicy):
    if f.phase != "Failed" and f.exit_code in (None, 0):
        return None
    code = f.exit_code
    stopped_on_request = contract.CHECKPOINTED_ON_REQUEST_MESSAGE in f.termination_message
    if stopped_on_request or code == contract.EXIT_CHECKPOINTED_ON_REQUEST:
        return (
            Outcome.DISRUPTED,
            Reason.CHECKPOINTED_ON_REQUEST,
            "the trainer saved and stopped as asked",
        )
    if code in SIGNAL_EXIT_CODES and f.node_termination:
        return (
            Outcome.DISRUPTED,
            Reason.NODE_TERMINATION,
            f"exit {code} while node {f.node_name} is going away ({f.node_termination.sign})",
        )
    if code is not None and code in policy.retryable_exit_codes:
        return Outcome.DISRUPTED, Reason.RETRYABLE_EXIT_CODE, f"exit code {code} is retryable"
    if f.termination_reason == "OOMKilled":
        return Outcome.FAILED, "OOMKilled", "the trainer ran out of memory (OOMKilled)"
    if code is None:
        return (
            Outcome.FAILED,
            f.status_reason or Reason.POD_FAILED,
            "the pod failed without an exit code",
        )
    said = _last_line(f.termination_message)
    reason = Reason.START_ERROR if f.termination_reason == "StartError" else Reason.EXIT_CODE
    return (
        Outcome.FAILED,
        reason,
        f"the trainer exited with code {code}" + (f": {said}" if said else ""),
    )


def _last_line(message: str, limit: int = 300) -> str:
    """The end of the termination message (or of the log, the kubelet's fallback): the error."""
    lines = [line.strip() for line in message.splitlines() if any(ch.isalnum() for ch in line)]
    return lines[-1][-limit:] if lines else ""


RULES: tuple[Rule, ...] = (
    _disruption_target,
    _kueue,
    _evicted,
    _node_lost,
    _node_not_ready,
    _deleted_by_someone_else,
    _succeeded,
    _exit,
)


def classify_facts(f: PodFacts, policy: RestartPolicy) -> PodEnd:
    for rule in RULES:
        verdict = rule(f, policy)
        if verdict:
            outcome, reason, message = verdict
            return PodEnd(outcome, reason, message, f.name, f.node_name)
    return PodEnd(Outcome.ACTIVE, f.phase, f"the pod is {f.phase}", f.name, f.node_name)


def classify(
    pod: dict[str, Any], node: dict[str, Any] | None, policy: RestartPolicy, now: datetime
) -> PodEnd:
    """How this pod stands: still active, succeeded, disrupted, or failed."""
    return classify_facts(facts(pod, node, now), policy)
