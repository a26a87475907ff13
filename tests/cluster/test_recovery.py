"""Preemption and recovery on the real control plane: each disruption source ends in exactly
one new attempt that resumes from the newest complete checkpoint.

The operator reads the job's checkpoint volume through RLJOB_CHECKPOINT_VOLUMES (the
claim mapped to a directory of the test); the tests write checkpoints there.
"""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
from kube_steps import bind_claim, gpu_pod, read_pod, stays, wait_for
from kubernetes import client
from kubernetes.client.rest import ApiException
from rljob_contract import CHECKPOINT_REQUEST_ANNOTATION
from rljob_contract.manifest import write_manifest
from rljob_operator import constants as c
from rljob_operator.api.reasons import Phase
from rljob_operator.api.timestamps import parse_iso
from rljob_testenv import cluster
from rljob_testenv.operator_process import OperatorProcess, run_operator
from test_job_lifecycle import event_reasons, finish, get_job, phase_is, running_pods, trainer_pods

CKPT_DIR = "/checkpoints/run/checkpoints"


def write_checkpoint(volume, step, complete=True):
    folder = volume / "run" / "checkpoints" / f"global_step_{step}"
    (folder / "actor").mkdir(parents=True)
    (folder / "actor" / "__0_0.distcp").write_bytes(b"weights" * 10)
    (folder / "actor" / ".metadata").write_bytes(b"metadata")
    if complete:
        write_manifest(folder, step=step, world_size=2)


def write_progress(volume, step, step_seconds=None):
    progress = {"step": step, "step_seconds": step_seconds}
    (volume / "run" / "checkpoints" / "progress.json").write_text(json.dumps(progress))


@pytest.fixture
def nodes(cluster_name):
    """Three GPU nodes of this test alone, so that no other test's pods are in the way."""
    prefix = f"n{uuid.uuid4().hex[:6]}"
    names = cluster.add_gpu_nodes(cluster_name, 3, prefix=prefix)
    yield names
    for name in names:
        cluster.kubectl(cluster_name, "delete", "node", name, "--ignore-not-found", "--wait=false")


@pytest.fixture
def claim(core, namespace):
    pv = bind_claim(core, namespace)
    yield "ckpts"
    core.delete_persistent_volume(pv)


@pytest.fixture
def volume(tmp_path):
    path = tmp_path / "volume"
    write_checkpoint(path, 10)
    write_checkpoint(path, 20)
    write_checkpoint(path, 30, complete=False)  # torn: never resumed from
    write_progress(path, 27, step_seconds=0.5)
    return path


@pytest.fixture
def recovering_operator(kubeconfig, namespace, crd, claim, volume, tmp_path):
    process = OperatorProcess(
        kubeconfig, namespace, tmp_path / "operator.log", RLJOB_CHECKPOINT_VOLUMES=f"ckpts={volume}"
    )
    yield from run_operator(process)


def job_body(nodes, priority_class=None, **spec):
    template_spec = {
        "terminationGracePeriodSeconds": 0,
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}
        ]}}},
    }  # fmt: skip
    if priority_class:
        template_spec["priorityClassName"] = priority_class
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": "grpo"},
        "spec": {
            "image": "rljob-trainer:dev",
            "nnodes": 2,
            "resources": {"limits": {"nvidia.com/gpu": 8}},
            "checkpoint": {
                "volume": {"persistentVolumeClaim": {"claimName": "ckpts"}},
                "directory": "run/checkpoints",
            },
            "template": {"spec": template_spec},
            **spec,
        },
    }


def start(api_client, core, namespace, body):
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, body
    )
    return wait_for(lambda: running_pods(core, namespace, 2), what="the first gang to run")


def env_of(pod):
    return {e.name: e.value for e in pod.spec.containers[0].env}


def event_messages(core, namespace, reason):
    events = [e for e in core.list_namespaced_event(namespace).items if e.reason == reason]
    return [e.message for e in sorted(events, key=lambda e: e.metadata.creation_timestamp)]


def resumed_gang(api_client, core, namespace, attempt=1):
    """The running gang of `attempt`, and the job once it has recorded that gang's creation."""
    pods = wait_for(
        lambda: [p for p in running_pods(core, namespace, 2) or [] if p.metadata.labels[c.LABEL_ATTEMPT] == str(attempt)],
        timeout=60, what=f"the gang of attempt {attempt} to run",
    )  # fmt: skip

    def recorded():
        job = get_job(api_client, namespace)
        status = job.get("status", {})
        return (
            job if status.get("attempt") == attempt and status.get("attemptCreationTime") else None
        )

    return wait_for(recorded, what=f"attempt {attempt} to be recorded"), pods


def assert_one_recovery_from_step_20(job, pods, reasons):
    assert job["status"]["attempt"] == 1
    assert (job["status"]["preemptions"], job["status"]["failures"]) == (1, 0)
    recovery = job["status"]["recoveries"][-1]
    assert recovery["reason"] in reasons
    assert (recovery["resumedFromStep"], recovery["lastFinishedStep"], recovery["lostSteps"]) == (
        20,
        27,
        7,
    )
    assert recovery["lostSeconds"] == 3.5  # 7 steps of 0.5 s, per progress.json
    assert len(job["status"]["recoveries"]) == 1
    for pod in pods:
        env = env_of(pod)
        assert env["RLJOB_RESUME_DIR"] == f"{CKPT_DIR}/global_step_20"
        assert env["RLJOB_RESUME_STEP"] == "20"
        assert f"runner.resume_dir={CKPT_DIR}/global_step_20" in pod.spec.containers[0].args


def test_scheduler_preemption_resumes_the_gang_from_the_newest_complete_checkpoint(
    api_client, core, namespace, nodes, recovering_operator
):
    scheduling = client.SchedulingV1Api(api_client)
    low, high = f"low-{namespace}", f"high-{namespace}"
    scheduling.create_priority_class(
        client.V1PriorityClass(metadata=client.V1ObjectMeta(name=low), value=100)
    )
    scheduling.create_priority_class(
        client.V1PriorityClass(metadata=client.V1ObjectMeta(name=high), value=1000)
    )
    try:
        pods = start(api_client, core, namespace, job_body(nodes, priority_class=low))
        victim_node = pods[0].spec.node_name

        core.create_namespaced_pod(
            namespace, gpu_pod("urgent", gpus=8, node=victim_node, priority_class=high)
        )

        job, new_pods = resumed_gang(api_client, core, namespace)
        assert_one_recovery_from_step_20(job, new_pods, {"PreemptionByScheduler"})
        assert victim_node not in {p.spec.node_name for p in new_pods}
        wait_for(
            lambda: {"Preempted", "GangCreated"} <= event_reasons(core, namespace),
            what="the events",
        )
        assert (
            'rljob_preemptions_total{reason="PreemptionByScheduler"} 1.0'
            in recovering_operator.metrics()
        )
    finally:
        scheduling.delete_priority_class(low)
        scheduling.delete_priority_class(high)


def test_eviction_resumes_from_the_newest_complete_checkpoint(
    api_client, core, namespace, nodes, recovering_operator
):
    pods = start(api_client, core, namespace, job_body(nodes))
    # The first gang's running time is counted from the status that says it runs: evicted
    # before the operator wrote it, the job would have spent no time Running (as it had not;
    # the cpu lane of make test run 14 did that once).
    wait_for(lambda: phase_is(api_client, namespace, Phase.RUNNING), what="the job to run")
    stays(lambda: phase_is(api_client, namespace, Phase.RUNNING), 0.5, "the job running")

    core.create_namespaced_pod_eviction(pods[1].metadata.name, namespace, client.V1Eviction(
        metadata=client.V1ObjectMeta(name=pods[1].metadata.name, namespace=namespace)))  # fmt: skip

    job, new_pods = resumed_gang(api_client, core, namespace)
    assert_one_recovery_from_step_20(job, new_pods, {"EvictionByEvictionAPI"})

    # Running again, the job's goodput says where its time went, and the gauge has it live
    # (kwok's pods turn Ready as they run: each attempt's first step is seen at once).
    job = wait_for(
        lambda: phase_is(api_client, namespace, Phase.RUNNING), what="the job to run again"
    )
    figures = job["status"]["goodput"]
    assert (figures["lostSteps"], figures["lostSeconds"]) == (7, 3.5)
    assert figures["podStartSeconds"] > 0 and figures["trainingSeconds"] > 0
    causes = ("waiting", "podStart", "frameworkStart", "training", "stopping")
    total = sum(figures[f"{cause}Seconds"] for cause in causes)
    assert abs(total - figures["wallSeconds"]) < 0.01  # stored to the millisecond
    productive = max(0.0, figures["trainingSeconds"] - 3.5)
    assert abs(figures["productiveSeconds"] - productive) < 0.01
    assert abs(figures["ettr"] - productive / figures["wallSeconds"]) < 0.01
    gauge = f'rljob_job_ettr{{name="grpo",namespace="{namespace}"}} '
    assert any(line.startswith(gauge) for line in recovering_operator.metrics().splitlines())


def test_two_pods_evicted_together_make_one_recovery(
    api_client, core, namespace, nodes, recovering_operator
):
    pods = start(api_client, core, namespace, job_body(nodes))

    def evict(pod):
        """Sent together; the operator may still end the gang before the last one lands."""
        try:
            core.create_namespaced_pod_eviction(pod.metadata.name, namespace, client.V1Eviction(
                metadata=client.V1ObjectMeta(name=pod.metadata.name, namespace=namespace)))  # fmt: skip
        except ApiException as exc:
            if exc.status != 404:
                raise

    with ThreadPoolExecutor(len(pods)) as pool:
        list(pool.map(evict, pods))

    job, new_pods = resumed_gang(api_client, core, namespace)
    assert_one_recovery_from_step_20(job, new_pods, {"EvictionByEvictionAPI"})


def test_deleted_node_resumes_the_gang_elsewhere(
    api_client, core, namespace, nodes, recovering_operator
):
    pods = start(api_client, core, namespace, job_body(nodes))
    lost = pods[0].spec.node_name

    core.delete_node(lost)

    job, new_pods = resumed_gang(api_client, core, namespace)
    assert_one_recovery_from_step_20(job, new_pods, {"NodeLost", "DeletionByPodGC"})
    assert lost not in {p.spec.node_name for p in new_pods}


def test_termination_taint_asks_for_a_checkpoint_and_sigterm_exit_is_a_disruption(
    api_client, core, namespace, nodes, recovering_operator
):
    pods = start(api_client, core, namespace, job_body(nodes))
    node = pods[0].spec.node_name

    core.patch_node(
        node, {"spec": {"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}}
    )

    asked = wait_for(
        lambda: all(CHECKPOINT_REQUEST_ANNOTATION in (read_pod(core, namespace, p.metadata.name).metadata.annotations or {})
                    for p in pods),
        what="the checkpoint request on every pod",
    )  # fmt: skip
    assert asked
    wait_for(lambda: "CheckpointRequested" in event_reasons(core, namespace), what="the event")

    finish(core, namespace, pods[0].metadata.name, 143)

    job, new_pods = resumed_gang(api_client, core, namespace)
    assert_one_recovery_from_step_20(job, new_pods, {"NodeTermination"})
    assert node not in {p.spec.node_name for p in new_pods}


def test_node_not_ready_beyond_tolerance_is_a_disruption(
    api_client, core, namespace, nodes, recovering_operator, cluster_name
):
    body = job_body(nodes, restartPolicy={"nodeNotReadyToleranceSeconds": 1})
    pods = start(api_client, core, namespace, body)
    node = pods[0].spec.node_name
    # Take the node away from kwok, so that nothing reports it Ready again; then say it is not.
    core.patch_node(node, {"metadata": {"annotations": {cluster.KWOK_NODE_ANNOTATION: None}}})
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    core.patch_node_status(node, {"status": {"conditions": [
        {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown", "message": "kubelet stopped posting",
         "lastHeartbeatTime": now, "lastTransitionTime": now}]}})  # fmt: skip

    job, new_pods = resumed_gang(api_client, core, namespace)
    assert_one_recovery_from_step_20(job, new_pods, {"NodeNotReady", "DeletionByTaintManager"})


def test_trainer_failures_spend_the_budget_then_fail_the_job(
    api_client, core, namespace, nodes, recovering_operator, volume
):
    body = job_body(nodes, restartPolicy={"maxFailures": 1, "failureBackoffSeconds": 0})
    pods = start(api_client, core, namespace, body)
    write_progress(volume, 25)  # it trained past step 20, so step 20 loaded fine

    finish(core, namespace, pods[0].metadata.name, 1)

    job, pods = resumed_gang(api_client, core, namespace)
    assert (job["status"]["failures"], job["status"]["preemptions"]) == (1, 0)
    assert env_of(pods[0])["RLJOB_RESUME_DIR"] == f"{CKPT_DIR}/global_step_20"

    finish(core, namespace, pods[1].metadata.name, 2)

    job = wait_for(lambda: phase_is(api_client, namespace, Phase.FAILED),
                   what="the job to fail")  # fmt: skip
    failed = next(x for x in job["status"]["conditions"] if x["type"] == "Failed")
    assert failed["reason"] == "FailureBudgetExhausted" and "code 2" in failed["message"]
    # The job is recorded Failed first, then its gang stopped: no pod of it runs on.
    wait_for(lambda: all(p.status.phase != "Running" for p in trainer_pods(core, namespace)),
             what="the failed job's pods to stop")  # fmt: skip


def test_gang_that_crashes_loading_a_checkpoint_resumes_from_the_one_before(
    api_client, core, namespace, nodes, recovering_operator, volume
):
    body = job_body(nodes, restartPolicy={"failureBackoffSeconds": 0})
    pods = start(api_client, core, namespace, body)
    write_progress(volume, 20)  # no step finished after loading step 20

    finish(core, namespace, pods[0].metadata.name, 1)

    job, new_pods = resumed_gang(api_client, core, namespace)
    assert job["status"]["badCheckpoints"][0]["path"] == f"{CKPT_DIR}/global_step_20"
    assert env_of(new_pods[0])["RLJOB_RESUME_DIR"] == f"{CKPT_DIR}/global_step_10"
    assert (
        volume / "run" / "checkpoints" / "global_step_20" / "rljob_manifest.json"
    ).exists()  # kept
    wait_for(lambda: "CheckpointMarkedBad" in event_reasons(core, namespace), what="the event")


def test_operator_killed_during_a_recovery_makes_exactly_one_new_attempt(
    api_client, core, namespace, nodes, recovering_operator
):
    pods = start(
        api_client, core, namespace, job_body(nodes, restartPolicy={"failureBackoffSeconds": 4})
    )

    finish(core, namespace, pods[0].metadata.name, 1)
    wait_for(
        lambda: phase_is(api_client, namespace, Phase.RESTARTING),
        what="Restarting",
    )
    recovering_operator.kill()
    recovering_operator.start()

    job, _ = resumed_gang(api_client, core, namespace)
    assert (job["status"]["attempt"], job["status"]["failures"]) == (1, 1)
    assert sorted(p.metadata.name for p in trainer_pods(core, namespace)) == [
        "grpo-a1-n0",
        "grpo-a1-n1",
    ]


def test_inspector_pod_that_finds_nothing_gives_a_fresh_start(
    api_client, core, namespace, nodes, claim, operator
):
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, job_body(nodes)
    )

    inspector = wait_for(
        lambda: read_pod(core, namespace, "grpo-inspect-a0"), what="the inspector pod"
    )
    command = inspector.spec.containers[0].command
    assert command[:4] == ["rljob", "ckpt", "latest", CKPT_DIR]
    assert inspector.spec.containers[0].volume_mounts[0].read_only is True
    report = {"found": False, "step": None, "path": None, "layout": None, "verify": "quick",
              "rejected": [{"step": 5, "path": f"{CKPT_DIR}/global_step_5", "verdict": "incomplete", "reason": "no manifest"}]}  # fmt: skip
    core.patch_namespaced_pod_status("grpo-inspect-a0", namespace, {"status": {"phase": "Succeeded", "containerStatuses": [{
        "name": "inspector", "image": "x", "imageID": "", "ready": False, "restartCount": 0,
        "state": {"terminated": {"exitCode": 1, "message": json.dumps(report)}}}]}})  # fmt: skip

    pods = wait_for(lambda: running_pods(core, namespace, 2), what="a fresh gang")
    assert all("RLJOB_RESUME_DIR" not in env_of(p) for p in pods)

    def fresh_starts():  # Events go out after the writes that create the gang
        return event_messages(core, namespace, "FreshStart") or None

    fresh = wait_for(fresh_starts, 15, "the FreshStart Event")
    assert "step 5: incomplete (no manifest)" in fresh[0]
    wait_for(
        lambda: read_pod(core, namespace, "grpo-inspect-a0") is None,
        what="the inspector to be removed",
    )


def test_inspector_pods_that_crash_or_never_end_back_off_and_say_why(
    api_client, core, namespace, nodes, claim, operator
):
    """An inspector that never terminates (its deadline ends the pod with its container still
    waiting), then two that exit 1 without a report: each is one failure, the next inspector
    comes only after the back-off, the third failure sets a condition, and no gang starts
    fresh meanwhile (the checkpoints may well be there)."""
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, job_body(nodes)
    )
    ends = [
        {"phase": "Failed", "reason": "DeadlineExceeded", "message": "Pod was active on the node longer than the specified deadline",
         "containerStatuses": [{"name": "inspector", "image": "x", "imageID": "", "ready": False, "restartCount": 0,
                                "state": {"waiting": {"reason": "ContainerCreating"}}}]},
        *[{"phase": "Failed", "containerStatuses": [{"name": "inspector", "image": "x", "imageID": "", "ready": False,
           "restartCount": 0, "state": {"terminated": {"exitCode": 1, "message": ""}}}]}] * 2,
    ]  # fmt: skip
    retry_after = None
    for failures, end in enumerate(ends, start=1):
        inspector = wait_for(
            lambda: read_pod(core, namespace, "grpo-inspect-a0"), 60, f"inspector {failures}"
        )
        if retry_after:  # the API server's own clock, to the second, on both sides
            assert inspector.metadata.creation_timestamp >= retry_after
        core.patch_namespaced_pod_status("grpo-inspect-a0", namespace, {"status": end})

        def recorded(failures=failures):
            status = get_job(api_client, namespace).get("status") or {}
            return (status.get("checkpointLookup") or {}).get("failures") == failures and status

        state = wait_for(recorded, 30, f"failure {failures} recorded")
        retry_after = parse_iso(state["checkpointLookup"]["retryAfter"])
        wait_for(lambda: read_pod(core, namespace, "grpo-inspect-a0") is None, 30, "the pod gone")

    assert "DeadlineExceeded" in event_messages(core, namespace, "CheckpointLookupFailed")[0]
    condition = {x["type"]: x for x in state["conditions"]}["CheckpointLookupFailed"]
    assert (
        condition["status"] == "True"
        and "3 checkpoint lookups in a row failed" in condition["message"]
    )
    assert state["phase"] == Phase.PENDING
    assert trainer_pods(core, namespace) == []  # never a fresh start
    assert len(event_messages(core, namespace, "CheckpointLookupFailed")) == 3


def test_an_explicit_resume_folder_that_is_torn_fails_the_job_before_any_pod(
    api_client, core, namespace, nodes, volume, recovering_operator
):
    write_checkpoint(volume, 15, complete=False)
    body = job_body(nodes)
    body["spec"]["checkpoint"]["resume"] = f"{CKPT_DIR}/global_step_15"
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, body
    )

    job = wait_for(lambda: phase_is(api_client, namespace, Phase.FAILED), 30, "the job to fail")

    failed = {x["type"]: x for x in job["status"]["conditions"]}["Failed"]
    assert failed["reason"] == "InvalidResumeTarget"
    assert f"{CKPT_DIR}/global_step_15, which is incomplete" in failed["message"]
    assert trainer_pods(core, namespace) == []


def test_the_inspector_verifies_an_explicit_resume_folder_before_the_gang_resumes_from_it(
    api_client, core, namespace, nodes, claim, operator
):
    body = job_body(nodes)
    body["spec"]["checkpoint"]["resume"] = f"{CKPT_DIR}/global_step_20"
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, body
    )
    inspector = wait_for(lambda: read_pod(core, namespace, "grpo-inspect-a0"), what="the inspector")
    command = inspector.spec.containers[0].command
    assert command[:4] == ["rljob", "ckpt", "verify", f"{CKPT_DIR}/global_step_20"]
    report = {"step": 20, "path": f"{CKPT_DIR}/global_step_20", "verdict": "complete",
              "reason": "manifest matches", "layout": "rljob", "verify": "quick"}  # fmt: skip
    core.patch_namespaced_pod_status("grpo-inspect-a0", namespace, {"status": {"phase": "Succeeded", "containerStatuses": [{
        "name": "inspector", "image": "x", "imageID": "", "ready": False, "restartCount": 0,
        "state": {"terminated": {"exitCode": 0, "message": json.dumps(report)}}}]}})  # fmt: skip

    pods = wait_for(lambda: running_pods(core, namespace, 2), what="the gang")
    assert all(env_of(p)["RLJOB_RESUME_DIR"] == f"{CKPT_DIR}/global_step_20" for p in pods)


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"resources": {"limits": {"nvidia.com/gpu": 64}}}, "Insufficient nvidia.com/gpu"),  # 8 a node
        ({"checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "nope"}}, "resume": "never"}},
         'persistentvolumeclaim "nope" not found'),
    ],
    ids=["gpus", "missing-claim"],
)  # fmt: skip
def test_a_gang_the_scheduler_cannot_place_says_why_with_the_schedulers_message(
    api_client, core, namespace, nodes, recovering_operator, spec, words
):
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, job_body(nodes, **spec)
    )

    def unschedulable():
        conditions = (get_job(api_client, namespace).get("status") or {}).get("conditions") or []
        return next((x for x in conditions
                     if x["type"] == "PodsUnschedulable" and x["status"] == "True"), None)  # fmt: skip

    condition = wait_for(unschedulable, what="the PodsUnschedulable condition")
    assert condition["reason"] == "Unschedulable"
    assert words in condition["message"]
    messages = wait_for(lambda: event_messages(core, namespace, "Unschedulable"), what="the Event")
    assert words in messages[0]
    assert get_job(api_client, namespace)["status"]["failures"] == 0


def condition_of(api_client, namespace, cond_type, status):
    """The job's condition of that type, once it has that status."""
    conditions = (get_job(api_client, namespace).get("status") or {}).get("conditions") or []
    return next((x for x in conditions if x["type"] == cond_type and x["status"] == status), None)


def test_an_inspector_that_cannot_be_scheduled_says_why_until_its_claim_is_created(
    api_client, core, namespace, nodes, operator
):
    """The inspector of a claim that does not exist waits for it (its deadline counts only
    once it runs): the job says why in the scheduler's words, naming the inspector, and the
    condition turns False once the claim is there, with nothing counted or started fresh."""
    body = job_body(nodes)
    body["spec"]["checkpoint"]["volume"]["persistentVolumeClaim"]["claimName"] = "nope"
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, body
    )

    condition = wait_for(
        lambda: condition_of(api_client, namespace, "PodsUnschedulable", "True"), 30,
        "the PodsUnschedulable condition",
    )  # fmt: skip
    assert condition["reason"] == "Unschedulable"
    assert condition["message"].startswith("inspector pod grpo-inspect-a0: ")
    assert 'persistentvolumeclaim "nope" not found' in condition["message"]
    status = get_job(api_client, namespace)["status"]
    assert status["checkpointLookup"] == {"failures": 0, "waiting": condition["message"]}
    assert status["phase"] == Phase.PENDING
    told = wait_for(lambda: event_messages(core, namespace, "Unschedulable"), 15, "the Event")
    assert told == [condition["message"]]

    pv = bind_claim(core, namespace, "nope")
    try:
        cleared = wait_for(
            lambda: condition_of(api_client, namespace, "PodsUnschedulable", "False"), 60,
            "the condition to turn False once the inspector is placed",
        )  # fmt: skip
        assert cleared["reason"] == "PodsScheduled"
        assert cleared["message"] == "inspector pod grpo-inspect-a0 is on a node"
        status = get_job(api_client, namespace)["status"]
        assert "checkpointLookup" not in status
        assert (status["attempt"], status["failures"], status["preemptions"]) == (0, 0, 0)
        assert read_pod(core, namespace, "grpo-inspect-a0").spec.node_name in nodes
        assert trainer_pods(core, namespace) == []  # it has not reported: no fresh start
        assert len(event_messages(core, namespace, "Unschedulable")) == 1
    finally:
        core.delete_persistent_volume(pv)


SCHEDULER_WAIT = 3


@pytest.fixture
def impatient_operator(kubeconfig, namespace, crd, claim, volume, tmp_path):
    """The operator that reads the volume in-process, and waits 3 s for a scheduler."""
    args = ["--standalone", "--namespace", namespace,
            "--scheduler-wait-seconds", str(SCHEDULER_WAIT)]  # fmt: skip
    process = OperatorProcess(kubeconfig, namespace, tmp_path / "operator.log", args=args,
                              RLJOB_CHECKPOINT_VOLUMES=f"ckpts={volume}")  # fmt: skip
    yield from run_operator(process)


def bind(core, namespace, pod, node):
    """Place the pod on the node, as its scheduler would (the Binding API)."""
    binding = client.V1Binding(metadata=client.V1ObjectMeta(name=pod),
                               target=client.V1ObjectReference(kind="Node", name=node))  # fmt: skip
    # The client cannot read the reply back into a V1Binding (kubernetes-client#825).
    core.create_namespaced_pod_binding(pod, namespace, binding, _preload_content=False)


def test_pods_no_scheduler_serves_say_so_after_the_wait_and_clear_once_placed(
    api_client, core, namespace, nodes, impatient_operator
):
    """No scheduler serves `volcano`, so none writes PodScheduled: after the wait the job
    asks whether it runs (the pass comes back for it; the 30 s resync is too late), and once
    the pods are placed the condition turns False, with nothing counted."""
    body = job_body(nodes)
    body["spec"]["template"]["spec"]["schedulerName"] = "volcano"
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, body
    )

    def gang():
        pods = trainer_pods(core, namespace)
        return pods if len(pods) == 2 else None

    pods = wait_for(gang, what="the gang")
    created = max(p.metadata.creation_timestamp for p in pods)

    condition = wait_for(
        lambda: condition_of(api_client, namespace, "PodsUnschedulable", "True"),
        SCHEDULER_WAIT + 10, "the NotSeenByScheduler condition",
    )  # fmt: skip
    assert condition["reason"] == "NotSeenByScheduler"
    assert condition["message"] == (
        f"pod grpo-a0-n0 has not been seen by a scheduler for {SCHEDULER_WAIT} s "
        "(schedulerName volcano): is that scheduler running?"
    )
    assert parse_iso(condition["lastTransitionTime"]) >= created + timedelta(seconds=SCHEDULER_WAIT)
    told = wait_for(lambda: event_messages(core, namespace, "NotSeenByScheduler"), 15, "the Event")
    assert told == [condition["message"]]

    for pod, node in zip(sorted(p.metadata.name for p in pods), nodes, strict=False):
        bind(core, namespace, pod, node)

    cleared = wait_for(
        lambda: condition_of(api_client, namespace, "PodsUnschedulable", "False"), 30,
        "the condition to turn False once the pods are placed",
    )  # fmt: skip
    assert cleared["reason"] == "PodsScheduled"
    job = wait_for(lambda: phase_is(api_client, namespace, Phase.RUNNING), 30, "Running")
    status = job["status"]
    assert (status["attempt"], status["failures"], status["preemptions"]) == (0, 0, 0)
    assert event_messages(core, namespace, "NotSeenByScheduler") == told
