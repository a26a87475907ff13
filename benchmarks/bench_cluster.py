"""The set-up every benchmark on its own local control plane shares."""

from __future__ import annotations

import os
import re
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client, config
from rljob_testenv import cluster

REPO = Path(__file__).resolve().parent.parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# The local control plane's processes, by the name of their binary.
CONTROL_PLANE = ("kube-apiserver", "etcd", "kube-scheduler", "kube-controller-manager",
                 "kwok-controller")  # fmt: skip


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Bench:
    name: str  # the cluster's
    kubeconfig: Path
    namespace: str
    api: client.ApiClient
    work: Path  # a temporary folder for logs and node agents, removed at the end


@contextmanager
def bench_cluster(prefix: str, existing: str | None = None, kwok_nodes: int = 0) -> Iterator[Bench]:
    """A local cluster (`existing`, or a new one that goes at the end) with rljob's CRDs and
    a fresh namespace; its `kwok_nodes` end pods as a kubelet does (rljob_testenv.stages)."""
    name = existing or f"{prefix}-{uuid.uuid4().hex[:6]}"
    kubeconfig = cluster.up(name, gpu_nodes=kwok_nodes, say=say,
                            kubelet_like_pods=bool(kwok_nodes))  # fmt: skip
    namespace = f"{prefix}-{uuid.uuid4().hex[:6]}"
    try:
        with tempfile.TemporaryDirectory(prefix=f"rljob-{prefix}-") as tmp:
            cluster.install_crds(name, REPO / "crds")
            cluster.kubectl(name, "create", "namespace", namespace)
            configuration = client.Configuration()
            config.load_kube_config(str(kubeconfig), client_configuration=configuration)
            yield Bench(name, kubeconfig, namespace, client.ApiClient(configuration), Path(tmp))
    finally:
        if not existing:
            cluster.down(name, say=say)


def apiserver_requests(name: str) -> Counter[str]:
    """The API server's request counts so far (all clients), by verb and resource."""
    counts: Counter[str] = Counter()
    for line in cluster.kubectl(name, "get", "--raw", "/metrics").splitlines():
        if line.startswith("apiserver_request_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            what = "/".join(filter(None, (labels.get("resource"), labels.get("subresource"))))
            counts[f"{labels.get('verb')} {what}"] += float(line.rsplit(" ", 1)[1])
    return counts


def process_cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of one process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def cpu_seconds(processes: dict[str, int]) -> dict[str, float]:
    """Each named process's user and system CPU seconds so far."""
    return {name: process_cpu_seconds(pid) for name, pid in processes.items()}


def control_plane_pids(name: str) -> dict[str, int]:
    """The local cluster's control-plane processes (kwokctl runs them from the cluster's
    own folder), by binary name."""
    pids = {}
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        binary = argv[0].decode(errors="replace")
        if entry.name.isdigit() and f"/clusters/{name}/" in binary:
            program = Path(binary).name
            if program in CONTROL_PLANE:
                pids[program] = int(entry.name)
    return pids
