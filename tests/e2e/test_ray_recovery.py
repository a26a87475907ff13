"""verl- and RLinf-shaped jobs on a real two-node Ray cluster under rljob, preempted by the
scheduler at the worker and at the head, resume bit-exactly through the framework's switch.

Each job's pods run rljob's Ray launcher on node agents: rank 0 starts the Ray head, waits
for both nodes and runs ray_trainer.py once as the driver; rank 1 joins with `ray start
--block`. The driver places one actor on each pod's Ray node (STRICT_SPREAD) and they
train together over gloo. A pod of higher priority then takes the GPU of the victim's
node, the scheduler preempts the victim, and the whole gang must come back from the newest
complete checkpoint with the resume switch on the driver only, and finish with every
rank's weights, optimizer state and RNG bitwise equal to an uninterrupted run.
"""

from __future__ import annotations

import pytest
from e2e_steps import (
    REPORTS,
    assert_nothing_left,
    attempts_of,
    create_job,
    delete_pods,
    running_gang,
    status,
    wait_for,
    wait_succeeded,
)
from ray_steps import (
    EVERY,
    RESUMED,
    SAVED,
    STEP,
    STEPS,
    assert_same_state,
    checkpoint_subdir,
    final_state,
    ray_job,
    run_reference,
)
from rljob_operator.checkpoints.resume import resume_overrides
from rljob_testenv.ports import free_port
from rljob_testenv.scenario import preemptor_pod

JOB = "rayjob"


@pytest.fixture(scope="session")
def ray_references(tmp_path_factory: pytest.TempPathFactory):
    """framework -> the final state of its uninterrupted run (made once per session)."""
    made: dict[str, dict] = {}

    def reference(framework: str) -> dict:
        if framework not in made:
            root = tmp_path_factory.mktemp(f"ray-reference-{framework}") / "run"
            made[framework] = final_state(framework, run_reference(framework, root))
        return made[framework]

    return reference


def last(pattern, text: str) -> int:
    return max((int(m) for m in pattern.findall(text)), default=0)


@pytest.mark.parametrize("victim", [1, 0], ids=["worker", "head"])
@pytest.mark.parametrize("framework", ["verl", "rlinf"])
def test_ray_job_preempted_by_the_scheduler_resumes_bit_exactly(
    framework, victim, api_client, core, namespace, rng, agents, claim, priority_classes,
    e2e_operator, ray_references,
):  # fmt: skip
    low, high = priority_classes
    want = ray_references(framework)
    pool = agents(3, gpus=1)  # one spare node: the preemptor keeps the one it took
    port = free_port()
    checkpoints = claim / JOB / checkpoint_subdir(framework)
    at = rng.randint(EVERY + 1, STEPS - 5)
    create_job(api_client, namespace, ray_job(JOB, framework, namespace, port, low))
    try:
        gang = running_gang(core, namespace, 0, 2)
        head = wait_for(
            lambda: next((r for r in pool.records() if r.name == gang[0].metadata.name), None),
            what="the head to start",
        )
        # The head turns Ready (its probe) once both Ray nodes joined and the driver runs.
        wait_for(lambda: (status(api_client, namespace, JOB).get("ray") or {}).get("driver")
                 == "Running", 120, "status.ray.driver to be Running")  # fmt: skip
        wait_for(lambda: last(STEP, head.log()) >= at, 180, f"the driver's step {at}")
        node = gang[victim].spec.node_name
        core.create_namespaced_pod(namespace, preemptor_pod("urgent", node, high, 1))
        job = wait_succeeded(api_client, namespace, JOB, timeout=300)
    finally:
        delete_pods(core, namespace, "app=preemptor")

    st = job["status"]
    (recovery,) = st["recoveries"]
    assert (recovery["kind"], recovery["reason"]) == ("Disruption", "PreemptionByScheduler")
    assert recovery["pod"] == gang[victim].metadata.name
    assert (st["preemptions"], st["failures"], st["attempt"]) == (1, 0, 1)
    assert st["conditions"][-1]["reason"] == "DriverSucceeded"
    assert st["ray"]["driver"] == "Succeeded"

    attempts = attempts_of(pool.records(), JOB)
    assert sorted(attempts) == [0, 1]
    before = attempts[0][0].log()
    assert "ray_trainer: 2 Ray nodes" in before
    assert '"node_rank": "0"' in before and '"node_rank": "1"' in before  # one actor a pod
    newest = last(SAVED, before)
    folder = f"{checkpoints}/global_step_{newest}"
    assert recovery["resumedFromStep"] == newest
    assert "lastFinishedStep" not in recovery  # neither framework writes rljob's progress file
    head_after, worker_after = attempts[1]
    switch = resume_overrides(framework, folder)
    assert head_after.argv[-len(switch) :] == switch  # the framework's own switch, on the driver
    assert not set(switch) & set(worker_after.argv)  # and on the driver only
    for record in (*attempts[0], *attempts[1]):
        assert "torchrun" not in " ".join(record.argv)
    assert RESUMED.search(head_after.log()).groups() == (folder, str(newest))

    assert_same_state(final_state(framework, checkpoints), want)
    report = (
        f"{framework}-shaped Ray job, 2 pods, {'head' if victim == 0 else 'worker'} preempted by "
        f"the scheduler after step {last(STEP, before)}: resumed from step {newest} through "
        f"{switch[0].split('=')[0]}; every rank's final state equal to an uninterrupted run"
    )
    REPORTS.append(report)
    print(report)
    assert_nothing_left(pool, port, api_client, core, namespace, JOB)
