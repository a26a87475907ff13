"""On kind's nodes: the chart-installed operator, the trainer image in containers, real kubelets
with the test device plugin's GPUs (rljob_testenv.stacks.KindStack).

What these show that kwok and the node agent cannot: the kubelet's SIGTERM and grace
period on an eviction or a deletion (a preemption by the scheduler is the same deletion; its
classification is tests/e2e/test_rljob_recovery.py's, with the real scheduler, and a drain is
test_on_kind.py's), torchrun as a container's PID 1 waiting for a save
longer than its default 30 s, the inspector pod reading the volume on a node, image pull
and start errors as the kubelet reports them, the OOM killer, and a node that dies.
Each job is checked the way a user would: its status, conditions, Events, and for the
training runs, weights bitwise equal to an uninterrupted run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from e2e_steps import (
    CLAIM,
    MAX_STEPS,
    REPORTS,
    SAVE_INTERVAL,
    assert_same_run_as_reference,
    create_job,
    evict,
    experiment_path,
    get_job,
    rljob_job,
    running_gang,
    status,
    wait_step,
    wait_succeeded,
)
from kube_steps import wait_for
from kubernetes import client
from rljob_contract.steps import parse_step
from rljob_operator import constants as c
from rljob_operator.api.reasons import Phase
from rljob_operator.api.timestamps import unix_seconds
from rljob_testenv.ports import free_port
from rljob_testenv.scenario import read_progress, trainer_pods
from rljob_trainer.faults import (
    ENV_TEST_SLOW_ROLLOUT_FROM_STEP,
    ENV_TEST_SLOW_ROLLOUT_TOKEN,
    ENV_TEST_SLOW_STOP_SAVE,
)
from rljob_trainer.metrics import read_metrics

TRAINER_IMAGE = "localhost/rljob-trainer:cpu"
OPERATOR_IMAGE = "localhost/rljob-operator:dev"
IMAGE_CONFIG = "/app/configs/grpo_tiny.yaml"  # where the trainer image keeps its configs


def node_job(name: str, nnodes: int, nproc: int, **overrides: Any) -> dict[str, Any]:
    """The e2e GRPO job, in the trainer image, on any of the workers."""
    body = rljob_job(name, nnodes, nproc, free_port(), pool="unused", max_failures=1)
    spec = body["spec"]
    spec["image"] = TRAINER_IMAGE
    spec["args"] = [IMAGE_CONFIG if a.endswith("grpo_tiny.yaml") else a for a in spec["args"]]
    del spec["template"]["spec"]["nodeSelector"]  # the node agents' pool
    for key, value in overrides.items():
        if key == "template_spec":
            spec["template"]["spec"].update(value)
        else:
            spec[key] = value
    return body


def custom_job(name: str, command: list[str], image: str = OPERATOR_IMAGE, **spec: Any):
    """A one-node job of the `custom` framework: its command, which the operator runs under
    torchrun (`torchrun --no-python <command>`), as for every job of the torchrun launcher."""
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": name},
        "spec": {
            "framework": "custom",
            "launcher": "torchrun",
            "image": image,
            "nnodes": 1,
            "command": command,
            "restartPolicy": {"maxFailures": 0, "failureBackoffSeconds": 0},
            "template": {"spec": {"terminationGracePeriodSeconds": 5}},
            **spec,
        },
    }


def events_of(core: client.CoreV1Api, namespace: str, name: str) -> list[client.CoreV1Event]:
    selector = f"involvedObject.name={name},involvedObject.kind={c.KIND}"
    return core.list_namespaced_event(namespace, field_selector=selector).items


def pull_attempts(core: client.CoreV1Api, namespace: str, name: str) -> int:
    """How often the kubelet has tried to pull the image of the job's pods: their Pulling
    Events, each counting its repeats."""
    pods = core.list_namespaced_pod(namespace, label_selector=f"{c.LABEL_JOB}={name}").items
    return sum(
        event.count or 1
        for pod in pods
        for event in core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={pod.metadata.name},reason=Pulling"
        ).items
    )


def condition(job: dict[str, Any], cond_type: str) -> dict[str, Any] | None:
    return next(
        (x for x in (job.get("status") or {}).get("conditions", []) if x["type"] == cond_type),
        None,
    )


def delete_job(cluster_api, namespace: str, name: str) -> None:
    client.CustomObjectsApi(cluster_api).delete_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, name
    )
    core = client.CoreV1Api(cluster_api)
    wait_for(
        lambda: (
            not core.list_namespaced_pod(namespace, label_selector=f"{c.LABEL_JOB}={name}").items
            or None
        ),
        120,
        f"the pods of {name} to go",
    )


def report_recovery(title: str, job: dict[str, Any], checkpoints: Path) -> None:
    """Detection -> new gang created -> Running -> first training step, for the session summary."""
    recovery = job["status"]["recoveries"][0]
    detected = unix_seconds(recovery["detectedAt"])
    steps = [m for m in read_metrics(checkpoints.parent / "metrics.jsonl")
             if m.get("attempt") == recovery["attempt"]]  # fmt: skip
    marks = [
        ("gang created", unix_seconds(recovery["gangCreatedAt"])),
        ("Running", unix_seconds(recovery["firstRunningAt"])),
        ("first step", steps[0]["time"] if steps else float("nan")),
    ]
    line = ", ".join(f"{what} +{at - detected:.1f}s" for what, at in marks)
    REPORTS.append(f"kind's nodes, {title}: {recovery['reason']}, resumed from step "
                   f"{recovery['resumedFromStep']}; after detection: {line}")  # fmt: skip


# --------------------------------------------------------------------------- the operator


def test_the_chart_runs_the_operator_image_restricted_with_metrics_and_health(
    stack, cluster_core, chart_operator
):
    pod = chart_operator
    assert pod.spec.containers[0].image == OPERATOR_IMAGE
    assert pod.spec.service_account_name == "rljob-operator"
    assert pod.spec.node_name in stack.nodes
    assert pod.spec.security_context.run_as_non_root is True
    # Through the API server's proxy, as `kubectl get --raw` reaches a pod from anywhere.
    name, namespace = pod.metadata.name, pod.metadata.namespace
    metrics = cluster_core.connect_get_namespaced_pod_proxy_with_path(
        f"{name}:8080", namespace, "metrics"
    )
    assert "rljob_" in metrics
    health = cluster_core.connect_get_namespaced_pod_proxy_with_path_with_http_info(
        f"{name}:8081", namespace, "healthz"
    )
    assert health[1] == 200


# --------------------------------------------------------------------------- disruptions


def test_eviction_with_a_save_slower_than_torchruns_default_30s_still_resumes_from_it(
    cluster_api, cluster_core, jobs_namespace, chart_operator, shared_claim, reference, rng
):
    """torchrun is the container's PID 1; on SIGTERM it gives its workers
    TORCH_ELASTIC_SHUTDOWN_TIMEOUT (from the grace period), not 30 s: a 40 s save ends."""
    job_name = "slow-save"
    checkpoints = shared_claim / experiment_path(job_name) / "checkpoints"
    at = rng.choice([s for s in range(5, 12) if s % SAVE_INTERVAL])
    body = node_job(job_name, 1, 2, template_spec={"terminationGracePeriodSeconds": 90},
                    env=[{"name": ENV_TEST_SLOW_STOP_SAVE, "value": "40"}])  # fmt: skip
    create_job(cluster_api, jobs_namespace, body)
    gang = running_gang(cluster_core, jobs_namespace, 0, 1, timeout=240)
    wait_step(checkpoints, at, attempt=0, timeout=300)
    evicted_at = time.monotonic()
    evict(cluster_core, jobs_namespace, gang[0].metadata.name)
    job = wait_succeeded(cluster_api, jobs_namespace, job_name, timeout=600)

    recovery = job["status"]["recoveries"][0]
    assert recovery["reason"] == "EvictionByEvictionAPI", recovery
    assert recovery["resumedFromStep"] >= at, recovery  # the slow save was sealed, and used
    assert time.monotonic() - evicted_at > 40  # the save really took its 40 s
    assert_same_run_as_reference(checkpoints, reference)
    report_recovery(f"1 node x 2 processes evicted after step {at}, a 40 s save", job, checkpoints)
    delete_job(cluster_api, jobs_namespace, job_name)


# A slow step and a deletion that gives less than the pods' grace period. Each sampled token of
# the step after the notice takes SLOW_TOKEN seconds (3 per step), and a rank's vote is read one
# token after it is cast: told the deletion's deadline, the gang agrees to save the last
# finished step at 2 tokens, in time; believing its own grace period, it finishes the step,
# at 3 tokens, after the deleted pod was killed.
SLOW_TOKEN = 15
SHORT_GRACE = 40
OWN_GRACE = 120


def test_a_deletion_shorter_than_the_grace_period_still_saves_the_last_finished_step(
    cluster_api, cluster_core, jobs_namespace, chart_operator, shared_claim, rng
):
    """`kubectl delete --grace-period=40` of one pod of a 2-node gang whose pods have 120 s:
    the deleted pod's trainer counts 120 s from its SIGTERM. The operator tells its peer in
    the checkpoint request, which the peer's kubelet projects into the pod (a pod being
    deleted gets no more volume updates, so the peer is deleted only after it), and the gang
    saves the last finished step within the 40 s: it resumes from it, with no step lost."""
    job_name = "short-grace"
    checkpoints = shared_claim / experiment_path(job_name) / "checkpoints"
    at = rng.choice([s for s in range(5, 8) if s % SAVE_INTERVAL])  # not an interval save
    body = node_job(job_name, 2, 1, template_spec={"terminationGracePeriodSeconds": OWN_GRACE},
                    env=[{"name": ENV_TEST_SLOW_ROLLOUT_TOKEN, "value": str(SLOW_TOKEN)},
                         {"name": ENV_TEST_SLOW_ROLLOUT_FROM_STEP, "value": str(at + 1)}])  # fmt: skip
    body["spec"]["args"] = [a.replace(f"max_steps={MAX_STEPS}", f"max_steps={at + 1}")
                            for a in body["spec"]["args"]]  # fmt: skip
    create_job(cluster_api, jobs_namespace, body)
    gang = running_gang(cluster_core, jobs_namespace, 0, 2, timeout=240)
    wait_step(checkpoints, at, attempt=0, timeout=300)
    cluster_core.delete_namespaced_pod(gang[1].metadata.name, jobs_namespace,
                                    grace_period_seconds=SHORT_GRACE)  # fmt: skip
    # The next gang needs no slow step: a merge patch drops the test's variables.
    client.CustomObjectsApi(cluster_api).patch_namespaced_custom_object(
        c.GROUP, c.VERSION, jobs_namespace, c.PLURAL, job_name, {"spec": {"env": None}})  # fmt: skip
    job = wait_succeeded(cluster_api, jobs_namespace, job_name, timeout=600)

    st = job["status"]
    recovery = st["recoveries"][0]
    assert (recovery["resumedFromStep"], recovery["lostSteps"]) == (at, 0), recovery
    assert (st["preemptions"], st["failures"]) == (1, 0), st
    said = f"its deletion gave it {SHORT_GRACE} s of its {OWN_GRACE} s grace period"
    assert st["lastEnd"]["message"].endswith(said), st["lastEnd"]
    asked = [e.message for e in events_of(cluster_core, jobs_namespace, job_name)
             if e.reason == "CheckpointRequested"]  # fmt: skip
    assert len(asked) == 1 and asked[0].endswith(said), asked
    assert sorted(parse_step(d.name) for d in checkpoints.glob("global_step_*")) == [
        SAVE_INTERVAL,
        at,
        at + 1,
    ]
    delete_job(cluster_api, jobs_namespace, job_name)


# --------------------------------------------------------------------------- failures


def test_an_image_that_does_not_exist_is_a_condition_and_an_event_not_a_retry_loop(
    cluster_api, cluster_core, jobs_namespace, chart_operator
):
    name = "no-image"
    create_job(cluster_api, jobs_namespace,
               custom_job(name, ["python", "-c", "pass"], image="localhost/rljob-nope:1"))  # fmt: skip
    stuck = wait_for(
        lambda: (lambda cond: cond if cond and cond["status"] == "True" else None)(
            condition(get_job(cluster_api, jobs_namespace, name), "ContainersNotStarting")
        ),
        120,
        "the ContainersNotStarting condition",
    )
    assert stuck["reason"] in {"ErrImagePull", "ImagePullBackOff"}, stuck
    assert "localhost/rljob-nope:1" in stuck["message"]

    # The kubelet retries the pull; the job must not count that as failures, at any time.
    def retried_while_pending() -> bool:
        status = get_job(cluster_api, jobs_namespace, name)["status"]
        counted = (status["phase"], status["failures"], status["attempt"])
        assert counted == (Phase.PENDING, 0, 0), status
        return pull_attempts(cluster_core, jobs_namespace, name) >= 2

    wait_for(retried_while_pending, 120, "the kubelet to retry the pull")
    job = get_job(cluster_api, jobs_namespace, name)
    assert job["status"]["phase"] == Phase.PENDING and job["status"]["failures"] == 0
    assert job["status"]["attempt"] == 0
    warnings = [e for e in events_of(cluster_core, jobs_namespace, name) if e.type == "Warning"]
    assert {e.reason for e in warnings} & {"ErrImagePull", "ImagePullBackOff"}, warnings
    delete_job(cluster_api, jobs_namespace, name)


def test_a_command_the_image_does_not_have_is_a_clear_failure(
    cluster_api, cluster_core, jobs_namespace, chart_operator
):
    """The operator image has no torchrun: the container cannot start (runc's StartError,
    exit 128), and the job says which executable is missing."""
    name = "no-command"
    create_job(cluster_api, jobs_namespace, custom_job(name, ["python", "-c", "pass"]))
    job = wait_failed(cluster_api, jobs_namespace, name)
    failed = condition(job, "Failed")
    assert "StartError" in failed["message"], failed
    assert 'exec: "torchrun": executable file not found' in failed["message"], failed
    assert job["status"]["failures"] == 1 and job["status"]["preemptions"] == 0
    delete_job(cluster_api, jobs_namespace, name)


def test_a_container_killed_by_the_oom_killer_is_a_failure_not_a_disruption(
    cluster_api, cluster_core, jobs_namespace, chart_operator
):
    name = "oom"
    hog = ["python", "-c", "b = []\nwhile True: b.append(bytearray(8 << 20))"]
    create_job(cluster_api, jobs_namespace,
               custom_job(name, hog, image=TRAINER_IMAGE, resources={"limits": {"memory": "256Mi"}}))  # fmt: skip
    job = wait_failed(cluster_api, jobs_namespace, name)
    failed = condition(job, "Failed")
    assert "OOMKilled" in failed["reason"] + failed["message"], failed
    assert job["status"]["preemptions"] == 0
    delete_job(cluster_api, jobs_namespace, name)


# What the trainer container finds, written to the checkpoint volume for the test to read.
PROBE = """
import json, os, time
shm = os.statvfs("/dev/shm")
found = {
    "token": os.environ.get("HF_TOKEN"),
    "shm_bytes": shm.f_blocks * shm.f_frsize,
    "model": open("/models/ready").read(),
}
os.makedirs(os.environ["RLJOB_CHECKPOINT_DIR"], exist_ok=True)
with open(os.path.join(os.environ["RLJOB_CHECKPOINT_DIR"], "probe.json"), "w") as out:
    json.dump(found, out)
time.sleep(5)  # not a test wait: the pod's program stays up a moment for its sidecars
"""
SLEEPER = ["python", "-c", "import time; time.sleep(3600)"]


def test_a_full_pod_template_runs_with_its_sidecars_init_container_shm_host_network_and_secret(
    cluster_api, cluster_core, jobs_namespace, chart_operator, shared_claim
):
    """The template users bring to a GPU cluster: an init container that fetches the
    model, a native sidecar and a plain second container, a memory-backed /dev/shm, the
    node's network, and a token from a Secret. The trainer's exit 0 ends the job although
    the plain sidecar still runs."""
    name = "full-template"
    cluster_core.create_namespaced_secret(jobs_namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="hf"), string_data={"token": "s3cret"}))  # fmt: skip
    folder = f"{name}/checkpoints"
    body = custom_job(name, ["sh", "-c", 'exec python -c "$PROBE"'], image=TRAINER_IMAGE,
                      rendezvousPort=free_port(), env=[{"name": "PROBE", "value": PROBE}],
                      checkpoint={"volume": {"persistentVolumeClaim": {"claimName": CLAIM}},
                                  "directory": folder, "resume": "never"})  # fmt: skip
    models = {"name": "models", "mountPath": "/models"}
    body["spec"]["template"]["spec"].update(
        hostNetwork=True,
        dnsPolicy="ClusterFirstWithHostNet",
        initContainers=[
            {"name": "fetch-model", "image": TRAINER_IMAGE, "imagePullPolicy": "Never",
             "command": ["python", "-c", "open('/models/ready', 'w').write('fetched')"],
             "volumeMounts": [models]},
            {"name": "dashboard-agent", "image": TRAINER_IMAGE, "imagePullPolicy": "Never",
             "restartPolicy": "Always", "command": SLEEPER},
        ],
        containers=[
            {"name": "log-shipper", "image": TRAINER_IMAGE, "imagePullPolicy": "Never",
             "command": SLEEPER},
            {"name": "trainer", "volumeMounts": [models, {"name": "dshm", "mountPath": "/dev/shm"}],
             "env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}]},
        ],
        volumes=[{"name": "models", "emptyDir": {}},
                 {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "256Mi"}}],
    )  # fmt: skip
    create_job(cluster_api, jobs_namespace, body)
    probe = shared_claim / folder / "probe.json"
    wait_for(probe.exists, 180, "the trainer container to report what it found")

    (pod,) = trainer_pods(cluster_core, jobs_namespace, 0)
    node = cluster_core.read_node(pod.spec.node_name)
    node_ip = next(a.address for a in node.status.addresses if a.type == "InternalIP")
    assert pod.status.pod_ip == node_ip  # on the node's network
    assert [x.name for x in pod.spec.containers] == ["log-shipper", "trainer"]
    assert {x.name for x in pod.status.init_container_statuses} == {
        "fetch-model",
        "dashboard-agent",
    }
    found = json.loads(probe.read_text())
    assert found["token"] == "s3cret" and found["model"] == "fetched"
    assert found["shm_bytes"] > 64 * 2**20  # the emptyDir, not the runtime's 64 MiB default
    job = wait_succeeded(cluster_api, jobs_namespace, name, timeout=120)
    assert job["status"]["failures"] == 0
    delete_job(cluster_api, jobs_namespace, name)
    cluster_core.delete_namespaced_secret("hf", jobs_namespace)


def wait_failed(cluster_api, namespace: str, name: str) -> dict[str, Any]:
    def failed() -> dict[str, Any] | None:
        job = get_job(cluster_api, namespace, name)
        return job if (job.get("status") or {}).get("phase") == Phase.FAILED else None

    return wait_for(failed, 120, f"{name} to fail")


# --------------------------------------------------------------------------- a node dies


# Last in this file, which pytest keeps in order: a node that dies is the roughest case.
@pytest.mark.parametrize(
    ("how", "reason"), [("not-ready", "NodeNotReady"), ("deleted", "NodeLost")]
)
def test_a_node_that_dies_and_the_gang_recovers_on_the_other_node(
    how, reason, stack, cluster_api, cluster_core, jobs_namespace, chart_operator, shared_claim
):
    """Its kubelet, containerd and pods stop at once (the stack's power cut). It goes NotReady
    (and past the job's tolerance), or its Node is deleted as well; either way its pod is
    deleted without grace and the gang runs on the other node."""
    name = f"node-{how}"
    body = node_job(name, 1, 1, restartPolicy={"maxFailures": 1, "failureBackoffSeconds": 0,
                                                "nodeNotReadyToleranceSeconds": 10})  # fmt: skip
    body["spec"]["args"] = [a.replace(f"max_steps={MAX_STEPS}", "max_steps=400")
                            for a in body["spec"]["args"]]  # fmt: skip
    survivor = chart_operator.spec.node_name  # the operator must outlive the node
    doomed = next(node for node in stack.nodes if node != survivor)
    body["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": doomed}
    create_job(cluster_api, jobs_namespace, body)
    running_gang(cluster_core, jobs_namespace, 0, 1, timeout=240)
    checkpoints = shared_claim / experiment_path(name) / "checkpoints"
    wait_step(checkpoints, SAVE_INTERVAL + 1, 0, 300)
    stack.power_off(doomed)
    # Nothing of the node runs any more. A save is written before its step's progress, so a
    # kill between the two leaves a step folder newer than the progress file.
    saved = [parse_step(d.name) or 0 for d in checkpoints.iterdir()]
    last_step = max([read_progress(checkpoints)["step"], *saved])
    try:
        # Let the job go to the other node (a merge patch: None drops the key).
        selector = {"kubernetes.io/hostname": None}
        client.CustomObjectsApi(cluster_api).patch_namespaced_custom_object(
            c.GROUP, c.VERSION, jobs_namespace, c.PLURAL, name,
            {"spec": {"template": {"spec": {"nodeSelector": selector}}}},
        )  # fmt: skip
        if how == "deleted":
            cluster_core.delete_node(doomed)
        else:
            wait_for(lambda: _not_ready(cluster_core, doomed), 90, f"{doomed} to go NotReady")
        gang = running_gang(cluster_core, jobs_namespace, 1, 1, timeout=240)
        assert gang[0].spec.node_name == survivor
        st = status(cluster_api, jobs_namespace, name)
        assert st["recoveries"][0]["reason"] == reason, st["recoveries"]
        # No save on SIGTERM from a dead node: the newest interval save (the one at the last
        # step may have been cut short by the kill, and is then passed over).
        newest = last_step // SAVE_INTERVAL * SAVE_INTERVAL
        assert st["recoveries"][0]["resumedFromStep"] in (newest, newest - SAVE_INTERVAL), st
        assert st["failures"] == 0
        wait_step(checkpoints, st["recoveries"][0]["resumedFromStep"] + 1, 1, 120)
        job = get_job(cluster_api, jobs_namespace, name)
        report_recovery(f"its node powered off ({how})", job, checkpoints)
    finally:
        stack.power_on(doomed)  # its kubelet registers it again
        wait_for(lambda: _ready(cluster_core, doomed), 120, f"{doomed} to be Ready again")
    delete_job(cluster_api, jobs_namespace, name)


def _ready(core: client.CoreV1Api, node: str) -> bool:
    nodes = core.list_node(field_selector=f"metadata.name={node}").items
    return bool(nodes) and not _not_ready(core, node)


def _not_ready(core: client.CoreV1Api, node: str) -> bool:
    conditions = core.read_node(node).status.conditions or []
    return any(x.type == "Ready" and x.status != "True" for x in conditions)
