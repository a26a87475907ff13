"""In-place restart (spec.restartPolicy.inPlace): the pods a torchrun gang keeps when one of
its pods is lost, from the attempt's end to the next gang, as passes over plain objects."""

from __future__ import annotations

import copy
import json
from datetime import timedelta

import pytest
from builders import NOW, make_job, make_node, make_pod
from passes import decide, with_status
from rljob_contract import (
    CHECKPOINT_REQUEST_ANNOTATION,
    ENV_IN_PLACE_WAIT,
    ENV_RESUME_DIR,
    ENV_RESUME_STEP,
    EXIT_RESTART_IN_PLACE,
    RUN_ANNOTATION,
)
from rljob_contract.in_place import DEFAULT_WORD_WAIT_SECONDS, parse_word, word_wait_seconds
from rljob_operator import constants as c
from rljob_operator.api.reasons import ConditionType, EventType, Phase
from rljob_operator.api.spec import parse_spec
from rljob_operator.api.timestamps import iso
from rljob_operator.launcher import in_place
from rljob_operator.launcher.pods import (
    ResumeTarget,
    desired_launcher_config_map,
    desired_pod,
    run_in_place,
)
from rljob_operator.preemption.nodes import RESTART_RULES_FEATURE, takes_in_place_pods
from rljob_operator.reconcile.plan import LookupResult
from rljob_operator.reconcile.policies.in_place import restart_rule_withheld
from rljob_operator.reconcile.snapshot import job_ref

IN_PLACE = {"inPlace": True}
LOOKUP = LookupResult(ResumeTarget("/ckpt/global_step_7", 7), last_finished_step=7)


def restarting_node(name: str) -> dict:
    node = make_node(name)
    node["status"]["declaredFeatures"] = [RESTART_RULES_FEATURE]
    return node


NODES = {n: restarting_node(n) for n in ("gpu-node-0", "gpu-node-1")}


def running(job, attempt=0):
    return with_status(job, {"attempt": attempt, "attemptCreationTime": "2026-11-29T11:00:00Z",
                             "phase": Phase.RUNNING})  # fmt: skip


def gang(job, attempt=0):
    return [make_pod(job, attempt, rank, node=f"gpu-node-{rank}") for rank in range(2)]


def lose_rank_1(job):
    """The gang of attempt 0 with its rank 1 pod being deleted (its node is not the
    survivor's)."""
    pods = gang(job)
    pods[1]["metadata"]["deletionTimestamp"] = "2026-11-29T11:59:00Z"
    return pods


def restarted_in_place(pod) -> dict:
    """The pod after its wrapper stopped the run and the kubelet restarted its containers in
    place (RestartAllContainers: its lastState is the kubelet's, not the trainer's)."""
    pod = copy.deepcopy(pod)
    ended = {
        "exitCode": 137,
        "reason": "RestartingAllContainers",
        "message": "The container is removed because RestartAllContainers in place",
    }
    pod["status"]["containerStatuses"] = [{
        "name": c.TRAINER_CONTAINER, "restartCount": 1,
        "state": {"running": {"startedAt": "2026-11-29T11:59:30Z"}},
        "lastState": {"terminated": ended},
    }]  # fmt: skip
    return pod


def applied(pod, patch: dict) -> dict:
    """The pod after a metadata merge patch."""
    pod = copy.deepcopy(pod)
    for kind, values in patch.items():
        for key, value in values.items():
            if value is None:
                pod["metadata"].get(kind, {}).pop(key, None)
            else:
                pod["metadata"].setdefault(kind, {})[key] = value
    return pod


def condition(status, cond_type):
    return next((x for x in status.conditions if x["type"] == cond_type), None)


def test_an_in_place_job_runs_its_trainer_under_the_wrapper_with_rljobs_restart_rule():
    spec = parse_spec(make_job(restartPolicy=IN_PLACE)["spec"])
    ref = job_ref(make_job())

    pod = desired_pod(spec, ref, 0, 1, None)
    plain = desired_pod(parse_spec(make_job()["spec"]), ref, 0, 1, None)

    (trainer,) = pod["spec"]["containers"]
    (plain_trainer,) = plain["spec"]["containers"]
    # The trainer's own Python runs the wrapper.
    assert trainer["command"] == in_place.wrapped(plain_trainer["command"], "python")
    assert trainer["command"][2] == str(len(plain_trainer["command"]))
    assert trainer["restartPolicy"] == "Never"
    assert trainer["restartPolicyRules"] == [{"action": "RestartAllContainers", "exitCodes": {
        "operator": "In", "values": [EXIT_RESTART_IN_PLACE]}}]  # fmt: skip
    assert {"name": in_place.STATE_VOLUME, "emptyDir": {}} in pod["spec"]["volumes"]
    podinfo = next(v for v in pod["spec"]["volumes"] if v["name"] == c.PODINFO_VOLUME)
    assert in_place.RUN_FILE_ITEM in podinfo["downwardAPI"]["items"]
    assert "restartPolicyRules" not in plain_trainer
    files = desired_launcher_config_map(spec, ref)["data"]
    assert in_place.WRAPPER in files


def test_a_ray_gang_runs_its_node_program_under_the_wrapper_and_only_its_head_gets_the_driver():
    job = make_job(restartPolicy=IN_PLACE, launcher="ray", framework="verl", args=["x=1"],
                   command=["python", "-m", "verl.trainer.main_ppo"])  # fmt: skip
    spec, ref = parse_spec(job["spec"]), job_ref(job)
    plain = parse_spec(make_job(launcher="ray", framework="verl",
                                command=["python", "-m", "verl.trainer.main_ppo"])["spec"])  # fmt: skip

    for rank in (0, 1):
        (trainer,) = desired_pod(spec, ref, 0, rank, None)["spec"]["containers"]
        (before,) = desired_pod(plain, ref, 0, rank, None)["spec"]["containers"]
        assert trainer["command"] == in_place.wrapped(before["command"], "python")
        assert trainer["restartPolicyRules"] == in_place.RESTART_RULES
    files = desired_launcher_config_map(spec, ref)["data"]
    assert {in_place.WRAPPER, "ray_node.py"} <= set(files)
    resume = ResumeTarget("/ckpt/global_step_3", 3)
    head = parse_word(run_in_place(spec, ref, 1, 0, resume, 1)["annotations"][RUN_ANNOTATION])
    worker = parse_word(run_in_place(spec, ref, 1, 1, resume, 1)["annotations"][RUN_ANNOTATION])
    assert head.args[0] == "x=1" and "trainer.resume_mode=resume_path" in head.args
    assert worker.args == ()  # the driver runs on the head


def test_a_lost_pod_ends_the_attempt_and_the_survivor_is_told_to_stop_and_wait_not_deleted():
    job = running(make_job(restartPolicy=IN_PLACE))
    pods = lose_rank_1(job)

    plan = decide(job, pods, NODES, NOW)

    assert plan.status.attempt == 1 and plan.status.preemptions == 1
    assert plan.delete == []  # the lost pod is going already; the survivor stays
    assert list(plan.stop_in_place) == ["grpo-a0-n0"]
    word = parse_word(plan.stop_in_place["grpo-a0-n0"]["annotations"][RUN_ANNOTATION])
    assert (word.attempt, word.runs, word.restarts) == (1, False, 0)
    assert "grpo-a0-n0" not in plan.request_checkpoint  # its stop is its notice
    assert "grpo-a0-n0" not in plan.release  # it keeps rljob's finalizer


def test_without_the_field_or_on_a_kubelet_without_restart_rules_the_gang_is_recreated():
    asked = running(make_job(restartPolicy=IN_PLACE))
    plain = running(make_job())
    old_kubelets = {n: make_node(n) for n in NODES}

    on_old = decide(asked, lose_rank_1(asked), old_kubelets, NOW)
    off = decide(plain, lose_rank_1(plain), NODES, NOW)

    assert on_old.delete == ["grpo-a0-n0"] and not on_old.stop_in_place
    recreated = condition(on_old.status, ConditionType.IN_PLACE_RESTART)
    assert recreated["status"] == "False" and recreated["reason"] == "GangRecreated"
    assert "grpo-a0-n1: it is being deleted" in recreated["message"]  # every pod's why
    assert f"grpo-a0-n0: its node gpu-node-0 does not declare {RESTART_RULES_FEATURE}" in (
        recreated["message"])  # fmt: skip
    assert off.delete == ["grpo-a0-n0"] and not off.stop_in_place
    assert condition(off.status, ConditionType.IN_PLACE_RESTART) is None


def test_a_gang_where_no_pod_was_lost_is_recreated_whole():
    job = running(make_job(restartPolicy=IN_PLACE))
    pods = gang(job)
    for pod in pods:  # both trainers crashed on their own: a failure, not a loss
        pod["status"] = {"phase": "Failed", "containerStatuses": [
            {"name": c.TRAINER_CONTAINER, "state": {"terminated": {"exitCode": 1}}}]}  # fmt: skip

    plan = decide(job, pods, NODES, NOW)

    assert plan.status.failures == 1 and not plan.stop_in_place
    assert sorted(plan.delete) == ["grpo-a0-n0", "grpo-a0-n1"]


def ended_with_survivor(job):
    """The job after the pass that ended attempt 0, and its survivor as that pass left it."""
    plan = decide(job, lose_rank_1(job), NODES, NOW)
    survivor = applied(gang(job)[0], plan.stop_in_place["grpo-a0-n0"])
    return with_status(job, plan.status), survivor


def test_the_next_gang_waits_for_the_survivors_run_to_end():
    ended, survivor = ended_with_survivor(running(make_job(restartPolicy=IN_PLACE)))

    plan = decide(ended, [survivor], NODES, NOW + timedelta(seconds=5))

    assert not plan.create and not plan.needs_checkpoint_lookup
    assert plan.delete == [] and plan.release == []  # kept: neither deleted nor released
    assert plan.requeue_after is not None


def test_once_the_survivors_run_ended_only_the_lost_rank_is_made_and_the_survivor_joins():
    ended, survivor = ended_with_survivor(running(make_job(restartPolicy=IN_PLACE)))
    survivor = restarted_in_place(survivor)
    survivor["metadata"]["annotations"][CHECKPOINT_REQUEST_ANNOTATION] = "2026-11-29T11:59:01Z"
    later = NOW + timedelta(seconds=8)

    look = decide(ended, [survivor], NODES, later)
    plan = decide(ended, [survivor], NODES, later, LOOKUP)

    assert look.needs_checkpoint_lookup
    assert [p["metadata"]["name"] for p in plan.create if p["kind"] == "Pod"] == ["grpo-a1-n1"]
    patch = plan.run_in_place["grpo-a0-n0"]
    assert patch["labels"][c.LABEL_ATTEMPT] == "1" and patch["labels"][c.LABEL_NODE_RANK] == "0"
    assert patch["annotations"][CHECKPOINT_REQUEST_ANNOTATION] is None
    word = parse_word(patch["annotations"][RUN_ANNOTATION])
    new_pod = next(p for p in plan.create if p["kind"] == "Pod")
    assert list(word.args) == new_pod["spec"]["containers"][0]["args"]  # the same resume switch
    assert in_place.has_restart_rule(new_pod)  # as the kept pod, however many nodes declare it
    assert word.env == {ENV_RESUME_DIR: "/ckpt/global_step_7", ENV_RESUME_STEP: "7"}
    assert (word.attempt, word.restarts) == (1, 1)
    (recovery,) = plan.status.recoveries
    assert (recovery.restarted_in_place, recovery.resumed_from_step) == (1, 7)
    assert condition(plan.status, ConditionType.IN_PLACE_RESTART)["reason"] == "PodsKept"
    assert any("created 1 pods, restarted 1 in place" in e.message for e in plan.events)


def test_the_joined_gang_runs_and_a_second_creation_makes_no_twin_of_a_kept_rank():
    ended, survivor = ended_with_survivor(running(make_job(restartPolicy=IN_PLACE)))
    survivor = restarted_in_place(survivor)
    later = NOW + timedelta(seconds=8)
    made = decide(ended, [survivor], NODES, later, LOOKUP)
    joined = applied(survivor, made.run_in_place["grpo-a0-n0"])
    new_pod = {**next(p for p in made.create if p["kind"] == "Pod"),
               "status": {"phase": "Running"}}  # fmt: skip
    new_pod["spec"]["nodeName"] = "gpu-node-1"

    steady = decide(with_status(ended, made.status), [joined, new_pod], NODES, later)
    # The patch landed, the status write that recorded the gang did not: no twin of rank 0.
    again = decide(ended, [joined], NODES, later, LOOKUP)

    assert steady.status.phase == Phase.RUNNING and not steady.delete
    assert not steady.stop_in_place and not steady.run_in_place
    assert [p["metadata"]["name"] for p in again.create if p["kind"] == "Pod"] == ["grpo-a1-n1"]


def test_a_survivor_whose_run_does_not_end_in_time_or_whose_node_goes_is_replaced():
    ended, survivor = ended_with_survivor(running(make_job(restartPolicy=IN_PLACE)))
    grace = parse_spec(ended["spec"]).grace_seconds
    late = NOW + timedelta(seconds=grace + 16)
    gone_node = {"gpu-node-1": NODES["gpu-node-1"], "gpu-node-0": make_node("gpu-node-0",
                 ready=False, since=iso(NOW))}  # fmt: skip

    too_late = decide(ended, [survivor], NODES, late)
    unfit = decide(ended, [restarted_in_place(survivor)], gone_node, NOW + timedelta(seconds=5))

    assert too_late.delete == ["grpo-a0-n0"] and not too_late.create
    assert unfit.delete == ["grpo-a0-n0"] and not unfit.create


def test_a_kept_pod_whose_container_ended_for_good_is_replaced():
    ended, survivor = ended_with_survivor(running(make_job(restartPolicy=IN_PLACE)))
    survivor["status"] = {"phase": "Failed", "containerStatuses": [  # no restart: an old kubelet
        {"name": c.TRAINER_CONTAINER, "state": {"terminated": {"exitCode": 117}}}]}  # fmt: skip

    plan = decide(ended, [survivor], NODES, NOW + timedelta(seconds=5))

    assert plan.delete == ["grpo-a0-n0"] and not plan.create and not plan.run_in_place


def test_the_word_round_trips_and_a_malformed_one_is_no_word():
    patch = in_place.run_patch(3, ["--a"], {"X": None}, 2, {"k": "v"})
    word = parse_word(patch["annotations"][RUN_ANNOTATION])

    assert (word.attempt, word.args, word.env, word.restarts) == (3, ("--a",), {"X": None}, 2)
    assert parse_word(json.dumps({"attempt": 3, "restarts": -1})) is None
    assert parse_word("{") is None


# --------------------------------------------------------------------------- too few nodes
FRESH = LookupResult(None, detail="no complete checkpoint yet")


def new_pods(plan) -> list[dict]:
    return [p for p in plan.create if p["kind"] == "Pod"]


def test_a_node_takes_an_in_place_pod_where_it_declares_the_feature_is_ready_and_not_cordoned():
    cordoned = restarting_node("n")
    cordoned["spec"]["unschedulable"] = True

    assert takes_in_place_pods(restarting_node("n"))
    assert not takes_in_place_pods(make_node("n"))  # a kubelet before 1.36, or a node agent
    assert not takes_in_place_pods(cordoned)
    not_ready = make_node("n", ready=False)
    not_ready["status"]["declaredFeatures"] = [RESTART_RULES_FEATURE]
    assert not takes_in_place_pods(not_ready)


@pytest.mark.parametrize(
    ("nnodes", "in_place_nodes", "made", "withheld"),
    [
        (2, 0, None, "no Ready node declares"),
        (2, 1, None, "Ready nodes that declare RestartAllContainersOnContainerExits: 1, fewer"),
        (2, 2, None, None),
        (2, 5, None, None),
        (2, 5, False, "the gang's first pods were made without it"),  # the gang's pods alike
        (2, 0, True, None),
    ],
)
def test_the_restart_rule_is_withheld_where_fewer_nodes_than_pods_take_it(
    nnodes, in_place_nodes, made, withheld
):
    why = restart_rule_withheld(nnodes, in_place_nodes, made)

    assert why == withheld if withheld is None else withheld in why


def test_where_no_node_declares_the_feature_the_gang_is_made_as_without_in_place_and_says_so():
    asked = make_job(restartPolicy=IN_PLACE)
    plain = make_job()

    plan = decide(asked, [], {}, NOW, FRESH, in_place_nodes=0)
    as_plain = decide(plain, [], {}, NOW, FRESH, in_place_nodes=0)

    assert new_pods(plan) == new_pods(as_plain)  # no wrapper, rule, run file, state dir, env
    assert len(new_pods(plan)) == 2
    assert not any(in_place.has_restart_rule(pod) for pod in new_pods(plan))
    said = condition(plan.status, ConditionType.IN_PLACE_RESTART)
    assert (said["status"], said["reason"]) == ("False", "FeatureMissing")
    assert RESTART_RULES_FEATURE in said["message"]
    assert "each recovery recreates the gang" in said["message"]
    (warning,) = [e for e in plan.events if e.reason == "FeatureMissing"]
    assert warning.type == EventType.WARNING and warning.message == said["message"]
    assert condition(as_plain.status, ConditionType.IN_PLACE_RESTART) is None


def test_where_a_node_per_pod_declares_the_feature_the_gang_carries_the_rule():
    job = make_job(restartPolicy=IN_PLACE)

    enough = decide(job, [], {}, NOW, FRESH, in_place_nodes=2)
    too_few = decide(job, [], {}, NOW, FRESH, in_place_nodes=1)

    assert all(in_place.has_restart_rule(pod) for pod in new_pods(enough))
    assert condition(enough.status, ConditionType.IN_PLACE_RESTART) is None
    assert not any(in_place.has_restart_rule(pod) for pod in new_pods(too_few))
    assert condition(too_few.status, ConditionType.IN_PLACE_RESTART)["reason"] == "FeatureMissing"


def made_without_the_rule(job):
    """The job once its attempt 0 was made where no node declares the feature, and its gang
    running on nodes that (by now) do."""
    made = decide(job, [], {}, NOW, FRESH, in_place_nodes=0)
    job = with_status(job, {**made.status.to_dict(), "phase": Phase.RUNNING})
    pods = [make_pod(job, 0, rank, node=f"gpu-node-{rank}") for rank in range(2)]
    for pod, rendered in zip(pods, new_pods(made), strict=True):
        pod["spec"] = {**rendered["spec"], "nodeName": pod["spec"]["nodeName"]}
    return job, pods


def test_a_gang_made_without_the_rule_is_recreated_whole_and_the_condition_keeps_its_why():
    job, pods = made_without_the_rule(make_job(restartPolicy=IN_PLACE))
    pods[1]["metadata"]["deletionTimestamp"] = "2026-11-29T11:59:00Z"

    plan = decide(job, pods, NODES, NOW, in_place_nodes=2)

    assert plan.status.attempt == 1 and plan.status.preemptions == 1
    assert plan.delete == ["grpo-a0-n0"] and not plan.stop_in_place  # never kept
    before = next(x for x in job["status"]["conditions"] if x["type"] == "InPlaceRestart")
    said = condition(plan.status, ConditionType.IN_PLACE_RESTART)
    assert (said["reason"], said["message"]) == ("FeatureMissing", before["message"])


def test_the_next_gang_where_the_feature_is_still_missing_says_it_again_without_a_second_event():
    job, _ = made_without_the_rule(make_job(restartPolicy=IN_PLACE))
    ended = with_status(job, {**job["status"], "attempt": 1, "attemptCreationTime": None})

    plan = decide(ended, [], {}, NOW + timedelta(seconds=30), FRESH, in_place_nodes=0)

    assert len(new_pods(plan)) == 2
    assert not any(in_place.has_restart_rule(pod) for pod in new_pods(plan))
    said = condition(plan.status, ConditionType.IN_PLACE_RESTART)
    assert said["reason"] == "FeatureMissing" and said["message"].startswith("attempt 1: ")
    assert not [e for e in plan.events if e.reason == "FeatureMissing"]


def test_once_the_nodes_declare_the_feature_the_next_gang_carries_the_rule_again():
    job, _ = made_without_the_rule(make_job(restartPolicy=IN_PLACE))
    ended = with_status(job, {**job["status"], "attempt": 1, "attemptCreationTime": None})

    plan = decide(ended, [], {}, NOW + timedelta(seconds=30), FRESH, in_place_nodes=3)

    assert all(in_place.has_restart_rule(pod) for pod in new_pods(plan))
    said = condition(plan.status, ConditionType.IN_PLACE_RESTART)
    assert (said["status"], said["reason"]) == ("False", "GangRecreated")
    assert "again" in said["message"]


def test_a_gang_partly_made_without_the_rule_gets_its_other_pods_alike():
    """The pass that made rank 0's pod had its status write fail: the next one makes rank 1,
    now that nodes declare the feature, without the rule as rank 0."""
    job = make_job(restartPolicy=IN_PLACE)
    made = decide(job, [], {}, NOW, FRESH, in_place_nodes=0)
    rank0 = {**new_pods(made)[0], "status": {"phase": "Pending"}}

    plan = decide(job, [rank0], {}, NOW, FRESH, in_place_nodes=2)

    assert [p["metadata"]["name"] for p in new_pods(plan)] == ["grpo-a0-n1"]
    assert not in_place.has_restart_rule(new_pods(plan)[0])
    said = condition(plan.status, ConditionType.IN_PLACE_RESTART)
    assert said["reason"] == "FeatureMissing" and "first pods were made without it" in (
        said["message"])  # fmt: skip


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(None, DEFAULT_WORD_WAIT_SECONDS), ("2.5", 2.5), ("0", 0.0), ("soon", DEFAULT_WORD_WAIT_SECONDS),
     ("-1", DEFAULT_WORD_WAIT_SECONDS), ("inf", DEFAULT_WORD_WAIT_SECONDS)],
)  # fmt: skip
def test_the_wait_for_a_word_that_the_wrapper_and_a_warm_trainer_share(value, seconds):
    env = {} if value is None else {ENV_IN_PLACE_WAIT: value}
    assert word_wait_seconds(env) == seconds
