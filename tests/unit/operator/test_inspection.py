"""The inspector pod, which reads a checkpoint volume the operator cannot mount, is created
and removed by the pass's plan, like every other write, never while planning."""

from __future__ import annotations

import copy
import json

import pytest
from builders import NOW, make_job
from passes import plan_pass
from rljob_operator import constants as c
from rljob_operator.api.status import CheckpointLookup, ResumeFrom
from rljob_operator.reconcile.lookup.finder import CheckpointFinder

# No volume the operator reads itself: every look goes through an inspector pod.
FINDER = CheckpointFinder(volumes={}, inspector_image="rljob-operator:test")
NODES: dict = {}
VOLUME = {"persistentVolumeClaim": {"claimName": "ckpts"}}


def job_with_volume(**status):
    job = make_job(checkpoint={"volume": VOLUME})
    job["status"] = status
    return job


def first_inspector(job):
    """The inspector pod the job's first pass creates."""
    (pod,) = [o for o in plan_pass(job, [], NODES, FINDER, NOW).create if o["kind"] == "Pod"]
    return pod


def reported(pod, report, attempt=0):
    """The inspector as the cache shows it once its container wrote `report` and exited."""
    pod = copy.deepcopy(pod)
    message = json.dumps(report)
    state = {"terminated": {"exitCode": 0, "message": message}}
    pod["status"] = {"phase": "Succeeded", "containerStatuses": [{"name": "i", "state": state}]}
    return pod


def test_a_look_that_needs_an_inspector_creates_it_in_the_plan_and_nothing_else():
    plan = plan_pass(job_with_volume(), [], NODES, FINDER, NOW)

    assert [o["metadata"]["name"] for o in plan.create] == ["grpo-inspect-a0"]
    assert plan.create[0]["metadata"]["labels"][c.LABEL_ROLE] == c.ROLE_INSPECTOR
    assert plan.delete == [] and plan.needs_checkpoint_lookup


def test_a_running_inspector_is_waited_for_without_a_second_create():
    job = job_with_volume()
    running = dict(first_inspector(job), status={"phase": "Running"})

    plan = plan_pass(job, [running], NODES, FINDER, NOW)

    assert plan.create == [] and plan.delete == []


def test_an_inspector_that_reported_is_read_then_deleted_by_the_plan_that_records_it():
    job = job_with_volume()
    report = {"found": True, "path": "/checkpoints/global_step_30", "step": 30,
              "progress_step": 33}  # fmt: skip
    done = reported(first_inspector(job), report)

    plan = plan_pass(job, [done], NODES, FINDER, NOW)

    assert plan.status.resume_from == ResumeFrom(30, "/checkpoints/global_step_30")
    assert [o["metadata"]["name"] for o in plan.create if o["kind"] == "Pod"] == [
        "grpo-a0-n0", "grpo-a0-n1",
    ]  # fmt: skip
    assert plan.delete == ["grpo-inspect-a0"]


def test_a_bad_checkpoint_found_by_an_inspector_is_recorded_and_the_next_look_waits_for_it_to_go():
    """The checkpoint the last attempt crashed on is marked bad in this pass's status; the
    next look needs a new inspector of the same name, created once the old one is gone."""
    path = "/checkpoints/global_step_40"
    job = job_with_volume(
        attempt=1, failures=1, resumeFrom={"step": 40, "path": path},
        lastEnd={"attempt": 0, "kind": "Failure", "reason": "ExitCode"},
    )  # fmt: skip
    done = reported(first_inspector(job), {"found": True, "path": path, "step": 40,
                                           "progress_step": 40})  # fmt: skip
    assert done["metadata"]["name"] == "grpo-inspect-a1"

    plan = plan_pass(job, [done], NODES, FINDER, NOW)

    assert [b.path for b in plan.status.bad_checkpoints] == [path]
    assert [e.reason for e in plan.events].count("CheckpointMarkedBad") == 1
    assert plan.create == [] and plan.delete == ["grpo-inspect-a1"]

    gone = plan_pass(dict(job, status=plan.status.to_dict()), [], NODES, FINDER, NOW)
    (inspector,) = gone.create
    assert inspector["spec"]["containers"][0]["command"][-2:] == ["--exclude", path]


def test_an_inspector_of_an_earlier_attempt_is_deleted():
    job = job_with_volume()
    old = dict(first_inspector(job), status={"phase": "Running"})
    job["status"] = {"attempt": 1, "failures": 1}

    plan = plan_pass(job, [old], NODES, FINDER, NOW)

    assert "grpo-inspect-a0" in plan.delete
    assert [o["metadata"]["name"] for o in plan.create] == ["grpo-inspect-a1"]


@pytest.mark.parametrize(
    ("spec", "layout"),
    [
        ({"backend": "megatron"}, "rljob"),
        ({"backend": "fsdp", "checkpoint": {"volume": VOLUME, "layout": "auto"}}, "rljob"),
        ({"checkpoint": {"volume": VOLUME, "layout": "dcp"}}, "dcp"),
        ({"framework": "rlinf", "backend": "megatron", "command": ["python", "main.py"]}, "auto"),
    ],
)  # fmt: skip
def test_layout_auto_is_rljob_for_the_rljob_trainer_whatever_its_backend(spec, layout):
    """Its torn Megatron save would read as complete rlinf-megatron if told from the files."""
    job = make_job(**{"checkpoint": {"volume": VOLUME}, **spec})
    job["status"] = {"rayTokenSecret": "grpo-ray-token-made"}  # a Ray job's, made before the look
    inspector = first_inspector(job)
    command = inspector["spec"]["containers"][0]["command"]
    assert command[command.index("--layout") + 1] == layout

    report = {"found": True, "path": "/checkpoints/global_step_30", "step": 30}
    plan = plan_pass(job, [reported(inspector, report)], NODES, FINDER, NOW)

    assert plan.status.latest_checkpoint.layout == layout


UNSCHEDULABLE = {"phase": "Pending", "conditions": [{
    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
    "message": '0/3 nodes are available: persistentvolumeclaim "nope" not found.'}]}  # fmt: skip
IMAGE_NOT_PULLED = {"phase": "Pending", "containerStatuses": [{"name": "inspector", "state": {
    "waiting": {"reason": "ErrImagePull", "message": "rljob-operator:test: not found"}}}]}  # fmt: skip


@pytest.mark.parametrize(
    ("status", "condition", "reason", "says"),
    [
        (UNSCHEDULABLE, "PodsUnschedulable", "Unschedulable",
         'inspector pod grpo-inspect-a0: 0/3 nodes are available: persistentvolumeclaim "nope" not found.'),
        (IMAGE_NOT_PULLED, "ContainersNotStarting", "ErrImagePull",
         "inspector pod grpo-inspect-a0: container inspector: rljob-operator:test: not found"),
    ],
    ids=["unschedulable", "image"],
)  # fmt: skip
def test_an_inspector_that_cannot_start_says_why_in_the_gangs_words_until_it_runs(
    status, condition, reason, says
):
    job = job_with_volume()
    stuck = dict(first_inspector(job), status=status)

    plan = plan_pass(job, [stuck], NODES, FINDER, NOW)

    conditions = {x["type"]: x for x in plan.status.conditions}
    assert (conditions[condition]["status"], conditions[condition]["reason"]) == ("True", reason)
    assert conditions[condition]["message"] == says
    assert plan.status.checkpoint_lookup == CheckpointLookup(failures=0, waiting=says)
    assert plan.status.phase == "Pending"
    assert [(e.type, e.reason, e.message) for e in plan.events] == [("Warning", reason, says)]
    assert plan.create == [] and plan.delete == []
    job["status"] = plan.status.to_dict()
    assert plan_pass(job, [stuck], NODES, FINDER, NOW).events == []  # the same reason: told once

    running = plan_pass(job, [dict(stuck, status={"phase": "Running"})], NODES, FINDER, NOW)

    cleared = {x["type"]: x for x in running.status.conditions}[condition]
    assert cleared["status"] == "False"
    assert "inspector pod grpo-inspect-a0 " in cleared["message"]
    assert running.status.checkpoint_lookup is None
    assert running.create == [] and running.events == []


def test_an_inspector_that_reports_while_its_condition_is_true_clears_it_and_the_gang_starts():
    job = job_with_volume()
    inspector = first_inspector(job)
    stuck = dict(inspector, status=UNSCHEDULABLE)
    job["status"] = plan_pass(job, [stuck], NODES, FINDER, NOW).status.to_dict()
    done = reported(inspector, {"found": True, "path": "/checkpoints/global_step_30", "step": 30})

    plan = plan_pass(job, [done], NODES, FINDER, NOW)

    conditions = {x["type"]: x for x in plan.status.conditions}
    assert (conditions["PodsUnschedulable"]["status"],
            conditions["PodsUnschedulable"]["reason"]) == ("False", "PodsScheduled")  # fmt: skip
    assert plan.status.checkpoint_lookup is None
    assert plan.status.resume_from.step == 30
    assert [o["metadata"]["name"] for o in plan.create if o["kind"] == "Pod"] == [
        "grpo-a0-n0", "grpo-a0-n1",
    ]  # fmt: skip


def test_failed_looks_so_far_stay_on_record_while_the_next_inspector_is_stuck():
    job = job_with_volume(checkpointLookup={
        "failures": 2, "message": "inspector pod grpo-inspect-a0 exited 1 without a report",
        "retryAfter": "2026-11-29T11:59:00Z"})  # fmt: skip
    stuck = dict(first_inspector(job), status=UNSCHEDULABLE)

    plan = plan_pass(job, [stuck], NODES, FINDER, NOW)

    record = plan.status.checkpoint_lookup
    assert record.failures == 2 and record.retry_after == "2026-11-29T11:59:00Z"
    assert record.waiting.startswith("inspector pod grpo-inspect-a0: 0/3 nodes")
    job["status"] = plan.status.to_dict()
    running = plan_pass(job, [dict(stuck, status={"phase": "Running"})], NODES, FINDER, NOW)
    assert running.status.checkpoint_lookup.waiting is None
    assert running.status.checkpoint_lookup.failures == 2
