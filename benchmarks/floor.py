"""The floor of a gang recovery: a bare controller that does only the unavoidable work.

A stand-in for the best any operator could do on this cluster, run beside rljob in the same
benchmark so that rljob's time can be put over it. It fakes an operator that keeps no status,
posts no Events, looks up no checkpoint, puts no finalizer on its pods and has no failure
budget, and it trusts its own watch: for each gang of plain pods it

1. sees a pod of the current attempt end (Failed, Succeeded, being deleted, or marked
   `DisruptionTarget`) on one pod watch;
2. deletes the attempt's pods that nobody has deleted yet (with their grace period, as rljob
   does);
3. once every pod of the attempt has stopped (phase Succeeded or Failed) or gone, creates the
   next attempt's pods: two gangs never run at once, the same rule as rljob's.

Seeing the new pods Running is the benchmark's own watch. The work runs on as many threads
as rljob's reconcile workers (`rljob_operator.controller.WORKERS`), so that a burst meets
the same concurrency.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client, watch
from rljob_operator.controller import WORKERS
from urllib3.exceptions import ProtocolError

log = logging.getLogger(__name__)

ATTEMPT_LABEL = "bench.rljob.io/attempt"
RANK_LABEL = "bench.rljob.io/rank"
ENDED_PHASES = ("Succeeded", "Failed")


@dataclass
class Gang:
    template: dict[str, Any]  # a pod: metadata (labels) and spec
    size: int
    attempt: int = 0
    ending: bool = False  # the attempt's end was seen: its pods are being deleted
    # pod of the attempt -> (it has stopped: ended or gone, its deletion was asked for)
    pods: dict[str, tuple[bool, bool]] = field(default_factory=dict)


def _ending(pod: Any) -> bool:
    """The attempt is over: a pod ended, is being deleted, or is marked for disruption."""
    conditions = pod.status.conditions or []
    return (
        pod.metadata.deletion_timestamp is not None
        or pod.status.phase in ENDED_PHASES
        or any(x.type == "DisruptionTarget" and x.status == "True" for x in conditions)
    )


class FloorController:
    def __init__(self, api: client.ApiClient, namespace: str, selector: str) -> None:
        self.core = client.CoreV1Api(api)
        self.namespace, self.selector = namespace, selector
        self.gangs: dict[str, Gang] = {}
        self.owner: dict[str, str] = {}  # pod -> its gang, for the current attempts' pods
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="floor")
        self.stopping = threading.Event()

    def start(self) -> FloorController:
        threading.Thread(target=self._watch, daemon=True).start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.pool.shutdown(wait=False, cancel_futures=True)

    def add(self, name: str, template: dict[str, Any], size: int) -> None:
        """A new gang: its first attempt's pods are created."""
        with self.lock:
            self.gangs[name] = Gang(template, size)
            self._create(name)

    def remove(self, name: str) -> None:
        """Forget the gang and delete its pods."""
        with self.lock:
            gang = self.gangs.pop(name)
            for pod in gang.pods:
                self.owner.pop(pod, None)
                self.pool.submit(self._delete, pod)

    def _create(self, name: str) -> None:
        gang = self.gangs[name]
        for rank in range(gang.size):
            pod = copy.deepcopy(gang.template)
            pod_name = f"floor-{name}-a{gang.attempt}-n{rank}"  # apart from rljob's own
            pod["metadata"]["name"] = pod_name
            pod["metadata"]["labels"].update({ATTEMPT_LABEL: str(gang.attempt),
                                              RANK_LABEL: str(rank)})  # fmt: skip
            gang.pods[pod_name] = (False, False)
            self.owner[pod_name] = name
            self.pool.submit(self._create_pod, pod)

    def _create_pod(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        self._call("create", name, lambda: self.core.create_namespaced_pod(self.namespace, pod),
                   done=409)  # fmt: skip

    def _delete(self, pod: str) -> None:
        self._call("delete", pod, lambda: self.core.delete_namespaced_pod(pod, self.namespace))

    def _call(self, what: str, pod: str, call: Callable[[], Any], done: int = 404) -> None:
        """Retried until it takes, as any controller would (a busy API server times out)."""
        for delay in (0.1, 0.2, 0.5, 1, 2, 5, 10):
            try:
                call()
                return
            except client.ApiException as exc:
                if exc.status == done:
                    return
                log.warning("floor: %s %s: %s; again in %s s", what, pod, exc.reason, delay)
            except (ProtocolError, OSError) as exc:
                log.warning("floor: %s %s: %s; again in %s s", what, pod, exc, delay)
            time.sleep(delay)
        log.error("floor: %s %s gave up", what, pod)

    def _watch(self) -> None:
        pod_watch = watch.Watch()
        while not self.stopping.is_set():
            known = pod_watch.resource_version
            try:
                for event in pod_watch.stream(
                    self.core.list_namespaced_pod, self.namespace, label_selector=self.selector,
                    timeout_seconds=300, **({"resource_version": known} if known else {}),
                ):  # fmt: skip
                    self._on(event["type"], event["object"])
            except (ProtocolError, client.ApiException, OSError) as exc:
                if getattr(exc, "status", None) == 410:
                    pod_watch.resource_version = None
                time.sleep(0.1)

    def _on(self, event_type: str, pod: Any) -> None:
        with self.lock:
            name = self.owner.get(pod.metadata.name)
            if name is None:
                return  # not a pod of a current attempt
            gang = self.gangs[name]
            if event_type == "DELETED":
                gang.pods[pod.metadata.name] = (True, True)
            else:
                stopped = pod.status.phase in ENDED_PHASES
                asked = gang.pods[pod.metadata.name][1] or pod.metadata.deletion_timestamp
                gang.pods[pod.metadata.name] = (stopped, bool(asked))
            if not gang.ending and (event_type == "DELETED" or _ending(pod)):
                gang.ending = True
                for other, (stopped, asked) in gang.pods.items():
                    if not asked:
                        gang.pods[other] = (stopped, True)
                        self.pool.submit(self._delete, other)
            if gang.ending and all(stopped for stopped, _ in gang.pods.values()):
                for old in gang.pods:
                    del self.owner[old]
                gang.ending, gang.pods = False, {}
                gang.attempt += 1
                self._create(name)
