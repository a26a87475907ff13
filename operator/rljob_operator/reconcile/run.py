"""Carry out one reconcile pass: read the cache, decide, then act (see `apply` for the order).

The pass reads the job, its pods and their nodes from the watch cache and calls the API
server only to act. A cache can lag behind, so every write is conditional on the job's
resourceVersion as the pass saw it: the status write carries it, and a pass that creates
or deletes without changing the status first writes an empty patch that carries it (a
fence). A stale pass fails with a conflict before it creates a pod or deletes anything, and
is run again on the job as the API server has it. Children are created under fixed names,
so a repeated create is a no-op; events go out last, once the status they describe is
stored.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

from rljob_contract import CHECKPOINT_REQUEST_ANNOTATION
from rljob_contract.request import format_request

from .. import constants as c
from ..api.reasons import ConditionType, Reason
from ..api.spec import SpecError
from ..api.status import JobStatus
from ..api.timestamps import iso
from ..kube import Kube, KubeError, at_once
from ..launcher.identity import attempt_name
from ..launcher.inspector import inspector_name
from ..runtime.cache import ClusterCache, controller_uid
from ..runtime.events import PostEvent
from .boost_guards import ceiling, not_owned
from .decide import decide, fail
from .lookup import CheckpointFinder, Inspection, LookupFailed, inspector_ended
from .observe import inspector_stuck
from .plan import LookupPending, LookupResult, Plan
from .pod_cleanup import holds_our_finalizer
from .priority_boost import (
    Refusal,
    SavedRead,
    boost_condition,
    plan_boost,
    wants_boost,
    written_on,
)
from .settings import DEFAULT_SETTINGS, Settings
from .snapshot import Snapshot, take_snapshot

log = logging.getLogger(__name__)


def status_patch(old: dict[str, Any], new: JobStatus) -> dict[str, Any]:
    """A merge patch from the status as stored to `new` (top-level keys; a removed key becomes
    null)."""
    wanted = new.to_dict()
    patch = {k: v for k, v in wanted.items() if old.get(k) != v}
    patch.update({k: None for k in old if k not in wanted})
    return patch


def apply(
    kube: Kube, cache: ClusterCache, job: dict[str, Any], plan: Plan, tell: PostEvent
) -> None:
    """Fence, create, record, then release, ask, delete and drop the old PodGroups, tell.

    A new gang is created before its creation is recorded, so a pass that dies
    half-way creates the rest next time rather than mistaking the missing pods for
    deleted ones; an ended attempt is recorded before its pods are deleted, so the
    end is counted exactly once. Requests that need none of each other go out together
    (`at_once`): the gang's pods, once what they name exists; the releases, requests and
    deletes. The pods and the job as the API server returns them go into the cache, so
    that the next pass sees them before the watch brings them.
    """
    meta = job["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    revision = meta.get("resourceVersion")
    patch = status_patch(job.get("status") or {}, plan.status)
    acts = (plan.create or plan.request_checkpoint or plan.delete or plan.force_delete
            or plan.delete_pod_groups)  # fmt: skip
    fence = plan.create or (acts and not patch)
    children = [obj for obj in plan.create if obj["kind"] != "Pod"]
    pods = [obj for obj in plan.create if obj["kind"] == "Pod"]
    # What the pods name (their Service, PodGroup, ...) is made beside the fence: none of it
    # runs anything, so a stale pass leaves at most an unused PodGroup of an attempt that is
    # not recorded, which that attempt takes over if it comes, and the job's deletion removes.
    at_once([
        *([partial(_fence, kube, cache, job)] if fence else []),
        *([partial(_create_children, kube, cache, children)] if children else []),
    ])  # fmt: skip
    for created in at_once(partial(kube.create, pod) for pod in pods):
        if created:
            # The next pass must see the new gang, though its watch events have not come:
            # a pod missing from the cache would look deleted.
            cache.on_pod(None, created)
    if patch:
        cache.on_job(None, kube.patch_status(namespace, name, patch, revision))
    request = format_request(datetime.now(UTC), plan.checkpoint_deadline)
    answers = at_once([
        *(partial(kube.release_pod, namespace, pod) for pod in plan.release),
        *(partial(kube.delete_pod, namespace, pod) for pod in plan.delete),
        *(partial(kube.delete_pod, namespace, pod, grace_seconds=0) for pod in plan.force_delete),
        *(partial(kube.annotate_pod, namespace, pod, CHECKPOINT_REQUEST_ANNOTATION, request)
          for pod in plan.request_checkpoint),
        *(partial(kube.delete_pod_group, namespace, group) for group in plan.delete_pod_groups),
    ])  # fmt: skip
    released = answers[: len(plan.release)]  # none that this pass deletes: decide sees to it
    deleted = answers[len(released) : len(released) + len(plan.delete) + len(plan.force_delete)]
    done = len(released) + len(deleted)
    asked = answers[done : done + len(plan.request_checkpoint)]
    # The next pass must not release, delete or ask a pod again before the watch brings this,
    # nor delete a pod asked before its request lands. A deleted pod without our finalizer may
    # be gone already, and is left to the watch.
    for pod in [*released, *(p for p in deleted if p and holds_our_finalizer(p)), *asked]:
        if pod:
            cache.on_pod(None, pod)
    if plan.annotate_workload:
        _annotate_workload(kube, cache, name, namespace, *plan.annotate_workload)
    for event in plan.events:
        tell(job, event.type, event.reason, event.message)
    if plan.delete_job:
        kube.delete_job(namespace, name)


def _fence(kube: Kube, cache: ClusterCache, job: dict[str, Any]) -> None:
    """An empty status write that fails if the job changed since the pass read it."""
    meta = job["metadata"]
    cache.on_job(None, kube.patch_status(meta["namespace"], meta["name"], {},
                                         meta.get("resourceVersion")))  # fmt: skip


class ForeignChild(Exception):
    """An object under a name the job's own child must have is not the job's: its pods would
    mount or run what someone else put there."""


def not_ours(found: dict[str, Any], wanted: dict[str, Any]) -> str | None:
    """Why a ConfigMap found under the name of the job's own is not it (another controller,
    or other contents); None where it is."""
    owners = {o.get("uid") for o in wanted["metadata"]["ownerReferences"]}
    if controller_uid(found) not in owners:
        return "its controller is not the job"
    if (found.get("data") or {}) != wanted.get("data") or found.get("binaryData"):
        return "its contents are not what rljob ships"
    return None


def with_fresh_secrets(obj: dict[str, Any]) -> dict[str, Any]:
    """A Secret as the plan names it gets a fresh random value for each of its keys here, as
    it is created: the plan stays a function of what the pass saw, and no value is logged."""
    if obj["kind"] != "Secret":
        return obj
    return {**obj, "stringData": {key: secrets.token_urlsafe(32) for key in obj["stringData"]}}


def _create_children(kube: Kube, cache: ClusterCache, children: list[dict[str, Any]]) -> None:
    """Create what a gang's pods name, in the plan's order. A ConfigMap that is there already
    is read and must be the job's own (ForeignChild otherwise), before any pod mounts it. A
    Secret that is there already is the job's: its name holds the job's uid."""
    for obj in children:
        created = kube.create(with_fresh_secrets(obj))
        meta = obj["metadata"]
        if created is None and obj["kind"] == "ConfigMap":
            found = kube.get_config_map(meta["namespace"], meta["name"])
            why = not_ours(found, obj) if found else None
            if why:
                raise ForeignChild(f"ConfigMap {meta['name']} exists and is not the job's own "
                                   f"({why}); rljob will not mount it into the job's pods. "
                                   "Delete it, then the job, and create the job again")  # fmt: skip
            created = found
        if created and obj["kind"] in c.SHARED_KINDS:
            cache.on_shared(obj["kind"], None, created)


def _annotate_workload(
    kube: Kube, cache: ClusterCache, job: str, namespace: str, workload: str,
    annotations: dict[str, str],
) -> None:  # fmt: skip
    """Write the priority boost. Advisory: a refusal (no RBAC for it, Kueue's webhook) is
    kept for the job's back-off and condition (reconcile.priority_boost), and the pass goes on."""
    try:
        stored = kube.annotate_kueue_workload(namespace, workload, annotations)
    except KubeError as exc:
        log.warning("%s/%s: cannot write Kueue's priority boost (%s)", namespace, workload, exc)
        before = cache.boost_refusal(namespace, job)
        count = before.count + 1 if before else 1
        cache.refuse_boost(namespace, job, Refusal(datetime.now(UTC), count, str(exc)))
        return
    cache.refuse_boost(namespace, job, None)
    if stored is not None:
        cache.on_admission(None, stored)


def plan_boost_write(
    plan: Plan, snap: Snapshot, finder: CheckpointFinder, cache: ClusterCache
) -> None:
    """Add the priority boost's condition, write and next look to the plan, where the job
    wants one, the operator allows it, no refused write waits out its back-off, and the
    attempt's Kueue Workload is in the cache and owned by the attempt's pods; below the next
    priority class up (reconcile.priority_boost and reconcile.boost_guards decide)."""
    spec = snap.spec
    if isinstance(spec, SpecError):
        return
    if not wants_boost(spec, snap.queue, plan.status):
        return
    limit = snap.settings.max_priority_boost
    refusal = cache.boost_refusal(snap.ref.namespace, snap.ref.name)
    attempt = plan.status.attempt
    workload = attempt_name(snap.ref.name, attempt)
    found = cache.kueue_workload(snap.ref.namespace, workload)
    top = foreign = None
    if found is not None:
        foreign = not_owned(found, snap.trainers, attempt)
        top = ceiling(found, cache.priority_classes())
    condition = boost_condition(spec.queueing.priority_boost, limit, refusal, top, foreign)
    plan.status = plan.status.with_condition(
        ConditionType.PRIORITY_BOOST, *condition, iso(snap.now),
        snap.job["metadata"].get("generation"),
    )  # fmt: skip
    if limit <= 0:
        return
    if refusal is not None and refusal.retry_at() > snap.now:
        plan.requeue((refusal.retry_at() - snap.now).total_seconds())
        return
    if found is None or foreign is not None:
        return
    annotations = found["metadata"].get("annotations") or {}
    read = cache.saved_read(snap.ref.namespace, snap.ref.name)
    if read is None or not read.fresh(attempt, snap.now, spec.queueing.priority_boost):
        saved = finder.saved(spec)
        if saved is None:
            return
        read = SavedRead(attempt, snap.now, saved)
        cache.keep_saved_read(snap.ref.namespace, snap.ref.name, read)
    saved = read.saved
    boost = plan_boost(spec, plan.status, saved, written_on(annotations), snap.now, limit, top)
    if boost.annotations:
        plan.annotate_workload = (workload, boost.annotations)
        if boost.basis is not None:
            plan.status = replace(plan.status, priority_boost=boost.basis)
    if boost.wake_after is not None:
        plan.requeue(boost.wake_after)


MAX_LOOKUPS_PER_PASS = 3  # a bad checkpoint asks for one more look


def plan_pass(snap: Snapshot, finder: CheckpointFinder) -> Plan:
    """Decide, looking at the checkpoints as often as the decision asks (bounded).

    An inspector pod the look needs is created by the plan, and one that is done (it
    reported, or never will) or of another attempt is deleted by it, after the status that
    records its report. One that runs and has not reported is decided on once more, for what
    keeps it from starting.
    """
    plan = decide(snap)
    inspectors = snap.inspectors
    inspector = inspectors.get(inspector_name(snap.ref.name, plan.status.attempt))
    events = []
    for _ in range(MAX_LOOKUPS_PER_PASS):
        if not plan.needs_checkpoint_lookup or isinstance(snap.spec, SpecError):
            break
        seen = snap.with_status(plan.status)
        try:
            found = finder.lookup(
                snap.spec, snap.ref, plan.status.attempt, plan.lookup_exclude, inspector
            )
        except LookupFailed as exc:
            found = LookupResult(None, failure=str(exc))
        if isinstance(found, Inspection):
            log.debug("%s: %s", snap.ref.name, found.state)
            if found.pod is None and inspector is not None:  # it runs, and has not reported
                stuck = inspector_stuck(inspector, snap.now)
                waiting = LookupPending(inspector["metadata"]["name"], stuck)
                events += plan.events  # replaced by the plan that knows why it waits
                plan = decide(seen, waiting)
            elif found.pod is not None and found.pod["metadata"]["name"] not in inspectors:
                plan.create.append(found.pod)
            # else the one read this pass is still there: the plan deletes it, and its
            # deletion brings the pass that creates the next.
            break
        inspector = None  # its report is read: a second look needs a new one
        events += plan.events  # this plan is replaced by the one that knows what was found
        plan = decide(seen, found)
    plan.events = events + plan.events
    attempt = str(plan.status.attempt)
    plan.delete += [
        name for name, pod in inspectors.items()
        if not pod["metadata"].get("deletionTimestamp")
        and (inspector_ended(pod) or pod["metadata"]["labels"].get(c.LABEL_ATTEMPT) != attempt)
    ]  # fmt: skip
    return plan


def reconcile(
    kube: Kube,
    cache: ClusterCache,
    namespace: str,
    name: str,
    finder: CheckpointFinder,
    tell: PostEvent,
    now: datetime | None = None,
    settings: Settings = DEFAULT_SETTINGS,
) -> tuple[JobStatus, Plan] | None:
    """One pass for one job; its Events go to `tell`. The caller never runs two passes of one
    job at once (the work queue hands a key to one worker at a time); `settings` are the
    administrator's. The job's status as the pass found it, and the plan it carried out
    (whose status is now stored); None for a job that is gone."""
    job = cache.job(namespace, name)
    pods = cache.pods_of(namespace, name)
    if job is None or job["metadata"].get("deletionTimestamp"):
        held = [pod["metadata"]["name"] for pod in pods if holds_our_finalizer(pod)]
        for pod in at_once(partial(kube.release_pod, namespace, held_pod) for held_pod in held):
            if pod:  # the garbage collector removes them; the next pass must not release again
                cache.on_pod(None, pod)
        return None
    moment = now or datetime.now(UTC)
    shared = cache.shared_of(namespace, name, job["metadata"].get("uid") or None)
    snap = take_snapshot(job, pods, {}, moment, kube.serves_workload_api, settings=settings,
                         shared=shared)  # fmt: skip
    admission = cache.admission(namespace, attempt_name(name, snap.status.attempt))
    snap = replace(snap, nodes=_nodes_of(kube, cache, snap.trainers), admission=admission)
    plan = plan_pass(snap, finder)
    plan_boost_write(plan, snap, finder, cache)
    try:
        apply(kube, cache, job, plan, tell)
    except ForeignChild as exc:
        plan = fail(snap, Reason.FOREIGN_CHILD, str(exc))
        apply(kube, cache, job, plan, tell)
    except KubeError as exc:
        refused = exc.status in (400, 422) or exc.refused_by_admission
        if not refused or not plan.create:
            raise
        # The API server refused a pod we rendered: retrying cannot help.
        plan = fail(snap, Reason.POD_REJECTED, f"the API server refused the job's pods: {exc}")
        apply(kube, cache, job, plan, tell)
    return snap.status, plan


def _nodes_of(
    kube: Kube, cache: ClusterCache, pods: Iterable[dict[str, Any]]
) -> dict[str, dict[str, Any] | None]:
    """The pods' nodes from the cache. One the cache lacks is read from the API server: a
    node is never taken for gone only because its watch event has not come yet."""
    names = {p["spec"]["nodeName"] for p in pods if p.get("spec", {}).get("nodeName")}
    nodes = cache.nodes_named(names)
    missing = {name for name, node in nodes.items() if node is None}
    for name, node in kube.get_nodes(missing).items():
        nodes[name] = node
        if node is not None:
            cache.on_node(None, node)
    return nodes
