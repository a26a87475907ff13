"""kopf handlers: thin doors into the one reconcile.

The job's own events, its pods' events and a periodic sweep all lead to the same
idempotent pass; none of them decides anything itself, and none keeps state on the job.
The sweep is a plain thread rather than a kopf timer, because kopf puts a finalizer on
every object with a timer, and a job should stay deletable while the operator is down.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import kopf
from kubernetes import client, config

from . import constants as c
from .kube import Kube, KubeError
from .reconcile.lookup import CheckpointFinder, LookupPending
from .reconcile.run import reconcile

log = logging.getLogger(__name__)
SWEEP_INTERVAL_SECONDS = 5.0


class Operator:
    """The process-wide state: the API client, the checkpoint finder, the known jobs."""

    def __init__(self) -> None:
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        self.kube = Kube(client.ApiClient())
        self.finder = CheckpointFinder.from_env(self.kube)
        self.jobs: set[tuple[str, str]] = set()
        self.stopping = threading.Event()

    def reconcile(self, namespace: str, name: str) -> None:
        self.jobs.add((namespace, name))
        try:
            plan = reconcile(self.kube, namespace, name, self.finder)
        except LookupPending as exc:
            log.debug("%s/%s: %s", namespace, name, exc)  # its pod's events bring us back
            return
        except KubeError as exc:
            if exc.status == 403 and not exc.refused_by_admission:
                log.error("rljob lacks a permission it needs: %s", exc)
            raise
        if plan is None:
            self.jobs.discard((namespace, name))
        elif plan.requeue_after is not None and plan.requeue_after < SWEEP_INTERVAL_SECONDS:
            self._wake_up(namespace, name, plan.requeue_after)

    def _wake_up(self, namespace: str, name: str, delay: float) -> None:
        """Come back sooner than the sweep would (a back-off ending, stale pods going)."""
        timer = threading.Timer(delay, self._quietly, (namespace, name))
        timer.daemon = True
        timer.start()

    def _quietly(self, namespace: str, name: str) -> None:
        try:
            self.reconcile(namespace, name)
        except Exception:  # the sweep retries
            log.exception("%s/%s: reconcile failed", namespace, name)

    def sweep(self) -> None:
        """Every few seconds, a pass over every known job: back-off ends, NotReady
        tolerances run out and lost nodes are noticed even when no event says so."""
        while not self.stopping.wait(SWEEP_INTERVAL_SECONDS):
            for namespace, name in sorted(self.jobs):
                self._quietly(namespace, name)  # one job's trouble must not stop the others


_operator: Operator | None = None


def _current() -> Operator:
    if _operator is None:
        raise RuntimeError("the operator has not started")
    return _operator


def _reconcile(namespace: str, name: str) -> None:
    try:
        _current().reconcile(namespace, name)
    except KubeError as exc:
        raise kopf.TemporaryError(str(exc), delay=2) from exc


@kopf.on.startup()
def start(settings: kopf.OperatorSettings, **_: Any) -> None:
    global _operator
    settings.posting.enabled = False  # we post our own, richer events
    settings.watching.server_timeout = 300
    _operator = Operator()
    threading.Thread(target=_operator.sweep, name="rljob-sweep", daemon=True).start()
    log.info("rljob operator started")


@kopf.on.cleanup()
def stop(**_: Any) -> None:
    if _operator:
        _operator.stopping.set()


def needs_pass(event_type: str | None, job: dict[str, Any]) -> bool:
    """Whether a watch event of a job calls for a pass: every job at start-up (no type) and
    when added, and a change of its spec, which moves metadata.generation past the status's
    observedGeneration. The operator's own status writes do not, nor does deletion (the
    garbage collector removes the pods, whose events bring the last pass)."""
    if event_type in (None, "ADDED"):
        return True
    observed = (job.get("status") or {}).get("observedGeneration")
    return event_type == "MODIFIED" and (job.get("metadata") or {}).get("generation") != observed


@kopf.on.event(c.GROUP, c.VERSION, c.PLURAL)
def job_changed(
    namespace: str, name: str, type: str | None, body: dict[str, Any], **_: Any
) -> None:
    """An event handler, not a change handler: those keep the whole spec in an annotation
    for diffing, which a large spec pushes past the API server's 256 KiB limit."""
    if needs_pass(type, body):
        _reconcile(namespace, name)


@kopf.on.event(
    "", "v1", "pods", labels={c.LABEL_MANAGED_BY: c.MANAGED_BY, c.LABEL_JOB: kopf.PRESENT}
)
def pod_changed(namespace: str, labels: dict[str, str], **_: Any) -> None:
    _reconcile(namespace, labels[c.LABEL_JOB])
