"""The jobs, their pods, what they own across attempts (Services, ConfigMaps, Workloads:
their names only), the nodes, Kueue's Workloads (why each waits, its priority boost, its
priority and owners) and the cluster's priority classes (their values, and whether the newest
full list of each source succeeded), as the watches last delivered them.

kopf's watch streams feed it (handlers.py), and a full list replaces it at start-up and
now and then (`replace`): a watch that reconnects delivers what exists, but never what was
deleted while it was away. The reconcile reads it instead of the API server. A write the
operator made itself goes in as well, so its next pass sees it before the watch does. No
entry ever goes back to an older resourceVersion, so a late event cannot undo that write.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .. import constants as c
from ..api.status import find_condition
from ..launcher.identity import attempt_name, job_of_attempt_name
from ..preemption.nodes import (
    NodeTermination,
    node_ready_condition,
    node_termination,
    takes_in_place_pods,
)
from ..queueing import Admission

# What the cache keeps of a Kueue Workload's spec: its priority and where it comes from.
PRIORITY_FIELDS = ("priority", "priorityClassRef", "priorityClassSource", "priorityClassName")

Key = tuple[str, str]  # (namespace, name); a node's namespace is ""
BOOST_ANNOTATIONS = (c.KUEUE_PRIORITY_BOOST_ANNOTATION, c.PRIORITY_BOOST_TIME_ANNOTATION)
DELETED = "DELETED"


def key_of(obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return meta.get("namespace") or "", meta["name"]


def _revision(obj: dict[str, Any]) -> int | None:
    """The resourceVersion as a number: the API promises only that it is opaque, but every
    API server backed by etcd gives its revision, and an order is what makes stale
    events harmless. None (never older than anything) where it is not a number."""
    try:
        return int(obj["metadata"]["resourceVersion"])
    except (KeyError, TypeError, ValueError):
        return None


def _older(new: dict[str, Any], old: dict[str, Any] | None) -> bool:
    if old is None:
        return False
    a, b = _revision(new), _revision(old)
    return a is not None and b is not None and a < b


class Store:
    """Objects of one kind by key, never moved back to an older revision, nor back from a
    deletion: a write of ours that returns after the watch's DELETED event (a finalizer
    released, so the pod went) must not bring a ghost back."""

    def __init__(self) -> None:
        self.objects: dict[Key, dict[str, Any]] = {}
        self.deleted: dict[Key, int] = {}  # key -> the revision it was deleted at

    def apply(self, event_type: str | None, obj: dict[str, Any]) -> bool:
        """Take a watch event (or our own write); whether the store changed."""
        key = key_of(obj)
        if event_type == DELETED:
            revision = _revision(obj)
            if revision is not None:
                self.deleted[key] = revision
            return self.objects.pop(key, None) is not None
        revision = _revision(obj)
        if key in self.deleted:
            if revision is not None and revision <= self.deleted[key]:
                return False
            del self.deleted[key]  # made again since
        old = self.objects.get(key)
        if old == obj or _older(obj, old):
            return False
        self.objects[key] = obj
        return True

    def replace(
        self, listed: Iterable[dict[str, Any]], revision: str, namespace: str | None = None
    ) -> set[Key]:
        """Take a full list made at `revision` (of one namespace, or of all when None): what
        it lacks and is not newer is gone. Returns the keys added, changed or removed."""
        listed = {key_of(o): o for o in listed}
        at = int(revision) if revision.isdigit() else None
        if at is not None:  # the list is the truth as of `at`: older deletions are in it
            self.deleted = {k: r for k, r in self.deleted.items()
                            if r > at or (namespace is not None and k[0] != namespace)}  # fmt: skip
        touched = set()
        for key, old in list(self.objects.items()):
            newer = at is not None and (_revision(old) or 0) > at
            if namespace is not None and key[0] != namespace:
                continue
            if key not in listed and not newer:
                del self.objects[key]
                touched.add(key)
        for key, obj in listed.items():
            if self.apply(None, obj):
                touched.add(key)
        return touched


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _class_value(obj: dict[str, Any]) -> dict[str, Any]:
    """What the cache keeps of a priority class: its name, revision and value."""
    meta = obj["metadata"]
    kept = {k: meta[k] for k in ("name", "resourceVersion") if k in meta}
    return {"metadata": kept, "value": obj.get("value")}


def _what_jobs_read(node: dict[str, Any]) -> tuple[str | None, NodeTermination | None]:
    """What a job's pass reads of a node: the status of its Ready condition ("True",
    "False", "Unknown"), and whether (and when) it is going away."""
    return (node_ready_condition(node) or {}).get("status"), node_termination(node, _EPOCH)


@dataclass(frozen=True)
class KueueView:
    """What Kueue shows of a job's current attempt (its pod group): why it has not admitted it
    (where it says), its Workload as the cache keeps it (_slim_kueue_workload), and the
    cluster's priority classes, {group: {name: value}}, with why they are not known (a group
    never listed, or whose newest list failed)."""

    admission: Admission | None = None
    workload: dict[str, Any] | None = None
    classes: dict[str, dict[str, int]] = field(default_factory=dict)
    classes_unknown: str | None = None


@dataclass(frozen=True)
class JobView:
    """One job as the cache holds it, read under one lock, so that a pass sees the job, its
    pods, what it owns, its trainers' nodes and Kueue's word on its attempt as they were at
    one moment: all that a pass reads of the cache."""

    job: dict[str, Any] | None  # None once it is gone
    pods: list[dict[str, Any]]  # trainers and inspectors, by name
    shared: frozenset[tuple[str, str]]  # (kind, name) of what it owns across attempts
    nodes: dict[str, dict[str, Any] | None]  # the trainers' nodes; None: not in the cache
    kueue: KueueView = KueueView()  # of the attempt the job's status names
    in_place_nodes: int = 0  # the cluster's nodes that take a pod with rljob's restart rule now


class ClusterCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs = Store()
        self._pods = Store()
        self._pods_by_job: dict[Key, set[Key]] = {}  # job -> its pods' keys
        self._shared = {kind: Store() for kind in c.SHARED_KINDS}  # names and labels only
        self._shared_by_job: dict[Key, set[tuple[str, str]]] = {}  # job -> (kind, name)
        self._nodes = Store()
        # The nodes that take a pod with rljob's restart rule now (takes_in_place_pods), kept as
        # their events come: a pass reads how many, never walks every node.
        self._in_place_nodes: set[str] = set()
        self._admissions: dict[Key, Admission] = {}  # Kueue pod group -> why not admitted
        self._boosts = Store()  # Kueue pod group -> its Workload's boost, priority and owners
        self._classes = {
            group: Store() for group in c.PRIORITY_CLASS_KINDS
        }  # priority classes by group
        # Why a group's classes are not known: never listed, or its newest list failed.
        self._classes_unlisted = {
            group: f"{kind}es not listed yet" for group, kind in c.PRIORITY_CLASS_KINDS.items()
        }

    # ------------------------------------------------------------------ jobs
    def on_job(self, event_type: str | None, job: dict[str, Any]) -> None:
        with self._lock:
            self._jobs.apply(event_type, job)

    def jobs(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._jobs.objects.values())

    def job_keys(self) -> list[Key]:
        with self._lock:
            return sorted(self._jobs.objects)

    def replace_jobs(
        self, jobs: list[dict[str, Any]], revision: str, namespace: str | None = None
    ) -> set[Key]:
        """Take a full list; the jobs that came, went or changed."""
        with self._lock:
            return self._jobs.replace(jobs, revision, namespace)

    # ------------------------------------------------------------------ pods
    def on_pod(self, event_type: str | None, pod: dict[str, Any]) -> Key | None:
        """Take a pod's event; the job it belongs to, if it has one."""
        key = key_of(pod)
        with self._lock:
            old = self._pods.objects.get(key)
            if self._pods.apply(event_type, pod):
                self._reindex(key, old)
        return _job_of(pod)

    def _reindex(self, key: Key, old: dict[str, Any] | None) -> None:
        """Move a pod in the by-job index after its entry changed from `old`."""
        new = self._pods.objects.get(key)
        was, now = (_job_of(old) if old else None), (_job_of(new) if new else None)
        if was and was != now:
            self._pods_by_job[was].discard(key)
            if not self._pods_by_job[was]:
                del self._pods_by_job[was]
        if now:
            self._pods_by_job.setdefault(now, set()).add(key)

    def view(self, namespace: str, name: str) -> JobView:
        """What one pass reads of the job from the cache, in one read (Kueue's word on its
        attempt only where the job is there to name the attempt)."""
        with self._lock:
            job = self._jobs.objects.get((namespace, name))
            keys = sorted(self._pods_by_job.get((namespace, name), ()))
            pods = [self._pods.objects[k] for k in keys]
            uid = (job or {}).get("metadata", {}).get("uid") or None
            shared = self._shared_of(namespace, name, uid)
            nodes = {
                node: self._nodes.objects.get(("", node))
                for pod in pods
                if (pod["metadata"].get("labels") or {}).get(c.LABEL_ROLE) == c.ROLE_TRAINER
                and (node := (pod.get("spec") or {}).get("nodeName"))
            }  # fmt: skip
            if job is None:
                return JobView(None, pods, shared, nodes)
            # The attempt as JobStatus reads it: the pod group is named after it.
            attempt = (job.get("status") or {}).get("attempt", 0)
            kueue = self._kueue(namespace, attempt_name(name, attempt))
            in_place_nodes = len(self._in_place_nodes)
        return JobView(job, pods, shared, nodes, kueue, in_place_nodes)

    def replace_pods(
        self, pods: list[dict[str, Any]], revision: str, namespace: str | None = None
    ) -> set[Key]:
        """Take a full list; the jobs whose pods came, went or changed."""
        with self._lock:
            before = dict(self._pods.objects)
            touched = self._pods.replace(pods, revision, namespace)
            for key in touched:
                self._reindex(key, before.get(key))
            changed = [before.get(k) or self._pods.objects.get(k) for k in touched]
        return {job for job in map(_job_of, filter(None, changed)) if job}

    # ------------------------------------------------------------------ shared children
    def on_shared(self, kind: str, event_type: str | None, obj: dict[str, Any]) -> None:
        """Take an event of a job's Service, ConfigMap or Workload (or our own create)."""
        slim = _slim(obj)
        with self._lock:
            if self._shared[kind].apply(event_type, slim):
                self._reindex_shared(kind, key_of(slim), slim)

    def replace_shared(
        self, kind: str, listed: list[dict[str, Any]], revision: str, namespace: str | None = None
    ) -> None:
        """Take a full list of one kind."""
        with self._lock:
            store = self._shared[kind]
            before = dict(store.objects)
            for key in store.replace(map(_slim, listed), revision, namespace):
                self._reindex_shared(kind, key, store.objects.get(key) or before[key])

    def _reindex_shared(self, kind: str, key: Key, obj: dict[str, Any]) -> None:
        job = _job_of(obj)
        if job is None:
            return
        if key in self._shared[kind].objects:
            self._shared_by_job.setdefault(job, set()).add((kind, key[1]))
        elif job in self._shared_by_job:
            self._shared_by_job[job].discard((kind, key[1]))
            if not self._shared_by_job[job]:
                del self._shared_by_job[job]

    def _shared_of(self, namespace: str, job: str, uid: str | None) -> frozenset[tuple[str, str]]:
        found = self._shared_by_job.get((namespace, job), ())
        if uid is None:
            return frozenset(found)
        return frozenset(
            (kind, name) for kind, name in found
            if controller_uid(self._shared[kind].objects[(namespace, name)]) == uid
        )  # fmt: skip

    # ------------------------------------------------------------------ Kueue
    def on_admission(self, event_type: str | None, workload: dict[str, Any]) -> Key | None:
        """Take an event of a Kueue Workload: keep only why it is not admitted (its
        QuotaReserved=False condition), by pod group. The job whose attempt it is, if cached."""
        namespace, name = key = key_of(workload)
        conditions = (workload.get("status") or {}).get("conditions") or []
        waiting = find_condition(conditions, c.KUEUE_QUOTA_CONDITION)
        boost = _slim_kueue_workload(workload)
        with self._lock:
            # A Workload seen first wakes its job (its boost may be due); a change of the
            # boost alone (rljob's own write) wakes none.
            appeared = event_type != DELETED and key not in self._boosts.objects
            self._boosts.apply(event_type, boost)
            if event_type == DELETED or waiting is None or waiting.get("status") != "False":
                changed = self._admissions.pop(key, None) is not None
            else:
                admission = (waiting.get("reason") or "", waiting.get("message") or "")
                changed = self._admissions.get(key) != admission
                self._admissions[key] = admission
            job = job_of_attempt_name(name)
            known = job is not None and (namespace, job) in self._jobs.objects
        return (namespace, job) if (changed or appeared) and known and job else None

    def kueue(self, namespace: str, pod_group: str) -> KueueView:
        """What Kueue shows of a pod group; its Workload is None while the cache holds none."""
        with self._lock:
            return self._kueue(namespace, pod_group)

    def _kueue(self, namespace: str, pod_group: str) -> KueueView:
        key = (namespace, pod_group)
        return KueueView(self._admissions.get(key), self._boosts.objects.get(key),
                         self._priority_classes(), self._priority_classes_unknown())  # fmt: skip

    def on_priority_class(self, group: str, event_type: str | None, obj: dict[str, Any]) -> None:
        """Take an event of a WorkloadPriorityClass (kueue.x-k8s.io) or a PriorityClass
        (scheduling.k8s.io): its name and value. Wakes no job: a boost above 0 is looked at
        every minIntervalSeconds anyway."""
        with self._lock:
            self._classes[group].apply(event_type, _class_value(obj))

    def replace_priority_classes(
        self, group: str, listed: list[dict[str, Any]], revision: str
    ) -> None:
        """Take a full list of one group's classes (an empty one where the cluster does not
        serve them): one deleted while the watch was away goes, and the group is known."""
        with self._lock:
            self._classes[group].replace([_class_value(o) for o in listed], revision)
            self._classes_unlisted.pop(group, None)

    def priority_classes_unlisted(self, group: str, why: str) -> None:
        """A list of one group's classes failed (no RBAC for it): the group is not known until
        a list succeeds, whatever the watch delivers meanwhile."""
        with self._lock:
            self._classes_unlisted[group] = f"{c.PRIORITY_CLASS_KINDS[group]}es: {why}"

    def priority_classes_unknown(self) -> str | None:
        """Why the cluster's priority classes are not known (a group never listed, or whose
        newest list failed); None where the newest list of every group succeeded."""
        with self._lock:
            return self._priority_classes_unknown()

    def _priority_classes_unknown(self) -> str | None:
        whys = [self._classes_unlisted[g] for g in c.PRIORITY_CLASS_KINDS
                if g in self._classes_unlisted]  # fmt: skip
        return "; ".join(whys) or None

    def priority_classes(self) -> dict[str, dict[str, int]]:
        """The cluster's priority classes: {group: {name: value}}."""
        with self._lock:
            return self._priority_classes()

    def _priority_classes(self) -> dict[str, dict[str, int]]:
        return {
            group: {name: o["value"] for (_, name), o in store.objects.items()
                    if isinstance(o.get("value"), int)}
            for group, store in self._classes.items()
        }  # fmt: skip

    # ------------------------------------------------------------------ nodes
    def on_node(self, event_type: str | None, node: dict[str, Any]) -> list[Key]:
        """Take a node's event; the jobs to wake: those with pods on the node, when it came,
        went, or changed readiness or a termination notice (a taint, or the termination-time
        annotation). A heartbeat that changes nothing else wakes none."""
        name = node["metadata"]["name"]
        with self._lock:
            old = self._nodes.objects.get(("", name))
            if not self._nodes.apply(event_type, node):
                return []
            self._note_in_place_node(name)
            if (
                event_type != DELETED
                and old is not None
                and (_what_jobs_read(old) == _what_jobs_read(node))
            ):
                return []
            return self._jobs_on_locked({name})

    def replace_nodes(self, nodes: list[dict[str, Any]], revision: str) -> list[Key]:
        """Take a full list; the jobs with pods on nodes that came, went or changed."""
        with self._lock:
            touched = self._nodes.replace(nodes, revision)
            for _, name in touched:
                self._note_in_place_node(name)
            return self._jobs_on_locked({name for _, name in touched})

    def _note_in_place_node(self, name: str) -> None:
        """Count the node among those that take in-place pods, or not, as the store holds it."""
        node = self._nodes.objects.get(("", name))
        if node is not None and takes_in_place_pods(node):
            self._in_place_nodes.add(name)
        else:
            self._in_place_nodes.discard(name)

    def _jobs_on_locked(self, node_names: set[str]) -> list[Key]:
        return sorted(
            {
                job
                for pod in self._pods.objects.values()
                if (pod.get("spec") or {}).get("nodeName") in node_names and (job := _job_of(pod))
            }
        )


def _slim(obj: dict[str, Any]) -> dict[str, Any]:
    """What the cache keeps of a shared child: who it is, and whose (its label, and the uid of
    its controller, which only the owner's own creates can know ahead)."""
    meta = obj["metadata"]
    kept = {k: meta[k] for k in ("namespace", "name", "resourceVersion", "labels") if k in meta}
    controller = controller_uid(obj)
    if controller:
        kept["ownerReferences"] = [{"uid": controller, "controller": True}]
    return {"metadata": kept}


def _slim_kueue_workload(workload: dict[str, Any]) -> dict[str, Any]:
    """What the cache keeps of a Kueue Workload for the boost: who it is, rljob's two
    annotations, its owners (Kueue's pod group: the group's pods) and its priority."""
    meta = workload["metadata"]
    kept = {k: meta[k] for k in ("namespace", "name", "resourceVersion") if k in meta}
    annotations = meta.get("annotations") or {}
    kept["annotations"] = {k: annotations[k] for k in BOOST_ANNOTATIONS if k in annotations}
    owners = [{k: o[k] for k in ("apiVersion", "kind", "name", "uid") if k in o}
              for o in meta.get("ownerReferences") or []]  # fmt: skip
    if owners:
        kept["ownerReferences"] = owners
    spec = workload.get("spec") or {}
    return {"metadata": kept, "spec": {k: spec[k] for k in PRIORITY_FIELDS if k in spec}}


def controller_uid(obj: dict[str, Any]) -> str | None:
    """The uid of the object's controller (its owner reference marked controller), if any."""
    owners = obj["metadata"].get("ownerReferences") or []
    return next((o.get("uid") for o in owners if o.get("controller")), None)


def _job_of(pod: dict[str, Any]) -> Key | None:
    job = (pod["metadata"].get("labels") or {}).get(c.LABEL_JOB)
    return (pod["metadata"].get("namespace") or "", job) if job else None
