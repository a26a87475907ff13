"""verl's own GRPO driver, `python -m verl.trainer.main_ppo` with its default V1 trainer, under
rljob on node agents: two Ray nodes, preempted by the scheduler at the worker and then at the
head, saved on notice through verl's own checkpoint manager, resumed through verl's
`trainer.resume_mode=resume_path`, and finished with every rank's weights, optimizer and
scheduler state bitwise equal to an uninterrupted run of the same driver.

Nothing of verl is replaced: the driver, the trainer, FSDP2, the checkpoint manager and the
data loader are verl 0.9.1's. What lets it run on this CPU-only machine is test support
(devtools/rljob_verl_cpu, each module says what it fakes): a CPU platform and a CPU rollout
served by Hugging Face `generate`, plugged in through verl's own plugin and registry
switches, and the replay buffer that keeps a batch in sampled order, through verl's own
sampler switch. The inputs (a tiny random Qwen2, its tokenizer, parquet prompts) are made
here and put on the job's volume.
"""

from __future__ import annotations

import shutil
from functools import partial
from pathlib import Path

import pytest
from e2e_steps import (
    MOUNT,
    REPORTS,
    assert_nothing_left,
    attempts_of,
    create_job,
    wait_succeeded,
)
from ray_steps import (
    HEAD,
    SAVED_ON_NOTICE,
    WORKER,
    assert_same_state,
    preempt_in_turn,
    ray_job,
)
from rljob_operator.frameworks import resume_overrides
from rljob_testenv.ports import free_port
from rljob_verl_cpu import recipe, results
from rljob_verl_cpu.inputs import make_inputs
from rljob_verl_cpu.reference import Reference, uninterrupted

JOB = "verljob"
STEPS, EVERY = 12, 4  # steps left after the second preemption


def step_metrics(log: str) -> dict[int, dict[str, str]]:
    """step -> the metrics of it that depend on nothing but the data and the weights."""
    return {
        step: {k: shown[k] for k in results.EXACT}
        for step, shown in results.step_metrics(log).items()
    }


def trained_state(checkpoints: Path) -> dict:
    """Every rank's weights, optimizer and scheduler at the last step (the worker processes'
    global RNGs left out: nothing in verl seeds them, see results.trained_state)."""
    return results.trained_state(checkpoints / f"global_step_{STEPS}" / "actor")


@pytest.fixture(scope="session")
def verl_inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Model, tokenizer and prompts (one epoch of STEPS steps), made once per session."""
    work = tmp_path_factory.mktemp("verl-inputs")
    make_inputs(work, train_rows=STEPS * recipe.BATCH)
    return work


@pytest.fixture(scope="session")
def verl_reference(verl_inputs: Path, tmp_path_factory: pytest.TempPathFactory) -> Reference:
    """The uninterrupted run of the same driver on a local two-node Ray cluster, run once for
    its inputs (rljob_verl_cpu.reference keeps it in rljob's cache)."""
    overrides = partial(recipe.overrides, steps=STEPS, save_freq=EVERY, nnodes=2)
    work = tmp_path_factory.mktemp("verl-reference") / "run"
    return uninterrupted(overrides, 2, STEPS, verl_inputs, work)


def main_ppo_job(namespace: str, port: int, priority_class: str, inputs: str) -> dict:
    """The job a verl user writes: verl's module as the command, its overrides as args."""
    # A step of verl's driver took 25 s once with the other lane's kind nodes busy (run 25),
    # and the bridge rightly gave up a save that could not end within 20 s: room for a slow
    # step, since this test is about the save on notice (test_ray_recovery's covers a grace
    # too short for one). The pod exits once the save is done, so a fast run waits no longer.
    job = ray_job(JOB, "verl", namespace, port, priority_class, grace=45)
    spec = job["spec"]
    spec["command"] = ["python", "-m", "verl.trainer.main_ppo"]
    spec["args"] = recipe.overrides(
        inputs, f"{MOUNT}/{JOB}/ckpt", steps=STEPS, save_freq=EVERY, nnodes=2
    )
    spec["env"] = [{"name": name, "value": value} for name, value in recipe.ENV.items()]
    spec["ray"]["startArgs"] = [f"--num-cpus={recipe.NODE_CPUS}"]  # the GPU is the pod's limit
    spec["ray"]["joinTimeoutSeconds"] = 300
    return job


# Three starts of verl's stack (about a minute each on 2 idle cores) and the reference run:
# 5.5-6.5 minutes alone, more beside the other lane.
@pytest.mark.timeout(1200)
def test_verls_own_driver_preempted_at_the_worker_then_the_head_resumes_bit_exactly(
    api_client, core, namespace, rng, agents, claim, priority_classes, e2e_operator,
    verl_inputs, verl_reference,
):  # fmt: skip
    low, high = priority_classes
    pool = agents(3, gpus=1)  # one spare node: a preemptor keeps the one it took a while
    port = free_port()
    shutil.copytree(verl_inputs, claim / "inputs")
    checkpoints = claim / JOB / "ckpt"
    create_job(api_client, namespace, main_ppo_job(namespace, port, low, f"{MOUNT}/inputs"))
    victims = (WORKER, HEAD)
    gangs, ats = preempt_in_turn(
        api_client, core, namespace, JOB, victims, checkpoints, high,
        lambda resumed: rng.randint(resumed + 1, resumed + 2) if resumed else rng.randint(EVERY + 1, 6),
    )  # fmt: skip
    done = wait_succeeded(api_client, namespace, JOB, timeout=600)

    st = done["status"]
    assert (st["preemptions"], st["failures"], st["attempt"]) == (2, 0, 2)
    assert st["conditions"][-1]["reason"] == "DriverSucceeded"
    attempts = attempts_of(pool.records(), JOB)
    assert sorted(attempts) == [0, 1, 2]
    logged: dict[int, dict[str, str]] = {}
    saved_on_notice: set[int] = set()
    reports = []
    for k, (recovery, victim) in enumerate(zip(st["recoveries"], victims, strict=True)):
        assert (recovery["kind"], recovery["reason"]) == ("Disruption", "PreemptionByScheduler")
        assert recovery["pod"] == gangs[k][victim].metadata.name
        before = attempts[k][0].log()
        saved = max(int(s) for s in SAVED_ON_NOTICE.findall(before))
        assert saved >= ats[k]
        assert recovery["resumedFromStep"] == recovery["lastFinishedStep"] == saved
        assert recovery["lostSteps"] == 0
        assert (checkpoints / f"global_step_{saved}").is_dir()
        head_after, worker_after = attempts[k + 1]
        switch = resume_overrides("verl", f"{checkpoints}/global_step_{saved}")
        assert head_after.argv[-len(switch) :] == switch  # verl's switch, on the driver only
        assert not set(switch) & set(worker_after.argv)
        # verl's first step after the resume is the one after the save.
        assert min(step_metrics(head_after.log())) == saved + 1
        logged.update({s: m for s, m in step_metrics(before).items() if s <= saved})
        saved_on_notice.add(saved)
        reports.append(f"{'head' if victim == HEAD else 'worker'} preempted after step "
                       f"{max(step_metrics(before))}: saved step {saved} on notice, resumed "
                       "from it")  # fmt: skip
    logged.update(step_metrics(attempts[2][0].log()))
    # Every step's loss, grad norm, score and length as verl logged them in the uninterrupted
    # run: the data loader went on where it stopped. A step saved on notice may not be logged:
    # the head holds the driver once verl's save returns, before verl logs that step.
    want_metrics = verl_reference.metrics()
    assert {s: want_metrics[s] for s in logged} == logged
    assert set(range(1, STEPS + 1)) - set(logged) <= saved_on_notice
    assert_same_state(trained_state(checkpoints), results.trained_state(verl_reference.actor))
    report = (f"verl's main_ppo (V1, GRPO), 2 Ray pods: {'; '.join(reports)}; lost 0 steps; "
              "every rank's final weights, optimizer and scheduler equal to an uninterrupted run")  # fmt: skip
    REPORTS.append(report)
    print(report)
    assert_nothing_left(pool, port, api_client, core, namespace, JOB)
