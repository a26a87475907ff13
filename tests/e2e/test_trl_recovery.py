"""TRL's real GRPOTrainer as an rljob job, preempted between two saves and resumed bit-exactly.

`framework: trl`, 2 pods x 1 process under torchrun on node agents, the job's command TRL's
own `GRPOTrainer` (tests/e2e/trl_grpo.py: its real trainer and checkpoints on a tiny random
model) as a user writes it, `python SCRIPT FLAGS...`. The operator starts every torchrun
worker in rljob's bridge into the Trainer (rljob_podside/rljob_hf_bridge.py). The scheduler
preempts one pod after a step that no periodic save holds: its torchrun passes the SIGTERM
on, the operator asks the other pod through its request file, the ranks agree at the step's
end and the Trainer saves that step with its own save; the gang comes back with
`--resume_from_checkpoint=<that checkpoint-N>`, loses no step, and ends with weights bitwise
equal to an uninterrupted run of the same script (torchrun, 2 processes, cached by its
inputs), and the same loss, reward and grad norm at every step.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from e2e_steps import (
    CLAIM,
    MOUNT,
    POOL_LABEL,
    REPORTS,
    assert_nothing_left,
    create_job,
    delete_pods,
    running_gang,
    wait_for,
    wait_succeeded,
)
from rljob_contract import progress
from rljob_operator import constants as c
from rljob_testenv import cached, scenario
from rljob_testenv.ports import free_port
from rljob_testenv.scenario import preemptor_pod

DRIVER = Path(__file__).resolve().parent / "trl_grpo.py"
JOB = "trl-grpo"
STEPS, EVERY = 8, 4  # the first epoch of the driver's prompts on two ranks: see its docstring
FLAGS = [f"--max_steps={STEPS}", f"--save_steps={EVERY}"]
# The pace (the driver's own flag; it changes no number): time to preempt between saves.
SLOW = "--seconds_per_step=2"
ENV = {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
WEIGHTS = "model.safetensors"
COMPARED = ("loss", "reward", "grad_norm")  # of every step, in trainer_state.json's log


def trl_reference() -> Path:
    """The uninterrupted run: `torchrun --nproc_per_node=2` of the same script and flags."""
    versions = ("torch", "transformers", "trl", "accelerate")
    key = cached.inputs_key([FLAGS, ENV], [DRIVER], versions)

    def run(folder: Path) -> None:
        argv = [str(scenario.TORCHRUN), "--nproc_per_node=2", "--rdzv-backend=c10d",
                f"--rdzv-endpoint=127.0.0.1:{free_port()}", str(DRIVER),
                f"--output_dir={folder / 'run'}", *FLAGS]  # fmt: skip
        clean = {k: v for k, v in os.environ.items() if not k.startswith("RLJOB_")}
        scenario.run_watched(argv, {**clean, **ENV}, folder / "reference.log", timeout=300)

    folder, _ = cached.run_once("trl-grpo", key, run)
    return folder / "run"


def trl_job(port: int, pool: str, priority_class: str) -> dict[str, Any]:
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": JOB},
        "spec": {
            "framework": "trl",
            "image": "trl:example",
            "nnodes": 2,
            "nprocPerNode": 1,
            "rendezvousPort": port,
            "command": ["python", str(DRIVER)],
            "args": [f"--output_dir={MOUNT}/{JOB}", *FLAGS, SLOW],
            "env": [{"name": k, "value": v} for k, v in ENV.items()],
            "resources": {"limits": {"nvidia.com/gpu": 1}},
            "checkpoint": {
                "volume": {"persistentVolumeClaim": {"claimName": CLAIM}},
                "mountPath": MOUNT,
                "directory": JOB,
                "saveInterval": EVERY,
            },
            "restartPolicy": {"maxFailures": 1, "failureBackoffSeconds": 0},
            "template": {
                "spec": {
                    "nodeSelector": {POOL_LABEL: pool},
                    "priorityClassName": priority_class,
                    "terminationGracePeriodSeconds": 60,
                }
            },
        },
    }


def record(output_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((output_dir / progress.FRAMEWORK_PROGRESS_FILE_NAME).read_text())
    except (OSError, ValueError):
        return {}


def logged_steps(output_dir: Path) -> dict[int, dict[str, float]]:
    """Step -> the compared values, from the final checkpoint's trainer_state.json."""
    state = json.loads((output_dir / f"checkpoint-{STEPS}" / "trainer_state.json").read_text())
    return {
        entry["step"]: {k: entry[k] for k in COMPARED}
        for entry in state["log_history"]
        if "loss" in entry
    }


def test_trls_grpo_trainer_preempted_between_saves_saves_on_notice_and_resumes_bit_exactly(
    api_client, core, namespace, rng, agents, claim, priority_classes, e2e_operator
):
    reference = trl_reference()
    low, high = priority_classes
    pool = agents(3, gpus=1)  # one spare node: the preemptor keeps the one it takes
    port = free_port()
    output = claim / JOB
    # The step after `after` is the one in progress at the notice: one no periodic save holds.
    after = rng.choice([s for s in range(1, STEPS - 2) if (s + 1) % EVERY])
    create_job(api_client, namespace, trl_job(port, namespace, low))
    try:
        gang = running_gang(core, namespace, 0, 2, timeout=180)
        wait_for(lambda: record(output).get("step", 0) >= after, 240, f"step {after}")
        victim = rng.choice(gang).spec.node_name
        core.create_namespaced_pod(namespace, preemptor_pod("urgent", victim, high, 1))
        job = wait_succeeded(api_client, namespace, JOB, timeout=420)
    finally:
        delete_pods(core, namespace, "app=preemptor")

    st = job["status"]
    (recovery,) = st["recoveries"]
    saved = recovery["resumedFromStep"]
    assert recovery["reason"] == "PreemptionByScheduler", recovery
    assert (st["preemptions"], st["failures"]) == (1, 0), st
    # The save on notice: the step in progress (or, if the preemption took longer than a
    # step, a later one), through the Trainer's own save on every rank; nothing was lost.
    # Where `after` is a periodic save's step, the notice may land in that very save (the
    # progress record is written at the step's end, before the Trainer saves): the bridge
    # stops with it, and that step is the one saved on notice.
    assert saved > after or (saved == after and after % EVERY == 0), recovery
    assert (recovery["lastFinishedStep"], recovery["lostSteps"]) == (saved, 0), recovery
    trainers = [r for r in pool.records() if r.labels.get(c.LABEL_JOB) == JOB]
    stopped = [r for r in trainers if r.labels.get(c.LABEL_ATTEMPT) == "0"]
    assert len(stopped) == 2 and all(
        f"rljob: saved step {saved} on notice (checkpoint-{saved})" in r.log() for r in stopped
    ), [r.log()[-2000:] for r in stopped]
    resumed = [r for r in trainers if r.labels.get(c.LABEL_ATTEMPT) == "1"]
    assert len(resumed) == 2 and all(
        f"--resume_from_checkpoint={output}/checkpoint-{saved}" in r.argv for r in resumed
    ), [r.argv for r in resumed]
    assert all("rljob_hf_bridge.py" in " ".join(r.argv) for r in trainers)

    final = (output / f"checkpoint-{STEPS}" / WEIGHTS).read_bytes()
    assert final == (reference / f"checkpoint-{STEPS}" / WEIGHTS).read_bytes(), (
        "the final weights differ from the uninterrupted run's"
    )
    assert logged_steps(output) == logged_steps(reference)
    assert sorted(logged_steps(output)) == list(range(1, STEPS + 1))
    periodic = " (a periodic save's step too)" if saved % EVERY == 0 else ""
    report = (f"TRL GRPOTrainer, 2 pods x 1 process, preempted by the scheduler after step "
              f"{after}: saved step {saved} on notice{periodic}, resumed from it, lost 0; final weights "
              f"bitwise equal to the uninterrupted run; loss, reward and grad norm of all "
              f"{STEPS} steps equal")  # fmt: skip
    REPORTS.append(report)
    print(report)
    assert_nothing_left(pool, port, api_client, core, namespace, JOB)
