"""A real local control plane for tests and the demo: kwokctl's binary runtime on our binaries.

kube-apiserver (RBAC on), etcd, kube-controller-manager and kube-scheduler run as
local processes; kwok plays the kubelet for nodes annotated as kwok nodes. Each
cluster lives in its own directory under the cache, gets its own random ports from
kwokctl, and is removed whole by `down`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from . import binaries, stages
from .processes import alive

DEFAULT_CLUSTER_NAME = "rljob"
CLUSTER_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$")

# What a kwok GPU node looks like: the labels NVIDIA's GPU operator and cloud providers set.
GPU_LABELS = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "node.kubernetes.io/instance-type": "p5.48xlarge",
}
GPU_NODE_LABELS = {**GPU_LABELS, "rljob.io/testenv": "kwok"}
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"


class ClusterError(RuntimeError):
    """The cluster could not be started, reached or stopped; the message says why."""


@dataclass(frozen=True)
class NodeShape:
    gpus: int = 8
    cpu: str = "96"
    memory: str = "1Ti"
    pods: int = 110

    def capacity(self) -> dict[str, str]:
        """What a Node with this shape advertises (capacity and allocatable alike)."""
        return {
            "cpu": self.cpu,
            "memory": self.memory,
            "pods": str(self.pods),
            "nvidia.com/gpu": str(self.gpus),
        }


def workdir() -> Path:
    """KWOK_WORKDIR for every cluster we make: beside the binaries, outside the repository."""
    return binaries.cache_root() / "kwok"


def _kwok_env() -> dict[str, str]:
    """Point kwokctl at our own binaries so that it never tries to download anything."""
    env = dict(os.environ)
    env.update(
        KWOK_WORKDIR=str(workdir()),
        KWOK_RUNTIME="binary",
        KWOK_KUBE_VERSION=binaries.KUBERNETES_VERSION,
        KWOK_VERSION=binaries.KWOK_VERSION,
        KWOK_ETCD_VERSION=binaries.ETCD_VERSION.removeprefix("v"),
        KWOK_KUBE_APISERVER_BINARY=str(binaries.require("kube-apiserver")),
        KWOK_KUBE_CONTROLLER_MANAGER_BINARY=str(binaries.require("kube-controller-manager")),
        KWOK_KUBE_SCHEDULER_BINARY=str(binaries.require("kube-scheduler")),
        KWOK_KUBECTL_BINARY=str(binaries.require("kubectl")),
        KWOK_ETCD_BINARY=str(binaries.require("etcd")),
        KWOK_CONTROLLER_BINARY=str(binaries.require("kwok")),
    )
    return env


def validate_name(name: str) -> str:
    if not CLUSTER_NAME_RE.match(name):
        raise ClusterError(
            f"cluster name {name!r} is not valid: use 1-32 lowercase letters, digits and '-'"
        )
    return name


def cluster_dir(name: str) -> Path:
    return workdir() / "clusters" / name


def kubeconfig_path(name: str) -> Path:
    return cluster_dir(name) / "kubeconfig.yaml"


def _kwokctl(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    cmd = [str(binaries.require("kwokctl")), *args]
    try:
        return subprocess.run(
            cmd, env=_kwok_env(), capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise ClusterError(f"`kwokctl {' '.join(args)}` did not finish in {timeout:.0f}s") from exc


def exists(name: str) -> bool:
    return kubeconfig_path(name).exists()


def kubectl(name: str, *args: str, input: str | None = None, check: bool = True) -> str:
    """Run kubectl against the named cluster; raise ClusterError with its stderr on failure."""
    cmd = [str(binaries.require("kubectl")), "--kubeconfig", str(kubeconfig_path(name)), *args]
    result = subprocess.run(cmd, input=input, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise ClusterError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def install_crds(name: str, path: Path, timeout: float = 60) -> list[str]:
    """Apply the CRDs at `path` server-side and wait until each is Established.

    Polled rather than `kubectl wait`, which fails at once on a CRD whose status has no
    conditions yet: a CRD with a large schema (the pod template's PodSpec) shows that for
    a moment after it is created.
    """
    crds = kubectl(name, "apply", "--server-side", "-o", "name", "-f", str(path)).split()
    deadline = time.monotonic() + timeout
    for crd in crds:
        while not _established(json.loads(kubectl(name, "get", crd, "-o", "json"))):
            if time.monotonic() > deadline:
                raise ClusterError(f"{crd} is not Established after {timeout:.0f}s")
            time.sleep(0.2)
    return crds


def _established(crd: dict) -> bool:
    conditions = crd.get("status", {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def gpu_node_manifest(name: str, shape: NodeShape) -> dict:
    """A Node that kwok keeps Ready, advertising `nvidia.com/gpu` like a GPU-operator node."""
    capacity = shape.capacity()
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                **GPU_NODE_LABELS,
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
        },
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"},
        },
    }


def add_gpu_nodes(
    name: str, count: int, shape: NodeShape = NodeShape(), prefix: str = "gpu-node"
) -> list[str]:
    names = [f"{prefix}-{i}" for i in range(count)]
    docs = [gpu_node_manifest(n, shape) for n in names]
    kubectl(name, "apply", "-f", "-", input=yaml.safe_dump_all(docs))
    wait_until(
        lambda: _ready_nodes(name) >= set(names),
        timeout=60,
        what=f"nodes {', '.join(names)} to become Ready",
    )
    return names


def _ready_nodes(name: str) -> set[str]:
    nodes = json.loads(kubectl(name, "get", "nodes", "-o", "json"))["items"]
    return {
        n["metadata"]["name"]
        for n in nodes
        if any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in n.get("status", {}).get("conditions", [])
        )
    }


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll `predicate` (a ClusterError counts as not yet) until true; ClusterError after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except ClusterError:
            pass
        time.sleep(0.5)
    raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}")


# kwok plays the kubelet only for nodes we mark as kwok nodes, so that tests (and the node
# agent) can act as the kubelet of other nodes.
KWOK_ARGS = (
    ("kwok-controller", "manage-all-nodes", "false"),
    ("kwok-controller", "manage-nodes-with-annotation-selector", f"{KWOK_NODE_ANNOTATION}=fake"),
    # One of each, so no leader election: on a loaded machine a lease renewal that times out
    # would make the controller-manager or the scheduler exit, and nothing restarts them.
    ("kube-controller-manager", "leader-elect", "false"),
    ("kube-scheduler", "leader-elect", "false"),
)
# The Workload API's gang scheduling (alpha in 1.35 and 1.36): PodGroups that the scheduler
# places all or nothing.
FEATURE_GATES = "GenericWorkload=true,GangScheduling=true"
RUNTIME_CONFIG = "scheduling.k8s.io/v1alpha2=true"


def extra_args(args: tuple[tuple[str, str, str], ...]) -> list[str]:
    """kwokctl's --extra-args, each component's first one ahead of all the others.

    kwokctl v0.8.0 files a component's later arguments under the patch whose index is
    that of the component's first argument in the list; that is only right when the
    first arguments of all components come first.
    """
    firsts, rest, seen = [], [], set()
    for component, key, value in args:
        (rest if component in seen else firsts).append(f"--extra-args={component}={key}={value}")
        seen.add(component)
    return firsts + rest


def up(
    name: str = DEFAULT_CLUSTER_NAME,
    gpu_nodes: int = 3,
    shape: NodeShape = NodeShape(),
    say: Callable[[str], None] = print,
    kubelet_like_pods: bool = False,
) -> Path:
    """Start a cluster (or reuse a healthy one of that name) and return its kubeconfig path.

    `kubelet_like_pods`: kwok ends pods as a kubelet does (see `stages`), for a cluster that
    compares controllers; by default a Job's pod succeeds as soon as it runs.
    """
    validate_name(name)
    if exists(name) and _healthy(name):
        say(f"cluster {name!r} is already running")
    else:
        if cluster_dir(name).exists():
            say(f"cluster {name!r} is left over from an earlier run: removing it first")
            down(name, say=lambda _msg: None)
        say(
            f"starting cluster {name!r} (kube-apiserver, etcd, scheduler, controller-manager, kwok)"
        )
        started = time.monotonic()
        config = []
        if kubelet_like_pods:
            config = ["--config", str(stages.write_config(cluster_dir(name) / "stages.yaml"))]
        result = _kwokctl(
            [
                "create", "cluster",
                "--name", name,
                "--runtime", "binary",
                "--kube-authorization=true",
                "--kube-admission=true",
                "--kubeconfig=",
                "--wait=120s",
                "--quiet-pull",
                f"--kube-feature-gates={FEATURE_GATES}",
                f"--kube-runtime-config={RUNTIME_CONFIG}",
                *config,
                *extra_args(KWOK_ARGS),
            ]
        )  # fmt: skip
        if result.returncode != 0:
            logs = _component_logs_tail(name)
            down(name, say=lambda _msg: None)
            raise ClusterError(
                f"kwokctl could not create cluster {name!r} (exit {result.returncode}):\n"
                f"{result.stderr.strip() or result.stdout.strip()}{logs}"
            )
        wait_until(lambda: _healthy(name), timeout=60, what="the API server to answer /readyz")
        say(f"cluster {name!r} is up in {time.monotonic() - started:.1f}s")
    existing = {n for n in _ready_nodes(name) if n.startswith("gpu-node-")}
    if len(existing) < gpu_nodes:
        add_gpu_nodes(name, gpu_nodes, shape)
    return kubeconfig_path(name)


def _healthy(name: str) -> bool:
    if not kubeconfig_path(name).exists():
        return False
    try:
        return kubectl(name, "get", "--raw", "/readyz").strip() == "ok"
    except ClusterError:
        return False


def _component_logs_tail(name: str, lines: int = 15) -> str:
    logs = cluster_dir(name) / "logs"
    if not logs.is_dir():
        return ""
    parts = []
    for log in sorted(logs.glob("*.log")):
        tail = log.read_text(errors="replace").splitlines()[-lines:]
        parts.append(f"\n--- {log.name} (last {len(tail)} lines) ---\n" + "\n".join(tail))
    return "".join(parts)


def _pids(name: str) -> list[int]:
    pids = []
    for pidfile in (cluster_dir(name) / "pids").glob("*.pid"):
        try:
            pids.append(int(pidfile.read_text().strip()))
        except (OSError, ValueError):
            continue
    return pids


def down(name: str = DEFAULT_CLUSTER_NAME, say: Callable[[str], None] = print) -> None:
    """Stop every process of the cluster and remove its directory."""
    validate_name(name)
    if not cluster_dir(name).exists():
        say(f"cluster {name!r} does not exist")
        return
    pids = _pids(name)
    result = _kwokctl(["delete", "cluster", "--name", name], timeout=120)
    for pid in pids:  # kwokctl stops them; make sure, so that nothing outlives `down`.
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    wait_until(
        lambda: not any(alive(p) for p in pids), timeout=15, what="cluster processes to exit"
    )
    shutil.rmtree(cluster_dir(name), ignore_errors=True)
    if result.returncode != 0:
        say(f"kwokctl delete reported: {result.stderr.strip()} (cleaned up anyway)")
    say(f"cluster {name!r} is gone")


def list_clusters() -> list[str]:
    root = workdir() / "clusters"
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
