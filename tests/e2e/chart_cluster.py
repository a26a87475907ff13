"""Fixtures of the e2e tests on a cluster with rljob installed by its chart (tests/e2e/kind: kind's
nodes). A conftest provides `stack`, a session's rljob_testenv.stacks.Stack that is up, and
imports these: the jobs' namespace and the operator pod once Ready (one of each for the
session), a claim on the shared volume for each test, and what a failed test prints."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_steps import CLAIM
from kube_steps import api_client, bind_claim, wait_for
from kubernetes import client
from rljob_operator import constants as c
from rljob_testenv import chart
from rljob_testenv.stacks import Stack

__all__ = [  # the fixtures a conftest that provides `stack` takes in
    "chart_operator", "cluster_api", "cluster_core", "jobs_namespace", "shared_claim",
    "what_the_cluster_showed",
]  # fmt: skip


# A job's rendezvous port: each pod has a network namespace of its own on a real kubelet.
RENDEZVOUS_PORT = 29500


def say(msg: str) -> None:
    print(msg, flush=True)


@pytest.fixture(scope="session")
def cluster_api(stack: Stack) -> Iterator[client.ApiClient]:
    with api_client(stack.kubeconfig) as api:
        yield api


@pytest.fixture
def cluster_core(cluster_api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(cluster_api)


@pytest.fixture(scope="session")
def jobs_namespace(cluster_api: client.ApiClient) -> Iterator[str]:
    """A fresh namespace for the tests' jobs, which the chart's operator watches."""
    core = client.CoreV1Api(cluster_api)
    name = f"jobs-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="session")
def chart_operator(
    stack: Stack, cluster_api: client.ApiClient, jobs_namespace: str
) -> client.V1Pod:
    """`helm upgrade --install` of charts/rljob-operator, with the image built from the
    Dockerfile, into a namespace under the "restricted" Pod Security Standard; its Ready pod.
    The release goes with the cluster."""
    stack.start_operator(jobs_namespace, say)
    core = client.CoreV1Api(cluster_api)
    return wait_for(lambda: ready_operator_pod(core), 120, "the operator pod to be Ready")


@pytest.fixture
def shared_claim(
    stack: Stack, cluster_core: client.CoreV1Api, jobs_namespace: str
) -> Iterator[Path]:
    """The claim the jobs name, bound to a volume on a fresh folder that every node sees; the
    folder, as this machine sees it."""
    volume = f"ckpts-{uuid.uuid4().hex[:6]}"
    folder, manifest = stack.claim_volume(volume, jobs_namespace, CLAIM)
    bind_claim(cluster_core, jobs_namespace, CLAIM, manifest)
    yield folder
    remove_claim(cluster_core, jobs_namespace, volume)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def what_the_cluster_showed(request, stack: Stack, jobs_namespace: str) -> Iterator[None]:
    """On a failure, print what a user would look at: jobs, pods, events, the operator's log."""
    failed_before = request.session.testsfailed
    yield
    if request.session.testsfailed > failed_before:
        show_cluster(stack, jobs_namespace)


def ready_operator_pod(core: client.CoreV1Api) -> client.V1Pod | None:
    """The chart's operator pod, once one is Ready."""
    pods = core.list_namespaced_pod(
        chart.OPERATOR_NAMESPACE, label_selector="app.kubernetes.io/name=rljob-operator"
    ).items
    for pod in pods:
        if any(x.type == "Ready" and x.status == "True" for x in pod.status.conditions or []):
            return pod
    return None


def claim_phase(core: client.CoreV1Api, namespace: str) -> str | None:
    """The jobs' claim's phase; None once it is gone."""
    for claim in core.list_namespaced_persistent_volume_claim(namespace).items:
        if claim.metadata.name == CLAIM:
            return claim.status.phase
    return None


def remove_claim(core: client.CoreV1Api, namespace: str, volume: str) -> None:
    """Delete the jobs (a failed test leaves its job, whose pods hold the claim), wait for their
    pods, then the claim and its volume; wait out pvc-protection's finalizer, since the next
    test makes a claim of the same name."""
    client.CustomObjectsApi(core.api_client).delete_collection_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL
    )
    wait_for(lambda: not core.list_namespaced_pod(namespace, label_selector=c.LABEL_JOB).items,
             180, "the jobs' pods to go")  # fmt: skip
    core.delete_namespaced_persistent_volume_claim(CLAIM, namespace)
    core.delete_persistent_volume(volume)
    wait_for(lambda: claim_phase(core, namespace) is None, 120, "the claim to go")


def show_cluster(stack: Stack, namespace: str) -> None:
    """Print what a user would look at after a failure: jobs, pods, events, nodes and the
    operator's log."""
    shown = [
        (f"kubectl {' '.join(args)}", stack.kubectl(*args, check=False))
        for args in (("get", "rltj,pods", "-o", "wide", "-n", namespace),
                     ("events", "-n", namespace), ("get", "nodes", "-o", "wide"))
    ]  # fmt: skip
    shown.append(("the operator's log", stack.operator_log(tail=400)))
    for title, text in shown:
        lines = [x for x in text.splitlines() if "GET /healthz" not in x and "succeeded." not in x]
        print(f"\n$ {title}\n" + "\n".join(lines[-60:]))
