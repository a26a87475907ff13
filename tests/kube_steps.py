"""Small builders and waits for cluster tests, so that each test reads as steps."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from kubernetes import client, config
from kubernetes.client.rest import ApiException
from rljob_testenv.ports import free_port as free_port  # the tests' helpers, in one place

T = TypeVar("T")

HOLD_FINALIZER = "rljob.io/test-hold"


@contextmanager
def api_client(kubeconfig: Path) -> Iterator[client.ApiClient]:
    """A client of the cluster `kubeconfig` names, closed on leaving (without touching the
    kubernetes package's default configuration, so clients of two clusters can coexist)."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    with client.ApiClient(configuration) as api:
        yield api


def wait_for(
    fetch: Callable[[], T | None],
    timeout: float = 60,
    what: str = "condition",
    interval: float = 0.25,
) -> T:
    """Poll `fetch` until it returns something truthy; fail the test with `what` otherwise."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = fetch()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def stays(
    check: Callable[[], object],
    seconds: float,
    what: str = "condition",
    interval: float = 0.25,
) -> None:
    """Poll `check` for `seconds`; fail the test with `what` as soon as it returns something
    falsy (gomega's Consistently, where `wait_for` is its Eventually)."""
    start = time.monotonic()
    while True:
        last = check()
        held = time.monotonic() - start
        if not last:
            raise AssertionError(
                f"{what} stopped holding after {held:.1f}s of {seconds:.0f}s (last: {last!r})"
            )
        if held >= seconds:
            return
        time.sleep(interval)


def gpu_pod(
    name: str,
    gpus: int = 1,
    node: str | None = None,
    priority_class: str | None = None,
    hold: bool = False,
) -> client.V1Pod:
    """A pod that asks for GPUs; `hold` adds a finalizer so its last state stays readable."""
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=name, finalizers=[HOLD_FINALIZER] if hold else None, labels={"app": name}
        ),
        spec=client.V1PodSpec(
            containers=[
                client.V1Container(
                    name="trainer",
                    image="example.invalid/trainer:never-pulled",
                    resources=client.V1ResourceRequirements(
                        requests={"nvidia.com/gpu": str(gpus)}, limits={"nvidia.com/gpu": str(gpus)}
                    ),
                )
            ],
            node_selector={"kubernetes.io/hostname": node} if node else None,
            priority_class_name=priority_class,
            termination_grace_period_seconds=0,
        ),
    )


def read_pod(core: client.CoreV1Api, namespace: str, name: str) -> client.V1Pod | None:
    try:
        return core.read_namespaced_pod(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def running(core: client.CoreV1Api, namespace: str, name: str) -> client.V1Pod | None:
    pod = read_pod(core, namespace, name)
    return pod if pod and pod.status.phase == "Running" else None


def condition(pod: client.V1Pod | None, cond_type: str) -> client.V1PodCondition | None:
    if pod is None or pod.status is None:
        return None
    return next((c for c in pod.status.conditions or [] if c.type == cond_type), None)


def release(core: client.CoreV1Api, namespace: str, name: str) -> None:
    """Drop the test's finalizer so that a held pod can go."""
    try:
        core.patch_namespaced_pod(name, namespace, {"metadata": {"finalizers": None}})
    except ApiException as exc:
        if exc.status != 404:
            raise


def bind_claim(
    core: client.CoreV1Api, namespace: str, claim: str = "ckpts", volume: dict | None = None
) -> str:
    """A claim bound to a volume reserved for it, as a cluster admin would provide it: `volume`
    (a PersistentVolume whose claimRef names the claim), else a hostPath volume of its own.
    Returns the volume's name, for the caller to delete (volumes are cluster-scoped)."""
    if volume is None:
        volume = {
            "metadata": {"name": f"{claim}-{namespace}"},
            "spec": {
                "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                "storageClassName": "", "hostPath": {"path": f"/tmp/{claim}-{namespace}"},
                "claimRef": {"namespace": namespace, "name": claim},
            },
        }  # fmt: skip
    pv = volume["metadata"]["name"]
    core.create_persistent_volume(volume)
    core.create_namespaced_persistent_volume_claim(namespace, client.V1PersistentVolumeClaim(
        metadata=client.V1ObjectMeta(name=claim),
        spec=client.V1PersistentVolumeClaimSpec(
            access_modes=["ReadWriteMany"], storage_class_name="", volume_name=pv,
            resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}),
        ),
    ))  # fmt: skip
    wait_for(lambda: core.read_namespaced_persistent_volume_claim(claim, namespace).status.phase == "Bound",
             what=f"the claim {claim} to bind")  # fmt: skip
    return pv
