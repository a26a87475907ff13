"""A kind cluster for the tests in this folder: a control plane and two workers on rootful podman,
the project's images loaded into them, the operator installed by its Helm chart.

One cluster per test file (rljob_testenv.onkind.up), deleted at its end whatever happened;
RLJOB_KIND_CLUSTER names one to reuse, and leave running. Checkpoints live in a host folder
every node mounts (kind's extraMounts), exposed as a ReadWriteMany PersistentVolume.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import chart_cluster
import pytest
from chart_helpers import CHART
from e2e_steps import CLAIM
from kube_steps import api_client, wait_for
from kubernetes import client
from rljob_testenv import onrealnodes

REPO = Path(__file__).resolve().parents[3]
WORKERS = 2


def _say(msg: str) -> None:
    print(msg, flush=True)


# Module-scoped: the cluster (about 17 GB of images on its nodes) is gone before the next
# file's tests start, e.g. the real nodes' in the same lane.
@pytest.fixture(scope="module")
def kind_cluster() -> Iterator[str]:
    """The cluster's name. A host that cannot run it (no podman, no cgroups, too little disk)
    fails here at once with what it lacks; every wait in its set-up has a deadline."""
    from rljob_testenv import binaries, cluster, images, kind, onkind

    reused = os.environ.get("RLJOB_KIND_CLUSTER")
    name = reused or f"rljob-e2e-{os.getpid()}"
    shared = kind.shared_dir(name) or kind.cluster_dir(name) / "shared"
    try:
        onkind.up(name, shared, REPO, WORKERS, _say)
    except (kind.KindError, images.ImageError, binaries.BinariesError,
            cluster.ClusterError) as exc:  # fmt: skip
        pytest.fail(f"the kind cluster could not start: {exc}", pytrace=False)
    try:
        yield name
    finally:
        if not reused:
            kind.delete_cluster(name, say=_say)


@pytest.fixture(scope="module")
def kind_api(kind_cluster: str):
    from rljob_testenv import kind

    with api_client(kind.kubeconfig_path(kind_cluster)) as api:
        yield api


@pytest.fixture
def kind_core(kind_api) -> client.CoreV1Api:
    return client.CoreV1Api(kind_api)


@pytest.fixture(scope="module")
def kind_namespace(kind_api) -> Iterator[str]:
    """Where the tests' jobs run: a namespace the chart's operator watches."""
    yield from chart_cluster.jobs_namespace(kind_api)


@pytest.fixture(scope="module")
def kind_operator(kind_cluster: str, kind_api, kind_namespace: str) -> client.V1Pod:
    """`helm upgrade --install` of charts/rljob-operator, with the image built from the
    Dockerfile, into a namespace under the "restricted" Pod Security Standard. The cluster is
    deleted at the end, the release with it."""
    from rljob_testenv import kind

    onrealnodes.install_chart(kind.kubeconfig_path(kind_cluster), CHART, [kind_namespace])
    core = client.CoreV1Api(kind_api)
    return wait_for(lambda: chart_cluster.ready_operator_pod(core), 120,
                    "the operator pod to be Ready")  # fmt: skip


@pytest.fixture
def kind_claim(
    kind_cluster: str, kind_core: client.CoreV1Api, kind_namespace: str
) -> Iterator[Path]:
    """The claim the jobs name, bound to a fresh folder of the shared volume; the folder, as
    this machine sees it (every node sees it at rljob_testenv.kind.SHARED_MOUNT)."""
    from rljob_testenv import kind

    subpath = f"claims/{uuid.uuid4().hex[:8]}"
    folder = kind.shared_dir(kind_cluster) / subpath
    folder.mkdir(parents=True)
    folder.chmod(0o777)  # the trainer image runs as a user of its own
    volume, claim = kind.shared_volume(f"ckpts-{subpath[-8:]}", CLAIM, kind_namespace, subpath)
    kind_core.create_persistent_volume(volume)
    kind_core.create_namespaced_persistent_volume_claim(kind_namespace, claim)
    wait_for(lambda: chart_cluster.claim_phase(kind_core, kind_namespace) == "Bound", 60,
             "the claim to bind")  # fmt: skip
    yield folder
    chart_cluster.remove_claim(kind_core, kind_namespace, volume["metadata"]["name"])
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def what_the_cluster_showed(request, kind_cluster: str, kind_namespace: str) -> Iterator[None]:
    """On a failure, print what a user would look at: jobs, pods, events, the operator's log."""
    failed_before = request.session.testsfailed
    yield
    if request.session.testsfailed == failed_before:
        return
    from rljob_testenv import kind

    def kubectl(*args: str) -> str:
        shown = kind.kubectl(kind_cluster, *args, check=False)
        return shown.stdout + shown.stderr

    log = kubectl("logs", "-n", onrealnodes.OPERATOR_NAMESPACE,
                  f"deploy/{onrealnodes.OPERATOR_DEPLOYMENT}", "--tail=300")  # fmt: skip
    chart_cluster.show_cluster(kubectl, kind_namespace, log)
