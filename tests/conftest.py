"""Test-wide fixtures: one real local control plane per test run, and a fresh namespace per test.

Tests under tests/cluster/ (and any test marked `cluster`) get the cluster; the rest
never start it. A cluster that cannot start fails those tests with the reason. Tests
under tests/trainer/ are marked `trainer`: they run the trainer under torchrun (minutes).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
CLUSTER_FOLDERS = ("cluster", "e2e")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests by their folder under tests/ (the markers are registered in
    pyproject.toml): tests/unit/trainer/ is a unit test of the trainer, not a torchrun run."""
    for item in items:
        folder = Path(item.path).resolve().relative_to(TESTS).parts[0]
        if folder in CLUSTER_FOLDERS:
            item.add_marker(pytest.mark.cluster)
        if folder == "e2e":
            item.add_marker(pytest.mark.e2e)
        if folder == "trainer":
            item.add_marker(pytest.mark.trainer)


@pytest.fixture(scope="session")
def cluster_name() -> Iterator[str]:
    """Bring a cluster up once for the whole run (its own name, so runs never collide)."""
    from rljob_testenv import binaries, cluster

    name = os.environ.get("RLJOB_TEST_CLUSTER") or f"test-{os.getpid()}"
    reuse = bool(os.environ.get("RLJOB_TEST_CLUSTER")) and cluster.exists(name)
    try:
        binaries.install(say=lambda msg: print(msg, flush=True))
        cluster.up(name, gpu_nodes=3, say=lambda msg: print(msg, flush=True))
    except (binaries.BinariesError, cluster.ClusterError) as exc:
        pytest.fail(f"the test cluster could not start: {exc}", pytrace=False)
    yield name
    if not reuse:
        cluster.down(name, say=lambda msg: print(msg, flush=True))


@pytest.fixture(scope="session")
def kubeconfig(cluster_name: str) -> Path:
    from rljob_testenv import cluster

    return cluster.kubeconfig_path(cluster_name)


@pytest.fixture(scope="session")
def api_client(kubeconfig: Path):
    import kube_steps

    with kube_steps.api_client(kubeconfig) as api:
        yield api


@pytest.fixture
def core(api_client):
    from kubernetes import client

    return client.CoreV1Api(api_client)


@pytest.fixture
def namespace(core) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards."""
    from kubernetes import client

    name = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


REPO = Path(__file__).resolve().parent.parent
CRD_FILE = REPO / "crds" / "rljob.io_rltrainingjobs.yaml"


@pytest.fixture(scope="session")
def crd(cluster_name: str) -> str:
    """The RLTrainingJob CRD, installed and Established."""
    from rljob_testenv import cluster

    cluster.install_crds(cluster_name, CRD_FILE)
    return "rltrainingjobs.rljob.io"


@pytest.fixture
def operator(kubeconfig: Path, namespace: str, crd: str, tmp_path: Path):
    """`rljob operator` as a real process watching the test's namespace; restartable."""
    from rljob_testenv.operator_process import OperatorProcess, run_operator

    yield from run_operator(OperatorProcess(kubeconfig, namespace, tmp_path / "operator.log"))
