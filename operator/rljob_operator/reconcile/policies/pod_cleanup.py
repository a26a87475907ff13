"""How the plan's deletions meet the pods as they are: finalizers released once an end is
recorded and the pod has stopped, no grace period for pods on a lost node, no second delete of
a pod already going, no delete before a checkpoint request has reached the pod, and a wake-up
when a NotReady node's tolerance runs out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rljob_contract import CHECKPOINT_REQUEST_ANNOTATION
from rljob_contract.request import parse_request

from ... import constants as c
from ...api.reasons import TERMINAL_PHASES, Phase
from ...api.status import JobStatus
from ...preemption.nodes import NodeState
from ..plan import Pass, Plan
from ..pod_facts import has_stopped, kept_for


def meet_the_pods(p: Pass) -> None:
    """Shape the pass's deletions and releases to the job's pods as they are."""
    pods, nodes = list(p.snap.trainers), p.snap.nodes
    # A pod kept for the next attempt is not released: it joins that attempt's gang.
    p.plan.release = [n for n in ends_recorded(p.status, pods) if n not in p.plan.stop_in_place]
    no_grace_for_lost_nodes(p.plan, pods, nodes, p.not_ready_tolerance)
    wake_when_tolerance_ends(p, pods, nodes)
    skip_pods_already_going(p.plan, pods)
    release_once_stopped(p, pods)
    delete_after_requests_land(p, pods)  # after the release: a held pod keeps its finalizer
    # Releases of pods whose end the stored status records already need no fence nor record.
    stored = set(ends_recorded(p.snap.status, pods))
    p.plan.release_first = all(name in stored for name in p.plan.release)


def holds_our_finalizer(pod: dict[str, Any]) -> bool:
    return c.FINALIZER in (pod["metadata"].get("finalizers") or [])


def ends_recorded(status: JobStatus, pods: list[dict[str, Any]]) -> list[str]:
    """Pods whose end `status` records, so that it no longer needs keeping: of another
    attempt, or of a job at rest."""
    at_rest = status.phase in (*TERMINAL_PHASES, Phase.SUSPENDED)
    attempt = str(status.attempt)
    return [
        pod["metadata"]["name"]
        for pod in pods
        if holds_our_finalizer(pod)
        and (at_rest or pod["metadata"].get("labels", {}).get(c.LABEL_ATTEMPT) != attempt)
        and (at_rest or not kept_for(pod, status.attempt))  # it stays for this attempt
    ]


def release_once_stopped(p: Pass, pods: list[dict[str, Any]]) -> None:
    """Keep the finalizer of a pod whose end is recorded until a pass sees it stopped
    (pod_facts.has_stopped), or at rest and not deleted; and while an old pod still runs, keep
    them all, for the pass that creates the next gang.

    A release sent beside the pod's delete could be applied first and return the pod not yet
    going; the next pass would delete it again. A release sent while another old pod stops
    would make a pass of its own, and the pass that sees the last old pod stop, which creates
    the next gang, would wait behind it. The creating pass releases them after its creates and
    its status write."""
    if p.old_gang_runs:
        p.plan.release = []
        return
    asked = set(p.plan.delete + p.plan.force_delete)

    def stopping(pod: dict[str, Any]) -> bool:
        meta = pod["metadata"]
        if not meta.get("deletionTimestamp"):
            return meta["name"] in asked
        return not has_stopped(pod)

    holding = {pod["metadata"]["name"] for pod in pods if stopping(pod)}
    p.plan.release = [name for name in p.plan.release if name not in holding]


def skip_pods_already_going(plan: Plan, pods: list[dict[str, Any]]) -> None:
    """A pod being deleted needs no second delete of the same kind: every pass until it is
    gone would send one (a write each, many under a burst of recoveries)."""
    going = {pod["metadata"]["name"]: pod["metadata"] for pod in pods
             if pod["metadata"].get("deletionTimestamp")}  # fmt: skip
    plan.delete = [name for name in plan.delete if name not in going]
    plan.force_delete = [
        name for name in plan.force_delete
        if going.get(name, {}).get("deletionGracePeriodSeconds") != 0
    ]  # fmt: skip


def wake_when_tolerance_ends(
    p: Pass, pods: list[dict[str, Any]], nodes: Mapping[str, NodeState | None]
) -> None:
    """A pod's node is NotReady but within the job's tolerance: come back when that runs
    out, because no watch event will say so."""
    for pod in pods:
        node = nodes.get(pod.get("spec", {}).get("nodeName") or "")
        waited = node.not_ready_seconds if node is not None else None
        if waited is not None and waited <= p.not_ready_tolerance:
            p.requeue(p.not_ready_tolerance - waited + 0.5)


def no_grace_for_lost_nodes(
    plan: Plan,
    pods: list[dict[str, Any]],
    nodes: Mapping[str, NodeState | None],
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
        waited = node.not_ready_seconds if node is not None else None
        return node is None or (waited is not None and waited > tolerance)

    lost = {
        pod["metadata"]["name"]
        for pod in pods
        if unreachable(pod.get("spec", {}).get("nodeName"))
        and (pod["metadata"]["name"] in plan.delete or pod["metadata"].get("deletionTimestamp"))
    }
    plan.delete = [name for name in plan.delete if name not in lost]
    plan.force_delete = sorted(lost.union(plan.force_delete))


# How long a pod asked to save is left undeleted after the request was written: its kubelet
# projects the annotation into the pod's request file well within it (about 1 s: docs/recovery.md).
REQUEST_LANDS_SECONDS = 2.0


def delete_after_requests_land(p: Pass, pods: list[dict[str, Any]]) -> None:
    """A pod asked to save (this pass, or in the last seconds) is deleted only once the request
    has reached it. The kubelet stops refreshing a pod's volumes once the pod is being
    deleted, so a request that comes after the delete never reaches its trainer: and only the
    request says when the first pod of the gang is killed.

    The request's time is to the second, rounded down, so the wait counts from the end of that
    second: counted from its start, a pass woken by the annotation's own watch event could
    delete the pod as little as 1 s after the write. A request this pass writes (a first one,
    or one again with a sooner deadline) goes out after `now`, and counts from it."""
    written = dict.fromkeys(p.plan.request_checkpoint, p.now)  # name -> the request's time
    for pod in pods:
        name = pod["metadata"]["name"]
        asked = (pod["metadata"].get("annotations") or {}).get(CHECKPOINT_REQUEST_ANNOTATION)
        at = parse_request(asked).requested_at if asked and name not in written else None
        if at is not None:
            written[name] = at
    left = {name: REQUEST_LANDS_SECONDS + 1 - (p.now - at.replace(microsecond=0)).total_seconds()
            for name, at in written.items()}  # fmt: skip
    held = [left[name] for name in p.plan.delete if left.get(name, 0.0) > 0]
    if held:
        p.plan.delete = [name for name in p.plan.delete if left.get(name, 0.0) <= 0]
        p.requeue(min(held))
