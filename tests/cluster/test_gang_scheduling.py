"""Two jobs, GPUs for one gang: plain pods deadlock, a PodGroup runs one job whole.

The control plane serves the Workload API with its gang scheduling (feature gates
GenericWorkload and GangScheduling in testenv), and the real kube-scheduler places the
pods on two kwok nodes of one GPU each. Job "early" is created while one node is cordoned,
so one of its pods can be placed; job "urgent" has a higher priority that never preempts,
so once the node is uncordoned the scheduler serves it first. Without gang scheduling, the
second node is kept for "urgent" instead (a taint only it tolerates), so that each job gets
one node whatever order the scheduler tries their pods in.
"""

from __future__ import annotations

import uuid

import pytest
from kube_steps import condition, stays, wait_for
from kubernetes import client
from rljob_operator import constants as c
from rljob_operator.api.reasons import Phase
from rljob_testenv import cluster
from test_job_lifecycle import create_job, finish, get_job
from test_recovery import job_body

URGENT_CLASS = "rljob-test-urgent-no-preempt"
URGENT_ONLY = "rljob.io/test-urgent-only"


@pytest.fixture
def two_gpus(cluster_name, core):
    """Two nodes of one GPU each, of this test alone; the second one cordoned."""
    names = cluster.add_gpu_nodes(cluster_name, 2, cluster.NodeShape(gpus=1),
                                  prefix=f"g{uuid.uuid4().hex[:6]}")  # fmt: skip
    core.patch_node(names[1], {"spec": {"unschedulable": True}})
    yield names
    for name in names:
        cluster.kubectl(cluster_name, "delete", "node", name, "--ignore-not-found", "--wait=false")


@pytest.fixture
def urgent_class(api_client):
    scheduling = client.SchedulingV1Api(api_client)
    scheduling.create_priority_class(client.V1PriorityClass(
        metadata=client.V1ObjectMeta(name=URGENT_CLASS), value=1000, preemption_policy="Never"))  # fmt: skip
    yield URGENT_CLASS
    scheduling.delete_priority_class(URGENT_CLASS)


def job(name, nodes, gang, priority_class=None):
    """The recovery tests' two-pod job on `nodes`, one GPU a pod, nothing to resume from."""
    body = job_body(nodes, priority_class, resources={"limits": {"nvidia.com/gpu": 1}},
                    checkpoint={"resume": "never"}, gangScheduling=gang)  # fmt: skip
    body["metadata"] = {"name": name}
    return body


def bound(core, namespace, name):
    """The job's pods that the scheduler has put on a node."""
    pods = core.list_namespaced_pod(namespace, label_selector=f"{c.LABEL_JOB}={name}").items
    return [p for p in pods if p.spec.node_name]


def tried(pod):
    """Whether the scheduler has tried the pod and found no place for it."""
    scheduled = condition(pod, "PodScheduled")
    return bool(scheduled) and (scheduled.status, scheduled.reason) == ("False", "Unschedulable")


def test_without_gang_scheduling_two_jobs_each_hold_half_a_gang_and_wait_forever(
    api_client, core, namespace, operator, two_gpus
):
    """Why the feature exists: pods placed one by one."""
    early_node, urgent_node = two_gpus
    kept = {"key": URGENT_ONLY, "effect": "NoSchedule"}
    core.patch_node(urgent_node, {"spec": {"unschedulable": False, "taints": [kept]}})
    create_job(api_client, namespace, job("early", two_gpus, "Off"))
    wait_for(lambda: bound(core, namespace, "early"), 30, "a pod of early to be placed")
    urgent = job("urgent", two_gpus, "Off")
    urgent["spec"]["template"]["spec"]["tolerations"] = [{**kept, "operator": "Exists"}]
    create_job(api_client, namespace, urgent)

    wait_for(lambda: len(bound(core, namespace, "urgent")) == 1, 30, "urgent to get the other node")
    # And it stays so: neither job can run, neither gives its GPU back.
    stays(lambda: [[p.spec.node_name for p in bound(core, namespace, n)] for n in ("early", "urgent")]
          == [[early_node], [urgent_node]], 10, "one pod of each job on its own node")  # fmt: skip
    for name in ("early", "urgent"):
        status = get_job(api_client, namespace, name)["status"]
        assert status["phase"] == Phase.PENDING and "podGroup" not in status
        unschedulable = {x["type"]: x for x in status["conditions"]}["PodsUnschedulable"]
        assert unschedulable["status"] == "True" and "nvidia.com/gpu" in unschedulable["message"]


def test_with_gang_scheduling_one_job_runs_whole_and_the_other_waits_with_no_pod_placed(
    api_client, core, namespace, operator, two_gpus, urgent_class
):
    create_job(api_client, namespace, job("early", two_gpus, "Auto"))
    # Its gang does not fit the one open node: nothing of it is placed.
    wait_for(lambda: get_job(api_client, namespace, "early").get("status", {}).get("podGroup"),
             30, "early's PodGroup")  # fmt: skip
    create_job(api_client, namespace, job("urgent", two_gpus, "Auto", urgent_class))
    wait_for(lambda: len(core.list_namespaced_pod(namespace).items) == 4, 30, "both gangs")
    wait_for(lambda: all(tried(p) for p in core.list_namespaced_pod(namespace).items), 30,
             "the scheduler to try both gangs against the one open node")  # fmt: skip
    core.patch_node(two_gpus[1], {"spec": {"unschedulable": False}})

    wait_for(lambda: len(bound(core, namespace, "urgent")) == 2, 60, "urgent's gang to be placed")
    stays(lambda: bound(core, namespace, "early") == [], 5, "early to have no pod placed")
    wait_for(lambda: get_job(api_client, namespace, "urgent")["status"].get("phase") == Phase.RUNNING,
             30, "urgent to run")  # fmt: skip
    groups = client.CustomObjectsApi(api_client).list_namespaced_custom_object(
        c.SCHEDULING_GROUP, c.SCHEDULING_VERSION, namespace, "podgroups"
    )["items"]
    assert {g["metadata"]["name"]: g["spec"]["schedulingPolicy"] for g in groups} == {
        "early-a0": {"gang": {"minCount": 2}}, "urgent-a0": {"gang": {"minCount": 2}},
    }  # fmt: skip

    for pod in bound(core, namespace, "urgent"):
        finish(core, namespace, pod.metadata.name, 0)

    wait_for(
        lambda: len(bound(core, namespace, "early")) == 2, 60, "early's gang, once urgent ended"
    )
    wait_for(lambda: get_job(api_client, namespace, "early")["status"].get("phase") == Phase.RUNNING,
             30, "early to run")  # fmt: skip
    assert get_job(api_client, namespace, "urgent")["status"]["phase"] == Phase.SUCCEEDED
