"""A preempted job resumes on the cluster, bit-exactly: the real operator, the real trainer
(torchrun, 2 ranks, CPU/gloo) on node agents, and real disruptions.

Each test runs one job and interrupts it at a random step (seeded: the session's seed is
printed, RLJOB_E2E_SEED repeats it): the shapes 2 nodes x 1 process and 1 node x 2
processes, and the disruptions scheduler preemption (twice in a row, and once of a job that
asks for in-place restarts, which node agents cannot give), SIGKILL in the middle of a
checkpoint save followed by an eviction, and the deletion of a node. Each
recovery must resume from the newest checkpoint the trainers sealed, each job must
succeed with weights bitwise equal to the uninterrupted reference, and nothing may be
left behind.
"""

from __future__ import annotations

from e2e_steps import (
    REPORTS,
    SAVE_INTERVAL,
    assert_nothing_left,
    attempts_of,
    create_job,
    delete_pods,
    evict,
    experiment_path,
    rljob_job,
    running_gang,
    status,
    verify_rljob_run,
    wait_for,
    wait_step,
    wait_succeeded,
)
from rljob_operator import constants as c
from rljob_operator.launcher import in_place
from rljob_operator.preemption.nodes import RESTART_RULES_FEATURE
from rljob_testenv.ports import free_port
from rljob_testenv.scenario import preemptor_pod
from rljob_trainer.faults import ENV_TEST_KILL_BEFORE_MANIFEST

JOB = "grpo"


def test_two_node_gang_preempted_twice_by_the_scheduler_resumes_bit_exactly(
    api_client, core, namespace, rng, reference, agents, claim, priority_classes, e2e_operator
):
    low, high = priority_classes
    pool = agents(3, gpus=1)  # one spare node: the preemptor keeps the one it took
    port = free_port()
    checkpoints = claim / experiment_path(JOB) / "checkpoints"
    first = rng.randint(3, 8)
    create_job(api_client, namespace, rljob_job(JOB, 2, 1, port, namespace, priority_class=low))
    try:
        gang = running_gang(core, namespace, 0, 2)
        wait_step(checkpoints, first, attempt=0)
        victim = rng.choice(gang).spec.node_name
        core.create_namespaced_pod(namespace, preemptor_pod("urgent-1", victim, high, 1))

        gang = running_gang(core, namespace, 1, 2)
        assert victim not in {p.spec.node_name for p in gang}
        delete_pods(core, namespace, "app=preemptor")  # its node is free again
        # The gang is created before its creation (and resume point) is recorded: wait for it.
        resumed = wait_for(lambda: status(api_client, namespace, JOB).get("resumeFrom"), 30,
                           "the resume point of attempt 1 in the status")  # fmt: skip
        second = resumed["step"] + rng.randint(2, 5)
        wait_step(checkpoints, second, attempt=1)
        victim = rng.choice(gang).spec.node_name
        core.create_namespaced_pod(namespace, preemptor_pod("urgent-2", victim, high, 1))

        job = wait_succeeded(api_client, namespace, JOB)
    finally:
        delete_pods(core, namespace, "app=preemptor")
    report = verify_rljob_run(
        job, pool.records(), checkpoints, reference,
        [("Disruption", {"PreemptionByScheduler"})] * 2,
        f"2 nodes x 1 process, preempted by the scheduler after steps {first} and {second}",
    )  # fmt: skip
    REPORTS.append(report)
    print(report)
    assert_nothing_left(pool, port, api_client, core, namespace, JOB)


def test_megatron_tensor_parallel_gang_across_two_nodes_preempted_resumes_bit_exactly(
    api_client, core, namespace, rng, megatron_reference, agents, claim, priority_classes,
    e2e_operator,
):  # fmt: skip
    """backend: megatron, one model split over two nodes (TP2): the operator tells the trainer
    its backend, finds the newest sealed Megatron save and resumes it bit-exactly. The job
    asks for in-place restarts, which node agents cannot give (their nodes declare no
    RestartAllContainersOnContainerExits): its pods are made as without it (no wrapper, no
    restart rule, else the scheduler would leave them Pending), the preempted gang is
    recreated whole, and the InPlaceRestart condition says why."""
    low, high = priority_classes
    pool = agents(3, gpus=1)
    port = free_port()
    checkpoints = claim / experiment_path(JOB) / "checkpoints"
    body = rljob_job(JOB, 2, 1, port, namespace, priority_class=low, backend="megatron")
    body["spec"]["restartPolicy"]["inPlace"] = True
    create_job(api_client, namespace, body)
    try:
        gang = running_gang(core, namespace, 0, 2)
        rules = [x.restart_policy_rules for pod in gang for x in pod.spec.containers]
        assert rules == [None, None], rules
        preempt_after = wait_step(checkpoints, rng.randint(SAVE_INTERVAL + 1, 12), attempt=0)
        victim = rng.choice(gang).spec.node_name
        core.create_namespaced_pod(namespace, preemptor_pod("urgent", victim, high, 1))
        job = wait_succeeded(api_client, namespace, JOB)
    finally:
        delete_pods(core, namespace, "app=preemptor")
    trainers = [r for r in pool.records() if r.labels.get(c.LABEL_ROLE) == c.ROLE_TRAINER]
    assert trainers and all(r.env["RLJOB_BACKEND"] == "megatron" for r in trainers)
    assert not any(in_place.WRAPPER in " ".join(r.argv) for r in trainers)
    first, second = (attempts_of(trainers, JOB)[k] for k in (0, 1))
    assert len(second) == 2 and not {r.uid for r in first} & {r.uid for r in second}
    said = next(x for x in job["status"]["conditions"] if x["type"] == "InPlaceRestart")
    assert (said["status"], said["reason"]) == ("False", "FeatureMissing"), said
    assert RESTART_RULES_FEATURE in said["message"], said
    report = verify_rljob_run(
        job, pool.records(), checkpoints, megatron_reference,
        [("Disruption", {"PreemptionByScheduler"})],
        f"Megatron TP2 over 2 nodes, preempted by the scheduler after step {preempt_after}",
    )  # fmt: skip
    REPORTS.append(report)
    print(report)
    assert_nothing_left(pool, port, api_client, core, namespace, JOB)


def test_one_node_gang_killed_mid_save_then_evicted_resumes_bit_exactly(
    api_client, core, namespace, rng, reference, agents, claim, e2e_operator
):
    kill_at = SAVE_INTERVAL * rng.randint(2, 3)

    def kill_hook(pod):  # only the first attempt dies in the middle of that save
        first = pod["metadata"]["labels"].get(c.LABEL_ATTEMPT) == "0"
        return {ENV_TEST_KILL_BEFORE_MANIFEST: str(kill_at)} if first else {}

    pool = agents(2, gpus=2, extra_env=kill_hook)
    port = free_port()
    checkpoints = claim / experiment_path(JOB) / "checkpoints"
    create_job(api_client, namespace, rljob_job(JOB, 1, 2, port, namespace))

    gang = running_gang(core, namespace, 1, 1, timeout=180)
    evict_at = kill_at + rng.randint(1, 5)
    wait_step(checkpoints, evict_at, attempt=1)
    evict(core, namespace, gang[0].metadata.name)

    job = wait_succeeded(api_client, namespace, JOB)
    first_log = next(r for r in pool.records() if r.labels[c.LABEL_ATTEMPT] == "0").log()
    assert "killing rank 0 before the manifest" in first_log
    report = verify_rljob_run(
        job, pool.records(), checkpoints, reference,
        [("Failure", {"ExitCode"}), ("Disruption", {"EvictionByEvictionAPI"})],
        f"1 node x 2 processes, SIGKILLed saving step {kill_at}, then evicted after step {evict_at}",
    )  # fmt: skip
    REPORTS.append(report)
    print(report)
    assert job["status"]["recoveries"][0]["resumedFromStep"] == kill_at - SAVE_INTERVAL
    assert_nothing_left(pool, port, api_client, core, namespace, JOB)


def test_gang_whose_node_is_deleted_resumes_elsewhere_bit_exactly(
    api_client, core, namespace, rng, reference, agents, claim, e2e_operator
):
    pool = agents(3, gpus=1)
    port = free_port()
    checkpoints = claim / experiment_path(JOB) / "checkpoints"
    at = rng.randint(SAVE_INTERVAL + 1, 10)
    create_job(api_client, namespace, rljob_job(JOB, 2, 1, port, namespace))

    gang = running_gang(core, namespace, 0, 2)
    wait_step(checkpoints, at, attempt=0)
    lost = rng.choice(gang).spec.node_name
    core.delete_node(lost)

    # The lost node's pod stays until the pod garbage collector removes it (~40-60 s).
    gang = running_gang(core, namespace, 1, 2, timeout=180)
    assert lost not in {p.spec.node_name for p in gang}
    assert pool[lost].gone.is_set()
    job = wait_succeeded(api_client, namespace, JOB)
    report = verify_rljob_run(
        job, pool.records(), checkpoints, reference,
        [("Disruption", {"NodeLost", "DeletionByPodGC"})],
        f"2 nodes x 1 process, node {lost} deleted after step {at}",
        progress_slack=1,
    )  # fmt: skip
    REPORTS.append(report)
    print(report)
    assert_nothing_left(pool, port, api_client, core, namespace, JOB)
