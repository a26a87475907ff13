"""The operator's small Kubernetes access layer: plain dicts in and out, our own errors.

Everything the reconcile reads or writes goes through here, so the logic above
never sees an ApiException and tests of the logic never need a client.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import urlsplit

from kubernetes import client
from kubernetes.client.rest import ApiException
from prometheus_client import Counter

from . import constants as c
from .api.timestamps import iso


class KubeError(RuntimeError):
    """A call to the API server failed; the message says which call and why."""

    def __init__(self, what: str, exc: ApiException) -> None:
        detail = exc.reason
        with contextlib.suppress(TypeError, ValueError):
            detail = json.loads(exc.body).get("message", detail)
        super().__init__(f"{what}: {exc.status} {detail}")
        self.status = exc.status
        self.detail = str(detail)

    @property
    def refused_by_admission(self) -> bool:
        """A 403 from an admission plugin (Pod Security, a missing PriorityClass or
        ServiceAccount), which retrying cannot fix, rather than from RBAC.

        RBAC's refusals all say "<user> cannot <verb> resource ..."; admission's never do.
        """
        return self.status == 403 and " cannot " not in self.detail


log = logging.getLogger(__name__)

API_REQUESTS = Counter(
    "rljob_api_requests_total",
    "Requests this replica sent to the API server through its client (not kopf's watches)",
    ["verb", "resource"],
)
_VERBS = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}


def verb_and_resource(method: str, url: str) -> tuple[str, str]:
    """The request as Kubernetes' audit names it: ("patch", "pods/status"), ("list", "pods").

    The path is /api/v1/... or /apis/<group>/<version>/..., then namespaces/<ns>/ for a
    namespaced object, then <resource>[/<name>[/<subresource>]]."""
    parts = [p for p in urlsplit(url).path.split("/") if p]
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    if not rest:
        return "get", "discovery"  # /apis/<group>/<version>: what the group serves
    resource = rest[0]
    if len(rest) >= 3:
        resource += f"/{rest[2]}"
    verb = _VERBS.get(method.upper(), "get" if len(rest) >= 2 else "list")
    return verb, resource


class CountingApiClient(client.ApiClient):
    """The kubernetes client, counting each request by verb and resource
    (rljob_api_requests_total), so that the cost of a recovery can be read off /metrics."""

    def call_api(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        verb, resource = verb_and_resource(method, url)
        API_REQUESTS.labels(verb, resource).inc()
        if log.isEnabledFor(logging.DEBUG):  # --verbose only: no parsing on the hot path else
            log.debug("request: %s %s %s", verb, resource, urlsplit(url).path)
        return super().call_api(method, url, *args, **kwargs)


T = TypeVar("T")
# Requests of one pass that depend on none of each other go out together; this many at a
# time across every pass (each needs a connection of the client's pool).
REQUESTS_AT_ONCE = 8
_requests = ThreadPoolExecutor(REQUESTS_AT_ONCE, thread_name_prefix="rljob-request")


def at_once(calls: Iterable[Callable[[], T]]) -> list[T]:
    """Run independent requests together, so that a pass waits for the slowest of them rather
    than for their sum (the pods of a large gang, say); their results in order. The first
    error in that order is raised once every request has returned."""
    calls = list(calls)
    if len(calls) < 2:
        return [call() for call in calls]
    futures = [_requests.submit(call) for call in calls]
    wait(futures)
    return [future.result() for future in futures]


def _data(response: Any) -> Any:
    return json.loads(response.data)


@contextlib.contextmanager
def _calling(what: str, gone_ok: bool = False) -> Iterator[None]:
    """Turn the client's ApiException into a KubeError that says `what` failed. With
    `gone_ok`, a 404 (the object is gone, or was never there) ends the block quietly, and
    the method goes on after it."""
    try:
        yield
    except ApiException as exc:
        if not (gone_ok and exc.status == 404):
            raise KubeError(what, exc) from exc


class Kube:
    def __init__(self, api: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.networking = client.NetworkingV1Api(api)

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        with _calling(f"get {c.KIND} {namespace}/{name}", gone_ok=True):
            return self.custom.get_namespaced_custom_object(
                c.GROUP, c.VERSION, namespace, c.PLURAL, name
            )
        return None

    # Full lists (in one namespace, or in all when None), with the list's resourceVersion.
    def list_jobs(self, namespace: str | None) -> tuple[list[dict[str, Any]], str]:
        if namespace is None:
            call, scope = self.custom.list_cluster_custom_object, ()
        else:
            call, scope = self.custom.list_namespaced_custom_object, (namespace,)
        return self._list("jobs", call, c.GROUP, c.VERSION, *scope, c.PLURAL)

    def list_pods(self, namespace: str | None) -> tuple[list[dict[str, Any]], str]:
        """rljob's pods (the managed-by label)."""
        selector = f"{c.LABEL_MANAGED_BY}={c.MANAGED_BY}"
        if namespace is None:
            return self._list(
                "pods", self.core.list_pod_for_all_namespaces, label_selector=selector
            )
        return self._list("pods", self.core.list_namespaced_pod, namespace, label_selector=selector)

    def list_shared(self, kind: str, namespace: str | None) -> tuple[list[dict[str, Any]], str]:
        """rljob's Services, ConfigMaps, NetworkPolicies or Workloads (the managed-by label)."""
        selector = f"{c.LABEL_MANAGED_BY}={c.MANAGED_BY}"
        if kind == "Workload":
            plural = c.SCHEDULING_PLURALS[kind]
            group = (c.SCHEDULING_GROUP, c.SCHEDULING_VERSION)
            if namespace is None:
                call, scope = self.custom.list_cluster_custom_object, (*group,)
            else:
                call, scope = self.custom.list_namespaced_custom_object, (*group, namespace)
            return self._list(plural, call, *scope, plural, label_selector=selector)
        calls = {  # kind -> (in every namespace, in one)
            "Service": (self.core.list_service_for_all_namespaces,
                        self.core.list_namespaced_service),
            "ConfigMap": (self.core.list_config_map_for_all_namespaces,
                          self.core.list_namespaced_config_map),
            "NetworkPolicy": (self.networking.list_network_policy_for_all_namespaces,
                              self.networking.list_namespaced_network_policy),
        }  # fmt: skip
        every, one = calls[kind]
        what = f"{kind.lower()}s"
        if namespace is None:
            return self._list(what, every, label_selector=selector)
        return self._list(what, one, namespace, label_selector=selector)

    def list_nodes(self) -> tuple[list[dict[str, Any]], str]:
        return self._list("nodes", self.core.list_node)

    def list_priority_classes(self, group: str) -> tuple[list[dict[str, Any]], str] | None:
        """WorkloadPriorityClasses (kueue.x-k8s.io) or PriorityClasses (scheduling.k8s.io);
        None where the cluster does not serve them (no Kueue)."""
        return self.list_served(group, *c.PRIORITY_CLASS_APIS[group])

    def list_served(
        self, group: str, version: str, plural: str
    ) -> tuple[list[dict[str, Any]], str] | None:
        """A cluster-wide list of one resource, with its resourceVersion; None where the
        cluster does not serve it (its CRD is not installed), which is no error."""
        with _calling(f"list {plural}.{group}", gone_ok=True):
            listed = _data(self.custom.list_cluster_custom_object(
                group, version, plural, _preload_content=False))  # fmt: skip
            return listed["items"], listed["metadata"].get("resourceVersion", "")
        return None

    def _list(self, what: str, call: Any, *args: Any, **kwargs: Any) -> tuple[list, str]:
        with _calling(f"list {what}"):
            listed = _data(call(*args, _preload_content=False, **kwargs))
        return listed["items"], listed["metadata"].get("resourceVersion", "")

    def annotate_pod(
        self, namespace: str, name: str, key: str, value: str
    ) -> dict[str, Any] | None:
        """The pod as stored, None if it is gone."""
        body = {"metadata": {"annotations": {key: value}}}
        with _calling(f"annotate pod {namespace}/{name}", gone_ok=True):
            return _data(self.core.patch_namespaced_pod(name, namespace, body,
                                                        _preload_content=False))  # fmt: skip
        return None

    def patch_pod_metadata(
        self, namespace: str, name: str, metadata: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Merge `metadata` (labels, annotations; None removes a key) into the pod's; the pod
        as stored, None if it is gone."""
        with _calling(f"patch pod {namespace}/{name}", gone_ok=True):
            return _data(self.core.patch_namespaced_pod(name, namespace, {"metadata": metadata},
                                                        _preload_content=False))  # fmt: skip
        return None

    def annotate_kueue_workload(
        self, namespace: str, name: str, annotations: dict[str, str]
    ) -> dict[str, Any] | None:
        """Merge `annotations` into a Kueue Workload's; the Workload as stored, None if it is
        gone (its attempt ended)."""
        body = {"metadata": {"annotations": annotations}}
        with _calling(f"annotate Kueue Workload {namespace}/{name}", gone_ok=True):
            return _data(
                self.custom.patch_namespaced_custom_object(
                    c.KUEUE_GROUP, c.KUEUE_VERSION, namespace, c.KUEUE_WORKLOADS, name, body,
                    _preload_content=False,
                )
            )  # fmt: skip
        return None

    def release_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Drop rljob's finalizer from a pod, leaving any other finalizer in place; the pod as
        stored, None if it is gone (the release let it go)."""
        body = {"metadata": {"$deleteFromPrimitiveList/finalizers": [c.FINALIZER]}}
        with _calling(f"release pod {namespace}/{name}", gone_ok=True):
            return _data(self.core.patch_namespaced_pod(name, namespace, body,
                                                        _preload_content=False))  # fmt: skip
        return None

    def get_nodes(self, names: set[str]) -> dict[str, dict[str, Any] | None]:
        """The named nodes; None for one that no longer exists."""
        nodes: dict[str, dict[str, Any] | None] = {name: None for name in sorted(names)}
        for name in nodes:
            with _calling(f"get node {name}", gone_ok=True):
                nodes[name] = _data(self.core.read_node(name, _preload_content=False))
        return nodes

    def patch_status(
        self, namespace: str, name: str, patch: dict[str, Any], resource_version: str | None
    ) -> dict[str, Any]:
        """Merge `patch` into the job's status if the job is still at `resource_version`
        (a 409 KubeError if it has moved on); the job as stored. An empty patch writes
        nothing and only checks the version."""
        body: dict[str, Any] = {"metadata": {"resourceVersion": resource_version}}
        if patch:
            body["status"] = patch
        with _calling(f"update status of {namespace}/{name}"):
            return _data(
                self.custom.patch_namespaced_custom_object_status(
                    c.GROUP, c.VERSION, namespace, c.PLURAL, name, body, _preload_content=False
                )
            )

    def create(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """Create a Pod, Service, ConfigMap, Secret, NetworkPolicy, Workload or PodGroup; the
        object as stored, or
        None when one of that name exists already."""
        namespace = obj["metadata"]["namespace"]
        try:
            if obj["kind"] in ("Workload", "PodGroup"):
                return self.custom.create_namespaced_custom_object(
                    c.SCHEDULING_GROUP,
                    c.SCHEDULING_VERSION,
                    namespace,
                    c.SCHEDULING_PLURALS[obj["kind"]],
                    obj,
                )
            create = {
                "Pod": self.core.create_namespaced_pod,
                "Service": self.core.create_namespaced_service,
                "ConfigMap": self.core.create_namespaced_config_map,
                "NetworkPolicy": self.networking.create_namespaced_network_policy,
                "Secret": self.core.create_namespaced_secret,
            }[obj["kind"]]
            return _data(create(namespace, obj, _preload_content=False))
        except ApiException as exc:
            if exc.status == 409:
                return None
            raise KubeError(
                f"create {obj['kind']} {namespace}/{obj['metadata']['name']}", exc
            ) from exc

    def get_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        with _calling(f"get ConfigMap {namespace}/{name}", gone_ok=True):
            return _data(self.core.read_namespaced_config_map(name, namespace,
                                                              _preload_content=False))  # fmt: skip
        return None

    def delete_pod(
        self, namespace: str, name: str, grace_seconds: int | None = None
    ) -> dict[str, Any] | None:
        """Delete, by default with the pod's own grace period, so that its trainer can save;
        the pod as the API server returned it (going, or as it was when it went), None if it
        was gone already."""
        with _calling(f"delete pod {namespace}/{name}", gone_ok=True):
            answer = self.core.delete_namespaced_pod(
                name, namespace, grace_period_seconds=grace_seconds, _preload_content=False
            )
            pod = _data(answer)
            return pod if pod.get("kind") == "Pod" else None
        return None

    def delete_pod_group(self, namespace: str, name: str) -> None:
        with _calling(f"delete PodGroup {namespace}/{name}", gone_ok=True):
            self.custom.delete_namespaced_custom_object(
                c.SCHEDULING_GROUP,
                c.SCHEDULING_VERSION,
                namespace,
                c.SCHEDULING_PLURALS["PodGroup"],
                name,
            )

    @functools.cached_property
    def serves_workload_api(self) -> bool:
        """Whether the API server serves PodGroups (asked once: enabling the API means
        restarting the API server, and with it the operator's watches)."""
        with _calling(f"discover {c.SCHEDULING_GROUP}/{c.SCHEDULING_VERSION}", gone_ok=True):
            resources = self.custom.get_api_resources(c.SCHEDULING_GROUP, c.SCHEDULING_VERSION)
            return any(r.name == c.SCHEDULING_PLURALS["PodGroup"] for r in resources.resources)
        return False

    def delete_job(self, namespace: str, name: str) -> None:
        with _calling(f"delete {c.KIND} {namespace}/{name}", gone_ok=True):
            self.custom.delete_namespaced_custom_object(
                c.GROUP, c.VERSION, namespace, c.PLURAL, name
            )

    def post_event(self, job: dict[str, Any], type_: str, reason: str, message: str) -> None:
        meta = job["metadata"]
        now = iso(datetime.now(UTC))
        event = {
            "metadata": {
                "name": f"{meta['name']}.{uuid.uuid4().hex[:12]}",
                "namespace": meta["namespace"],
            },
            "involvedObject": {
                "apiVersion": c.API_VERSION,
                "kind": c.KIND,
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "source": {"component": c.MANAGED_BY},
            "reportingComponent": c.MANAGED_BY,
        }
        with _calling(f"post event {reason} on {meta['namespace']}/{meta['name']}"):
            self.core.create_namespaced_event(meta["namespace"], event)
