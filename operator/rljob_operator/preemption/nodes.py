"""What a Node says of the pods on it: whether it is Ready (and for how long not), and whether
and when it goes away. The cache wakes jobs on these, the planner waits out a NotReady node's
tolerance on them, and the rules that classify a pod's end read them: each node is read once a
pass, into a NodeState."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from .. import constants as c
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


# A kubelet declares it (node.status.declaredFeatures) from Kubernetes 1.36; it needs
# ContainerRestartRules on, which is all an in-place restart uses (launcher.in_place).
RESTART_RULES_FEATURE = "RestartAllContainersOnContainerExits"


@dataclass(frozen=True)
class NodeState:
    """What a pass reads of one node that exists, read from it once."""

    not_ready_seconds: float | None  # how long it has not been Ready; None while it is
    termination: NodeTermination | None  # it says it is going away
    restarts_in_place: bool = False  # its kubelet restarts a container on a restart rule


def restarts_in_place(node: dict[str, Any]) -> bool:
    return RESTART_RULES_FEATURE in ((node.get("status") or {}).get("declaredFeatures") or [])


def takes_in_place_pods(node: dict[str, Any]) -> bool:
    """Whether a new pod with rljob's restart rule can go to the node now: its kubelet declares
    the feature (the scheduler's NodeDeclaredFeatures filter places such a pod nowhere else),
    it is Ready and not cordoned."""
    ready = (node_ready_condition(node) or {}).get("status") == "True"
    cordoned = bool((node.get("spec") or {}).get("unschedulable"))
    return ready and not cordoned and restarts_in_place(node)


def node_states(
    nodes: Mapping[str, dict[str, Any] | None], now: datetime
) -> dict[str, NodeState | None]:
    """Each node's state by name; None for a node that no longer exists."""
    return {
        name: None if node is None
        else NodeState(not_ready_seconds(node, now), node_termination(node, now),
                       restarts_in_place(node))
        for name, node in nodes.items()
    }  # fmt: skip
