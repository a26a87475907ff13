"""kopf handlers: thin doors into the controller.

kopf's watch streams of the jobs, their pods, the nodes and (where Kueue is installed) its
Workloads feed the controller's cache and work queue; none of the handlers decides anything
itself, and none keeps state on the job. The periodic work (resync, "come back in N
seconds") is the controller's own, in plain threads rather than kopf timers, because kopf
puts a finalizer on every object with a timer, and a job should stay deletable while the
operator is down.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import kopf
from kubernetes import client, config

from . import constants as c
from .controller import RESYNC_SECONDS, WORKERS, Controller
from .kube import CountingApiClient, Kube
from .reconcile.lookup import CheckpointFinder
from .reconcile.stuck import SCHEDULER_WAIT_SECONDS
from .runtime.events import LANES
from .runtime.peering import PeeringWatch

log = logging.getLogger(__name__)


@dataclass
class Peering:
    name: str
    identity: str  # the one kopf writes keep-alives under (kopf.run's identity=)
    priority: int


@dataclass
class Scope:
    """Set by `rljob operator` before kopf starts."""

    namespaces: list[str] | None = None  # None: every namespace
    peering: Peering | None = None  # None: standalone, always acting
    resync_seconds: float = RESYNC_SECONDS
    scheduler_wait: float = SCHEDULER_WAIT_SECONDS


SCOPE = Scope()
_controller: Controller | None = None
_peering: PeeringWatch | None = None


def _current() -> Controller:
    if _controller is None:
        raise RuntimeError("the operator has not started")
    return _controller


@kopf.on.startup()
def start(settings: kopf.OperatorSettings, **_: Any) -> None:
    global _controller, _peering
    settings.posting.enabled = False  # we post our own, richer events
    settings.watching.server_timeout = 300
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    configuration = client.Configuration.get_default_copy()
    # One connection per thread that calls the API at once; the client's default (5 per core)
    # makes the rest open a new TLS connection per request under a burst, and throw it away.
    configuration.connection_pool_maxsize = WORKERS + LANES + 4
    api = CountingApiClient(configuration)
    kube = Kube(api)
    _controller = Controller(
        kube,
        CheckpointFinder.from_env(),
        SCOPE.namespaces,
        resync_seconds=SCOPE.resync_seconds,
        scheduler_wait=SCOPE.scheduler_wait,
    )
    if SCOPE.peering:
        _controller.queue.pause()  # until the peering object says this replica acts
        peering = SCOPE.peering
        _peering = PeeringWatch(
            api,
            peering.name,
            SCOPE.namespaces,
            peering.identity,
            peering.priority,
            lambda acting: _controller.resume() if acting else _controller.pause(),
        )
    _controller.start()
    if _peering:
        _peering.start()
    log.info("rljob operator started")


@kopf.on.cleanup()
def stop(**_: Any) -> None:
    if _peering:
        _peering.stop()
    if _controller:
        _controller.stop()


def needs_pass(event_type: str | None, job: dict[str, Any]) -> bool:
    """Whether a watch event of a job calls for a pass: every job at start-up (no type) and
    when added, and a change of its spec, which moves metadata.generation past the status's
    observedGeneration. The operator's own status writes do not (deletion is the
    controller's to see)."""
    if event_type in (None, "ADDED"):
        return True
    observed = (job.get("status") or {}).get("observedGeneration")
    return event_type == "MODIFIED" and (job.get("metadata") or {}).get("generation") != observed


@kopf.on.event(c.GROUP, c.VERSION, c.PLURAL)
async def job_changed(type: str | None, event: dict[str, Any], **_: Any) -> None:
    """An event handler, not a change handler: those keep the whole spec in an annotation
    for diffing, which a large spec pushes past the API server's 256 KiB limit."""
    job = event["object"]
    _current().job_event(type, job, needs_pass(type, job))


@kopf.on.event(
    "", "v1", "pods", labels={c.LABEL_MANAGED_BY: c.MANAGED_BY, c.LABEL_JOB: kopf.PRESENT}
)
async def pod_changed(type: str | None, event: dict[str, Any], **_: Any) -> None:
    _current().pod_event(type, event["object"])


@kopf.on.event("", "v1", "nodes")
async def node_changed(type: str | None, event: dict[str, Any], **_: Any) -> None:
    _current().node_event(type, event["object"])


@kopf.on.event(c.KUEUE_GROUP, c.KUEUE_VERSION, "workloads")
async def kueue_workload_changed(type: str | None, event: dict[str, Any], **_: Any) -> None:
    """Why Kueue has not admitted a gang yet, for its job's conditions. Where Kueue is not
    installed, kopf serves this once its CRD appears."""
    _current().admission_event(type, event["object"])
