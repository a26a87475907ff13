"""On kind: a verl-shaped Ray job of 2 pods on 2 kind workers, its worker preempted by the
scheduler, saves on notice through verl's own step end and resumes bit-exactly, its head kept
and restarted in place (spec.restartPolicy.inPlace; a Ray gang recreated whole is the node
agents' test, tests/e2e/test_ray_recovery.py).

The pods run the Ray driver image (rljob_testenv.images.ray_driver_image: the trainer image plus
Ray and verl at this environment's versions, and tests/e2e/ray_trainer.py, whose docstring says
what that driver fakes). rljob's Ray launcher starts the head and the worker with `ray start` in
their own pods and runs the driver on the head, which places one actor on each pod's Ray node.
A pod of higher priority then asks for all the GPUs of the worker's node: the scheduler
preempts the worker's pod (a graceful delete), rljob asks the gang to save, verl's V1 trainer
saves the step it finishes (the bridge), the head's container is restarted in its pod (it stays
the head) beside a new worker pod, and its driver runs with verl's resume switch. Judged by the job's status, the head's logs and every rank's final weights,
optimizer and RNG state, bitwise equal to an uninterrupted run of the same driver.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from chart_cluster import RENDEZVOUS_PORT
from e2e_steps import (
    MOUNT,
    REPORTS,
    create_job,
    one_pod_per_node,
    priority_classes_made,
    running_gang,
    status,
    wait_succeeded,
)
from kube_steps import wait_for
from kubernetes import client
from ray_steps import (
    EVERY,
    HEAD,
    RESUMED,
    SAVED_ON_NOTICE,
    WORKER,
    assert_same_state,
    checkpoint_subdir,
    final_state,
    last,
    ray_job,
    reported,
    run_reference,
)
from rljob_contract import RUN_ANNOTATION
from rljob_contract.in_place import parse_word
from rljob_operator.frameworks import resume_overrides
from rljob_testenv import binaries, images
from rljob_testenv.scenario import preemptor_pod

DRIVER = "/opt/rljob-e2e/ray_trainer.py"  # where the Ray driver image keeps it
GRACE_SECONDS = 45  # room for a step and the save on notice on a loaded machine
JOB = "verl-on-kind"


def kind_ray_job(name: str, priority_class: str) -> dict[str, Any]:
    """ray_steps' verl job (verl's default V1 trainer) as 2 pods of the Ray driver image, one
    per worker (required anti-affinity), each asking for one of its node's GPUs; Ray on its
    own ports, since every pod has its own network namespace."""
    body = ray_job(name, "verl", "unused", RENDEZVOUS_PORT, priority_class, grace=GRACE_SECONDS)
    spec = body["spec"]
    spec["image"] = images.ray_driver_image().tag
    spec["restartPolicy"]["inPlace"] = True
    spec["command"] = ["python", DRIVER, "verl"]
    spec["ray"] = {
        "joinTimeoutSeconds": 300,
        # A pod's /dev/shm is 64 MiB: a small object store, which this driver barely uses.
        "startArgs": ["--num-cpus=1", "--object-store-memory=100000000"],
        "headStartArgs": ["--include-dashboard=false"],
    }
    spec["resources"] = {
        "requests": {"cpu": "250m", "memory": "1Gi"},
        "limits": {"nvidia.com/gpu": 1},
    }
    template = spec["template"]["spec"]
    del template["nodeSelector"]
    template["affinity"] = one_pod_per_node(name)
    return body


@pytest.fixture
def priority_classes(cluster_api: client.ApiClient) -> Iterator[tuple[str, str]]:
    with priority_classes_made(cluster_api, "rljob-e2e") as names:
        yield names


@contextmanager
def following(stack, namespace: str, pod: str, into: Path) -> Iterator[None]:
    """`kubectl logs -f` of a pod into a file while the block runs and until the pod ends
    (rljob deletes a finished gang's pods, and their logs with them)."""
    kubectl = binaries.require("kubectl")
    cmd = [str(kubectl), "--kubeconfig", str(stack.kubeconfig), "logs", "-f", "-n", namespace, pod]
    with into.open("wb") as out:
        follower = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield
        follower.wait(timeout=120)
    finally:
        follower.kill()


def argv(pod: client.V1Pod) -> list[str]:
    container = pod.spec.containers[0]
    return [*(container.command or []), *(container.args or [])]


@pytest.mark.timeout(1200)
def test_a_verl_shaped_ray_job_preempted_by_the_scheduler_resumes_bit_exactly(
    stack, cluster_api, cluster_core, jobs_namespace, chart_operator, shared_claim,
    priority_classes, rng, tmp_path,
):  # fmt: skip
    low, high = priority_classes
    want = final_state("verl", run_reference("verl"))
    checkpoints = shared_claim / JOB / checkpoint_subdir("verl")
    create_job(cluster_api, jobs_namespace, kind_ray_job(JOB, low))
    gang = running_gang(cluster_core, jobs_namespace, 0, 2, timeout=300)
    assert len({pod.spec.node_name for pod in gang}) == 2, "one pod per worker"
    # Past the first periodic save, with steps left after it.
    at = rng.randint(EVERY + 1, 7)
    with following(stack, jobs_namespace, gang[HEAD].metadata.name, tmp_path / "head-0.log"):
        # The head turns Ready (the kubelet's probe) once the bridge reports a step of the
        # attempt from the framework's loop: the status says the driver trains.
        wait_for(lambda: (status(cluster_api, jobs_namespace, JOB).get("ray") or {})
                 .get("driver") == "Training", 300, "status.ray.driver to be Training")  # fmt: skip
        assert reported(checkpoints)[0] == 0, "Ready before a step of the attempt"
        wait_for(lambda: reported(checkpoints) >= (0, at), 300, f"the loop's step {at}")
        victim = gang[WORKER]
        print(f"preempting {victim.metadata.name} on {victim.spec.node_name} after step {at}")
        node = cluster_core.read_node(victim.spec.node_name)
        gpus = int(node.status.allocatable["nvidia.com/gpu"])  # all of them: no room beside
        urgent = preemptor_pod("urgent", victim.spec.node_name, high, gpus, stack.urgent_image)
        cluster_core.create_namespaced_pod(jobs_namespace, urgent)
        # The preemptor runs once the victim is gone; the new gang needs its node back (one
        # pod per worker), as when a spot node's capacity returns.
        wait_for(lambda: cluster_core.read_namespaced_pod("urgent", jobs_namespace).status.phase
                 == "Running", 240, "the preemptor to run")  # fmt: skip
        cluster_core.delete_namespaced_pod("urgent", jobs_namespace, grace_period_seconds=0)
    head_after, worker_after = running_gang(cluster_core, jobs_namespace, 1, 2, timeout=300)
    head = gang[HEAD]
    assert (head_after.metadata.uid, head_after.spec.node_name) == (
        head.metadata.uid, head.spec.node_name), "the head stays, restarted in its pod"  # fmt: skip
    assert head_after.status.container_statuses[0].restart_count == 1
    with following(stack, jobs_namespace, head_after.metadata.name, tmp_path / "head-1.log"):
        job = wait_succeeded(cluster_api, jobs_namespace, JOB, timeout=600)

    st = job["status"]
    assert (st["preemptions"], st["failures"], st["attempt"]) == (1, 0, 1), st
    assert st["conditions"][-1]["reason"] == "DriverSucceeded", st["conditions"][-1]
    (recovery,) = st["recoveries"]
    assert (recovery["kind"], recovery["reason"]) == ("Disruption", "PreemptionByScheduler")
    assert recovery["pod"] == victim.metadata.name, recovery
    before = (tmp_path / "head-0.log").read_text(errors="replace")
    assert "ray_trainer: 2 Ray nodes" in before
    assert '"node_rank": "0"' in before and '"node_rank": "1"' in before  # one actor a pod
    # The head says the framework saved on notice, at the step it had reached: that save,
    # not the periodic one before it, is the resume point.
    newest = last(SAVED_ON_NOTICE, before)
    assert newest >= at, before[-3000:]
    assert recovery["resumedFromStep"] == recovery["lastFinishedStep"] == newest, recovery
    assert recovery["lostSteps"] == 0, recovery
    folder = f"{MOUNT}/{JOB}/{checkpoint_subdir('verl')}/global_step_{newest}"
    after = (tmp_path / "head-1.log").read_text(errors="replace")
    assert RESUMED.search(after).groups() == (folder, str(newest)), after[-3000:]
    switch = resume_overrides("verl", folder)
    run = parse_word(head_after.metadata.annotations[RUN_ANNOTATION])
    assert list(run.args[-len(switch) :]) == switch  # the framework's switch, on the driver
    assert not set(switch) & set(argv(worker_after))  # and on the driver only
    assert recovery["restartedInPlace"] == 1, recovery
    assert_same_state(final_state("verl", checkpoints), want)
    REPORTS.append(
        f"kind, verl-shaped Ray job, 2 pods on 2 workers, the worker preempted by the "
        f"scheduler after step {at}: saved step {newest} on notice, the head restarted in "
        f"place (same uid and node), resumed from it through "
        f"{switch[0].split('=')[0]}, lost 0 steps; every rank's final state equal to an "
        "uninterrupted run"
    )
