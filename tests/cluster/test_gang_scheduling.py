"""Two jobs, GPUs for one gang: plain pods deadlock, a PodGroup runs one job whole.

The control plane serves the Workload API with its gang scheduling (feature gates
GenericWorkload and GangScheduling in testenv), and the real kube-scheduler places the
pods on two kwok nodes of one GPU each. Without gang scheduling, job "early" gets one
node and job "urgent" the other (a taint only "urgent" tolerates keeps it so, whatever
order the scheduler tries their pods in). With it, both gangs are tried against one
open node first, so that neither fits, and the second node is then opened to both.
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


def job(name, nodes, gang):
    """The recovery tests' two-pod job on `nodes`, one GPU a pod, nothing to resume from."""
    body = job_body(nodes, resources={"limits": {"nvidia.com/gpu": 1}},
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


def placed_whole_and_none(core, namespace):
    """The names of the job with its whole gang placed and of the job with none, once so."""
    counts = {name: len(bound(core, namespace, name)) for name in ("early", "late")}
    if sorted(counts.values()) != [0, 2]:
        return None
    return sorted(counts, key=counts.get, reverse=True)


def test_with_gang_scheduling_one_job_runs_whole_and_the_other_waits_with_no_pod_placed(
    api_client, core, namespace, operator, two_gpus
):
    create_job(api_client, namespace, job("early", two_gpus, "Auto"))
    # Its gang does not fit the one open node: nothing of it is placed.
    wait_for(lambda: get_job(api_client, namespace, "early").get("status", {}).get("podGroup"),
             30, "early's PodGroup")  # fmt: skip
    create_job(api_client, namespace, job("late", two_gpus, "Auto"))
    wait_for(lambda: len(core.list_namespaced_pod(namespace).items) == 4, 30, "both gangs")
    wait_for(lambda: all(tried(p) for p in core.list_namespaced_pod(namespace).items), 30,
             "the scheduler to try both gangs against the one open node")  # fmt: skip
    assert bound(core, namespace, "early") == [] and bound(core, namespace, "late") == []
    core.patch_node(two_gpus[1], {"spec": {"unschedulable": False}})

    # Which gang the scheduler takes first depends on its queue's backoff, not on the jobs.
    first, second = wait_for(lambda: placed_whole_and_none(core, namespace), 60,
                             "one gang placed whole and none of the other")  # fmt: skip
    stays(lambda: bound(core, namespace, second) == [], 5, f"{second} to have no pod placed")
    wait_for(lambda: get_job(api_client, namespace, first)["status"].get("phase") == Phase.RUNNING,
             30, f"{first} to run")  # fmt: skip
    groups = client.CustomObjectsApi(api_client).list_namespaced_custom_object(
        c.SCHEDULING_GROUP, c.SCHEDULING_VERSION, namespace, "podgroups"
    )["items"]
    assert {g["metadata"]["name"]: g["spec"]["schedulingPolicy"] for g in groups} == {
        "early-a0": {"gang": {"minCount": 2}}, "late-a0": {"gang": {"minCount": 2}},
    }  # fmt: skip

    for pod in bound(core, namespace, first):
        finish(core, namespace, pod.metadata.name, 0)

    wait_for(lambda: len(bound(core, namespace, second)) == 2, 60,
             f"{second}'s gang, once {first} ended")  # fmt: skip
    wait_for(lambda: get_job(api_client, namespace, second)["status"].get("phase") == Phase.RUNNING,
             30, f"{second} to run")  # fmt: skip
    assert get_job(api_client, namespace, first)["status"]["phase"] == Phase.SUCCEEDED
