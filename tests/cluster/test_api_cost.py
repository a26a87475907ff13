"""What one recovery costs the API server, counted by the operator's own client
(rljob_api_requests_total on its /metrics) on the real control plane."""

from __future__ import annotations

import re
from collections import Counter

import pytest
import test_recovery
from kube_steps import wait_for
from kubernetes import client
from rljob_testenv.operator_process import OperatorProcess, run_operator
from test_job_lifecycle import get_job
from test_recovery import assert_one_recovery_from_step_20, job_body, resumed_gang, start
from test_watch_driven import settled

nodes, claim, volume = test_recovery.nodes, test_recovery.claim, test_recovery.volume
REQUESTS = re.compile(
    r'^rljob_api_requests_total\{resource="([^"]*)",verb="([^"]*)"\} (\S+)$', re.M
)
DELETED_POD = re.compile(r"request: delete pods /api/v1/namespaces/[^/]+/pods/(\S+)$", re.M)


@pytest.fixture
def counted_operator(kubeconfig, namespace, crd, claim, volume, tmp_path):
    """Reads the checkpoint volume itself, logs each pass, and has no resync in the way."""
    args = ["--standalone", "--namespace", namespace, "--verbose", "--resync-seconds", "3600"]
    process = OperatorProcess(kubeconfig, namespace, tmp_path / "operator.log", args=args,
                              RLJOB_CHECKPOINT_VOLUMES=f"ckpts={volume}")  # fmt: skip
    yield from run_operator(process)


def job_phase(api_client, namespace: str) -> str | None:
    return (get_job(api_client, namespace).get("status") or {}).get("phase")


def requests(operator: OperatorProcess) -> Counter[tuple[str, str]]:
    return Counter(
        {
            (verb, resource): int(float(n))
            for resource, verb, n in REQUESTS.findall(operator.metrics())
        }
    )


def test_a_recovery_reads_nothing_and_writes_each_pod_once_after_creating_it(
    api_client, core, namespace, nodes, counted_operator
):
    """One pod of a 2-pod gang evicted; what rljob sends from then until it is quiet again
    with the new gang Running. Unavoidable: the other pod's delete and 2 pod creates (and,
    with the Workload API, the new attempt's Workload and PodGroup, the old PodGroup's
    delete). The eviction deletes the evicted pod; rljob deletes it too only where its pass
    sees the eviction's DisruptionTarget condition before the deletion, a race the test does
    not steer. Above them: each ended pod's finalizer released once, at most 6 status writes (the end, the fence, the new
    gang, its first pod running where it runs a pass before the other, all running, the
    first step: kwok's pods turn Ready as they run, a trainer's once it has trained a step)
    and 4 Events (Preempted, GangCreated, Running, FirstStep): one each per attempt, none per
    step. No read, no checkpoint request to a pod that the same pass deletes, and the job's
    Service and Workload, which are still there, are not created again."""
    operator = counted_operator
    pods = start(api_client, core, namespace, job_body(nodes))
    wait_for(lambda: operator.log().count("relist: ") >= 2, what="the second list")
    settled(operator)
    before = requests(operator)

    core.create_namespaced_pod_eviction(pods[0].metadata.name, namespace, client.V1Eviction(
        metadata=client.V1ObjectMeta(name=pods[0].metadata.name, namespace=namespace)))  # fmt: skip
    job, new_pods = resumed_gang(api_client, core, namespace)
    assert_one_recovery_from_step_20(job, new_pods, {"EvictionByEvictionAPI"})
    wait_for(lambda: job_phase(api_client, namespace) == "Running", what="the job Running")
    settled(operator)

    spent = requests(operator) - before
    print(f"requests of one recovery: {sorted(spent.items())}")
    assert not [k for k in spent if k[0] in ("get", "list")], spent
    pods_written = {verb: spent[(verb, "pods")] for verb in ("create", "patch")}
    assert pods_written == {"create": 2, "patch": 2}, spent
    deleted = Counter(DELETED_POD.findall(operator.log()))
    assert deleted[pods[1].metadata.name] == 1, deleted
    assert deleted[pods[0].metadata.name] <= 1, deleted
    assert spent[("delete", "pods")] == deleted.total(), (spent, deleted)
    assert spent[("patch", "rltrainingjobs/status")] <= 6, spent
    assert spent[("create", "events")] <= 4, spent
    assert not spent[("create", "services")] and not spent[("create", "workloads")], spent
    assert sum(spent.values()) <= 18, spent


def test_a_service_someone_deleted_is_made_again_by_the_next_gang(
    api_client, core, namespace, nodes, counted_operator
):
    """The Service's watch tells the operator it went (the running gang keeps its addresses),
    and the next gang's pass creates it with the pods."""
    operator = counted_operator
    pods = start(api_client, core, namespace, job_body(nodes))
    core.delete_namespaced_service("grpo", namespace)
    wait_for(lambda: f"Service {namespace}/grpo is gone" in operator.log(),
             what="the operator to see the Service go")  # fmt: skip

    core.create_namespaced_pod_eviction(pods[0].metadata.name, namespace, client.V1Eviction(
        metadata=client.V1ObjectMeta(name=pods[0].metadata.name, namespace=namespace)))  # fmt: skip
    resumed_gang(api_client, core, namespace)

    service = core.read_namespaced_service("grpo", namespace)
    assert service.spec.cluster_ip == "None"
    assert service.metadata.owner_references[0].name == "grpo"
    assert requests(operator)[("create", "services")] == 2  # the first gang's, and this one
