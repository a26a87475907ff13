"""Carry out one reconcile pass: read the cluster, decide, write status, then act.

The status is written first, so that a pass that dies half-way is repeated from
what it already recorded; children are created under fixed names, so a repeated
create is a no-op; events go out last, once the status they describe is stored.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any, Protocol

from ..kube import Kube, KubeError
from ..launcher.pods import ResumeTarget
from .decide import Plan, decide, fail

log = logging.getLogger(__name__)

_locks: defaultdict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)


class CheckpointLocator(Protocol):
    def latest(self, job: dict[str, Any]) -> ResumeTarget | None:
        """The newest complete checkpoint of the job, or None when there is none."""


def status_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A merge patch from `old` to `new` (top-level keys; a removed key becomes null)."""
    patch = {k: v for k, v in new.items() if old.get(k) != v}
    patch.update({k: None for k in old if k not in new})
    return patch


def apply(kube: Kube, job: dict[str, Any], plan: Plan) -> None:
    """Create, record, delete, tell: in this order.

    A new gang is created before its creation is recorded, so a pass that dies
    half-way creates the rest next time rather than mistaking the missing pods for
    deleted ones; an ended attempt is recorded before its pods are deleted, so the
    end is counted exactly once.
    """
    meta = job["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    for obj in plan.create:
        kube.create(obj)
    patch = status_patch(job.get("status") or {}, plan.status)
    if patch:
        kube.patch_status(namespace, name, patch)
    for pod in plan.delete:
        kube.delete_pod(namespace, pod)
    for event in plan.events:
        kube.post_event(job, event.type, event.reason, event.message)
    if plan.delete_job:
        kube.delete_job(namespace, name)


def reconcile(
    kube: Kube,
    namespace: str,
    name: str,
    locator: CheckpointLocator,
    now: datetime | None = None,
) -> Plan | None:
    """One pass for one job; passes for the same job never overlap in this process."""
    with _locks[(namespace, name)]:
        job = kube.get_job(namespace, name)
        if job is None or job["metadata"].get("deletionTimestamp"):
            return None
        pods = kube.list_job_pods(namespace, name)
        node_names = {p["spec"]["nodeName"] for p in pods if p.get("spec", {}).get("nodeName")}
        nodes = kube.get_nodes(node_names)
        moment = now or datetime.now(UTC)
        plan = decide(job, pods, nodes, moment)
        if plan.needs_checkpoint_lookup:
            plan = decide(job, pods, nodes, moment, locator.latest(job), checkpoint_looked_up=True)
        try:
            apply(kube, job, plan)
        except KubeError as exc:
            if exc.status not in (400, 422) or not plan.create:
                raise
            # The API server refused a pod we rendered: retrying cannot help.
            plan = fail(job, moment, "PodRejected", f"the API server refused the job's pods: {exc}")
            apply(kube, job, plan)
        return plan
