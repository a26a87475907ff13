"""One reconcile pass as a pure function: the job's life, step by step, without a cluster."""

from __future__ import annotations

import copy
import re
from dataclasses import replace
from datetime import timedelta

import pytest
from builders import NOW, make_job, make_node, make_pod
from passes import decide, with_status
from rljob_contract import CHECKPOINT_REQUEST_ANNOTATION
from rljob_operator import constants as c
from rljob_operator.api.reasons import Phase
from rljob_operator.api.status import CheckpointLookup, RayStatus, ResumeFrom
from rljob_operator.api.timestamps import iso
from rljob_operator.launcher.pods import ResumeTarget
from rljob_operator.reconcile.plan import LookupResult
from rljob_operator.reconcile.settings import Settings

NODES = {"gpu-node-0": make_node("gpu-node-0"), "gpu-node-1": make_node("gpu-node-1")}


def started(job, attempt=0, **status):
    """The job after its attempt's pods were created."""
    return with_status(
        job,
        {
            "attempt": attempt,
            "attemptCreationTime": "2026-11-29T11:00:00Z",
            "phase": Phase.PENDING,
            **status,
        },
    )


def pods_of(job, attempt=0, **kwargs):
    return [make_pod(job, attempt, rank, node=f"gpu-node-{rank}", **kwargs) for rank in range(2)]


def created_pod_names(plan):
    return [o["metadata"]["name"] for o in plan.create if o["kind"] == "Pod"]


def test_new_job_with_resume_never_creates_service_and_one_pod_per_node():
    job = make_job(checkpoint={"resume": "never"})

    plan = decide(job, [], NODES, NOW)

    assert [o["kind"] for o in plan.create] == ["Service", "NetworkPolicy", "Pod", "Pod"]
    assert created_pod_names(plan) == ["grpo-a0-n0", "grpo-a0-n1"]
    assert plan.status.phase == Phase.PENDING
    assert plan.status.attempt_creation_time == "2026-11-29T12:00:00Z"
    assert any(e.reason == "GangCreated" and "starting fresh" in e.message for e in plan.events)


def test_where_the_workload_api_is_served_a_gang_gets_a_workload_and_a_pod_group_per_attempt():
    job = make_job(checkpoint={"resume": "never"})

    plan = decide(job, [], NODES, NOW, workload_api=True)

    kinds = [o["kind"] for o in plan.create]
    assert kinds == ["Service", "NetworkPolicy", "Workload", "PodGroup", "Pod", "Pod"]
    workload, group = plan.create[2], plan.create[3]
    assert workload["spec"]["podGroupTemplates"] == [
        {"name": "gang", "schedulingPolicy": {"gang": {"minCount": 2}}}
    ]
    assert group["metadata"]["name"] == plan.status.pod_group == "grpo-a0"
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    assert group["spec"]["podGroupTemplateRef"]["workload"]["workloadName"] == "grpo"
    assert group["metadata"]["ownerReferences"][0]["name"] == "grpo"
    for pod in plan.create[4:]:
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": "grpo-a0"}


def test_the_next_attempt_gets_its_own_pod_group_and_the_last_ones_goes():
    job = started(make_job(checkpoint={"resume": "never"}), phase=Phase.RUNNING)
    job["status"]["podGroup"] = "grpo-a0"
    pods = [make_pod(job, 0, 0, disruption="PreemptionByScheduler"),
            make_pod(job, 0, 1, node="gpu-node-1")]  # fmt: skip
    ended = with_status(job, decide(job, pods, NODES, NOW, workload_api=True).status)

    plan = decide(ended, [], NODES, NOW, workload_api=True)

    assert plan.status.attempt == 1 and plan.status.pod_group == "grpo-a1"
    assert plan.delete_pod_groups == ["grpo-a0"]
    assert {
        p["spec"]["schedulingGroup"]["podGroupName"] for p in plan.create if p["kind"] == "Pod"
    } == {"grpo-a1"}


def test_the_next_gang_makes_again_only_the_shared_children_that_went():
    job = started(make_job(checkpoint={"resume": "never"}), phase=Phase.RUNNING)
    pods = [make_pod(job, 0, 0, disruption="PreemptionByScheduler"),
            make_pod(job, 0, 1, node="gpu-node-1")]  # fmt: skip
    ended = with_status(job, decide(job, pods, NODES, NOW, workload_api=True).status)

    policy = ("NetworkPolicy", "grpo-torchrun-gang")
    kept = decide(ended, [], NODES, NOW, workload_api=True,
                  shared=frozenset({("Service", "grpo"), ("Workload", "grpo"), policy}))  # fmt: skip
    service_gone = decide(ended, [], NODES, NOW, workload_api=True,
                          shared=frozenset({("Workload", "grpo"), policy}))  # fmt: skip

    assert [o["kind"] for o in kept.create] == ["PodGroup", "Pod", "Pod"]
    assert [o["kind"] for o in service_gone.create] == ["Service", "PodGroup", "Pod", "Pod"]


@pytest.mark.parametrize(
    ("spec", "workload_api"),
    [({}, False), ({"gangScheduling": "Off"}, True), ({"nnodes": 1}, True)],
    ids=["not-served", "off", "one-pod"],
)
def test_without_the_api_when_off_or_for_one_pod_the_gang_is_scheduled_pod_by_pod(
    spec, workload_api
):
    job = make_job(checkpoint={"resume": "never"}, **spec)

    plan = decide(job, [], NODES, NOW, workload_api=workload_api)

    assert {o["kind"] for o in plan.create} == {"Service", "NetworkPolicy", "Pod"}
    assert plan.status.pod_group is None
    assert all("schedulingGroup" not in o["spec"] for o in plan.create if o["kind"] == "Pod")


def test_a_job_with_a_kueue_queue_has_each_attempts_pods_in_one_kueue_pod_group():
    job = make_job(checkpoint={"resume": "never"})
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team"}

    plan = decide(job, [], NODES, NOW)

    for pod in (o for o in plan.create if o["kind"] == "Pod"):
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team"
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] == "grpo-a0"
        assert pod["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] == "2"
        assert pod["metadata"]["annotations"]["kueue.x-k8s.io/retriable-in-group"] == "false"


def test_a_template_that_sets_the_kueue_pod_group_itself_is_refused_naming_it():
    job = make_job(checkpoint={"resume": "never"},
                   template={"metadata": {"labels": {"kueue.x-k8s.io/pod-group-name": "mine"}}})  # fmt: skip
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team"}

    plan = decide(job, [], NODES, NOW)

    assert plan.status.phase == Phase.FAILED and plan.create == []
    failed = {x["type"]: x for x in plan.status.conditions}["Failed"]
    assert failed["reason"] == "InvalidSpec"
    assert failed["message"].startswith(
        "spec.template.metadata.labels[kueue.x-k8s.io/pod-group-name]"
    )


def gated_by_kueue(job):
    """The job's gang as Kueue holds it before admission: gated, labeled with its queue."""
    pods = [make_pod(job, 0, rank, phase="Pending", node=None) for rank in (0, 1)]
    for pod in pods:
        pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "team"
        pod["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False",
                                        "reason": "SchedulingGated"}]  # fmt: skip
    return pods


def test_a_gang_waiting_for_kueue_says_so_in_a_condition_and_a_normal_event():
    job = started(make_job(), phase=Phase.PENDING)

    plan = decide(job, gated_by_kueue(job), NODES, NOW)

    queued = {x["type"]: x for x in plan.status.conditions}["PodsUnschedulable"]
    assert queued["reason"] == "WaitingForKueue" and "queue team" in queued["message"]
    (event,) = [e for e in plan.events if e.reason == "WaitingForKueue"]
    assert event.type == "Normal"
    assert plan.status.failures == 0 and plan.delete == []


@pytest.mark.parametrize(
    ("admission", "reason", "event_type", "says"),
    [
        (("Pending", "couldn't assign flavors to pod set main: insufficient quota"),
         "WaitingForKueue", "Normal", "not admitted the gang yet (queue team): couldn't assign"),
        (("Inadmissible", "LocalQueue team doesn't exist"),
         "QueueInadmissible", "Warning", "admit the gang (queue team): LocalQueue team doesn't exist"),
        # Kueue v0.19 with UnadmittedWorkloadsObservability: the same, in finer reasons.
        (("Misconfigured", "LocalQueue team doesn't exist"),
         "QueueInadmissible", "Warning", "admit the gang (queue team): LocalQueue team doesn't exist"),
        (("Suspended", "ClusterQueue gpus is inactive"),
         "QueueInadmissible", "Warning", "admit the gang (queue team): ClusterQueue gpus is inactive"),
        (("WaitingForQuota", "couldn't assign flavors to pod set main: insufficient quota"),
         "WaitingForKueue", "Normal", "not admitted the gang yet (queue team): couldn't assign"),
    ],
)  # fmt: skip
def test_a_gang_kueue_does_not_admit_says_why_in_kueues_words(admission, reason, event_type, says):
    job = started(make_job(), phase=Phase.PENDING)

    plan = decide(job, gated_by_kueue(job), NODES, NOW, admission=admission)

    queued = {x["type"]: x for x in plan.status.conditions}["PodsUnschedulable"]
    assert queued["reason"] == reason and says in queued["message"]
    (event,) = [e for e in plan.events if e.reason == reason]
    assert event.type == event_type
    assert plan.status.failures == 0 and plan.delete == [] and plan.create == []


def test_auto_resume_asks_for_a_checkpoint_lookup_before_creating_pods():
    plan = decide(make_job(), [], NODES, NOW)

    assert plan.needs_checkpoint_lookup
    assert plan.create == []


def test_auto_resume_injects_the_latest_checkpoint_into_every_pod():
    target = ResumeTarget("/checkpoints/global_step_150", 150)

    plan = decide(make_job(), [], NODES, NOW, LookupResult(target))

    for pod in (o for o in plan.create if o["kind"] == "Pod"):
        container = pod["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["RLJOB_RESUME_DIR"] == "/checkpoints/global_step_150"
        assert env["RLJOB_RESUME_STEP"] == "150"
        assert "runner.resume_dir=/checkpoints/global_step_150" in container["args"]
    assert plan.status.resume_from == ResumeFrom(150, "/checkpoints/global_step_150")


def test_explicit_resume_path_is_checked_then_used_for_the_first_attempt():
    job = make_job(checkpoint={"resume": "/checkpoints/run1/global_step_40/"})
    assert decide(job, [], NODES, NOW).needs_checkpoint_lookup  # the folder is looked at first

    target = ResumeTarget("/checkpoints/run1/global_step_40", 40)
    plan = decide(job, [], NODES, NOW, LookupResult(target))

    assert plan.status.resume_from == ResumeFrom(40, "/checkpoints/run1/global_step_40")
    assert (
        "runner.resume_dir=/checkpoints/run1/global_step_40"
        in next(o for o in plan.create if o["kind"] == "Pod")["spec"]["containers"][0]["args"]
    )


def test_explicit_resume_path_that_is_not_complete_fails_before_any_pod():
    job = make_job(checkpoint={"resume": "/checkpoints/run1/global_step_40"})

    plan = decide(
        job, [], NODES, NOW, LookupResult(None, detail="incomplete (no rljob_manifest.json)")
    )

    assert plan.create == [] and plan.status.phase == Phase.FAILED
    failed = {x["type"]: x for x in plan.status.conditions}["Failed"]
    assert failed["reason"] == "InvalidResumeTarget"
    assert failed["message"] == (
        "spec.checkpoint.resume names /checkpoints/run1/global_step_40, which is incomplete "
        "(no rljob_manifest.json): no pod was created"
    )


def test_all_pods_running_makes_the_job_running():
    job = started(make_job())

    plan = decide(job, pods_of(job), NODES, NOW)

    assert plan.status.phase == Phase.RUNNING
    assert plan.create == [] and plan.delete == []
    running = next(x for x in plan.status.conditions if x["type"] == "Running")
    assert running["status"] == "True" and running["observedGeneration"] == 1


def test_a_running_jobs_next_pass_asks_for_nothing_and_one_that_tells_does():
    """act returns at once for a plan that asks for nothing (most passes), and only then."""
    job = started(make_job())
    first = decide(job, pods_of(job), NODES, NOW)  # becomes Running: a status write, an Event
    assert not first.asks_for_nothing()
    again = decide(with_status(job, first.status), pods_of(job), NODES, NOW)
    assert again.asks_for_nothing()
    again.requeue(5)  # steering the next pass asks for nothing
    assert again.asks_for_nothing()
    again.release = ["grpo-a0-n0"]
    assert not again.asks_for_nothing()


def test_all_pods_succeeded_makes_the_job_succeed():
    job = started(make_job(), phase=Phase.RUNNING)

    plan = decide(job, pods_of(job, phase="Succeeded", exit_code=0), NODES, NOW)

    assert plan.status.phase == Phase.SUCCEEDED
    assert plan.status.completion_time == "2026-11-29T12:00:00Z"
    assert any(e.reason == "Succeeded" for e in plan.events)


def test_one_pod_succeeded_and_one_running_keeps_the_job_running():
    job = started(make_job(), phase=Phase.RUNNING)
    pods = [
        make_pod(job, 0, 0, phase="Succeeded", exit_code=0),
        make_pod(job, 0, 1, node="gpu-node-1"),
    ]

    plan = decide(job, pods, NODES, NOW)

    assert plan.status.phase == Phase.RUNNING
    assert plan.delete == []


def test_trainer_failure_spends_the_budget_and_restarts_after_backoff():
    job = started(make_job(restartPolicy={"failureBackoffSeconds": 10}), phase=Phase.RUNNING)
    pods = [
        make_pod(job, 0, 0, phase="Failed", exit_code=1),
        make_pod(job, 0, 1, node="gpu-node-1"),
    ]

    plan = decide(job, pods, NODES, NOW)

    assert plan.status.failures == 1 and plan.status.preemptions == 0
    assert plan.status.attempt == 1
    assert plan.status.phase == Phase.RESTARTING
    assert plan.status.restart_after == "2026-11-29T12:00:10Z"
    assert sorted(plan.delete) == ["grpo-a0-n0", "grpo-a0-n1"]
    assert plan.status.last_end.reason == "ExitCode"
    assert any(e.type == "Warning" and e.reason == "TrainerFailed" for e in plan.events)


def test_next_attempt_waits_for_backoff_then_for_stale_pods_to_go():
    job = with_status(make_job(checkpoint={"resume": "never"}), {
        "attempt": 1, "failures": 1, "phase": Phase.RESTARTING, "restartAfter": "2026-11-29T12:00:10Z",
    })  # fmt: skip
    old = pods_of(job, attempt=0, phase="Failed", exit_code=1)

    waiting = decide(job, old, NODES, NOW)
    assert waiting.delete == ["grpo-a0-n0", "grpo-a0-n1"]
    assert waiting.create == []

    still_backing_off = decide(job, [], NODES, NOW)
    assert still_backing_off.create == []
    assert still_backing_off.requeue_after == 10

    later = decide(job, [], NODES, NOW + timedelta(seconds=11))
    assert created_pod_names(later) == ["grpo-a1-n0", "grpo-a1-n1"]


def test_the_next_gang_starts_beside_old_pods_that_have_ended_not_beside_running_ones():
    job = with_status(make_job(checkpoint={"resume": "never"}), {
        "attempt": 1, "preemptions": 1, "phase": Phase.RESTARTING,
    })  # fmt: skip
    saving = pods_of(job, attempt=0, deleting=True)  # SIGTERMed, the trainers still saving

    held = decide(job, saving, NODES, NOW)

    assert held.create == [] and held.requeue_after == 1
    ended = pods_of(job, attempt=0, phase="Failed", exit_code=143, deleting=True)

    started = decide(job, ended, NODES, NOW)

    assert created_pod_names(started) == ["grpo-a1-n0", "grpo-a1-n1"]
    assert sorted(started.release) == ["grpo-a0-n0", "grpo-a0-n1"]  # their ends are recorded


def test_failure_budget_exhausted_fails_the_job_with_a_clear_condition():
    job = started(
        make_job(restartPolicy={"maxFailures": 1}), attempt=1, failures=1, phase=Phase.RUNNING
    )
    pods = [
        make_pod(job, 1, 0, phase="Failed", exit_code=2),
        make_pod(job, 1, 1, node="gpu-node-1"),
    ]

    plan = decide(job, pods, NODES, NOW)

    assert plan.status.phase == Phase.FAILED
    failed = next(x for x in plan.status.conditions if x["type"] == "Failed")
    assert failed["reason"] == "FailureBudgetExhausted"
    assert "maxFailures" in failed["message"] and "code 2" in failed["message"]
    assert sorted(plan.delete) == ["grpo-a1-n0", "grpo-a1-n1"]


def test_preemption_restarts_at_once_without_spending_the_failure_budget():
    job = started(make_job(), phase=Phase.RUNNING)
    pods = [
        make_pod(job, 0, 0, disruption="PreemptionByScheduler"),
        make_pod(job, 0, 1, node="gpu-node-1"),
    ]

    plan = decide(job, pods, NODES, NOW)

    assert (plan.status.preemptions, plan.status.failures) == (1, 0)
    assert plan.status.attempt == 1
    assert plan.status.restart_after is None
    assert plan.status.recoveries[-1].reason == "PreemptionByScheduler"


def test_two_pods_preempted_together_make_one_recovery():
    job = started(make_job(), phase=Phase.RUNNING)
    pods = pods_of(job, disruption="PreemptionByScheduler")

    plan = decide(job, pods, NODES, NOW)

    assert plan.status.preemptions == 1
    assert len(plan.status.recoveries) == 1
    assert plan.status.attempt == 1


def test_disruption_outranks_peer_failures_of_the_same_attempt():
    job = started(make_job(), phase=Phase.RUNNING)
    pods = [
        make_pod(job, 0, 0, node=None),
        make_pod(job, 0, 1, node="gpu-node-1", phase="Failed", exit_code=1),
    ]
    nodes = {"gpu-node-1": make_node("gpu-node-1")}
    pods[0]["spec"]["nodeName"] = "gone-node"

    plan = decide(job, pods, nodes, NOW)

    assert (plan.status.preemptions, plan.status.failures) == (1, 0)
    assert plan.status.last_end.reason == "NodeLost"


def test_a_vanished_pod_of_a_created_attempt_is_a_disruption():
    job = started(make_job(), phase=Phase.RUNNING)

    plan = decide(job, [make_pod(job, 0, 1, node="gpu-node-1")], NODES, NOW)

    assert plan.status.preemptions == 1
    assert plan.status.last_end.reason == "PodDeleted"
    assert plan.delete == ["grpo-a0-n1"]


def test_same_observation_twice_decides_the_same():
    job = started(make_job(), phase=Phase.RUNNING)
    pods = [
        make_pod(job, 0, 0, disruption="EvictionByEvictionAPI"),
        make_pod(job, 0, 1, node="gpu-node-1"),
    ]

    first = decide(job, pods, NODES, NOW)
    second = decide(job, pods, NODES, NOW)

    assert first.status == second.status and first.delete == second.delete


def test_recovery_records_gang_creation_and_first_running_pod():
    job = started(make_job(), phase=Phase.RUNNING)
    ended = decide(job, pods_of(job, disruption="PreemptionByScheduler"), NODES, NOW)
    job = with_status(job, ended.status)

    lookup = LookupResult(ResumeTarget("/checkpoints/global_step_20", 20), last_finished_step=27)
    recreated = decide(job, [], NODES, NOW + timedelta(seconds=1), lookup)
    job = with_status(job, recreated.status)
    running = decide(job, pods_of(job, attempt=1), NODES, NOW + timedelta(seconds=3))

    recovery = running.status.recoveries[-1]
    assert recovery.attempt == 1
    assert recovery.detected_at == "2026-11-29T12:00:00.000000Z"
    assert recovery.gang_created_at == "2026-11-29T12:00:01.000000Z"
    assert recovery.first_running_at == "2026-11-29T12:00:03.000000Z"
    assert recovery.resumed_from_step == 20
    assert (recovery.last_finished_step, recovery.lost_steps) == (27, 7)
    assert running.status.phase == Phase.RUNNING


def test_max_preemptions_exhausted_fails_the_job():
    job = started(make_job(restartPolicy={"maxPreemptions": 0}), phase=Phase.RUNNING)

    plan = decide(job, pods_of(job, disruption="PreemptionByScheduler"), NODES, NOW)

    assert plan.status.phase == Phase.FAILED
    assert plan.status.conditions[-1]["reason"] == "DisruptionBudgetExhausted"


def test_suspend_deletes_the_pods_and_the_next_attempt_resumes():
    job = started(make_job(suspend=True), phase=Phase.RUNNING)

    plan = decide(job, pods_of(job), NODES, NOW)

    assert plan.status.phase == Phase.SUSPENDED
    assert sorted(plan.delete) == ["grpo-a0-n0", "grpo-a0-n1"]
    assert plan.status.attempt == 1 and plan.status.attempt_creation_time is None
    assert (plan.status.preemptions, plan.status.failures) == (0, 0)

    job = with_status(make_job(checkpoint={"resume": "never"}), plan.status)
    resumed = decide(job, [], NODES, NOW)
    assert created_pod_names(resumed) == ["grpo-a1-n0", "grpo-a1-n1"]
    suspended = next(x for x in resumed.status.conditions if x["type"] == "Suspended")
    assert suspended["status"] == "False"


def test_finished_job_is_deleted_after_its_ttl():
    job = with_status(
        make_job(ttlSecondsAfterFinished=60),
        {"phase": Phase.SUCCEEDED, "completionTime": "2026-11-29T11:59:30Z"},
    )

    early = decide(job, [], NODES, NOW)
    late = decide(job, [], NODES, NOW + timedelta(seconds=31))

    assert not early.delete_job and early.requeue_after == 30
    assert late.delete_job


def test_spec_that_slipped_past_admission_fails_with_the_field_named():
    job = make_job(framework="custom")

    plan = decide(job, [], NODES, NOW)

    assert plan.status.phase == Phase.FAILED
    assert "spec.command" in plan.status.conditions[-1]["message"]


def test_condition_keeps_its_transition_time_when_only_the_message_changes():
    job = started(make_job(), phase=Phase.RUNNING)
    first = decide(job, pods_of(job), NODES, NOW)
    job = with_status(job, first.status)

    again = decide(job, pods_of(job), NODES, NOW + timedelta(minutes=5))

    running = next(x for x in again.status.conditions if x["type"] == "Running")
    assert running["lastTransitionTime"] == "2026-11-29T12:00:00Z"
    assert again.events == []


def test_no_checkpoint_found_starts_fresh_and_says_why():
    lookup = LookupResult(
        None, None, "no complete checkpoint in /checkpoints. step 30: incomplete (no manifest)"
    )

    plan = decide(make_job(), [], NODES, NOW, lookup)

    assert created_pod_names(plan) == ["grpo-a0-n0", "grpo-a0-n1"]
    fresh = next(e for e in plan.events if e.reason == "FreshStart")
    assert "step 30: incomplete" in fresh.message
    assert plan.status.resume_from is None


def crashed_after_resuming_from(step, progress):
    """A job whose attempt 1 resumed from `step` and failed; the lookup sees `progress`."""
    path = f"/checkpoints/global_step_{step}"
    job = with_status(make_job(), {
        "attempt": 2, "failures": 1, "phase": Phase.RESTARTING,
        "resumeFrom": {"step": step, "path": path},
        "lastEnd": {"attempt": 1, "kind": "Failure", "reason": "ExitCode"},
    })  # fmt: skip
    return job, LookupResult(ResumeTarget(path, step), last_finished_step=progress)


def test_checkpoint_the_gang_crashed_loading_is_marked_bad_and_skipped():
    job, lookup = crashed_after_resuming_from(40, progress=40)

    plan = decide(job, [], NODES, NOW, lookup)

    assert plan.needs_checkpoint_lookup and plan.create == []
    assert plan.lookup_exclude == ("/checkpoints/global_step_40",)
    assert plan.status.bad_checkpoints[0].step == 40
    assert any(e.reason == "CheckpointMarkedBad" for e in plan.events)

    older = LookupResult(ResumeTarget("/checkpoints/global_step_30", 30), last_finished_step=40)
    retry = decide(with_status(job, plan.status), [], NODES, NOW, older)
    assert retry.status.resume_from.step == 30
    assert created_pod_names(retry) == ["grpo-a2-n0", "grpo-a2-n1"]


def test_checkpoint_is_not_marked_bad_when_the_gang_made_progress_after_it():
    job, lookup = crashed_after_resuming_from(40, progress=45)

    plan = decide(job, [], NODES, NOW, lookup)

    assert plan.status.bad_checkpoints == ()
    assert plan.status.resume_from.step == 40


def test_termination_taint_asks_every_running_trainer_to_checkpoint_once():
    job = started(make_job(), phase=Phase.RUNNING)
    nodes = {
        "gpu-node-0": make_node("gpu-node-0", taints=["karpenter.sh/disrupted"]),
        "gpu-node-1": make_node("gpu-node-1"),
    }

    plan = decide(job, pods_of(job), nodes, NOW)

    assert sorted(plan.request_checkpoint) == ["grpo-a0-n0", "grpo-a0-n1"]
    assert plan.status.attempt == 0 and plan.delete == []
    asked = pods_of(job)
    for pod in asked:
        pod["metadata"]["annotations"]["rljob.io/checkpoint-request"] = "2026-11-29T12:00:00Z"
    assert decide(job, asked, nodes, NOW).request_checkpoint == []


def test_a_checkpoint_request_says_when_the_first_of_the_gangs_nodes_goes():
    job = started(make_job(), phase=Phase.RUNNING)
    itn = make_node("gpu-node-0", taints=["aws-node-termination-handler/spot-itn"])
    itn["spec"]["taints"][0] |= {"effect": "NoExecute", "timeAdded": "2026-11-29T11:59:30Z"}
    gke = make_node("gpu-node-1", taints=["cloud.google.com/impending-node-termination"])

    plan = decide(job, pods_of(job), {"gpu-node-0": itn, "gpu-node-1": gke}, NOW)

    # The spot notice came 30 s ago and gives 2 minutes; GKE's, seen now, gives 30 s.
    assert plan.checkpoint_deadline == NOW + timedelta(seconds=30)
    (event,) = [e for e in plan.events if e.reason == "CheckpointRequested"]
    assert event.message.startswith("asked 2 pods to save now, by 2026-11-29T12:00:30Z: ")
    gke["spec"]["taints"] = []
    plan = decide(job, pods_of(job), {"gpu-node-0": itn, "gpu-node-1": gke}, NOW)
    assert plan.checkpoint_deadline == NOW + timedelta(seconds=90)


def test_pods_this_pass_deletes_are_not_asked_to_save_unless_the_request_says_when_the_node_goes():
    """Their SIGTERM is the same notice; only a request carries the node's time."""
    job = started(make_job(), phase=Phase.RUNNING)
    pods = [make_pod(job, 0, 0, disruption="EvictionByEvictionAPI"),
            make_pod(job, 0, 1, node="gpu-node-1")]  # fmt: skip

    plan = decide(job, pods, NODES, NOW)

    assert sorted(plan.delete) == ["grpo-a0-n0", "grpo-a0-n1"]
    assert plan.request_checkpoint == []
    assert "CheckpointRequested" not in [e.reason for e in plan.events]
    going = {
        **NODES,
        "gpu-node-1": make_node(
            "gpu-node-1", taints=["cloud.google.com/impending-node-termination"]
        ),
    }
    plan = decide(job, pods, going, NOW)
    assert sorted(plan.request_checkpoint) == ["grpo-a0-n0", "grpo-a0-n1"]
    assert plan.checkpoint_deadline == NOW + timedelta(seconds=30)


def deleted_with_grace(pod, seconds):
    """The pod as the API server stores it after a delete with `seconds` of grace at NOW."""
    pod["metadata"]["deletionTimestamp"] = iso(NOW + timedelta(seconds=seconds))
    pod["metadata"]["deletionGracePeriodSeconds"] = seconds
    return pod


def test_a_deletion_shorter_than_the_grace_period_tells_the_peers_when_the_gang_must_be_saved():
    """The deleted pod's trainer counts its own grace period (300 s) from its SIGTERM; only a
    request can tell the gang, whose save is collective, that this pod goes in 10 s. The
    deleted pod's volumes are no longer refreshed, so only its peer is asked; the peer is
    deleted once the request has reached it."""
    job = started(make_job(), phase=Phase.RUNNING)
    victim = deleted_with_grace(make_pod(job, 0, 0), 10)
    peer = make_pod(job, 0, 1, node="gpu-node-1")

    plan = decide(job, [victim, peer], NODES, NOW)

    assert plan.request_checkpoint == ["grpo-a0-n1"]
    assert plan.checkpoint_deadline == NOW + timedelta(seconds=10)
    assert plan.delete == [] and plan.requeue_after <= 2
    (event,) = [e for e in plan.events if e.reason == "CheckpointRequested"]
    assert event.message == ("asked 1 pods to save now, by 2026-11-29T12:00:10Z: pod grpo-a0-n0 "
                             "is being deleted: its deletion gave it 10 s of its 300 s grace "
                             "period")  # fmt: skip
    assert plan.status.last_end.message.endswith(
        "its deletion gave it 10 s of its 300 s grace period"
    )

    after = with_status(job, plan.status)
    asked = copy.deepcopy(peer)
    asked["metadata"]["annotations"][CHECKPOINT_REQUEST_ANNOTATION] = (
        "2026-11-29T12:00:00Z deadline=2026-11-29T12:00:10Z"
    )
    # The request's time is to the second: it may have been written at 12:00:00.99, so a pass
    # that its watch event brings at 12:00:02 still holds the pod.
    landing = decide(after, [victim, asked], NODES, NOW + timedelta(seconds=2))
    assert landing.delete == [] and 0 < landing.requeue_after <= 1
    landed = decide(after, [victim, asked], NODES, NOW + timedelta(seconds=3))
    assert landed.delete == ["grpo-a0-n1"] and landed.request_checkpoint == []


def test_a_deletion_with_the_whole_grace_period_is_the_notice_itself():
    """Every pod of the gang gets its SIGTERM and its whole grace period: nothing to ask."""
    job = started(make_job(), phase=Phase.RUNNING)
    victim = deleted_with_grace(make_pod(job, 0, 0), 300)
    peer = make_pod(job, 0, 1, node="gpu-node-1")

    plan = decide(job, [victim, peer], NODES, NOW)

    assert plan.request_checkpoint == [] and plan.delete == ["grpo-a0-n1"]
    assert "grace period" not in plan.status.last_end.message


def asked_by(pod, value):
    """The pod once a request with this value has been written to it."""
    asked = copy.deepcopy(pod)
    asked["metadata"]["annotations"][CHECKPOINT_REQUEST_ANNOTATION] = value
    return asked


def test_a_short_grace_drain_after_a_spot_warning_asks_the_pods_already_asked_again():
    """The warning asked both pods with no deadline; the drain then gives pod n0 10 s. Its
    peer must learn that time, though it was asked already, and is deleted only once the new
    request has reached it. The pod being deleted is not asked again: its kubelet no longer
    refreshes its volumes."""
    job = started(make_job(), phase=Phase.RUNNING)
    nodes = {**NODES, "gpu-node-0": make_node("gpu-node-0", taints=["karpenter.sh/disrupted"])}
    warned = "2026-11-29T11:59:00Z"
    victim = deleted_with_grace(asked_by(make_pod(job, 0, 0), warned), 10)
    peer = asked_by(make_pod(job, 0, 1, node="gpu-node-1"), warned)

    plan = decide(job, [victim, peer], nodes, NOW)

    assert plan.request_checkpoint == ["grpo-a0-n1"]
    assert plan.checkpoint_deadline == NOW + timedelta(seconds=10)
    assert plan.delete == [] and plan.requeue_after <= 2
    (event,) = [e for e in plan.events if e.reason == "CheckpointRequested"]
    assert event.message.startswith("asked 1 pods to save now, by 2026-11-29T12:00:10Z (1 of "
                                    "them again, sooner than before): pod grpo-a0-n0 is being "
                                    "deleted")  # fmt: skip

    after = with_status(job, plan.status)
    told = asked_by(peer, "2026-11-29T12:00:00Z deadline=2026-11-29T12:00:10Z")
    held = decide(after, [victim, told], nodes, NOW + timedelta(seconds=2))
    assert held.delete == [] and held.request_checkpoint == []
    landed = decide(after, [victim, told], nodes, NOW + timedelta(seconds=3))
    assert landed.delete == ["grpo-a0-n1"] and landed.request_checkpoint == []


def test_pods_are_asked_again_only_when_the_gangs_deadline_moves_earlier_by_a_second():
    """A spot notice gave the gang until 12:01:30 and both pods were told; then the other node
    gets GKE's notice (30 s from when rljob sees it, a time that moves on with every pass).
    Both are asked again once, by 12:00:30; later passes, whose deadline is later or within
    the same second, ask nobody, and a later time never replaces an earlier one."""
    job = started(make_job(), phase=Phase.RUNNING)
    itn = make_node("gpu-node-0", taints=["aws-node-termination-handler/spot-itn"])
    itn["spec"]["taints"][0] |= {"effect": "NoExecute", "timeAdded": "2026-11-29T11:59:30Z"}
    first = "2026-11-29T11:59:30Z deadline=2026-11-29T12:01:30Z"
    pods = [asked_by(pod, first) for pod in pods_of(job)]
    nodes = {**NODES, "gpu-node-0": itn}

    assert decide(job, pods, nodes, NOW).request_checkpoint == []  # nothing moved

    nodes["gpu-node-1"] = make_node(
        "gpu-node-1", taints=["cloud.google.com/impending-node-termination"]
    )
    plan = decide(job, pods, nodes, NOW)
    assert sorted(plan.request_checkpoint) == ["grpo-a0-n0", "grpo-a0-n1"]
    assert plan.checkpoint_deadline == NOW + timedelta(seconds=30)
    assert plan.delete == [] and plan.status.attempt == 0
    (event,) = [e for e in plan.events if e.reason == "CheckpointRequested"]
    assert event.message == ("asked 2 pods to save now, by 2026-11-29T12:00:30Z (2 of them "
                             "again, sooner than before): pods grpo-a0-n0, grpo-a0-n1 are on "
                             "terminating nodes")  # fmt: skip

    told = [asked_by(pod, "2026-11-29T12:00:00Z deadline=2026-11-29T12:00:30Z") for pod in pods]
    for later in (0.5, 1, 5):  # GKE's 30 s, counted from each pass: 12:00:30.5, :31, :35
        again = decide(job, told, nodes, NOW + timedelta(seconds=later))
        assert again.request_checkpoint == [] and not again.events, later


def test_failure_is_no_reason_to_ask_for_a_checkpoint():
    job = started(make_job(), phase=Phase.RUNNING)
    pods = [
        make_pod(job, 0, 0, phase="Failed", exit_code=1),
        make_pod(job, 0, 1, node="gpu-node-1"),
    ]

    assert decide(job, pods, NODES, NOW).request_checkpoint == []


def test_gang_pods_carry_the_finalizer_that_keeps_their_end_readable():
    plan = decide(make_job(checkpoint={"resume": "never"}), [], NODES, NOW)

    assert all(
        o["metadata"]["finalizers"] == ["rljob.io/track-end"]
        for o in plan.create
        if o["kind"] == "Pod"
    )


def test_finalizers_are_released_once_the_end_is_recorded_and_the_pod_has_stopped():
    job = started(make_job(), phase=Phase.RUNNING)
    evicted = make_pod(job, 0, 0, disruption="EvictionByEvictionAPI", deleting=True)
    pods = [evicted, make_pod(job, 0, 1, node="gpu-node-1")]

    ended = decide(job, pods, NODES, NOW)
    assert ended.status.attempt == 1  # the end of attempt 0 is recorded
    assert ended.delete == ["grpo-a0-n1"]
    # Neither has stopped. A release beside n1's delete could return it not yet going, and the
    # next pass would delete it again; one while they stop would hold up the next gang's pass.
    assert ended.release == []

    recorded = with_status(job, ended.status)
    n1_going = make_pod(job, 0, 1, node="gpu-node-1", deleting=True)
    assert decide(recorded, [evicted, n1_going], NODES, NOW).release == []
    n0_failed = make_pod(job, 0, 0, phase="Failed", exit_code=143, deleting=True)
    # n0 has stopped, n1 not yet: n0 waits for the pass that creates the next gang, which no
    # pass of releases alone holds up.
    assert decide(recorded, [n0_failed, n1_going], NODES, NOW).release == []
    n1_failed = make_pod(job, 0, 1, node="gpu-node-1", phase="Failed", exit_code=143,
                         deleting=True)  # fmt: skip
    last_stopped = decide(recorded, [n0_failed, n1_failed], NODES, NOW)
    assert last_stopped.needs_checkpoint_lookup  # the creating pass: it looks, then creates
    assert sorted(last_stopped.release) == ["grpo-a0-n0", "grpo-a0-n1"]
    lost = dict(n1_going, metadata={**n1_going["metadata"], "deletionGracePeriodSeconds": 0})
    assert decide(recorded, [lost], NODES, NOW).release == ["grpo-a0-n1"]  # no kubelet ends it

    # A pod that stopped before the end's pass is released by it, but only after the status
    # write that records the end: the pod is what says how the attempt ended.
    ended_stopped = decide(job, [n0_failed, make_pod(job, 0, 1, node="gpu-node-1")], NODES, NOW)
    assert ended_stopped.status.attempt == 1
    assert ended_stopped.release == ["grpo-a0-n0"] and not ended_stopped.release_first

    running = started(make_job(), phase=Phase.RUNNING)
    assert decide(running, pods_of(running), NODES, NOW).release == []


def test_a_pod_deleted_without_a_grace_period_has_stopped_and_the_next_gang_starts_beside_it():
    """The kubelet kills it at once (or none is left to): the pass that sees it creates the
    next gang and drops its finalizer, with no pass in between that only releases."""
    job = with_status(make_job(checkpoint={"resume": "never"}), {
        "attempt": 1, "preemptions": 1, "phase": Phase.RESTARTING,
    })  # fmt: skip
    going = pods_of(job, attempt=0, deleting=True)
    killed = [dict(pod, metadata={**pod["metadata"], "deletionGracePeriodSeconds": 0})
              for pod in going]  # fmt: skip

    started = decide(job, killed, NODES, NOW)

    assert created_pod_names(started) == ["grpo-a1-n0", "grpo-a1-n1"]
    assert sorted(started.release) == ["grpo-a0-n0", "grpo-a0-n1"]
    # Their end was recorded by an earlier pass: released before the new gang is created, so
    # that the scheduler no longer counts their GPUs when it places it.
    assert started.release_first
    held = decide(job, [killed[0], going[1]], NODES, NOW)  # one still has its grace period
    assert held.create == [] and held.release == [] and held.requeue_after == 1


def test_finished_job_releases_its_pods():
    job = started(make_job(), phase=Phase.RUNNING)

    plan = decide(job, pods_of(job, phase="Succeeded", exit_code=0), NODES, NOW)

    assert plan.status.phase == Phase.SUCCEEDED
    assert sorted(plan.release) == ["grpo-a0-n0", "grpo-a0-n1"]
    # The success is recorded by this pass: the pods, which say so, stay until it is stored.
    assert not plan.release_first


def test_pods_on_a_deleted_node_are_deleted_without_grace():
    job = started(make_job(), phase=Phase.RUNNING)
    pods = pods_of(job)
    nodes = {"gpu-node-0": None, "gpu-node-1": make_node("gpu-node-1")}

    plan = decide(job, pods, nodes, NOW)

    assert plan.status.last_end.reason == "NodeLost"
    assert plan.force_delete == ["grpo-a0-n0"]
    assert plan.delete == ["grpo-a0-n1"]  # its trainer still gets its grace period to save


# ------------------------------------------------------------------ a Ray gang (verl, RLinf)
VERL_MAIN = ["python3", "-m", "verl.trainer.main_ppo"]
OPENRLHF_MAIN = ["python3", "-m", "openrlhf.cli.train_ppo_ray"]


def ray_job(command=(*VERL_MAIN, "trainer.save_freq=4"), **spec):
    return make_job(framework="verl", command=list(command), **spec)


TOKEN_SECRET = "grpo-ray-token-0123456789abcdef0123456789abcdef"  # as an earlier pass drew it


def test_a_ray_jobs_token_secret_is_made_under_a_random_name_in_a_pass_before_its_gang():
    """Whoever makes the token's Secret first knows the token: its name is drawn at random by
    the pass that makes it, and recorded in the status write that follows, so nobody knows it
    before it is taken. The gang comes in the next pass, every pod mounting the recorded name;
    it asks for the Secret again (not watched, so never read), whose create finds it there."""
    job = ray_job(checkpoint={"resume": "never"})

    first = decide(job, [], NODES, NOW)

    (secret,) = first.create
    name = first.status.ray_token_secret
    assert re.fullmatch("grpo-ray-token-[0-9a-f]{32}", name)  # 128 random bits
    assert (secret["kind"], secret["metadata"]["name"]) == ("Secret", name)
    assert secret["immutable"] is True and first.requeue_after == 0
    assert first.status.attempt_creation_time is None  # no gang yet
    other = decide(job, [], NODES, NOW)  # another pass draws another name
    assert other.status.ray_token_secret not in (name, None)

    gang = decide(with_status(job, first.status), [], NODES, NOW)

    pods = [o for o in gang.create if o["kind"] == "Pod"]
    assert len(pods) == 2 and gang.status.ray_token_secret == name
    for pod in pods:
        (volume,) = [v for v in pod["spec"]["volumes"] if "secret" in v]
        assert volume["secret"]["secretName"] == name
    assert [o["metadata"]["name"] for o in gang.create if o["kind"] == "Secret"] == [name]


def test_a_ray_job_without_token_auth_makes_no_secret():
    job = ray_job(checkpoint={"resume": "never"}, ray={"tokenAuth": False})
    plan = decide(job, [], NODES, NOW)
    assert "Secret" not in [o["kind"] for o in plan.create] and len(created_pod_names(plan)) == 2
    assert plan.status.ray_token_secret is None


def test_every_gang_checks_the_launcher_configmap_though_the_cache_lists_it_as_the_jobs():
    """An owner reference is anyone's to copy: the ConfigMap the pods run code from is in
    every gang's plan, where reconcile.act reads and checks it; what else the cache lists as
    the job's (its Service, its NetworkPolicy) is not made again."""
    job = with_status(ray_job(checkpoint={"resume": "never"}), {"rayTokenSecret": TOKEN_SECRET})
    ref_spec = decide(job, [], NODES, NOW).create
    config_map = next(o for o in ref_spec if o["kind"] == "ConfigMap")["metadata"]["name"]
    shared = frozenset({("Service", "grpo"), ("NetworkPolicy", "grpo-ray-gang"),
                        ("ConfigMap", config_map)})  # fmt: skip

    plan = decide(job, [], NODES, NOW, shared=shared)

    assert [o["kind"] for o in plan.create] == ["ConfigMap", "Secret", "Pod", "Pod"]
    assert plan.create[0]["immutable"] is True


def ready(pod):
    pod["status"]["conditions"].append({"type": "Ready", "status": "True"})
    return pod


def test_ray_driver_exit_0_succeeds_the_job_and_stops_the_workers():
    job = started(ray_job(), phase=Phase.RUNNING)
    head = make_pod(job, 0, 0, phase="Succeeded", node="gpu-node-0", exit_code=0)
    worker = make_pod(job, 0, 1, node="gpu-node-1")  # `ray start --block` never exits

    plan = decide(job, [head, worker], NODES, NOW)

    assert plan.status.phase == Phase.SUCCEEDED
    assert plan.status.conditions[-1]["reason"] == "DriverSucceeded"
    assert (plan.delete, plan.force_delete) == ([], ["grpo-a0-n1"])  # nothing left to drain
    assert plan.status.ray.driver == "Succeeded"


def test_ray_worker_preempted_then_driver_crash_is_one_disruption():
    job = started(ray_job(), phase=Phase.RUNNING)
    head = make_pod(job, 0, 0, phase="Failed", node="gpu-node-0", exit_code=1)  # actor died
    worker = make_pod(job, 0, 1, node="gpu-node-1", disruption="PreemptionByScheduler")

    plan = decide(job, [head, worker], NODES, NOW)

    assert (plan.status.preemptions, plan.status.failures) == (1, 0)
    assert plan.status.last_end.reason == "PreemptionByScheduler"
    assert plan.status.phase == Phase.RESTARTING and plan.status.attempt == 1


def test_ray_head_preempted_then_worker_exit_is_one_disruption():
    job = started(ray_job(), phase=Phase.RUNNING)
    head = make_pod(job, 0, 0, node="gpu-node-0", disruption="EvictionByEvictionAPI")
    worker = make_pod(job, 0, 1, phase="Failed", node="gpu-node-1", exit_code=1)

    plan = decide(job, [head, worker], NODES, NOW)

    assert (plan.status.preemptions, plan.status.failures) == (1, 0)
    assert plan.status.ray.driver == "Disrupted"


def test_ray_driver_failing_on_healthy_nodes_spends_max_failures():
    job = started(ray_job(), phase=Phase.RUNNING)
    head = make_pod(job, 0, 0, phase="Failed", node="gpu-node-0", exit_code=1)
    worker = make_pod(job, 0, 1, node="gpu-node-1")

    plan = decide(job, [head, worker], NODES, NOW)

    assert (plan.status.preemptions, plan.status.failures) == (0, 1)
    assert (plan.status.last_end.kind, plan.status.last_end.reason) == ("Failure", "ExitCode")


def test_ray_restart_gives_the_resume_switch_to_the_driver_only():
    job = with_status(ray_job(), {"attempt": 1, "phase": Phase.RESTARTING,
                                  "rayTokenSecret": TOKEN_SECRET})  # fmt: skip
    target = ResumeTarget("/checkpoints/global_step_8", 8)

    plan = decide(job, [], NODES, NOW, LookupResult(target))

    head, worker = (o for o in plan.create if o["kind"] == "Pod")
    assert (
        "trainer.resume_from_path=/checkpoints/global_step_8"
        in head["spec"]["containers"][0]["args"]
    )
    assert worker["spec"]["containers"][0]["args"] == []


@pytest.mark.parametrize(
    ("job", "before", "after"),
    [
        # verl: rljob's bridge reports its steps; the head is Ready once one of the attempt's is done.
        (ray_job(), "Starting", "Training"),
        # OpenRLHF: no step is seen; the head is Ready once the driver runs.
        (make_job(framework="openrlhf", command=[*OPENRLHF_MAIN, "--ckpt.save_steps=4"]),
         "WaitingForNodes", "Running"),
    ],
    ids=["verl", "openrlhf"],
)  # fmt: skip
def test_ray_status_follows_the_head_from_its_start_to_its_readiness(job, before, after):
    job = started(job)
    head, worker = make_pod(job, 0, 0, node="gpu-node-0"), make_pod(job, 0, 1, node="gpu-node-1")

    starting = decide(job, [head, worker], NODES, NOW).status.ray
    ready_head = decide(job, [ready(head), worker], NODES, NOW).status.ray
    pending = decide(job, [make_pod(job, 0, 0, phase="Pending"), worker], NODES, NOW).status.ray

    assert starting == RayStatus(nodes=2, nodes_running=2, driver=before)
    assert ready_head == RayStatus(nodes=2, nodes_running=2, driver=after)
    assert pending == RayStatus(nodes=2, nodes_running=1, driver="Pending")


def test_torchrun_job_has_no_ray_status():
    job = started(make_job())
    assert decide(job, pods_of(job), NODES, NOW).status.ray is None


# ------------------------------------------------------------------ failed checkpoint lookups
def test_a_failed_lookup_backs_off_and_never_starts_fresh():
    job = make_job()

    plan = decide(job, [], NODES, NOW, LookupResult(None, failure="inspector exited 1"))

    assert plan.create == [] and not plan.needs_checkpoint_lookup
    assert plan.status.checkpoint_lookup == CheckpointLookup(
        failures=1, message="inspector exited 1", retry_after="2026-11-29T12:00:05Z"
    )
    assert plan.status.phase == Phase.PENDING and plan.requeue_after == 5
    assert [e.reason for e in plan.events] == ["CheckpointLookupFailed"]
    # Until the back-off ends, no pass looks again.
    waiting = decide(with_status(job, plan.status), [], NODES, NOW + timedelta(seconds=3))
    assert not waiting.needs_checkpoint_lookup and waiting.requeue_after == 2
    due = decide(with_status(job, plan.status), [], NODES, NOW + timedelta(seconds=5))
    assert due.needs_checkpoint_lookup


def test_the_third_failed_lookup_in_a_row_sets_a_condition_that_a_success_clears():
    job, now = make_job(), NOW
    for failures in (1, 2, 3):
        plan = decide(job, [], NODES, now, LookupResult(None, failure=f"try {failures}"))
        job, now = with_status(job, plan.status), now + timedelta(seconds=600)
    conditions = {x["type"]: x for x in plan.status.conditions}
    assert conditions["CheckpointLookupFailed"]["status"] == "True"
    assert (
        "3 checkpoint lookups in a row failed; the last: try 3"
        in conditions["CheckpointLookupFailed"]["message"]
    )
    assert plan.status.checkpoint_lookup.retry_after == "2026-11-29T12:20:20Z"  # 5, 10, 20 s

    found = decide(job, [], NODES, now, LookupResult(ResumeTarget("/checkpoints/global_step_4", 4)))

    assert found.status.checkpoint_lookup is None
    assert {x["type"]: x["status"] for x in found.status.conditions}[
        "CheckpointLookupFailed"
    ] == "False"
    assert found.status.resume_from.step == 4


def test_a_template_that_sets_rljobs_part_fails_the_job_naming_the_field_and_creates_nothing():
    job = make_job(checkpoint={"resume": "never"}, env=[
        {"name": "MASTER_PORT", "value": "1"}, {"name": "WANDB_PROJECT", "value": "grpo"},
    ])  # fmt: skip

    plan = decide(job, [], NODES, NOW)

    assert plan.status.phase == Phase.FAILED and plan.create == []
    (warning,) = [e for e in plan.events if e.reason == "InvalidSpec"]
    assert warning.message == "spec.env: MASTER_PORT: rljob sets these on the job's pods"


def test_env_without_collisions_reaches_the_pods():
    plan = decide(
        make_job(checkpoint={"resume": "never"}, env=[{"name": "A", "value": "1"}]), [], NODES, NOW
    )
    pod = next(o for o in plan.create if o["kind"] == "Pod")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["A"] == "1" and "InvalidSpec" not in [e.reason for e in plan.events]


def _waiting(pod, reason, message):
    pod["status"]["containerStatuses"] = [
        {"name": c.TRAINER_CONTAINER, "state": {"waiting": {"reason": reason, "message": message}}}
    ]
    return pod


def test_an_image_that_cannot_be_pulled_is_a_condition_and_one_event_not_a_failure():
    job = started(make_job())
    pods = [
        _waiting(make_pod(job, 0, 0, phase="Pending"), "ErrImagePull", "not found: trainer:1"),
        make_pod(job, 0, 1, phase="Pending", node="gpu-node-1"),
    ]

    plan = decide(job, pods, NODES, NOW)

    cond = next(x for x in plan.status.conditions if x["type"] == "ContainersNotStarting")
    assert cond["status"] == "True" and cond["reason"] == "ErrImagePull"
    assert "grpo-a0-n0" in cond["message"] and "not found: trainer:1" in cond["message"]
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "ErrImagePull")]
    assert plan.status.phase == Phase.PENDING and plan.status.failures == 0
    assert plan.create == [] and plan.delete == []

    # The kubelet backs off: the same reason again is no new Event; a new reason is.
    again = decide(with_status(job, plan.status), pods, NODES, NOW + timedelta(seconds=10))
    assert again.events == []
    _waiting(pods[0], "ImagePullBackOff", "Back-off pulling image")
    backoff = decide(with_status(job, again.status), pods, NODES, NOW + timedelta(seconds=20))
    assert [e.reason for e in backoff.events] == ["ImagePullBackOff"]
    assert backoff.status.failures == 0


def _unschedulable(pod, message):
    pod["spec"].pop("nodeName", None)
    pod["status"] = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
            }
        ],
    }
    return pod  # fmt: skip


def test_a_gang_the_scheduler_cannot_place_says_why_in_a_condition_and_one_event():
    job = started(make_job())
    why = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    pods = [_unschedulable(make_pod(job, 0, r, phase="Pending"), why) for r in range(2)]

    plan = decide(job, pods, NODES, NOW)

    cond = next(x for x in plan.status.conditions if x["type"] == "PodsUnschedulable")
    assert (cond["status"], cond["reason"]) == ("True", "Unschedulable")
    assert cond["message"] == f"pod grpo-a0-n0: {why}"
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "Unschedulable")]
    assert plan.status.phase == Phase.PENDING and plan.status.failures == 0
    again = decide(with_status(job, plan.status), pods, NODES, NOW + timedelta(seconds=5))
    assert again.events == []  # the same reason: no second Event

    placed = decide(with_status(job, again.status), pods_of(job), NODES, NOW)

    cond = next(x for x in placed.status.conditions if x["type"] == "PodsUnschedulable")
    assert (cond["status"], cond["reason"]) == ("False", "PodsScheduled")


def test_the_condition_clears_once_the_containers_start():
    job = started(make_job())
    stuck = [_waiting(make_pod(job, 0, r, phase="Pending"), "ErrImageNeverPull", "no image")
             for r in range(2)]  # fmt: skip
    first = decide(job, stuck, NODES, NOW)

    plan = decide(with_status(job, first.status), pods_of(job), NODES, NOW + timedelta(seconds=5))

    cond = next(x for x in plan.status.conditions if x["type"] == "ContainersNotStarting")
    assert cond["status"] == "False" and cond["reason"] == "ContainersStarted"
    assert plan.status.phase == Phase.RUNNING


@pytest.mark.parametrize(
    ("tolerance", "force_delete", "delete"),
    [
        # The dead kubelet would never end its pod: it goes at once; the live node's pod keeps
        # its grace period to save.
        (30, ["grpo-a0-n0"], ["grpo-a0-n1"]),
        (60, [], []),  # within the tolerance: nothing yet
    ],
)
def test_pods_on_a_node_not_ready_past_the_tolerance_are_deleted_without_grace(
    tolerance, force_delete, delete
):
    job = started(
        make_job(restartPolicy={"nodeNotReadyToleranceSeconds": tolerance}), phase=Phase.RUNNING
    )
    since = (NOW - timedelta(seconds=45)).strftime("%Y-%m-%dT%H:%M:%SZ")
    nodes = {"gpu-node-0": make_node("gpu-node-0", ready=False, since=since),
             "gpu-node-1": make_node("gpu-node-1")}  # fmt: skip

    plan = decide(job, pods_of(job), nodes, NOW)

    assert (plan.force_delete, plan.delete) == (force_delete, delete)


def test_a_node_not_ready_within_the_tolerance_brings_the_job_back_when_it_runs_out():
    """No watch event marks the end of the tolerance, so the pass asks to come back then."""
    job = started(make_job(restartPolicy={"nodeNotReadyToleranceSeconds": 60}), phase=Phase.RUNNING)
    since = (NOW - timedelta(seconds=45)).strftime("%Y-%m-%dT%H:%M:%SZ")
    nodes = {"gpu-node-0": make_node("gpu-node-0", ready=False, since=since),
             "gpu-node-1": make_node("gpu-node-1")}  # fmt: skip

    plan = decide(job, pods_of(job), nodes, NOW)

    assert plan.requeue_after == pytest.approx(15.5)
    assert decide(job, pods_of(job), NODES, NOW).requeue_after is None


def test_a_pod_already_being_deleted_gets_no_second_delete():
    """Every pass until a stale pod is gone would delete it again: a write each time."""
    job = with_status(make_job(checkpoint={"resume": "never"}), {
        "attempt": 1, "failures": 1, "phase": Phase.RESTARTING, "restartAfter": "2026-11-29T12:00:10Z",
    })  # fmt: skip
    old = [make_pod(job, 0, 0, phase="Failed", exit_code=1, deleting=True),
           make_pod(job, 0, 1, phase="Failed", exit_code=1, node="gpu-node-1")]  # fmt: skip

    assert decide(job, old, NODES, NOW).delete == ["grpo-a0-n1"]


def _unseen(pod, created_ago):
    """A pod that no scheduler has looked at: no PodScheduled condition, no node."""
    pod["spec"].pop("nodeName", None)
    pod["metadata"]["creationTimestamp"] = (NOW - timedelta(seconds=created_ago)).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    pod["status"] = {"phase": "Pending"}
    return pod


def test_pods_no_scheduler_has_seen_are_reported_once_the_wait_is_over_naming_the_scheduler():
    job = started(make_job(template={"spec": {"schedulerName": "volcano"}}))
    pods = [_unseen(make_pod(job, 0, r), created_ago=20) for r in range(2)]

    early = decide(job, pods, NODES, NOW, settings=Settings(scheduler_wait_seconds=60))

    assert "PodsUnschedulable" not in [x["type"] for x in early.status.conditions]
    assert early.events == [] and early.requeue_after == pytest.approx(40.5)  # no event comes

    late = decide(with_status(job, early.status), pods, NODES, NOW + timedelta(seconds=41),
                  settings=Settings(scheduler_wait_seconds=60))  # fmt: skip

    cond = next(x for x in late.status.conditions if x["type"] == "PodsUnschedulable")
    assert (cond["status"], cond["reason"]) == ("True", "NotSeenByScheduler")
    assert cond["message"] == ("pod grpo-a0-n0 has not been seen by a scheduler for 60 s "
                               "(schedulerName volcano): is that scheduler running?")  # fmt: skip
    assert [(e.type, e.reason, e.message) for e in late.events] == [
        ("Warning", "NotSeenByScheduler", cond["message"])
    ]
    assert late.status.failures == 0 and late.delete == [] and late.create == []
    # The message does not grow with the wait: a later pass writes nothing, tells nothing.
    again = decide(with_status(job, late.status), pods, NODES, NOW + timedelta(seconds=300),
                   settings=Settings(scheduler_wait_seconds=60))  # fmt: skip
    assert again.events == [] and again.status.conditions == late.status.conditions

    placed = decide(
        with_status(job, again.status), pods_of(job), NODES, NOW + timedelta(seconds=310)
    )

    cond = next(x for x in placed.status.conditions if x["type"] == "PodsUnschedulable")
    assert (cond["status"], cond["reason"]) == ("False", "PodsScheduled")


@pytest.mark.parametrize(
    "seen_by",
    [
        {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
        {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]},
        {"nodeName": "gpu-node-0"},
    ],
    ids=["tried", "gated", "bound"],
)
def test_a_pod_a_scheduler_has_tried_gated_or_bound_is_not_unseen(seen_by):
    job = started(make_job())
    pods = [_unseen(make_pod(job, 0, r), created_ago=600) for r in range(2)]
    pods[0]["status"]["conditions"] = seen_by.get("conditions", [])
    pods[0]["spec"]["nodeName"] = seen_by.get("nodeName")
    pods[1]["spec"]["nodeName"] = "gpu-node-1"

    plan = decide(job, pods, NODES, NOW)

    reasons = [x["reason"] for x in plan.status.conditions if x["type"] == "PodsUnschedulable"]
    assert "NotSeenByScheduler" not in reasons


# ------------------------------------------------------------------ save on notice (RLinf, verl)
def save_on_notice(plan):
    return next((c for c in plan.status.conditions if c["type"] == "SaveOnNotice"), None)


@pytest.mark.parametrize(
    ("framework", "command", "said"),
    [
        ("verl", VERL_MAIN, "the command does not set trainer.save_freq, and verl's default (-1)"),
        ("verl", [*VERL_MAIN, "trainer.save_freq=-1"], "trainer.save_freq=-1"),
        ("verl", [*VERL_MAIN, "trainer.save_freq=10", "++trainer.save_freq=0"], "trainer.save_freq=0"),
        ("rlinf", ["python3", "main_grpo.py", "runner.save_interval=0"], "runner.save_interval=0"),
        ("openrlhf", OPENRLHF_MAIN, "the command does not set --ckpt.save_steps, and openrlhf's default (-1)"),
        ("openrlhf", [*OPENRLHF_MAIN, "--ckpt.save_steps", "-1"], "--ckpt.save_steps=-1"),
    ],
)  # fmt: skip
def test_a_command_that_turns_the_frameworks_checkpoints_off_is_warned_at_admission(
    framework, command, said
):
    job = make_job(framework=framework, command=command, checkpoint={"resume": "never"})

    plan = decide(job, [], NODES, NOW)

    condition = save_on_notice(plan)
    assert (condition["status"], condition["reason"]) == ("False", "PeriodicSavesOff")
    assert condition["message"].startswith(f"{said} saves no checkpoint: a preemption loses all")
    warned = [e for e in plan.events if e.reason == "PeriodicSavesOff"]
    assert len(warned) == 1 and warned[0].type == "Warning"
    again = decide(with_status(job, plan.status), [], NODES, NOW)
    assert not [e for e in again.events if e.reason == "PeriodicSavesOff"]  # said once


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ([*VERL_MAIN, "trainer.save_freq=10"], []),
        (VERL_MAIN, ["trainer.save_freq=10"]),  # in spec.args, where most users put overrides
        (VERL_MAIN, ["--config-name=my_grpo"]),  # the user's config may: the bridge reads it
        (OPENRLHF_MAIN, ["--ckpt.save_steps", "10"]),  # argparse's spelling
        (OPENRLHF_MAIN, ["--ckpt.save_steps=10"]),
    ],
)
def test_a_command_that_saves_or_may_save_gets_no_warning(command, args):
    framework = "openrlhf" if command == OPENRLHF_MAIN else "verl"
    job = make_job(framework=framework, command=command, args=args, checkpoint={"resume": "never"})

    assert save_on_notice(decide(job, [], NODES, NOW)) is None


@pytest.mark.parametrize(
    ("command", "said"),
    [
        (["python", "grpo.py"], None),
        (["python3", "-m", "trl.scripts.grpo"], None),
        (["accelerate", "launch", "grpo.py"], "the command 'accelerate launch' is not `python SCRIPT`"),
        (["python", "-m", "trl.cli.main", "grpo"], "`python -m trl.cli.main` runs the trainer in child processes"),
        (["python3", "-m", "accelerate.commands.launch", "grpo.py"],
         "`python -m accelerate.commands.launch` runs the trainer in child processes"),
    ],
)  # fmt: skip
def test_a_trl_command_the_bridge_cannot_start_is_warned_at_admission(command, said):
    job = make_job(framework="trl", command=command, checkpoint={"resume": "never"})

    condition = save_on_notice(decide(job, [], NODES, NOW))

    if said is None:
        assert condition is None
        return
    assert (condition["status"], condition["reason"]) == ("False", "SaveOnNoticeUnavailable")
    assert condition["message"].startswith(said) and "last periodic save" in condition["message"]


@pytest.mark.parametrize(
    ("command", "kept"),
    [
        ([*OPENRLHF_MAIN, "--ckpt.save_steps", "10", "--ckpt.max_num", "1"], "--ckpt.max_num=1"),
        ([*OPENRLHF_MAIN, "--ckpt.save_steps=10", "--ckpt.max_num=0"], "--ckpt.max_num=0"),
        ([*OPENRLHF_MAIN, "--ckpt.save_steps=10", "--ckpt.max_num=2"], None),
        ([*OPENRLHF_MAIN, "--ckpt.save_steps=10"], None),  # OpenRLHF's default keeps 3
    ],
)
def test_an_openrlhf_command_that_keeps_one_checkpoint_is_warned_at_admission(command, kept):
    """OpenRLHF's rotation deletes the oldest folder before each save: keeping one leaves no
    complete checkpoint while the next is written."""
    job = make_job(framework="openrlhf", command=command, checkpoint={"resume": "never"})

    plan = decide(job, [], NODES, NOW)

    condition = save_on_notice(plan)
    if kept is None:
        assert condition is None
        return
    assert (condition["status"], condition["reason"]) == ("False", "KeepsOneCheckpoint")
    assert condition["message"].startswith(f"{kept}: openrlhf deletes its only complete")
    assert [e.type for e in plan.events if e.reason == "KeepsOneCheckpoint"] == ["Warning"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--save_only_model"], "--save_only_model=true"),
        (["--save_only_model", "--save_steps=4"], "--save_only_model=true"),
        (["--save_only_model", "True"], "--save_only_model=true"),
        (["--save_only_model=1"], "--save_only_model=1"),
        (["--save_only_model", "false"], None),
        (["--save_only_model", "--save_only_model=no"], None),  # the last one wins
        (["--save_steps=4"], None),
    ],
)
def test_a_trl_command_that_saves_weights_only_is_warned_at_admission(args, said):
    """transformers' `save_only_model` writes no optimizer, scheduler or RNG state: no resume
    goes on from it, and the job must say so before a preemption costs every step."""
    job = make_job(framework="trl", command=["python", "grpo.py"], args=args,
                   checkpoint={"resume": "never"})  # fmt: skip

    plan = decide(job, [], NODES, NOW)

    condition = save_on_notice(plan)
    if said is None:
        assert condition is None
        return
    assert (condition["status"], condition["reason"]) == ("False", "CheckpointsNotResumable")
    assert condition["message"].startswith(f"{said}: the trainer saves the weights alone")
    assert "from its first step" in condition["message"]
    assert [e.type for e in plan.events if e.reason == "CheckpointsNotResumable"] == ["Warning"]
    mended = with_status(job, plan.status)
    mended["spec"]["args"] = ["--save_steps=4"]
    assert save_on_notice(decide(mended, [], NODES, NOW))["reason"] == "SaveOnNoticeAvailable"


def test_the_bridges_word_from_the_last_attempt_becomes_the_condition_and_an_event():
    job = with_status(ray_job(), {"attempt": 1, "phase": Phase.RESTARTING})
    why = "verl 0.10.2: verl.trainer.ppo.v1.trainer_base.PPOTrainer.step not found"
    found = LookupResult(ResumeTarget("/checkpoints/global_step_8", 8), 9,
                         save_on_notice_unavailable=why)  # fmt: skip

    plan = decide(job, [], NODES, NOW, found)

    condition = save_on_notice(plan)
    assert (condition["status"], condition["reason"]) == ("False", "SaveOnNoticeUnavailable")
    assert condition["message"].startswith(why) and "last periodic save" in condition["message"]
    assert [e.type for e in plan.events if e.reason == "SaveOnNoticeUnavailable"] == ["Warning"]
    # A later attempt whose bridge hooked the loop: True again.
    later = with_status(job, replace(plan.status, attempt=2, attempt_creation_time=None))
    mended = decide(later, [], NODES, NOW, LookupResult(ResumeTarget("/c/global_step_12", 12), 12))
    assert (save_on_notice(mended)["status"], save_on_notice(mended)["reason"]) == (
        "True", "SaveOnNoticeAvailable"
    )  # fmt: skip


def test_a_save_on_notice_that_comes_later_keeps_the_condition_true_and_says_why_once():
    rlinf = make_job(framework="rlinf", command=["python3", "main_grpo.py"])
    job = with_status(rlinf, {"attempt": 1, "phase": Phase.RESTARTING})
    why = (
        "rlinf 0.4.0: rlinf.runners.embodied_runner.EmbodiedRunner._save_checkpoint not "
        "found: the loop is held only at the runner's next check_progress, a step later"
    )
    found = LookupResult(ResumeTarget("/checkpoints/global_step_8", 8), 9,
                         save_on_notice_late=why)  # fmt: skip

    plan = decide(job, [], NODES, NOW, found)

    condition = save_on_notice(plan)
    assert (condition["status"], condition["reason"]) == ("True", "SaveOnNoticeLate")
    assert condition["message"].startswith(why)
    assert [e.type for e in plan.events if e.reason == "SaveOnNoticeLate"] == ["Warning"]
    again = decide(with_status(job, plan.status), [], NODES, NOW, found)
    assert not [e for e in again.events if e.reason == "SaveOnNoticeLate"]  # said once
    later = with_status(job, replace(plan.status, attempt=2, attempt_creation_time=None))
    mended = decide(later, [], NODES, NOW, LookupResult(ResumeTarget("/c/global_step_12", 12), 12))
    assert save_on_notice(mended)["reason"] == "SaveOnNoticeAvailable"
