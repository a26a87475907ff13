"""The node agent's pure parts: what a pod's process sees, and what the agent reports.

Nothing here talks to the API server or starts a process, so every rule (environment,
`$(VAR)` expansion, path and DNS rewriting, downward-API files, status bodies, the Node)
is unit-tested on plain dicts.

The rewriting rule, applied to the command, the arguments and every environment value
after `$(VAR)` expansion, in one pass:

- a container path that is a volume mount (or the container's terminationMessagePath)
  is replaced by the local directory (file) the agent gives it, where the path stands as
  a path: at the start of the text or after one of ``= : , ; ' "`` or whitespace, and
  followed by ``/``, the end, or one of those characters. The longest mount path wins, so
  ``/checkpoints/run`` mounted on its own beats ``/checkpoints``. ``runner.resume_dir=/ckpt/a``
  becomes ``runner.resume_dir=<local>/a``; ``/ckptx`` and ``/data/ckpt`` are left alone.
- a cluster DNS name of a service (``<host>.<service>.<namespace>.svc`` or
  ``<service>.<namespace>.svc``, optionally followed by ``.cluster.local``) becomes
  ``127.0.0.1``: every pod of every node runs on this machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rljob_operator.api.timestamps import iso
from rljob_testenv.cluster import GPU_LABELS, NodeShape

LOOPBACK = "127.0.0.1"
DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"
MAX_TERMINATION_MESSAGE_BYTES = 4096
FALLBACK_LOG_LINES = 80
FALLBACK_LOG_BYTES = 2048
PLACEHOLDER_COMMAND = ("sleep", "infinity")
MARKER_ENV = "RLJOB_NODEAGENT_POD"  # "<node>/<pod uid>" on every process of a pod
NODEAGENT_LABEL = "rljob.io/nodeagent"  # "true" on every agent's Node
KUBELET_VERSION = "v1.36.3-rljob-nodeagent"

# The labels a GPU node carries (as the kwok GPU nodes of rljob_testenv), minus kwok's mark.
GPU_NODE_LABELS = {**GPU_LABELS, "rljob.io/testenv": "nodeagent", NODEAGENT_LABEL: "true"}


class PodError(Exception):
    """The pod cannot be run here; `reason` is what the container status shows."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def claim_dir(root: Path, namespace: str, claim: str) -> Path:
    """The one local directory that stands for a PersistentVolumeClaim, shared by all nodes."""
    return Path(root) / "claims" / namespace / claim


def pod_address(uid: str) -> str:
    """The pod IP the agent reports in the pod's status: a stable private address per pod.

    The API server's endpoint controllers refuse loopback addresses, so the status cannot say
    127.0.0.1 (as kwok, the agent reports addresses of a range of its own: 10.88.0.0/16); the
    process itself is told `status.podIP=127.0.0.1`, where it can be reached.
    """
    digest = hashlib.sha256(uid.encode()).digest()
    return f"10.88.{digest[0]}.{1 + digest[1] % 254}"


# --------------------------------------------------------------------------- field references
_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['([^']*)'\]$")


def _quoted_map(values: Mapping[str, str]) -> str:
    """The downward API's `key="value"` lines, sorted, as the kubelet writes them."""
    return "\n".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in sorted(values.items()))


def field_value(pod: dict[str, Any], path: str, pod_ip: str = LOOPBACK) -> str:
    """The value of a downward-API fieldRef on this pod (raise PodError for one we lack)."""
    meta, spec = pod.get("metadata", {}), pod.get("spec", {})
    match = _SUBSCRIPT.match(path)
    if match:
        return (meta.get(match.group(1)) or {}).get(match.group(2), "")
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "metadata.labels": _quoted_map(meta.get("labels") or {}),
        "metadata.annotations": _quoted_map(meta.get("annotations") or {}),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.hostIP": LOOPBACK,
        "status.hostIPs": LOOPBACK,
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
    }
    if path not in simple:
        raise PodError("CreateContainerConfigError", f"unsupported fieldRef {path!r}")
    return simple[path]


def resource_value(container: dict[str, Any], resource: str) -> str:
    """A resourceFieldRef: the container's limit (else request) of e.g. limits.cpu, as set."""
    kind, _, name = resource.partition(".")
    resources = container.get("resources") or {}
    value = (resources.get(kind) or {}).get(name) or (resources.get("limits") or {}).get(name)
    return str(value) if value is not None else "0"


# --------------------------------------------------------------------------- $(VAR) expansion
def expand(text: str, env: Mapping[str, str]) -> str:
    """The kubelet's `$(VAR)` expansion: a defined VAR is replaced, `$$` is a literal `$`,
    anything else (an undefined or unterminated reference) is left as written."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "$" or i + 1 == len(text):
            out.append(char)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            end = text.find(")", i + 2)
            name = text[i + 2 : end] if end != -1 else None
            if name is not None and name in env:
                out.append(env[name])
                i = end + 1
            elif end != -1:
                out.append(text[i : end + 1])
                i = end + 1
            else:
                out.append(text[i:])
                i = len(text)
        else:
            out.append(char)
            i += 1
    return "".join(out)


# --------------------------------------------------------------------------- environment
Lookup = Callable[[str, str], dict[str, str] | None]  # (namespace, name) -> data or None


def resolve_env(
    pod: dict[str, Any],
    container: dict[str, Any],
    config_map: Lookup,
    secret: Lookup,
    pod_ip: str = LOOPBACK,
) -> dict[str, str]:
    """The container's environment as the kubelet builds it: envFrom, then env in order
    (a later entry wins), each value `$(VAR)`-expanded against the entries before it."""
    namespace = pod["metadata"].get("namespace", "default")
    result: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        ref, lookup, kind = (
            (source["configMapRef"], config_map, "configmap")
            if "configMapRef" in source
            else (source.get("secretRef") or {}, secret, "secret")
        )
        data = lookup(namespace, ref.get("name", ""))
        if data is None:
            if ref.get("optional"):
                continue
            raise PodError("CreateContainerConfigError", f'{kind} "{ref.get("name")}" not found')
        for key, value in data.items():
            result[prefix + key] = value
    for entry in container.get("env") or []:
        name = entry["name"]
        if "valueFrom" not in entry:
            result[name] = expand(entry.get("value", ""), result)
            continue
        source = entry["valueFrom"]
        if "fieldRef" in source:
            result[name] = field_value(pod, source["fieldRef"]["fieldPath"], pod_ip)
        elif "resourceFieldRef" in source:
            result[name] = resource_value(container, source["resourceFieldRef"]["resource"])
        else:
            key_ref, lookup, kind = (
                (source["configMapKeyRef"], config_map, "configmap")
                if "configMapKeyRef" in source
                else (source.get("secretKeyRef") or {}, secret, "secret")
            )
            data = lookup(namespace, key_ref.get("name", "")) or {}
            if key_ref.get("key") not in data:
                if key_ref.get("optional"):
                    continue
                raise PodError(
                    "CreateContainerConfigError",
                    f"couldn't find key {key_ref.get('key')} in {kind} {key_ref.get('name')}",
                )
            result[name] = data[key_ref["key"]]
    return result


# --------------------------------------------------------------------------- rewriting
_BEFORE = r"(?:(?<=^)|(?<=[=:,;'\"\s]))"
_AFTER = r"(?=$|[/=:,;'\"\s])"
_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
SERVICE_DNS = re.compile(rf"(?<![\w.-])(?:{_LABEL}\.){{2,}}svc(?:\.cluster\.local)?(?![\w-]|\.\w)")


class Rewriter:
    """Container paths to local ones and service names to loopback (see the module doc)."""

    def __init__(self, paths: Mapping[str, str]) -> None:
        self.paths = {k.rstrip("/"): str(v) for k, v in paths.items() if k.rstrip("/")}
        ordered = sorted(self.paths, key=len, reverse=True)
        self._pattern = (
            re.compile(_BEFORE + "(" + "|".join(re.escape(p) for p in ordered) + ")" + _AFTER)
            if ordered
            else None
        )

    def path(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(lambda m: self.paths[m.group(1)], text)

    def __call__(self, text: str) -> str:
        return SERVICE_DNS.sub(LOOPBACK, self.path(text))


def container_mounts(container: dict[str, Any], volumes: Mapping[str, Path]) -> dict[str, str]:
    """mountPath -> local directory, from the container's volumeMounts and where each volume
    lives locally (a subPath is a folder inside its volume)."""
    mounts = {}
    for mount in container.get("volumeMounts") or []:
        if mount["name"] not in volumes:
            raise PodError("CreateContainerConfigError", f"no volume {mount['name']!r}")
        local = Path(volumes[mount["name"]])
        if mount.get("subPath"):
            local = local / safe_relative(mount["subPath"])
        mounts[mount["mountPath"]] = str(local)
    return mounts


def command_line(
    container: dict[str, Any], env: Mapping[str, str], rewrite: Callable[[str], str]
) -> list[str]:
    """command + args, `$(VAR)`-expanded against the container's env, then rewritten. A
    container without a command (the image's entrypoint would run) gets a placeholder that
    waits until the pod is deleted."""
    command = [expand(a, env) for a in container.get("command") or []]
    args = [expand(a, env) for a in container.get("args") or []]
    if not command:
        command, args = list(PLACEHOLDER_COMMAND), []
    return [rewrite(a) for a in [*command, *args]]


@dataclass(frozen=True)
class ReadinessProbe:
    """An exec readiness probe, its command rewritten like the container's."""

    argv: list[str]
    period_seconds: float
    timeout_seconds: float
    failure_threshold: int
    success_threshold: int


def readiness_probe(
    container: dict[str, Any], env: Mapping[str, str], rewrite: Callable[[str], str]
) -> ReadinessProbe | None:
    """The container's exec readiness probe; other probe kinds are not run (see docs)."""
    probe = container.get("readinessProbe") or {}
    command = (probe.get("exec") or {}).get("command")
    if not command:
        return None
    return ReadinessProbe(
        [rewrite(expand(a, env)) for a in command],
        float(probe.get("periodSeconds", 10)),
        float(probe.get("timeoutSeconds", 1)),
        int(probe.get("failureThreshold", 3)),
        int(probe.get("successThreshold", 1)),
    )


def local_path(container_path: str, mounts: Mapping[str, str]) -> str | None:
    """Where a container path lives locally, if it is under a mount (the longest wins)."""
    clean = container_path.rstrip("/") or "/"
    for mount in sorted(mounts, key=len, reverse=True):
        base = mount.rstrip("/")
        if clean == base or clean.startswith(base + "/"):
            return str(mounts[mount]) + clean[len(base) :]
    return None


# --------------------------------------------------------------------------- downward API
def downward_files(
    pod: dict[str, Any], container: dict[str, Any] | None, items: list[dict[str, Any]]
) -> dict[str, str]:
    """Relative path -> content of a downwardAPI volume's files for the pod as it is now.

    An annotation or label that is not set gives an empty file, as the kubelet writes it.
    """
    files = {}
    for item in items:
        if "fieldRef" in item:
            files[item["path"]] = field_value(pod, item["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in item and container is not None:
            files[item["path"]] = resource_value(container, item["resourceFieldRef"]["resource"])
        else:
            raise PodError("CreateContainerConfigError", f"unsupported downwardAPI item {item}")
    return files


def safe_relative(path: str) -> str:
    """A volume item path must stay inside its volume."""
    parts = Path(path).parts
    if not parts or Path(path).is_absolute() or ".." in parts:
        raise PodError("CreateContainerConfigError", f"volume item path {path!r} is not relative")
    return path


def key_files(data: dict[str, str], items: list[dict[str, Any]] | None) -> dict[str, str]:
    """configMap/secret volume files: every key, or the listed items under their paths."""
    if not items:
        return {safe_relative(k): v for k, v in data.items()}
    files = {}
    for item in items:
        if item["key"] not in data:
            raise PodError("CreateContainerConfigError", f"key {item['key']!r} not found")
        files[safe_relative(item.get("path") or item["key"])] = data[item["key"]]
    return files


# --------------------------------------------------------------------------- exits
def exit_code(returncode: int) -> int:
    """A process killed by signal N exits, as a container runtime reports it, with 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def log_tail(text: str, lines: int = FALLBACK_LOG_LINES, limit: int = FALLBACK_LOG_BYTES) -> str:
    tail = "\n".join(text.splitlines()[-lines:])
    data = tail.encode()
    return data[-limit:].decode(errors="replace") if len(data) > limit else tail


def termination_message(file_text: str | None, log_text: str, policy: str, code: int) -> str:
    """The message file's text if the process wrote one; with FallbackToLogsOnError and a
    failed exit, else the tail of its log."""
    if file_text and file_text.strip():
        data = file_text.encode()[:MAX_TERMINATION_MESSAGE_BYTES]
        return data.decode(errors="replace")
    if policy == "FallbackToLogsOnError" and code != 0:
        return log_tail(log_text)
    return ""


@dataclass(frozen=True)
class Exit:
    code: int
    reason: str  # Completed, Error, ContainerStatusUnknown, StartError ...
    message: str
    started_at: str | None
    finished_at: str


def exit_reason(code: int) -> str:
    return "Completed" if code == 0 else "Error"


# --------------------------------------------------------------------------- pod status
def _conditions(
    now: str, ready: bool, reason: str | None = None, before: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The pod's conditions at `now`; as a kubelet does, a condition whose status did not
    change keeps the lastTransitionTime it had in `before` (the pod's status until now)."""
    flag = "True" if ready else "False"
    extra = {"reason": reason} if reason and not ready else {}
    had = {c.get("type"): c for c in before or ()}

    def since(kind: str, status: str) -> str:
        old = had.get(kind) or {}
        return old.get("lastTransitionTime") or now if old.get("status") == status else now

    return [
        {"type": "PodReadyToStartContainers", "status": "True",
         "lastTransitionTime": since("PodReadyToStartContainers", "True")},
        {"type": "Initialized", "status": "True",
         "lastTransitionTime": since("Initialized", "True")},
        {"type": "ContainersReady", "status": flag,
         "lastTransitionTime": since("ContainersReady", flag), **extra},
        {"type": "Ready", "status": flag, "lastTransitionTime": since("Ready", flag), **extra},
    ]  # fmt: skip


def _base_status(now: str, pod_ip: str) -> dict[str, Any]:
    return {
        "hostIP": LOOPBACK,
        "hostIPs": [{"ip": LOOPBACK}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
    }


def _container_status(container: dict[str, Any], state: dict[str, Any], ready: bool, **extra):
    name = container["name"]
    return {
        "name": name,
        "image": container.get("image", ""),
        "imageID": "",
        "ready": ready,
        "restartCount": 0,
        "started": ready,
        "state": state,
        **extra,
    }


def pending_status(pod: dict[str, Any], now: str, pod_ip: str) -> dict[str, Any]:
    """Accepted by the node, containers being created."""
    status = pod.get("status") or {}
    containers = pod["spec"]["containers"]
    return {
        "status": {
            "phase": "Pending",
            "startTime": status.get("startTime") or now,
            **_base_status(now, pod_ip),
            "conditions": _conditions(now, False, "ContainersNotReady"),
            "containerStatuses": [
                _container_status(
                    c, {"waiting": {"reason": "ContainerCreating"}, "running": None}, False
                )
                for c in containers
            ],
        }
    }


def running_status(
    pod: dict[str, Any],
    started_at: str,
    container_id: str,
    pod_ip: str,
    ready: bool = True,
    now: str | None = None,
) -> dict[str, Any]:
    """Running; `ready` as its readiness probe last said (Ready from the start without one)."""
    status = pod.get("status") or {}
    containers = pod["spec"]["containers"]
    return {
        "status": {
            "phase": "Running",
            "startTime": status.get("startTime") or started_at,
            **_base_status(started_at, pod_ip),
            "conditions": _conditions(
                now or started_at,
                ready,
                None if ready else "ContainersNotReady",
                status.get("conditions"),
            ),
            "containerStatuses": [
                _container_status(
                    c,
                    {"running": {"startedAt": started_at}, "waiting": None, "terminated": None},
                    ready,
                    containerID=container_id,
                )
                for c in containers
            ],
        }
    }


def terminated_status(
    pod: dict[str, Any], exit: Exit, container_id: str, pod_ip: str
) -> dict[str, Any]:
    """The container's end and the pod's phase (restartPolicy Never: Succeeded iff exit 0)."""
    status = pod.get("status") or {}
    terminated: dict[str, Any] = {
        "exitCode": exit.code,
        "reason": exit.reason,
        "finishedAt": exit.finished_at,
        "containerID": container_id,
    }
    if exit.started_at:
        terminated["startedAt"] = exit.started_at
    if exit.message:
        terminated["message"] = exit.message
    containers = pod["spec"]["containers"]
    return {
        "status": {
            "phase": "Succeeded" if exit.code == 0 else "Failed",
            "startTime": status.get("startTime") or exit.finished_at,
            **_base_status(exit.finished_at, pod_ip),
            "conditions": _conditions(
                exit.finished_at, False, "PodCompleted", status.get("conditions")
            ),
            "containerStatuses": [
                _container_status(
                    c,
                    {"terminated": terminated, "running": None, "waiting": None},
                    False,
                    containerID=container_id,
                )
                for c in containers
            ],
        }
    }


# --------------------------------------------------------------------------- the Node
def node_conditions(now: str, since: str) -> list[dict[str, Any]]:
    def cond(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": since,
        }

    return [
        cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "enough memory"),
        cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "no disk pressure"),
        cond("PIDPressure", "False", "KubeletHasSufficientPID", "enough PIDs"),
        cond("Ready", "True", "KubeletReady", "rljob node agent is posting ready status"),
    ]


def node_status(name: str, shape: NodeShape, now: str, since: str) -> dict[str, Any]:
    capacity = {**shape.capacity(), "ephemeral-storage": "100Gi"}
    return {
        "capacity": capacity,
        "allocatable": capacity,
        "conditions": node_conditions(now, since),
        "addresses": [
            {"type": "InternalIP", "address": LOOPBACK},
            {"type": "Hostname", "address": name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
        "nodeInfo": {
            "machineID": name,
            "systemUUID": name,
            "bootID": name,
            "kernelVersion": os.uname().release,
            "osImage": "rljob node agent (local processes)",
            "containerRuntimeVersion": "rljob-nodeagent://0.1",
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }


def node_manifest(
    name: str, shape: NodeShape, labels: Mapping[str, str] | None = None, now: str | None = None
) -> dict[str, Any]:
    """A GPU Node that kwok leaves alone (no kwok annotation): the agent is its kubelet."""
    moment = now or iso()
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                **GPU_NODE_LABELS,
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "nodeagent",
                **(labels or {}),
            },
        },
        "spec": {},
        "status": node_status(name, shape, moment, moment),
    }


def lease_manifest(node: str, node_uid: str, renew: str, duration: int = 40) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": node,
            "namespace": "kube-node-lease",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}
            ],
        },
        "spec": {
            "holderIdentity": node,
            "leaseDurationSeconds": duration,
            "renewTime": renew,
        },
    }
