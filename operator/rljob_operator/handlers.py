"""kopf handlers: thin doors into the controller.

kopf's watch streams of the jobs, their pods, what they own across attempts (Services,
ConfigMaps, the Workload API's Workloads), the nodes, (where Kueue is installed) its
Workloads and WorkloadPriorityClasses, and the PriorityClasses feed the controller's cache
and work queue; none of the handlers decides anything itself, and none keeps state on the
job. The periodic work (resync, "come back in N seconds") is the controller's own, in plain
threads rather than kopf timers, because kopf puts a finalizer on every object with a timer,
and a job should stay deletable while the operator is down.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import kopf
from kubernetes import client, config

from . import constants as c
from .controller import RESYNC_SECONDS, WORKERS, Controller
from .kube import REQUESTS_AT_ONCE, CountingApiClient, Kube
from .reconcile.lookup.finder import CheckpointFinder
from .reconcile.settings import Settings
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
    """What `rljob operator` hands the handlers, through kopf's operator memo (`memo.scope`)."""

    namespaces: list[str] | None = None  # None: every namespace
    peering: Peering | None = None  # None: standalone, always acting
    resync_seconds: float = RESYNC_SECONDS
    settings: Settings = field(default_factory=Settings)


@kopf.on.startup()
def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """Build the controller (and the peering watch) into the operator's memo, which kopf
    copies into every object's memo once the watches start, after this handler."""
    scope: Scope = memo.get("scope") or Scope()
    settings.posting.enabled = False  # we post our own, richer events
    settings.watching.server_timeout = 300
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    configuration = client.Configuration.get_default_copy()
    # One connection per thread that calls the API at once; the client's default (5 per core)
    # makes the rest open a new TLS connection per request under a burst, and throw it away.
    configuration.connection_pool_maxsize = WORKERS + LANES + REQUESTS_AT_ONCE + 4
    api = CountingApiClient(configuration)
    controller = Controller(
        Kube(api),
        CheckpointFinder.from_env(),
        scope.namespaces,
        resync_seconds=scope.resync_seconds,
        settings=scope.settings,
    )
    memo.controller, memo.peering = controller, None
    if scope.peering:
        controller.queue.pause()  # until the peering object says this replica acts
        memo.peering = PeeringWatch(
            api,
            scope.peering.name,
            scope.namespaces,
            scope.peering.identity,
            scope.peering.priority,
            lambda acting: controller.resume() if acting else controller.pause(),
        )
    controller.start()
    if memo.peering:
        memo.peering.start()
    log.info("rljob operator started")


@kopf.on.cleanup()
def stop(memo: kopf.Memo, **_: Any) -> None:
    if memo.get("peering"):
        memo.peering.stop()
    if memo.get("controller"):
        memo.controller.stop()


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
async def job_changed(type: str | None, event: dict[str, Any], memo: kopf.Memo, **_: Any) -> None:
    """An event handler, not a change handler: those keep the whole spec in an annotation
    for diffing, which a large spec pushes past the API server's 256 KiB limit."""
    job = event["object"]
    memo.controller.job_event(type, job, needs_pass(type, job))


# What rljob made for a job: its pods and its shared children.
OWNED = {c.LABEL_MANAGED_BY: c.MANAGED_BY, c.LABEL_JOB: kopf.PRESENT}


@kopf.on.event("", "v1", "pods", labels=OWNED)
async def pod_changed(type: str | None, event: dict[str, Any], memo: kopf.Memo, **_: Any) -> None:
    memo.controller.pod_event(type, event["object"])


@kopf.on.event("", "v1", "services", labels=OWNED)
async def service_changed(
    type: str | None, event: dict[str, Any], memo: kopf.Memo, **_: Any
) -> None:
    memo.controller.shared_event("Service", type, event["object"])


@kopf.on.event("", "v1", "configmaps", labels=OWNED)
async def config_map_changed(
    type: str | None, event: dict[str, Any], memo: kopf.Memo, **_: Any
) -> None:
    memo.controller.shared_event("ConfigMap", type, event["object"])


@kopf.on.event("networking.k8s.io", "v1", "networkpolicies", labels=OWNED)
async def network_policy_changed(
    type: str | None, event: dict[str, Any], memo: kopf.Memo, **_: Any
) -> None:
    memo.controller.shared_event("NetworkPolicy", type, event["object"])


@kopf.on.event(c.SCHEDULING_GROUP, c.SCHEDULING_VERSION, "workloads", labels=OWNED)
async def workload_changed(
    type: str | None, event: dict[str, Any], memo: kopf.Memo, **_: Any
) -> None:
    """The Workload API's Workloads (all-or-nothing gangs); kopf serves this where the API
    server serves that API."""
    memo.controller.shared_event("Workload", type, event["object"])


@kopf.on.event("", "v1", "nodes")
async def node_changed(type: str | None, event: dict[str, Any], memo: kopf.Memo, **_: Any) -> None:
    memo.controller.node_event(type, event["object"])


@kopf.on.event(c.KUEUE_GROUP, c.KUEUE_VERSION, "workloads")
async def kueue_workload_changed(
    type: str | None, event: dict[str, Any], memo: kopf.Memo, **_: Any
) -> None:
    """Why Kueue has not admitted a gang yet, for its job's conditions. Where Kueue is not
    installed, kopf serves this once its CRD appears."""
    memo.controller.admission_event(type, event["object"])


@kopf.on.event(c.KUEUE_GROUP, *c.PRIORITY_CLASS_APIS[c.KUEUE_GROUP])
async def workload_priority_class_changed(
    type: str | None, event: dict[str, Any], memo: kopf.Memo, **_: Any
) -> None:
    """Kueue's WorkloadPriorityClasses, for the boost's ceiling below the next class up
    (reconcile.boost.guards). Where Kueue is not installed, kopf serves this once its CRD
    appears."""
    memo.controller.priority_class_event(c.KUEUE_GROUP, type, event["object"])


@kopf.on.event(c.POD_PRIORITY_GROUP, *c.PRIORITY_CLASS_APIS[c.POD_PRIORITY_GROUP])
async def priority_class_changed(
    type: str | None, event: dict[str, Any], memo: kopf.Memo, **_: Any
) -> None:
    """The pods' PriorityClasses, for the boost's ceiling of a Workload whose priority comes
    from them (reconcile.boost.guards)."""
    memo.controller.priority_class_event(c.POD_PRIORITY_GROUP, type, event["object"])
