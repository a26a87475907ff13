"""Everything the rules read about one pod, pulled out of the pod, its node and Kueue's
admission once: how its trainer ended, whether it is being deleted or was disrupted, what its
node says, and why it has not started, where it has not."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import rljob_contract as contract
from rljob_contract.in_place import parse_word

from .. import constants as c
from ..api.timestamps import parse_iso
from ..queueing import Admission, queue_wait
from .nodes import NodeState, NodeTermination

Conditions = dict[str, dict[str, Any]]  # a pod's conditions by type (the first of each)

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


@dataclass(frozen=True)
class ShortGrace:
    """A deletion that gave the pod less than its own grace period (`kubectl delete
    --grace-period`, a drain or an eviction with one): its kubelet kills it at `ends`."""

    granted: int  # seconds, the deletion's
    own: int  # seconds, the pod's terminationGracePeriodSeconds
    ends: datetime  # the pod's deletionTimestamp: the API server sets it to the end of the grace

    def __str__(self) -> str:
        return f"its deletion gave it {self.granted} s of its {self.own} s grace period"


def _short_grace(pod: dict[str, Any]) -> ShortGrace | None:
    meta = pod.get("metadata") or {}
    granted, ends = meta.get("deletionGracePeriodSeconds"), meta.get("deletionTimestamp")
    own = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")  # the API server sets it
    if granted is None or own is None or not ends or granted >= own:
        return None
    return ShortGrace(granted, own, parse_iso(ends))


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
    ready_since: str | None = None  # when it last turned Ready, while it is
    unready_since: str | None = None  # when it last turned not Ready, while it is not
    not_starting: tuple[str, str] | None = None  # (kubelet reason, message) of a stuck container
    unschedulable: tuple[str, str] | None = None  # (scheduler reason, message) of a pending pod
    # (schedulerName, seconds since the pod was created) of a pod that no scheduler has
    # looked at: no PodScheduled condition and no node
    unseen: tuple[str, float] | None = None
    stopped_by_kueue: tuple[str, str] | None = None  # (Kueue's reason, message): it evicted
    short_grace: ShortGrace | None = None  # deleted with less than its own grace period


def trainer_status(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The trainer container's status: the one named `trainer`, or the pod's only one."""
    statuses = pod.get("status", {}).get("containerStatuses") or []
    named = [s for s in statuses if s.get("name") == c.TRAINER_CONTAINER]
    trainer = named or (statuses if len(statuses) == 1 else [])
    return trainer[0] if trainer else None


def restarts(pod: dict[str, Any]) -> int:
    """How often the kubelet has restarted the trainer container in its pod."""
    return int((trainer_status(pod) or {}).get("restartCount") or 0)


def run_restarts(pod: dict[str, Any]) -> int:
    """The trainer container's restart count when its pod was given the run it has now:
    0 for the run it was created with, else what the run annotation notes
    (launcher.in_place)."""
    annotations = pod.get("metadata", {}).get("annotations") or {}
    run = parse_word(annotations.get(contract.RUN_ANNOTATION))
    return run.restarts if run else 0


def run_ended(pod: dict[str, Any]) -> bool:
    """Whether the run the pod was given has ended: its container has, or the kubelet has
    restarted it in place since (its wrapper then waits for its next run)."""
    return _trainer_termination(pod) is not None or restarts(pod) > run_restarts(pod)


def _trainer_termination(pod: dict[str, Any]) -> dict[str, Any] | None:
    """How the trainer container ended, where it has."""
    return ((trainer_status(pod) or {}).get("state") or {}).get("terminated")


def _not_starting(status: dict[str, Any]) -> tuple[str, str] | None:
    """The first container (init containers first) that the kubelet cannot start, and why."""
    for container in [*(status.get("initContainerStatuses") or []),
                      *(status.get("containerStatuses") or [])]:  # fmt: skip
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in NOT_STARTING_REASONS:
            message = waiting.get("message") or waiting["reason"]
            return waiting["reason"], f"container {container.get('name')}: {message}"
    return None


def _unschedulable(
    pod: dict[str, Any], conditions: Conditions, admission: Admission | None
) -> tuple[str, str] | None:
    """Why the scheduler cannot place the pod, from its PodScheduled=False condition, or why
    Kueue has not let it be scheduled yet (`admission`: its Workload's condition, if known)."""
    scheduled = conditions.get("PodScheduled")
    if scheduled is None or scheduled.get("status") != "False":
        return None
    reason = scheduled.get("reason") or "Unschedulable"
    gates = {g.get("name") for g in (pod.get("spec") or {}).get("schedulingGates") or []}
    if c.KUEUE_ADMISSION_GATE in gates:
        return queue_wait((pod.get("metadata") or {}).get("labels", {}).get(c.KUEUE_QUEUE_LABEL),
                          admission)  # fmt: skip
    return reason, scheduled.get("message") or reason


def _unseen(pod: dict[str, Any], conditions: Conditions, now: datetime) -> tuple[str, float] | None:
    """(schedulerName, seconds it has waited) of a pod that no scheduler has looked at yet.

    A scheduler writes PodScheduled on every pod of its own that it tries (the API server
    writes it on a gated one), so a pod without it and without a node has been seen by none:
    its scheduler may be slow, or may not exist at all (a schedulerName nothing serves).
    """
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    created = meta.get("creationTimestamp")
    if (spec.get("nodeName") or not created or meta.get("deletionTimestamp")
            or "PodScheduled" in conditions):  # fmt: skip
        return None
    waited = (now - parse_iso(created)).total_seconds()
    return spec.get("schedulerName") or c.DEFAULT_SCHEDULER, max(waited, 0.0)


def _stopped_by_kueue(conditions: Conditions) -> tuple[str, str] | None:
    """Kueue marks each pod of a workload it evicts (preempted, say) before deleting it."""
    stop = conditions.get(c.KUEUE_STOP_CONDITION)
    if stop is None or stop.get("status") != "True":
        return None
    return stop.get("reason") or "Stopped", stop.get("message") or ""


def facts(
    pod: dict[str, Any],
    node: NodeState | None,
    now: datetime,
    admission: Admission | None = None,
) -> PodFacts:
    """`node`: the state of the node the pod names; None where it names none or one that no
    longer exists."""
    meta, status = pod.get("metadata", {}), pod.get("status", {})
    node_name = pod.get("spec", {}).get("nodeName")
    conditions: Conditions = {}
    for cond in status.get("conditions") or []:
        conditions.setdefault(cond.get("type") or "", cond)
    disruption = conditions.get("DisruptionTarget")
    if disruption is not None and disruption.get("status") != "True":
        disruption = None
    terminated = _trainer_termination(pod)
    ready = conditions.get("Ready") or {}
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
        node_termination=node.termination if node is not None else None,
        node_not_ready_seconds=node.not_ready_seconds if node is not None else None,
        ready=ready.get("status") == "True",
        ready_since=ready.get("lastTransitionTime") if ready.get("status") == "True" else None,
        unready_since=ready.get("lastTransitionTime") if ready.get("status") == "False" else None,
        not_starting=_not_starting(status),
        unschedulable=_unschedulable(pod, conditions, admission),
        unseen=_unseen(pod, conditions, now),
        stopped_by_kueue=_stopped_by_kueue(conditions),
        short_grace=_short_grace(pod),
    )
