"""Carry out one reconcile pass: read the cluster, decide, then act (see `apply` for the order).

Children are created under fixed names, so a repeated create is a no-op; events go
out last, once the status they describe is stored.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any, Protocol

from rljob_contract import CHECKPOINT_REQUEST_ANNOTATION

from .. import constants as c
from ..kube import Kube, KubeError
from ..metrics import record_transition
from .decide import LookupResult, Plan, decide, fail, iso, with_status
from .lookup import LookupFailed, inspector_pods_to_clean

log = logging.getLogger(__name__)

_locks: defaultdict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)


class CheckpointLookup(Protocol):
    def lookup(self, job: dict[str, Any], exclude: tuple[str, ...] = ()) -> LookupResult:
        """The newest complete checkpoint of the job (raise LookupPending if not known yet)."""


def status_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A merge patch from `old` to `new` (top-level keys; a removed key becomes null)."""
    patch = {k: v for k, v in new.items() if old.get(k) != v}
    patch.update({k: None for k in old if k not in new})
    return patch


def apply(kube: Kube, job: dict[str, Any], plan: Plan) -> None:
    """Create, record, ask, delete, release, tell: in this order.

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
    for pod in plan.request_checkpoint:
        kube.annotate_pod(namespace, pod, CHECKPOINT_REQUEST_ANNOTATION, iso(datetime.now(UTC)))
    for pod in plan.delete:
        kube.delete_pod(namespace, pod)
    for pod in plan.force_delete:
        kube.delete_pod(namespace, pod, grace_seconds=0)
    for pod in plan.release:
        kube.release_pod(namespace, pod)
    for event in plan.events:
        kube.post_event(job, event.type, event.reason, event.message)
    if plan.delete_job:
        kube.delete_job(namespace, name)


MAX_LOOKUPS_PER_PASS = 3  # a bad checkpoint asks for one more look


def plan_pass(
    job: dict[str, Any],
    pods: list[dict[str, Any]],
    nodes: dict[str, dict[str, Any] | None],
    finder: CheckpointLookup,
    now: datetime,
) -> Plan:
    """Decide, looking at the checkpoints as often as the decision asks (bounded)."""
    plan = decide(job, pods, nodes, now)
    events = []
    for _ in range(MAX_LOOKUPS_PER_PASS):
        if not plan.needs_checkpoint_lookup:
            break
        events += plan.events
        seen = with_status(job, plan.status)
        try:
            found = finder.lookup(seen, plan.lookup_exclude)
        except LookupFailed as exc:
            found = LookupResult(None, failure=str(exc))
        plan = decide(seen, pods, nodes, now, found)
    plan.events = events + plan.events
    return plan


def reconcile(
    kube: Kube,
    namespace: str,
    name: str,
    finder: CheckpointLookup,
    now: datetime | None = None,
) -> Plan | None:
    """One pass for one job; passes for the same job never overlap in this process."""
    with _locks[(namespace, name)]:
        job = kube.get_job(namespace, name)
        pods = kube.list_job_pods(namespace, name)
        if job is None or job["metadata"].get("deletionTimestamp"):
            for pod in pods:  # the garbage collector removes them; let it
                if c.FINALIZER in (pod["metadata"].get("finalizers") or []):
                    kube.release_pod(namespace, pod["metadata"]["name"])
            return None
        trainer_pods = [
            p for p in pods if p["metadata"].get("labels", {}).get(c.LABEL_ROLE) == c.ROLE_TRAINER
        ]
        node_names = {
            p["spec"]["nodeName"] for p in trainer_pods if p.get("spec", {}).get("nodeName")
        }
        nodes = kube.get_nodes(node_names)
        moment = now or datetime.now(UTC)
        plan = plan_pass(job, trainer_pods, nodes, finder, moment)
        try:
            apply(kube, job, plan)
        except KubeError as exc:
            refused = exc.status in (400, 422) or exc.refused_by_admission
            if not refused or not plan.create:
                raise
            # The API server refused a pod we rendered: retrying cannot help.
            plan = fail(job, moment, "PodRejected", f"the API server refused the job's pods: {exc}")
            apply(kube, job, plan)
        record_transition(job.get("status") or {}, plan.status)
        for stale in inspector_pods_to_clean(pods, plan.status["attempt"]):
            kube.delete_pod(namespace, stale)
        return plan
