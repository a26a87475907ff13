"""What the e2e tests on a cluster with rljob installed by its chart share, whichever nodes
it has (tests/e2e/real: kubelets and containerds as local processes; tests/e2e/kind: kind's
nodes): the jobs' namespace, the operator pod once Ready, the claim's removal, and what a
failed test prints."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

from e2e_steps import CLAIM
from kube_steps import wait_for
from kubernetes import client
from rljob_operator import constants as c
from rljob_testenv import onrealnodes


def jobs_namespace(api: client.ApiClient) -> Iterator[str]:
    """A fresh namespace for the tests' jobs, deleted at the end (a fixture's body)."""
    core = client.CoreV1Api(api)
    name = f"jobs-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


def ready_operator_pod(core: client.CoreV1Api) -> client.V1Pod | None:
    """The chart's operator pod, once one is Ready."""
    pods = core.list_namespaced_pod(
        onrealnodes.OPERATOR_NAMESPACE, label_selector="app.kubernetes.io/name=rljob-operator"
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


def show_cluster(kubectl: Callable[..., str], namespace: str, operator_log: str) -> None:
    """Print what a user would look at after a failure: jobs, pods, events, nodes and the
    operator's log. `kubectl(*args)` returns what kubectl printed."""
    shown = [
        (f"kubectl {' '.join(args)}", kubectl(*args))
        for args in (("get", "rltj,pods", "-o", "wide", "-n", namespace),
                     ("events", "-n", namespace), ("get", "nodes", "-o", "wide"))
    ]  # fmt: skip
    shown.append(("the operator's log", operator_log))
    for title, text in shown:
        lines = [x for x in text.splitlines() if "GET /healthz" not in x and "succeeded." not in x]
        print(f"\n$ {title}\n" + "\n".join(lines[-60:]))
