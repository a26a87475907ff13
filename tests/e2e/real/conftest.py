"""Real nodes for the tests in this folder: kubelets and containerds running the project's
images, with the operator installed by its Helm chart.

One cluster per session (`rljob testenv up --real-nodes 2`; RLJOB_REAL_CLUSTER names one to
reuse). The chart installs the operator into a namespace under the "restricted" Pod
Security Standard, watching the jobs' namespace; checkpoints live on a hostPath
PersistentVolume, ReadWriteMany, bound to the claim the jobs name.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import chart_cluster
import pytest
from chart_helpers import CHART
from e2e_steps import CLAIM
from kube_steps import api_client, bind_claim, wait_for
from kubernetes import client
from rljob_testenv import onrealnodes

REAL_NODES = 2
GPUS_PER_NODE = 2  # a 1-node job of 2 ranks fits one node; a 2-node job leaves room


@pytest.fixture(scope="session")
def real_cluster() -> Iterator[str]:
    from rljob_testenv import binaries, cluster, images, realnodes

    say = lambda msg: print(msg, flush=True)  # noqa: E731
    name = os.environ.get("RLJOB_REAL_CLUSTER") or f"real-{os.getpid()}"
    reuse = bool(os.environ.get("RLJOB_REAL_CLUSTER")) and cluster.exists(name)
    try:
        onrealnodes.up(name, REAL_NODES, GPUS_PER_NODE, Path(__file__).resolve().parents[3], say)
    except (binaries.BinariesError, cluster.ClusterError, realnodes.RealNodeError,
            images.ImageError) as exc:  # fmt: skip
        pytest.fail(f"the real nodes could not start: {exc}", pytrace=False)
    yield name
    if not reuse:
        cluster.down(name, say=say)


@pytest.fixture(scope="session")
def real_api(real_cluster: str):
    from rljob_testenv import cluster

    with api_client(cluster.kubeconfig_path(real_cluster)) as api:
        yield api


@pytest.fixture
def real_core(real_api) -> client.CoreV1Api:
    return client.CoreV1Api(real_api)


@pytest.fixture(scope="session")
def jobs_namespace(real_api) -> Iterator[str]:
    """Where the tests' jobs run: a namespace the chart's operator watches."""
    yield from chart_cluster.jobs_namespace(real_api)


@pytest.fixture(scope="session")
def chart_operator(real_cluster: str, real_api, jobs_namespace: str) -> Iterator[client.V1Pod]:
    """`helm install` of charts/rljob-operator with the image built from the Dockerfile."""
    onrealnodes.install_operator(real_cluster, CHART, [jobs_namespace])
    core = client.CoreV1Api(real_api)
    pod = wait_for(lambda: chart_cluster.ready_operator_pod(core), 60,
                   "the operator pod to be Ready")  # fmt: skip
    yield pod
    onrealnodes.uninstall_operator(real_cluster)


@pytest.fixture
def real_claim(real_core: client.CoreV1Api, jobs_namespace: str) -> Iterator[Path]:
    """The claim the jobs name, bound to a fresh hostPath volume (ReadWriteMany); its folder.

    Every real node is a process tree on this machine, so one host folder is a volume
    that both nodes see, as an NFS or Lustre mount would be on a real cluster.
    """
    folder = Path(tempfile.mkdtemp(prefix="rljob-real-pv-"))
    volume = onrealnodes.shared_folder_volume(
        f"ckpts-{uuid.uuid4().hex[:6]}", folder, jobs_namespace, CLAIM
    )
    pv_name = bind_claim(real_core, jobs_namespace, CLAIM, volume)
    yield folder
    chart_cluster.remove_claim(real_core, jobs_namespace, pv_name)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call":
        item.rljob_failed = report.failed
    return report


@pytest.fixture(autouse=True)
def what_the_cluster_showed(request, real_cluster: str, jobs_namespace: str) -> Iterator[None]:
    """On a failure, print what a user would look at: jobs, pods, events, the operator's log."""
    yield
    if not getattr(request.node, "rljob_failed", False):
        return
    from rljob_testenv import cluster

    def kubectl(*args: str) -> str:
        return cluster.kubectl(real_cluster, *args, check=False)

    chart_cluster.show_cluster(kubectl, jobs_namespace,
                               onrealnodes.operator_log(real_cluster, tail=400))  # fmt: skip
