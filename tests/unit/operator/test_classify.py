"""The table of how a pod's end is read: disruption (free restart) or failure (budget)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from builders import NOW, make_job, make_node, make_pod
from rljob_operator.api.spec import RestartPolicy
from rljob_operator.api.timestamps import parse_iso
from rljob_operator.preemption.classify import Outcome, PodEnd, classify_facts
from rljob_operator.preemption.facts import facts
from rljob_operator.preemption.nodes import NodeTermination, node_states, node_termination

JOB = make_job()
POLICY = RestartPolicy(retryable_exit_codes=frozenset({42}), node_not_ready_tolerance_seconds=60)


def classify(pod, node, policy: RestartPolicy, now) -> PodEnd:
    """How the reconcile reads one pod's end: its node's state (None: gone), its facts, then
    the rules."""
    return classify_facts(facts(pod, node_states({"its": node}, now)["its"], now), policy)


@pytest.mark.parametrize(
    ("pod_kwargs", "node", "outcome", "reason"),
    [
        ({}, make_node(), Outcome.ACTIVE, "Running"),
        ({"phase": "Pending", "node": None}, None, Outcome.ACTIVE, "Pending"),
        ({"phase": "Succeeded", "exit_code": 0}, make_node(), Outcome.SUCCEEDED, "Completed"),
        ({"disruption": "PreemptionByScheduler"}, make_node(), Outcome.DISRUPTED, "PreemptionByScheduler"),
        ({"disruption": "EvictionByEvictionAPI"}, make_node(), Outcome.DISRUPTED, "EvictionByEvictionAPI"),
        ({"disruption": "DeletionByTaintManager"}, make_node(), Outcome.DISRUPTED, "DeletionByTaintManager"),
        ({"disruption": "DeletionByPodGC"}, None, Outcome.DISRUPTED, "DeletionByPodGC"),
        ({"disruption": "TerminationByKubelet", "phase": "Failed", "exit_code": 143}, make_node(), Outcome.DISRUPTED, "TerminationByKubelet"),
        ({"phase": "Failed", "status_reason": "Evicted"}, make_node(), Outcome.DISRUPTED, "Evicted"),
        ({"deleting": True}, make_node(), Outcome.DISRUPTED, "PodDeleted"),
        ({}, None, Outcome.DISRUPTED, "NodeLost"),
        ({}, make_node(ready=False, since="2026-11-29T11:58:00Z"), Outcome.DISRUPTED, "NodeNotReady"),
        ({}, make_node(ready=False, since="2026-11-29T11:59:30Z"), Outcome.ACTIVE, "Running"),
        ({"phase": "Failed", "exit_code": 143}, make_node(taints=["karpenter.sh/disrupted"]), Outcome.DISRUPTED, "NodeTermination"),
        ({"phase": "Failed", "exit_code": 137}, make_node(taints=["aws-node-termination-handler/spot-itn"]), Outcome.DISRUPTED, "NodeTermination"),
        ({"phase": "Failed", "exit_code": 143}, make_node(), Outcome.FAILED, "ExitCode"),
        ({"phase": "Failed", "exit_code": 75}, make_node(), Outcome.DISRUPTED, "CheckpointedOnRequest"),
        ({"phase": "Failed", "exit_code": 42}, make_node(), Outcome.DISRUPTED, "RetryableExitCode"),
        ({"phase": "Failed", "exit_code": 1}, make_node(taints=["karpenter.sh/disrupted"]), Outcome.FAILED, "ExitCode"),
        ({"phase": "Failed", "exit_code": 137, "termination_reason": "OOMKilled"}, make_node(), Outcome.FAILED, "OOMKilled"),
        ({"phase": "Failed"}, make_node(), Outcome.FAILED, "PodFailed"),
    ],
)  # fmt: skip
def test_pod_end_is_classified(pod_kwargs, node, outcome, reason):
    pod = make_pod(JOB, attempt=0, rank=0, **pod_kwargs)

    end = classify(pod, node, POLICY, NOW)

    assert (end.outcome, end.reason) == (outcome, reason)
    assert end.pod == "grpo-a0-n0"


def test_termination_message_of_a_trainer_stopped_on_request_is_a_disruption_whatever_the_exit_code():
    pod = make_pod(
        JOB, 0, 0, phase="Failed", exit_code=1
    )  # torchrun exits 1, hiding the workers' 75
    pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = (
        "rljob: checkpointed on request at step 30\n"
    )

    end = classify(pod, make_node(), POLICY, NOW)

    assert (end.outcome, end.reason) == (Outcome.DISRUPTED, "CheckpointedOnRequest")


def test_a_ray_node_stopped_on_notice_without_a_save_is_a_disruption_on_a_healthy_node():
    """The head ended its driver after SIGTERM, with nothing in the loop to save: exit 143 on a
    node that is not going away (the scheduler preempted the pod) is no trainer failure."""
    pod = make_pod(JOB, 0, 0, phase="Failed", exit_code=143)
    pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = (
        "rljob: stopped on notice without a save: no step of this attempt has finished "
        "through rljob's bridge\n"
    )

    end = classify(pod, make_node(), POLICY, NOW)

    assert (end.outcome, end.reason) == (Outcome.DISRUPTED, "StoppedOnNotice")
    assert "no step of this attempt has finished" in end.message


def test_failure_message_names_the_exit_code():
    pod = make_pod(JOB, 0, 0, phase="Failed", exit_code=3)
    assert "exited with code 3" in classify(pod, make_node(), POLICY, NOW).message


def test_disruption_outranks_an_exit_code():
    pod = make_pod(JOB, 0, 0, phase="Failed", exit_code=1, disruption="PreemptionByScheduler")
    assert classify(pod, make_node(), POLICY, NOW).outcome is Outcome.DISRUPTED


def test_a_trainer_done_beside_a_sidecar_that_still_runs_is_a_success():
    pod = make_pod(JOB, 0, 0, phase="Running", exit_code=0)
    pod["status"]["containerStatuses"].append({"name": "log-shipper", "state": {"running": {}}})

    assert classify(pod, make_node(), POLICY, NOW).outcome is Outcome.SUCCEEDED


def test_the_only_container_is_the_trainer_whatever_its_name():
    pod = make_pod(JOB, 0, 0, phase="Failed", exit_code=3)
    pod["status"]["containerStatuses"][0]["name"] = "main"

    end = classify(pod, make_node(), POLICY, NOW)

    assert (end.outcome, end.reason) == (Outcome.FAILED, "ExitCode") and "code 3" in end.message


def test_with_several_containers_only_the_trainers_end_counts():
    pod = make_pod(JOB, 0, 0, phase="Running")
    pod["status"]["containerStatuses"] = [
        {"name": "log-shipper", "state": {"terminated": {"exitCode": 0}}},
        {"name": "trainer", "state": {"running": {}}},
    ]

    assert classify(pod, make_node(), POLICY, NOW).outcome is Outcome.ACTIVE


def test_a_pod_kueue_stopped_is_a_disruption_with_kueues_reason():
    pod = make_pod(JOB, 0, 0, phase="Running", deleting=True)
    pod["status"]["conditions"].append({
        "type": "TerminationTarget", "status": "True", "reason": "WorkloadEvicted",
        "message": "Preempted to accommodate a workload due to prioritization in the ClusterQueue",
    })  # fmt: skip

    end = classify(pod, make_node(), POLICY, NOW)

    assert (end.outcome, end.reason) == (Outcome.DISRUPTED, "StoppedByKueue")
    assert "WorkloadEvicted" in end.message and "Preempted to accommodate" in end.message


def test_a_gang_kueue_evicted_for_not_being_ready_in_time_is_a_disruption_on_every_pod():
    """Kueue v0.19's WaitForPodsReady (on by default): the pod that never got a node and the
    one that ran are both marked and deleted; both are Kueue's stop, not a lost node or a
    stranger's delete, and the message keeps Kueue's words."""
    stop = {"type": "TerminationTarget", "status": "True",
            "reason": "WorkloadEvictedDueToPodsReadyTimeout",
            "message": "Exceeded the PodsReady timeout team/grpo-a0"}  # fmt: skip
    never_placed = make_pod(JOB, 0, 0, phase="Pending", node=None, deleting=True)
    ran = make_pod(JOB, 0, 1, phase="Failed", deleting=True, exit_code=143)
    for pod, node in ((never_placed, None), (ran, make_node())):
        pod["status"]["conditions"].append(dict(stop))

        end = classify(pod, node, POLICY, NOW)

        assert (end.outcome, end.reason) == (Outcome.DISRUPTED, "StoppedByKueue")
        assert end.message == (
            "Kueue stopped the pod (WorkloadEvictedDueToPodsReadyTimeout): "
            "Exceeded the PodsReady timeout team/grpo-a0"
        )


def _going(taints: list[dict[str, str]], annotations: dict[str, str] | None = None):
    node = make_node()
    node["spec"]["taints"] = taints
    node["metadata"]["annotations"] = annotations or {}
    return node_termination(node, NOW)


def test_a_termination_taint_with_a_documented_notice_says_when_the_node_goes():
    # A NoExecute taint carries the time it was added; a NoSchedule one counts from now.
    itn = {"key": "aws-node-termination-handler/spot-itn", "effect": "NoExecute",
           "timeAdded": "2026-11-29T11:59:00Z"}  # fmt: skip
    assert _going([itn]) == NodeTermination(
        "taint aws-node-termination-handler/spot-itn", parse_iso("2026-11-29T12:01:00Z")
    )
    gke = {"key": "cloud.google.com/impending-node-termination", "effect": "NoSchedule"}
    assert _going([gke]).deadline == NOW + timedelta(seconds=30)
    # Karpenter gives no fixed time: the node goes, when is not said.
    assert _going([{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]) == NodeTermination(
        "taint karpenter.sh/disrupted", None
    )
    assert _going([{"key": "example.com/other", "effect": "NoSchedule"}]) is None


def test_the_termination_time_annotation_says_when_and_outranks_a_taint():
    karpenter = [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]
    said = {"rljob.io/termination-time": "2026-11-29T12:00:45Z"}
    assert _going(karpenter, said) == NodeTermination(
        "annotation rljob.io/termination-time", parse_iso("2026-11-29T12:00:45Z")
    )
    assert _going([], said).deadline == parse_iso("2026-11-29T12:00:45Z")
    # A time that does not parse says nothing; the taint still does.
    assert _going(karpenter, {"rljob.io/termination-time": "soon"}) == NodeTermination(
        "taint karpenter.sh/disrupted", None
    )


def test_a_signal_exit_on_an_annotated_node_is_a_node_termination():
    node = make_node()
    node["metadata"]["annotations"] = {"rljob.io/termination-time": "2026-11-29T12:00:45Z"}
    end = classify(make_pod(JOB, 0, 0, phase="Failed", exit_code=143), node, POLICY, NOW)
    assert (end.outcome, end.reason) == (Outcome.DISRUPTED, "NodeTermination")
    assert "is going away (annotation rljob.io/termination-time)" in end.message
