"""The set-up every benchmark on its own local control plane shares."""

from __future__ import annotations

import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client, config
from rljob_testenv import cluster

REPO = Path(__file__).resolve().parent.parent


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
def bench_cluster(prefix: str, existing: str | None = None) -> Iterator[Bench]:
    """A local cluster (`existing`, or a new one that goes at the end) with rljob's CRDs and
    a fresh namespace."""
    name = existing or f"{prefix}-{uuid.uuid4().hex[:6]}"
    kubeconfig = cluster.up(name, gpu_nodes=0, say=say)
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
