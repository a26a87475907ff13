"""verl- and RLinf-shaped jobs on a real two-node Ray cluster under rljob, preempted by the
scheduler at the worker and at the head between periodic saves, save on notice through the
framework's own step-end decision (rljob's bridge: verl's legacy trainer, RLinf's runner),
lose no step, and resume bit-exactly through the framework's switch. With a save on notice too
slow for the grace period they go back to the last periodic save, and say what was lost.

The driver here is a stand-in (ray_trainer.py) whose steps end through the frameworks' real
functions (verl's V1 `PPOTrainer.step`, legacy `should_save_ckpt_esi`, `Tracking`,
`FSDPCheckpointManager`; RLinf's `Timer`, `check_progress`, `FSDP2Strategy`). It stays for
what verl's own driver does not cover here: verl's V1 trainer preempted at the worker and then
the head runs its real `main_ppo` (test_verl_main_ppo.py); the stand-in keeps verl's legacy
trainer, RLinf (its real entry point is not run here), an early warning during model load,
and a save on notice slower than the grace, which it makes slow on purpose.

Each job's pods run rljob's Ray launcher on node agents: rank 0 starts the Ray head, waits
for both nodes and runs ray_trainer.py once as the driver; rank 1 joins with `ray start
--block`. The driver places one actor on each pod's Ray node (STRICT_SPREAD) and they
train together over gloo. A pod of higher priority then takes the GPU of the victim's
node, the scheduler preempts the victim, and the whole gang must come back from the newest
complete checkpoint with the resume switch on the driver only, and finish with every
rank's weights, optimizer state and RNG bitwise equal to an uninterrupted run.
"""

from __future__ import annotations

import json
import re

import pytest
from e2e_steps import (
    REPORTS,
    assert_nothing_left,
    attempts_of,
    create_job,
    running_gang,
    wait_for,
    wait_succeeded,
)
from ray_steps import (
    EVERY,
    HEAD,
    RESUMED,
    SAVED_ON_NOTICE,
    STEP,
    STEPS,
    WORKER,
    assert_same_state,
    checkpoint_subdir,
    final_state,
    last,
    preempt,
    preempt_in_turn,
    ray_job,
    reported,
    run_reference,
)
from rljob_contract import progress
from rljob_operator.frameworks import resume_overrides
from rljob_testenv.ports import free_port

JOB = "rayjob"


@pytest.fixture(scope="session")
def ray_references():
    """framework -> the final state of its uninterrupted run (read once per session)."""
    made: dict[str, dict] = {}

    def reference(framework: str) -> dict:
        if framework not in made:
            made[framework] = final_state(framework, run_reference(framework))
        return made[framework]

    return reference


# verl's legacy trainer, whose save is ESI's (its default V1 trainer: test_verl_main_ppo.py)
LEGACY_VERL = ("trainer.use_v1=false",)


@pytest.mark.parametrize(
    ("framework", "victims", "extra_args"),
    [("verl", (WORKER,), LEGACY_VERL), ("rlinf", (WORKER, HEAD), ())],
    ids=["verl-legacy-worker", "rlinf-worker-then-head"],
)
def test_ray_job_preempted_by_the_scheduler_resumes_bit_exactly(
    framework, victims, extra_args, api_client, core, namespace, rng, agents, claim,
    priority_classes, e2e_operator, ray_references,
):  # fmt: skip
    """Preempted at each rank of `victims` in turn, in one job: the worker, then the head once
    the job runs again."""
    low, high = priority_classes
    want = ray_references(framework)
    pool = agents(3, gpus=1)  # one spare node: a preemptor keeps the one it took a while
    port = free_port()
    checkpoints = claim / JOB / checkpoint_subdir(framework)
    create_job(api_client, namespace,
               ray_job(JOB, framework, namespace, port, low, extra_args=extra_args))  # fmt: skip
    # Past the first periodic save, with steps left after the last preemption.
    gangs, ats = preempt_in_turn(
        api_client, core, namespace, JOB, victims, checkpoints, high,
        lambda resumed: rng.randint(resumed + 1, resumed + 3) if resumed else rng.randint(EVERY + 1, 7),
    )  # fmt: skip
    job = wait_succeeded(api_client, namespace, JOB, timeout=300)

    st = job["status"]
    assert (st["preemptions"], st["failures"], st["attempt"]) == (len(victims), 0, len(victims))
    assert st["conditions"][-1]["reason"] == "DriverSucceeded"
    assert st["ray"]["driver"] == "Succeeded"
    attempts = attempts_of(pool.records(), JOB)
    assert sorted(attempts) == list(range(len(victims) + 1))
    reports = []
    for k, (recovery, victim) in enumerate(zip(st["recoveries"], victims, strict=True)):
        assert (recovery["kind"], recovery["reason"]) == ("Disruption", "PreemptionByScheduler")
        assert recovery["pod"] == gangs[k][victim].metadata.name
        before = attempts[k][0].log()
        assert "ray_trainer: 2 Ray nodes" in before
        assert '"node_rank": "0"' in before and '"node_rank": "1"' in before  # one actor a pod
        # Saved on notice through the framework's own decision, at the step it had reached
        # (the head says so itself; an actor's log lines may not reach the head's log before
        # it ends).
        newest = last(SAVED_ON_NOTICE, before)
        folder = f"{checkpoints}/global_step_{newest}"
        assert newest >= ats[k]
        assert recovery["resumedFromStep"] == recovery["lastFinishedStep"] == newest
        assert recovery["lostSteps"] == 0
        head_after, worker_after = attempts[k + 1]
        switch = resume_overrides(framework, folder)
        assert head_after.argv[-len(switch) :] == switch  # the framework's switch, on the driver
        assert not set(switch) & set(worker_after.argv)  # and on the driver only
        assert RESUMED.search(head_after.log()).groups() == (folder, str(newest))
        reports.append(
            f"{'head' if victim == HEAD else 'worker'} preempted after step {last(STEP, before)}: "
            f"saved step {newest} on notice, resumed from it through {switch[0].split('=')[0]}"
        )
    for record in (rec for pods in attempts.values() for rec in pods):
        assert "torchrun" not in " ".join(record.argv)

    assert_same_state(final_state(framework, checkpoints), want)
    report = (
        f"{framework}-shaped Ray job{''.join(f' {arg}' for arg in extra_args)}, 2 pods: "
        f"{'; '.join(reports)}; lost 0 steps; every rank's final state equal to an "
        f"uninterrupted run"
    )
    REPORTS.append(report)
    print(report)
    assert_nothing_left(pool, port, api_client, core, namespace, JOB)


@pytest.mark.parametrize(
    ("framework", "when"), [("verl", "model-load"), ("rlinf", "mid-run")]
)  # fmt: skip
def test_an_early_warning_on_the_workers_node_is_no_failure_and_loses_no_step(
    framework, when, api_client, core, namespace, rng, agents, claim, priority_classes,
    e2e_operator, ray_references,
):  # fmt: skip
    """The worker's node gets a termination taint (a spot notice): rljob asks every pod of the
    gang to save, and nothing is stopped yet. Whether the warning comes while the driver is
    still setting up (no step has run: the head used to end the driver at once, exit 143 on a
    healthy node, a failure) or in the middle of the run, the framework saves the step it
    finishes through its own path, the gang comes back on the spare node from that save, and
    no failure is counted."""
    low, _ = priority_classes
    want = ray_references(framework)
    pool = agents(3, gpus=1)  # one spare node, for the gang off the tainted one
    port = free_port()
    checkpoints = claim / JOB / checkpoint_subdir(framework)
    create_job(api_client, namespace, ray_job(JOB, framework, namespace, port, low))
    worker = running_gang(core, namespace, 0, 2)[WORKER]
    if when == "mid-run":
        at = rng.randint(EVERY + 1, 7)
        wait_for(lambda: reported(checkpoints) >= (0, at), 180, f"the loop's step {at}")
    taint = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}
    core.patch_node(worker.spec.node_name, {"spec": {"taints": [taint]}})
    running_gang(core, namespace, 1, 2, timeout=300)
    job = wait_succeeded(api_client, namespace, JOB, timeout=300)

    st = job["status"]
    assert (st["preemptions"], st["failures"]) == (1, 0)
    (recovery,) = st["recoveries"]
    assert (recovery["kind"], recovery["reason"]) == ("Disruption", "CheckpointedOnRequest")
    assert recovery["lostSteps"] == 0
    saved = recovery["resumedFromStep"]
    assert saved == recovery["lastFinishedStep"] >= 1
    before = attempts_of(pool.records(), JOB)[0][0].log()
    assert last(SAVED_ON_NOTICE, before) == saved
    assert_same_state(final_state(framework, checkpoints), want)
    REPORTS.append(
        f"{framework}-shaped Ray job, the worker's node tainted ({when}): saved step {saved} on "
        "the checkpoint request, resumed from it on the spare node, 0 steps lost, 0 failures; "
        "final state equal to an uninterrupted run"
    )
    assert_nothing_left(pool, port, api_client, core, namespace, JOB)


# verl's only: what differs for RLinf (its torn folder passed over, its record of the steps) is
# unit-tested (test_ckpt_layouts.py, test_ray_bridge.py) and runs in its preemptions above; both
# frameworks' runs took 1.5-2 minutes of the suite's 25 each.
@pytest.mark.parametrize("framework", ["verl"])
def test_a_save_on_notice_too_slow_for_the_grace_goes_back_to_the_last_periodic_save(
    framework, api_client, core, namespace, rng, agents, claim, priority_classes, e2e_operator,
    ray_references,
):  # fmt: skip
    """The save on notice starts but cannot end within a 4 s grace: the folder it leaves is
    never taken for complete, and status and the Event say how many steps were lost."""
    low, high = priority_classes
    want = ray_references(framework)
    pool = agents(3, gpus=1)
    port = free_port()
    checkpoints = claim / JOB / checkpoint_subdir(framework)
    # Two steps past a periodic save, before the next: verl counts the step it saves as
    # finished only once the save is done, so a notice in the step right after a save would
    # lose no step that had finished.
    at = rng.randint(EVERY + 2, 2 * EVERY - 1)
    section = "trainer" if framework == "verl" else "runner"
    slow = (f"{section}.seconds_per_deadline_save=60",)
    create_job(api_client, namespace,
               ray_job(JOB, framework, namespace, port, low, grace=4, extra_args=slow))  # fmt: skip
    running_gang(core, namespace, 0, 2)
    preempt(api_client, core, namespace, JOB, 0, WORKER, checkpoints, at, high)
    job = wait_succeeded(api_client, namespace, JOB, timeout=300)

    (recovery,) = job["status"]["recoveries"]
    attempts = attempts_of(pool.records(), JOB)
    before = attempts[0][0].log()
    assert not SAVED_ON_NOTICE.search(before)
    # Either the head waited out the grace, or, where the bridge had measured a save (RLinf's
    # periodic saves take a few seconds here), it judged at once that none could fit in it.
    (why,) = re.findall(r"rljob: stopped on notice without a save: (.*)", before)
    assert why.startswith(("the driver did not save within the grace period (4 s)",
                           "the rest of the step and a save need about")), why  # fmt: skip
    periodic = recovery["resumedFromStep"]
    assert periodic == EVERY
    finished = json.loads((checkpoints / progress.FRAMEWORK_PROGRESS_FILE_NAME).read_text())
    assert recovery["lastFinishedStep"] >= at and recovery["lastFinishedStep"] > periodic
    assert recovery["lostSteps"] == recovery["lastFinishedStep"] - periodic
    assert (finished[progress.ATTEMPT], finished[progress.STEP]) == (1, STEPS)  # every step
    events = [e.message for e in core.list_namespaced_event(namespace).items
              if e.reason == "GangCreated" and "attempt 1" in e.message]  # fmt: skip
    assert any(f"lost steps: {recovery['lostSteps']} " in m for m in events), events
    assert_same_state(final_state(framework, checkpoints), want)
    REPORTS.append(
        f"{framework}-shaped Ray job, save on notice slower than the 4 s grace: resumed from "
        f"the periodic save at step {periodic}, {recovery['lostSteps']} steps lost, as status "
        f"and the GangCreated Event say; final state equal to an uninterrupted run"
    )
    assert_nothing_left(pool, port, api_client, core, namespace, JOB)
