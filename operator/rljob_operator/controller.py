"""The operator's core: watch events fill the cache and the work queue, workers run passes.

- Every input is a key in one de-duplicating queue: a job's event, an event of one of its
  pods, a node that came, went, or changed readiness or a termination notice (only the jobs
  with pods there), a Kueue Workload of an attempt that appeared or changed why it waits, and
  "come back in N seconds" from a pass.
- A resync queues every cached job now and then; it reads nothing from the API server,
  and a pass that finds nothing to do writes nothing. A relist, much rarer, replaces the
  cache with full lists, for what a reconnecting watch never reports: deletions while it
  was away. One comes soon after the start (and after a resume), for what went between
  the first list and the start of kopf's watches.
- A pass whose write meets a conflict reads the job once and runs again at once. Any
  other error backs off per job.
- Paused (another replica acts), the queue hands nothing out; resumed, it resyncs.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from . import constants as c
from .kube import Kube, KubeError
from .metrics import JOB_GOODPUT, PASSES, QUEUE_DEPTH, record_transition
from .reconcile.lookup.finder import CheckpointFinder
from .reconcile.run import Reconciler
from .reconcile.settings import DEFAULT_SETTINGS, Settings
from .runtime.cache import DELETED, ClusterCache, Key
from .runtime.events import EventSink
from .runtime.queue import WorkQueue

log = logging.getLogger(__name__)

RESYNC_SECONDS = 30.0
RELIST_SECONDS = 600.0
# The first full list is made before kopf's watches start, so what is deleted between the
# two is never reported; a second list, once the watches run, drops it.
RELIST_AFTER_START_SECONDS = 15.0
WORKERS = 16


class Controller:
    def __init__(
        self,
        kube: Kube,
        finder: CheckpointFinder,
        namespaces: Iterable[str] | None,
        workers: int = WORKERS,
        resync_seconds: float = RESYNC_SECONDS,
        relist_seconds: float = RELIST_SECONDS,
        settings: Settings = DEFAULT_SETTINGS,
    ) -> None:
        self.kube = kube
        self.namespaces = list(namespaces) if namespaces is not None else None  # None: all
        self.cache = ClusterCache()
        self.queue = WorkQueue()
        self.events = EventSink(kube.post_event)
        self.reconciler = Reconciler(kube, self.cache, finder, self.events, settings)
        self.workers = workers
        self.resync_seconds, self.relist_seconds = resync_seconds, relist_seconds
        self.stopping = threading.Event()
        self._next_relist = 0.0  # monotonic
        self._timer_moved = threading.Event()  # wakes the resync loop: stop, or a relist sooner
        QUEUE_DEPTH.set_function(lambda: len(self.queue))
        JOB_GOODPUT.jobs = lambda: [] if self.queue.paused else self.cache.jobs()

    # ------------------------------------------------------------------ life
    def start(self) -> None:
        """Fill the cache from full lists, then start the workers and the resync."""
        self.relist()
        self._relist_soon()
        for i in range(self.workers):
            self._thread(self._work, f"rljob-worker-{i}")
        self._thread(self._resync_loop, "rljob-resync")

    def _thread(self, target: Callable[[], None], name: str) -> None:
        threading.Thread(target=target, name=name, daemon=True).start()

    def stop(self) -> None:
        self.stopping.set()
        self._timer_moved.set()
        self.queue.shut_down()
        self.events.close()

    def pause(self) -> None:
        if not self.queue.paused:
            log.info("pausing: another replica acts")
        self.queue.pause()

    def resume(self) -> None:
        """Act again, from fresh lists: the cache went stale while kopf's watches paused."""
        if self.queue.paused:
            log.info("resuming: this replica acts")
            try:
                self.relist()
            except KubeError as exc:
                log.warning("relist failed (the resync retries): %s", exc)
            self._relist_soon()
            self.queue.resume()
            self.resync()

    # ------------------------------------------------------------------ inputs
    def job_event(self, event_type: str | None, job: dict[str, Any], needs_pass: bool) -> None:
        self.cache.on_job(event_type, job)
        if needs_pass or event_type == DELETED:
            meta = job["metadata"]
            self.queue.add((meta["namespace"], meta["name"]))

    def pod_event(self, event_type: str | None, pod: dict[str, Any]) -> None:
        job = self.cache.on_pod(event_type, pod)
        if job:
            self.queue.add(job)

    def admission_event(self, event_type: str | None, workload: dict[str, Any]) -> None:
        job = self.cache.on_admission(event_type, workload)
        if job:
            self.queue.add(job)

    def priority_class_event(self, group: str, event_type: str | None, obj: dict[str, Any]) -> None:
        """A WorkloadPriorityClass or PriorityClass: kept for the boosts' ceilings. No pass."""
        self.cache.on_priority_class(group, event_type, obj)

    def shared_event(self, kind: str, event_type: str | None, obj: dict[str, Any]) -> None:
        """A job's Service, ConfigMap or Workload: noted for its next gang, which creates
        only what is missing. No pass: a running gang has what it needs."""
        self.cache.on_shared(kind, event_type, obj)
        if event_type == DELETED:
            meta = obj["metadata"]
            log.debug("%s %s/%s is gone: the job's next gang makes it again",
                      kind, meta["namespace"], meta["name"])  # fmt: skip

    def node_event(self, event_type: str | None, node: dict[str, Any]) -> None:
        for job in self.cache.on_node(event_type, node):
            self.queue.add(job)

    def resync(self) -> None:
        for key in self.cache.job_keys():
            self.queue.add(key)

    def relist(self) -> None:
        """Replace the cache with full lists (one call per kind and namespace); queue the
        jobs whose objects changed."""
        changed: set[Key] = set()
        for namespace in self.namespaces or [None]:
            jobs, revision = self.kube.list_jobs(namespace)
            changed |= self.cache.replace_jobs(jobs, revision, namespace)
            pods, revision = self.kube.list_pods(namespace)
            changed |= self.cache.replace_pods(pods, revision, namespace)
            for kind in self._shared_kinds():
                listed, revision = self.kube.list_shared(kind, namespace)
                self.cache.replace_shared(kind, listed, revision, namespace)
        nodes, revision = self.kube.list_nodes()
        changed |= set(self.cache.replace_nodes(nodes, revision))
        self._relist_priority_classes()
        # Python's full collections walk every object the process holds, the cache's first:
        # 50-170 ms with the GIL held, measured in the middle of recoveries (a pass, the watch
        # events and the Events all stand still). What the lists brought lives until the next
        # list or its watch event replaces it, and holds no reference cycles: keep it, and all
        # that came before it, out of the collector's walks. Their memory is still freed as
        # soon as nothing refers to them.
        gc.freeze()
        log.debug("relist: %d jobs changed", len(changed))
        for key in sorted(changed):
            self.queue.add(key)

    def _relist_priority_classes(self) -> None:
        """The boosts' ceilings read the classes. A list that fails (no RBAC for them) leaves
        the rest of the relist alone, and the group unknown until a list succeeds: the boosts
        are held at 0 meanwhile. A group the cluster does not serve (no Kueue) has none."""
        for group in c.PRIORITY_CLASS_KINDS:
            try:
                listed = self.kube.list_priority_classes(group)
            except KubeError as exc:
                log.warning("relist of %s failed: %s", c.PRIORITY_CLASS_KINDS[group], exc)
                self.cache.priority_classes_unlisted(group, str(exc))
                continue
            self.cache.replace_priority_classes(group, *(listed or ([], "")))

    def _shared_kinds(self) -> list[str]:
        """The kinds of shared children this cluster has: Workloads where the API is served."""
        return [k for k in c.SHARED_KINDS if k != "Workload" or self.kube.serves_workload_api]

    def _relist_soon(self) -> None:
        """A second full list shortly, for what was deleted between a list and the watches."""
        self._next_relist = time.monotonic() + RELIST_AFTER_START_SECONDS
        self._timer_moved.set()

    def _resync_loop(self) -> None:
        next_resync = time.monotonic() + self.resync_seconds
        while not self.stopping.is_set():
            self._timer_moved.wait(max(0.0, min(next_resync, self._next_relist) - time.monotonic()))
            self._timer_moved.clear()
            if self.stopping.is_set():
                return
            now = time.monotonic()
            if now >= self._next_relist:
                self._next_relist = now + self.relist_seconds
                try:
                    self.relist()
                except KubeError as exc:
                    log.warning("relist failed (the next one retries): %s", exc)
            if now >= next_resync:
                next_resync = now + self.resync_seconds
                self.resync()

    # ------------------------------------------------------------------ work
    def _work(self) -> None:
        while (key := self.queue.get()) is not None:
            try:
                self.process(key)
            finally:
                self.queue.done(key)

    def process(self, key: Key) -> None:
        namespace, name = key
        log.debug("pass %s/%s", namespace, name)
        try:
            PASSES.inc()
            passed = self.reconciler.reconcile(namespace, name)
        except KubeError as exc:
            self._after_error(key, exc)
            return
        except Exception:
            delay = self.queue.retry(key)
            log.exception("%s/%s: the pass failed; again in %.1fs", namespace, name, delay)
            return
        self.queue.forget(key)
        if passed is None:
            return
        before, plan = passed
        record_transition(before, plan.status)
        if plan.requeue_after is not None:
            self.queue.add_after(key, plan.requeue_after)

    def _after_error(self, key: Key, exc: KubeError) -> None:
        namespace, name = key
        if exc.status == 409:
            # Written by someone else since the cache saw it: read it, and pass again.
            log.info("%s/%s: %s; passing again on the newest job", namespace, name, exc)
            try:
                job = self.kube.get_job(namespace, name)
            except KubeError as again:
                exc = again
            else:
                gone = {"metadata": {"namespace": namespace, "name": name}}
                self.cache.on_job(*((None, job) if job else (DELETED, gone)))
                self.queue.add(key)
                return
        if exc.status == 403 and not exc.refused_by_admission:
            log.error("rljob lacks a permission it needs: %s", exc)
        delay = self.queue.retry(key)
        log.warning("%s/%s: %s; again in %.1fs", namespace, name, exc, delay)
