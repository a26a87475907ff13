"""Kueue admits a job's gang as one pod group, preempts it for a higher-priority one, and
admits it again: rljob counts the preemption as a disruption and resumes from the newest
complete checkpoint.

Kueue v0.17.0's own manager (built from source) runs against the test control plane with
its `pod` integration; each test's own ClusterQueue has quota for one gang of two GPUs.
"""

from __future__ import annotations

import uuid

import pytest
import test_recovery
from kube_steps import wait_for
from kubernetes import client
from rljob_operator import constants as c
from rljob_operator.api.reasons import Phase
from test_job_lifecycle import finish, get_job
from test_recovery import job_body, write_checkpoint, write_progress

# The recovery tests' fixtures: GPU nodes of the test's own, the claim `ckpts` bound to a
# volume with complete checkpoints at steps 10 and 20, and the operator that reads it.
nodes, claim, volume = test_recovery.nodes, test_recovery.claim, test_recovery.volume
recovering_operator = test_recovery.recovering_operator

KUEUE_GROUP, KUEUE_VERSION = c.KUEUE_GROUP, c.KUEUE_VERSION  # the API the operator watches
HIGH_CLASS = "rljob-test-kueue-high"


@pytest.fixture(scope="module")
def kueue_manager(kubeconfig, api_client, tmp_path_factory):
    """Kueue's manager, and the PriorityClass that outranks the jobs without one."""
    from rljob_testenv import kueue as testenv_kueue

    manager = testenv_kueue.start(kubeconfig, tmp_path_factory.mktemp("kueue"))
    scheduling = client.SchedulingV1Api(api_client)
    scheduling.create_priority_class(
        client.V1PriorityClass(metadata=client.V1ObjectMeta(name=HIGH_CLASS), value=1000)
    )
    try:
        yield manager
    finally:
        scheduling.delete_priority_class(HIGH_CLASS)
        manager.down()


@pytest.fixture
def kueue(api_client, kueue_manager):
    """A ResourceFlavor and a ClusterQueue of 2 GPUs that preempts lower priorities within
    itself, of this test alone, Active before the test starts.

    Not shared between tests: a test's gang keeps its quota after the test, until its pods
    end. The `nodes` fixture deletes their nodes before the namespace goes, so nothing acts
    as their kubelet any more, and the pods (held by Kueue's finalizer) stay Running until
    kube-controller-manager's pod GC fails them as orphans: it looks every 20 s and waits
    40 s after the node's deletion, a minute in all, longer on a loaded machine."""
    custom = client.CustomObjectsApi(api_client)
    queue = f"gpus-{uuid.uuid4().hex[:6]}"
    flavor = {"apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}", "kind": "ResourceFlavor",
              "metadata": {"name": queue}}  # fmt: skip
    cluster_queue = {
        "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
        "kind": "ClusterQueue",
        "metadata": {"name": queue},
        "spec": {
            "namespaceSelector": {},
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [{
                "coveredResources": ["nvidia.com/gpu"],
                "flavors": [{"name": queue, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 2}]}],
            }],
        },
    }  # fmt: skip
    custom.create_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "resourceflavors", flavor)
    custom.create_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", cluster_queue)

    def active():
        cq = custom.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", queue)
        conditions = {x["type"]: x for x in (cq.get("status") or {}).get("conditions") or []}
        return conditions.get("Active", {}).get("status") == "True"

    try:
        wait_for(active, 60, f"the ClusterQueue {queue} to be Active")
        yield queue
    finally:
        custom.delete_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", queue)
        custom.delete_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "resourceflavors", queue)


@pytest.fixture
def local_queue(api_client, namespace, kueue):
    body = {"apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}", "kind": "LocalQueue",
            "metadata": {"name": "team"}, "spec": {"clusterQueue": kueue}}  # fmt: skip
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        KUEUE_GROUP, KUEUE_VERSION, namespace, "localqueues", body
    )
    return "team"


def queued_job(name, nodes, queue, priority_class=None):
    body = job_body(nodes, priority_class, resources={"limits": {"nvidia.com/gpu": 1}})
    body["metadata"] = {"name": name, "labels": {c.KUEUE_QUEUE_LABEL: queue}}
    return body


def pods_of(core, namespace, name, attempt):
    selector = f"{c.LABEL_JOB}={name},{c.LABEL_ATTEMPT}={attempt}"
    return core.list_namespaced_pod(namespace, label_selector=selector).items


def running(core, namespace, name, attempt):
    pods = pods_of(core, namespace, name, attempt)
    return pods if len(pods) == 2 and all(p.status.phase == "Running" for p in pods) else None


def gated(pod):
    return c.KUEUE_ADMISSION_GATE in {g.name for g in pod.spec.scheduling_gates or []}


def test_kueue_admits_the_gang_preempts_it_and_rljob_resumes_it_when_readmitted(
    api_client, core, namespace, nodes, recovering_operator, volume, local_queue
):
    create = client.CustomObjectsApi(api_client).create_namespaced_custom_object
    create(c.GROUP, c.VERSION, namespace, c.PLURAL, queued_job("low", nodes, local_queue))
    first = wait_for(lambda: running(core, namespace, "low", 0), 60, "low's gang, admitted")
    assert all(p.metadata.labels[c.KUEUE_POD_GROUP_LABEL] == "low-a0" for p in first)
    assert get_job(api_client, namespace, "low")["status"]["resumeFrom"]["step"] == 20
    write_checkpoint(volume, 40)
    write_progress(volume, 43, step_seconds=0.5)

    create(c.GROUP, c.VERSION, namespace, c.PLURAL,
           queued_job("high", nodes, local_queue, HIGH_CLASS))  # fmt: skip

    wait_for(lambda: running(core, namespace, "high", 0), 60, "high's gang, admitted")
    stopped = [p for p in pods_of(core, namespace, "low", 0) if p.metadata.deletion_timestamp]
    assert len(stopped) == 2  # Kueue deleted both, with their grace period
    for pod in stopped:  # as their kubelet would once the trainers saved and exited
        finish(core, namespace, pod.metadata.name, 143)
    requeued = wait_for(lambda: pods_of(core, namespace, "low", 1), 60, "low's next gang")
    assert all(gated(p) for p in requeued)  # waiting for Kueue, with the quota taken

    def waiting_for_kueue():
        status = get_job(api_client, namespace, "low")["status"]
        queued = {x["type"]: x for x in status["conditions"]}.get("PodsUnschedulable", {})
        return status if queued.get("reason") == "WaitingForKueue" else None

    low = wait_for(waiting_for_kueue, 30, "low to say it waits for Kueue")
    assert (low["preemptions"], low["failures"], low["attempt"]) == (1, 0, 1)
    assert low["recoveries"][-1]["reason"] == "StoppedByKueue"
    queued = {x["type"]: x for x in low["conditions"]}["PodsUnschedulable"]
    assert queued["status"] == "True" and f"queue {local_queue}" in queued["message"]

    for pod in running(core, namespace, "high", 0):
        finish(core, namespace, pod.metadata.name, 0)

    wait_for(lambda: running(core, namespace, "low", 1), 60, "low's gang, admitted again")
    # The stopped attempt's Kueue workload is finished, not left in the queue to take quota.
    wait_for(lambda: not pods_of(core, namespace, "low", 0), 30, "low's stopped pods to go")
    low = get_job(api_client, namespace, "low")["status"]
    recovery = low["recoveries"][-1]
    assert (recovery["resumedFromStep"], recovery["lostSteps"]) == (40, 3)
    assert low["failures"] == 0
    assert get_job(api_client, namespace, "high")["status"]["phase"] == Phase.SUCCEEDED


def test_a_queue_that_does_not_exist_is_a_warning_in_kueues_words_until_it_is_created(
    api_client, core, namespace, nodes, kueue, recovering_operator
):
    """A typo in the queue label: Kueue never admits the gang, and says why on its Workload;
    the job says it too, as a Warning, instead of waiting in silence. No pod is placed and
    nothing is counted. Once the LocalQueue exists, the gang is admitted and runs."""
    create = client.CustomObjectsApi(api_client).create_namespaced_custom_object
    create(c.GROUP, c.VERSION, namespace, c.PLURAL, queued_job("typo", nodes, "tema"))

    def inadmissible():
        status = get_job(api_client, namespace, "typo").get("status") or {}
        stuck = {x["type"]: x for x in status.get("conditions") or []}.get("PodsUnschedulable", {})
        return stuck if stuck.get("reason") == "QueueInadmissible" else None

    stuck = wait_for(inadmissible, 60, "the job to say Kueue cannot admit it")
    assert stuck["status"] == "True" and "LocalQueue tema doesn't exist" in stuck["message"]

    def warnings():  # Events go out after the status write that sets the condition
        found = [e.type for e in core.list_namespaced_event(namespace).items
                 if e.reason == "QueueInadmissible"]  # fmt: skip
        return found or None

    assert wait_for(warnings, 15, "the Warning Event") == ["Warning"]
    pods = pods_of(core, namespace, "typo", 0)
    assert len(pods) == 2 and all(gated(p) and not p.spec.node_name for p in pods)
    status = get_job(api_client, namespace, "typo")["status"]
    assert (status["failures"], status["preemptions"], status["attempt"]) == (0, 0, 0)

    body = {"apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}", "kind": "LocalQueue",
            "metadata": {"name": "tema"}, "spec": {"clusterQueue": kueue}}  # fmt: skip
    create(KUEUE_GROUP, KUEUE_VERSION, namespace, "localqueues", body)

    wait_for(lambda: running(core, namespace, "typo", 0), 60, "the gang, admitted")
    wait_for(lambda: inadmissible() is None, 30, "the condition to clear")
    conditions = {
        x["type"]: x for x in get_job(api_client, namespace, "typo")["status"]["conditions"]
    }
    assert conditions["PodsUnschedulable"]["status"] == "False"
