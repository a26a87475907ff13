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

import pytest
from chart_helpers import CHART
from e2e_steps import CLAIM
from kube_steps import api_client, wait_for
from kubernetes import client
from rljob_operator import constants as c
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
    core = client.CoreV1Api(kind_api)
    name = f"jobs-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="module")
def kind_operator(kind_cluster: str, kind_api, kind_namespace: str) -> client.V1Pod:
    """`helm upgrade --install` of charts/rljob-operator, with the image built from the
    Dockerfile, into a namespace under the "restricted" Pod Security Standard. The cluster is
    deleted at the end, the release with it."""
    from rljob_testenv import kind

    onrealnodes.install_chart(kind.kubeconfig_path(kind_cluster), CHART, [kind_namespace])
    core = client.CoreV1Api(kind_api)
    return wait_for(lambda: _ready_operator_pod(core), 120, "the operator pod to be Ready")


def _ready_operator_pod(core: client.CoreV1Api) -> client.V1Pod | None:
    pods = core.list_namespaced_pod(
        onrealnodes.OPERATOR_NAMESPACE, label_selector="app.kubernetes.io/name=rljob-operator"
    ).items
    for pod in pods:
        if any(x.type == "Ready" and x.status == "True" for x in pod.status.conditions or []):
            return pod
    return None


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
    wait_for(lambda: _claim_phase(kind_core, kind_namespace) == "Bound", 60, "the claim to bind")
    yield folder
    # A failed test leaves its job, whose pods hold the claim: remove them first.
    client.CustomObjectsApi(kind_core.api_client).delete_collection_namespaced_custom_object(
        c.GROUP, c.VERSION, kind_namespace, c.PLURAL
    )
    wait_for(
        lambda: not kind_core.list_namespaced_pod(kind_namespace, label_selector=c.LABEL_JOB).items,
        180,
        "the jobs' pods to go",
    )
    kind_core.delete_namespaced_persistent_volume_claim(CLAIM, kind_namespace)
    kind_core.delete_persistent_volume(volume["metadata"]["name"])
    wait_for(lambda: _claim_phase(kind_core, kind_namespace) is None, 120, "the claim to go")
    shutil.rmtree(folder, ignore_errors=True)


def _claim_phase(core: client.CoreV1Api, namespace: str) -> str | None:
    for claim in core.list_namespaced_persistent_volume_claim(namespace).items:
        if claim.metadata.name == CLAIM:
            return claim.status.phase
    return None


@pytest.fixture(autouse=True)
def what_the_cluster_showed(request, kind_cluster: str, kind_namespace: str) -> Iterator[None]:
    """On a failure, print what a user would look at: jobs, pods, events, the operator's log."""
    failed_before = request.session.testsfailed
    yield
    if request.session.testsfailed == failed_before:
        return
    from rljob_testenv import kind

    ns = ("-n", kind_namespace)
    for args in (("get", "rltj,pods", "-o", "wide", *ns), ("events", *ns), ("get", "nodes"),
                 ("logs", "-n", onrealnodes.OPERATOR_NAMESPACE,
                  f"deploy/{onrealnodes.OPERATOR_DEPLOYMENT}", "--tail=300")):  # fmt: skip
        shown = kind.kubectl(kind_cluster, *args, check=False)
        lines = [x for x in (shown.stdout + shown.stderr).splitlines() if "GET /healthz" not in x]
        print(f"\n$ kubectl {' '.join(args)}\n" + "\n".join(lines[-60:]))
