"""Carry out a pass's plan: the only writes of a pass (see `apply` for the order).

A cache can lag behind, so every write is conditional on the job's resourceVersion as the
pass saw it: the status write carries it, and a pass that creates or deletes without changing
the status first writes an empty patch that carries it (a fence). A stale pass fails with a
conflict before it creates a pod or deletes anything, and is run again on the job as the API
server has it. Children are created under fixed names, so a repeated create is a no-op;
events go out last, once the status they describe is stored. What the pass wrote goes into
the cache at once, so that the next pass sees it before the watch brings it.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

from rljob_contract import CHECKPOINT_REQUEST_ANNOTATION
from rljob_contract.request import format_request

from .. import constants as c
from ..api.status import BoostBasis, JobStatus
from ..kube import Kube, KubeError, at_once
from ..launcher.identity import JobRef
from ..runtime.cache import ClusterCache, controller_uid
from ..runtime.events import PostEvent
from .boost.memory import BoostMemory, Refusal
from .plan import Plan
from .policies.pod_cleanup import holds_our_finalizer
from .snapshot import job_ref

log = logging.getLogger(__name__)


def status_patch(old: dict[str, Any], new: JobStatus) -> dict[str, Any]:
    """A merge patch from the status as stored to `new` (top-level keys; a removed key becomes
    null)."""
    wanted = new.to_dict()
    patch = {k: v for k, v in wanted.items() if old.get(k) != v}
    patch.update({k: None for k in old if k not in wanted})
    return patch


@dataclass(frozen=True)
class Write:
    """One request of a pass (`send`), and where its answer goes (`keep`): into the cache, so
    that the next pass sees what this one wrote before the watch brings it."""

    send: Callable[[], Any]
    keep: Callable[[ClusterCache, Any], None]


def _pod(cache: ClusterCache, pod: dict[str, Any] | None) -> None:
    """A pod as stored (None: gone)."""
    if pod:
        cache.on_pod(None, pod)


def _deleted_pod(cache: ClusterCache, pod: dict[str, Any] | None) -> None:
    """A pod being deleted, as the API server returned it: one without our finalizer may be
    gone already, and is left to the watch."""
    if pod and holds_our_finalizer(pod):
        cache.on_pod(None, pod)


def _job(cache: ClusterCache, job: dict[str, Any]) -> None:
    """The job as stored after its status write."""
    cache.on_job(None, job)


def _nothing(cache: ClusterCache, answer: Any) -> None:
    """A write whose answer tells the cache nothing new: a PodGroup's deletion; the fence,
    which changed nothing where it went through; the children, which keep each one as it is
    made (_create_children)."""


def _send(cache: ClusterCache, writes: list[Write]) -> None:
    """Send writes that need none of each other together (`at_once`), then keep each answer
    as its write says; where one fails, the first error in their order is raised once all
    have returned, and none is kept (the watch brings them)."""
    for write, answer in zip(writes, at_once([write.send for write in writes]), strict=True):
        write.keep(cache, answer)


def apply(
    kube: Kube, cache: ClusterCache, memory: BoostMemory, job: dict[str, Any], plan: Plan,
    tell: PostEvent,
) -> None:  # fmt: skip
    """Fence, create, record, then release, ask, delete and drop the old PodGroups, tell.

    A new gang is created before its creation is recorded, so a pass that dies
    half-way creates the rest next time rather than mistaking the missing pods for
    deleted ones; an ended attempt is recorded before its pods are deleted or released, so
    the end is counted exactly once. Finalizers of pods whose end an earlier pass recorded
    (`plan.release_first`) go out beside the fence, before the new gang: the scheduler counts
    a pod's resources until the pod is gone, and would find no room for the new pods while
    the old ones wait for their release. A kept pod joins the new gang beside its new pods,
    and is told to stop with the later writes (reconcile.policies.in_place). Requests that
    need none of each other go out together (`at_once`): the gang's pods, once what they name
    exists; the releases, requests, deletes and stops. Each write's answer (the pods and the
    job as the API server returns them) goes into the cache (`Write.keep`), so that the next
    pass sees them before the watch brings them; what became of a boost write goes into the
    boost's `memory`.
    """
    patch = status_patch(job.get("status") or {}, plan.status)
    if not patch and plan.asks_for_nothing():
        return  # the pass of a job at rest: most passes
    for batch in _batches(kube, cache, job, plan, patch):
        _send(cache, batch)
    if plan.annotate_workload:
        _annotate_workload(kube, cache, memory, job_ref(job), *plan.annotate_workload)
    for event in plan.events:
        tell(job, event.type, event.reason, event.message)
    if plan.delete_job:
        kube.delete_job(job["metadata"]["namespace"], job["metadata"]["name"])


def _batches(
    kube: Kube, cache: ClusterCache, job: dict[str, Any], plan: Plan, patch: dict[str, Any]
) -> Iterator[list[Write]]:
    """The plan's writes to the pods and the job, in `apply`'s order: each batch goes out
    together, and once the one before it is answered (a batch is made only then)."""
    meta = job["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    revision = meta.get("resourceVersion")
    acts = (plan.create or plan.request_checkpoint or plan.delete or plan.force_delete
            or plan.delete_pod_groups or plan.stop_in_place or plan.run_in_place)  # fmt: skip
    fence = plan.create or plan.run_in_place or (acts and not patch)
    children = [obj for obj in plan.create if obj["kind"] != "Pod"]
    first, later = (plan.release, []) if plan.release_first else ([], plan.release)
    # What the pods name (their Service, PodGroup, ...) is made beside the fence (an empty
    # status write that fails if the job changed since the pass read it): none of it runs
    # anything, so a stale pass leaves at most an unused PodGroup of an attempt that is not
    # recorded, which that attempt takes over if it comes, and the job's deletion removes.
    yield [
        *(Write(partial(kube.release_pod, namespace, pod), _pod) for pod in first),
        *([Write(partial(kube.patch_status, namespace, name, {}, revision), _nothing)] if fence
          else []),
        *([Write(partial(_create_children, kube, cache, job, children), _nothing)] if children
          else []),
    ]  # fmt: skip
    # The next pass must see the new gang, though its watch events have not come: a pod
    # missing from the cache would look deleted.
    yield [
        *(Write(partial(kube.create, obj), _pod) for obj in plan.create if obj["kind"] == "Pod"),
        *(Write(partial(kube.patch_pod_metadata, namespace, pod, metadata), _pod)
          for pod, metadata in plan.run_in_place.items()),
    ]  # fmt: skip
    if patch:
        yield [Write(partial(kube.patch_status, namespace, name, patch, revision), _job)]
    request = format_request(datetime.now(UTC), plan.checkpoint_deadline)
    # None of the released pods is one that this pass deletes: decide sees to it. The next
    # pass must not release, delete or ask a pod again before the watch brings this, nor
    # delete a pod asked before its request lands.
    yield [
        *(Write(partial(kube.release_pod, namespace, pod), _pod) for pod in later),
        *(Write(partial(kube.delete_pod, namespace, pod), _deleted_pod) for pod in plan.delete),
        *(Write(partial(kube.delete_pod, namespace, pod, grace_seconds=0), _deleted_pod)
          for pod in plan.force_delete),
        *(Write(partial(kube.annotate_pod, namespace, pod, CHECKPOINT_REQUEST_ANNOTATION,
                        request), _pod)
          for pod in plan.request_checkpoint),
        *(Write(partial(kube.delete_pod_group, namespace, group), _nothing)
          for group in plan.delete_pod_groups),
        *(Write(partial(kube.patch_pod_metadata, namespace, pod, metadata), _pod)
          for pod, metadata in plan.stop_in_place.items()),
    ]  # fmt: skip


class ForeignChild(Exception):
    """An object under a name the job's own child must have is not the job's: its pods would
    mount or run what someone else put there."""


def not_ours(found: dict[str, Any], wanted: dict[str, Any]) -> str | None:
    """Why a ConfigMap found under the name of the job's own is not it (another controller,
    other contents, or contents that can change under the pods); None where it is. The owner
    reference alone proves nothing (anyone can copy the job's uid into one): the contents do,
    and being immutable, they stay what was checked."""
    owners = {o.get("uid") for o in wanted["metadata"]["ownerReferences"]}
    if controller_uid(found) not in owners:
        return "its controller is not the job"
    if (found.get("data") or {}) != wanted.get("data") or found.get("binaryData"):
        return "its contents are not what rljob ships"
    if found.get("immutable") is not True:
        return "it is not immutable: its contents could change under the pods"
    return None


def with_fresh_secrets(obj: dict[str, Any]) -> dict[str, Any]:
    """A Secret as the plan names it gets a fresh random value for each of its keys here, as
    it is created: the plan stays a function of what the pass saw, and no value is logged."""
    if obj["kind"] != "Secret":
        return obj
    return {**obj, "stringData": {key: secrets.token_urlsafe(32) for key in obj["stringData"]}}


def _create_children(
    kube: Kube, cache: ClusterCache, job: dict[str, Any], children: list[dict[str, Any]]
) -> None:
    """Create what a gang's pods name, in the plan's order, each shared child (c.SHARED_KINDS)
    into the cache as it is made: a later one that fails leaves the earlier ones known. Raise
    ForeignChild, before any pod mounts it, for what is not the job's own:

    - the launcher's ConfigMap, whose code every pod runs, is read on every gang (whatever the
      cache holds: anyone may have written it) and must be the job's, rljob's files, immutable;
    - a Secret (the Ray token's) must be made now, unless the job's status names it already:
      its name was drawn at random and is recorded only in the status write that follows its
      creation, so one found under a name not yet recorded was made by someone who knows it.
    """
    recorded = (job.get("status") or {}).get("rayTokenSecret")
    for obj in children:
        meta = obj["metadata"]
        if obj["kind"] == "ConfigMap":
            created = _checked_config_map(kube, obj)
        else:
            created = kube.create(with_fresh_secrets(obj))
        if created is None and obj["kind"] == "Secret" and meta["name"] != recorded:
            raise ForeignChild(f"Secret {meta['name']} exists, though rljob drew its name at "
                               "random and has not recorded it yet: someone else made it and "
                               "may know the token in it. rljob will not mount it into the "
                               "job's pods. Delete the job and create it again")  # fmt: skip
        if created and obj["kind"] in c.SHARED_KINDS:
            cache.on_shared(obj["kind"], None, created)


def _checked_config_map(kube: Kube, wanted: dict[str, Any]) -> dict[str, Any]:
    """The launcher's ConfigMap as stored: made now, or found and checked (ForeignChild)."""
    meta = wanted["metadata"]
    found = kube.get_config_map(meta["namespace"], meta["name"])
    if found is None:
        found = kube.create(wanted) or kube.get_config_map(meta["namespace"], meta["name"])
    if found is None:  # deleted between the create and the read: the next pass makes it
        raise RuntimeError(f"ConfigMap {meta['name']} went while rljob made it")
    why = not_ours(found, wanted)
    if why:
        raise ForeignChild(f"ConfigMap {meta['name']} exists and is not the job's own ({why}); "
                           "rljob will not mount it into the job's pods. Delete it, then the "
                           "job, and create the job again")  # fmt: skip
    return found


def _annotate_workload(
    kube: Kube, cache: ClusterCache, memory: BoostMemory, job: JobRef, workload: str,
    annotations: dict[str, str], basis: BoostBasis,
) -> None:  # fmt: skip
    """Write the priority boost. Advisory: a refusal (no RBAC for it, Kueue's webhook) is
    kept for the job's back-off and condition (reconcile.boost.memory), and the pass goes on.
    A write the API server took keeps its basis, which the next pass records in the job's
    status: the status never claims a boost that is not on the Workload."""
    try:
        stored = kube.annotate_kueue_workload(job.namespace, workload, annotations)
    except KubeError as exc:
        log.warning("%s/%s: cannot write Kueue's priority boost (%s)", job.namespace, workload, exc)
        before = memory.recall(job).refusal
        count = before.count + 1 if before else 1
        memory.keep_refusal(job, Refusal(datetime.now(UTC), count, str(exc)))
        return
    memory.keep_refusal(job, None)
    if stored is not None:
        cache.on_admission(None, stored)
        memory.keep_accepted(job, basis)
