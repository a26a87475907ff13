"""The four signals the operator lives on, shown on the real control plane.

kwok plays the kubelet; the scheduler, the controller-manager (PodGC) and the API
server's eviction subresource are the real ones.
"""

from __future__ import annotations

import uuid

from kube_steps import condition, gpu_pod, read_pod, release, running, wait_for
from kubernetes import client
from rljob_testenv import cluster


def test_gpu_pod_is_scheduled_onto_a_kwok_gpu_node_and_runs(core, namespace):
    core.create_namespaced_pod(namespace, gpu_pod("gpu-user", gpus=2))

    pod = wait_for(lambda: running(core, namespace, "gpu-user"), what="the GPU pod to run")

    node = core.read_node(pod.spec.node_name)
    assert node.metadata.labels["nvidia.com/gpu.present"] == "true"
    assert int(node.status.allocatable["nvidia.com/gpu"]) >= 2


def test_scheduler_preempts_low_priority_pod_with_disruption_target(api_client, core, namespace):
    scheduling = client.SchedulingV1Api(api_client)
    suffix = uuid.uuid4().hex[:6]
    low, high = f"low-{suffix}", f"high-{suffix}"
    for name, value in ((low, 100), (high, 1000)):
        scheduling.create_priority_class(
            client.V1PriorityClass(metadata=client.V1ObjectMeta(name=name), value=value)
        )
    try:
        node = "gpu-node-0"
        core.create_namespaced_pod(
            namespace, gpu_pod("victim", gpus=8, node=node, priority_class=low, hold=True)
        )
        wait_for(lambda: running(core, namespace, "victim"), what="the victim to run")

        core.create_namespaced_pod(
            namespace, gpu_pod("preemptor", gpus=8, node=node, priority_class=high)
        )

        target = wait_for(
            lambda: condition(read_pod(core, namespace, "victim"), "DisruptionTarget"),
            what="the victim's DisruptionTarget condition",
        )
        assert target.status == "True"
        assert target.reason == "PreemptionByScheduler"
        # The scheduler writes the condition, then deletes the pod in a request of its own.
        wait_for(
            lambda: read_pod(core, namespace, "victim").metadata.deletion_timestamp,
            what="the scheduler to delete the victim",
        )

        release(core, namespace, "victim")
        preemptor = wait_for(
            lambda: running(core, namespace, "preemptor"), what="the preemptor to run"
        )
        assert preemptor.spec.node_name == node
    finally:
        release(core, namespace, "victim")
        for name in (low, high):
            scheduling.delete_priority_class(name)


def test_eviction_api_marks_pod_with_disruption_target(core, namespace):
    core.create_namespaced_pod(namespace, gpu_pod("evictee", hold=True))
    wait_for(lambda: running(core, namespace, "evictee"), what="the pod to run")

    core.create_namespaced_pod_eviction(
        "evictee",
        namespace,
        client.V1Eviction(metadata=client.V1ObjectMeta(name="evictee", namespace=namespace)),
    )

    try:
        target = wait_for(
            lambda: condition(read_pod(core, namespace, "evictee"), "DisruptionTarget"),
            what="the evicted pod's DisruptionTarget condition",
        )
        assert target.reason == "EvictionByEvictionAPI"
        assert read_pod(core, namespace, "evictee").metadata.deletion_timestamp is not None
    finally:
        release(core, namespace, "evictee")
    wait_for(lambda: read_pod(core, namespace, "evictee") is None, what="the pod to go")


def test_deleting_a_node_makes_podgc_remove_its_pods(cluster_name, core, namespace):
    node = f"spot-{uuid.uuid4().hex[:6]}"
    cluster.add_gpu_nodes(cluster_name, 1, prefix=node)
    node = f"{node}-0"
    core.create_namespaced_pod(namespace, gpu_pod("on-spot", node=node, hold=True))
    wait_for(lambda: running(core, namespace, "on-spot"), what="the pod on the spot node to run")

    core.delete_node(node)

    try:
        # PodGC waits out a 40 s quarantine for orphaned pods, then checks every 20 s.
        target = wait_for(
            lambda: condition(read_pod(core, namespace, "on-spot"), "DisruptionTarget"),
            timeout=120,
            what="PodGC to mark the orphaned pod",
        )
        assert target.reason == "DeletionByPodGC"
    finally:
        release(core, namespace, "on-spot")
    wait_for(lambda: read_pod(core, namespace, "on-spot") is None, what="the orphaned pod to go")
