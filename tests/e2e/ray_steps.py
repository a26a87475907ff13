"""Builders and checks for the Ray launcher's e2e tests: verl- and RLinf-shaped jobs.

The reference for bit-exactness is the same driver (ray_trainer.py), never interrupted,
on a local two-node Ray cluster started here with `ray start`, outside Kubernetes.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch
from e2e_steps import CLAIM, MOUNT, POOL_LABEL, delete_pods, running_gang, status
from kube_steps import free_port, wait_for
from rljob_contract import progress
from rljob_operator import constants as c
from rljob_testenv import cached
from rljob_testenv.localray import local_ray_cluster
from rljob_testenv.scenario import preemptor_pod, trainer_pods
from rljob_verl_cpu.results import flatten

DRIVER = Path(__file__).with_name("ray_trainer.py")
REPO = Path(__file__).resolve().parents[2]
STEPS, EVERY = 16, 4
WORKER, HEAD = 1, 0  # pods of a two-node gang, by rank
STEP = re.compile(r"ray_trainer: step (\d+)/")
SAVED = re.compile(r"ray_trainer: saved \S*/global_step_(\d+)")
# The head's word, once the bridge reported the framework's save on notice.
SAVED_ON_NOTICE = re.compile(r"rljob: checkpointed on request: saved step (\d+) through")
RESUMED = re.compile(r"ray_trainer: resumed from (\S+) at step (\d+)")
LAYOUT = {"verl": "verl-fsdp", "rlinf": "rlinf-fsdp"}


def last(pattern: re.Pattern[str], text: str) -> int:
    """The highest step `pattern` finds in a log, 0 if none."""
    return max((int(m) for m in pattern.findall(text)), default=0)


def overrides(framework: str, root: str) -> list[str]:
    """The driver's command-line overrides; `root` is where the run keeps its checkpoints."""
    if framework == "verl":
        return [f"trainer.default_local_dir={root}/ckpt", f"trainer.total_training_steps={STEPS}",
                f"trainer.save_freq={EVERY}", "trainer.nnodes=2"]  # fmt: skip
    return [f"runner.output_dir={root}", "runner.experiment_name=run",
            f"runner.max_steps={STEPS}", f"runner.save_interval={EVERY}", "cluster.num_nodes=2"]  # fmt: skip


def reported(checkpoints: Path) -> tuple[int, int]:
    """(attempt, step) of the last step the bridge reports finished in the framework's loop
    (rljob-progress.json), else (-1, 0)."""
    try:
        shown = json.loads((checkpoints / progress.FRAMEWORK_PROGRESS_FILE_NAME).read_text())
    except (OSError, ValueError):
        return (-1, 0)
    return (shown[progress.ATTEMPT], shown[progress.STEP])


def preempt(api_client, core, namespace, job, attempt, victim, checkpoints, at, high) -> None:
    """Wait for attempt `attempt`'s step `at` of the loop of a two-node Ray job, then have the
    scheduler preempt its pod of rank `victim`, and wait for the next attempt's gang to run."""
    # The head turns Ready (its probe) once the attempt has finished a step in the framework's
    # loop, which the bridge's progress record says: never before it.
    wait_for(lambda: (st := status(api_client, namespace, job)).get("attempt") == attempt
             and (st.get("ray") or {}).get("driver") == "Training", 300,
             f"attempt {attempt}'s status.ray.driver to be Training")  # fmt: skip
    assert reported(checkpoints)[0] == attempt, "Ready before a step of the attempt"
    assert status(api_client, namespace, job).get("attemptFirstStepTime")
    # The step the bridge reports from the framework's loop (an actor's own log lines reach
    # the head's log in bursts).
    wait_for(lambda: reported(checkpoints) >= (attempt, at), 180, f"the loop's step {at}")
    node = trainer_pods(core, namespace, attempt)[victim].spec.node_name
    core.create_namespaced_pod(namespace, preemptor_pod(f"urgent-{attempt}", node, high, 1))
    running_gang(core, namespace, attempt + 1, 2, timeout=300)
    # The next preemption needs a free node again; the job's own pods never wait for this one.
    delete_pods(core, namespace, "app=preemptor")


def preempt_in_turn(
    api_client, core, namespace, job, victims, checkpoints, high, at
) -> tuple[list, list[int]]:  # fmt: skip
    """Preempt the two-node gang's pod of each rank in `victims` in turn, once the job runs
    again, at the step `at(resumed)` picks (resumed: the step the attempt resumed from, 0 for
    the first); the gangs preempted and the steps waited for."""
    gangs: list = []
    steps: list[int] = []
    resumed = 0
    for attempt, victim in enumerate(victims):
        gangs.append(running_gang(core, namespace, attempt, 2, timeout=300))
        steps.append(at(resumed))
        preempt(api_client, core, namespace, job, attempt, victim, checkpoints, steps[-1], high)
        resumed = status(api_client, namespace, job)["recoveries"][-1]["resumedFromStep"]
    return gangs, steps


def checkpoint_subdir(framework: str) -> str:
    """Where the run's global_step_N folders are, relative to `root`."""
    return "ckpt" if framework == "verl" else "run/checkpoints"


def ray_job(
    name: str,
    framework: str,
    pool: str,
    port: int,
    priority_class: str,
    grace: int = 20,
    extra_args: tuple[str, ...] = (),
) -> dict[str, Any]:
    ray_ports: list[int] = []  # apart from each other and the rendezvous port (admission checks)
    while len(ray_ports) < 2:
        if (candidate := free_port()) not in (port, *ray_ports):
            ray_ports.append(candidate)
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": name},
        "spec": {
            "framework": framework,
            "image": f"{framework}:example",
            "command": ["python", str(DRIVER), framework],
            "args": [*overrides(framework, f"{MOUNT}/{name}"), *extra_args],
            "nnodes": 2,
            "rendezvousPort": port,
            "ray": {
                "port": ray_ports[0], "dashboardPort": ray_ports[1],
                "joinTimeoutSeconds": 120,
                # Every pod of the node agent shares this machine's loopback: keep the
                # Ray nodes' own listeners off fixed ports.
                "startArgs": ["--num-cpus=1"],
                "headStartArgs": ["--include-dashboard=false"],
            },
            "resources": {"limits": {"nvidia.com/gpu": 1}},
            "checkpoint": {
                "volume": {"persistentVolumeClaim": {"claimName": CLAIM}},
                "mountPath": MOUNT,
                "directory": f"{name}/{checkpoint_subdir(framework)}",
                "layout": LAYOUT[framework],
            },
            "restartPolicy": {"maxFailures": 0},
            "template": {"spec": {
                "nodeSelector": {POOL_LABEL: pool}, "priorityClassName": priority_class,
                "terminationGracePeriodSeconds": grace,
            }},
        },
    }  # fmt: skip


# --------------------------------------------------------------------------- the reference
def run_reference(framework: str, timeout: float = 300) -> Path:
    """The uninterrupted run on a local two-node Ray cluster: its checkpoint directory, made
    once for the driver's overrides, its source and the bridge's, and the libraries' versions
    (rljob_testenv.cached: read it, never write into it)."""
    pace = "trainer.seconds_per_step=0" if framework == "verl" else "runner.seconds_per_step=0"
    sources = (DRIVER, REPO / "operator" / "rljob_podside")
    key = cached.inputs_key([framework, overrides(framework, "ROOT"), pace], sources,
                            ("torch", "ray", "verl", "rlinf"))  # fmt: skip

    def run(root: Path) -> None:
        with (root / "driver.log").open("wb") as out, local_ray_cluster(2, root / "ray") as (
            address, env,
        ):  # fmt: skip
            done = subprocess.run(
                [sys.executable, str(DRIVER), framework, *overrides(framework, str(root)), pace],
                env={**env, "RAY_ADDRESS": address, "RLJOB_ATTEMPT": "0"},
                stdout=out, stderr=subprocess.STDOUT, timeout=timeout,
            )  # fmt: skip
        logs = [*sorted((root / "ray").glob("*.log")), root / "driver.log"]
        assert done.returncode == 0, "the reference run failed:\n" + "\n".join(
            f"--- {log.name}\n{log.read_text()[-2000:]}" for log in logs
        )

    root, _ = cached.run_once(f"ray-{framework}", key, run)
    return root / checkpoint_subdir(framework)


# --------------------------------------------------------------------------- final state
def final_state(framework: str, checkpoints: Path, step: int = STEPS) -> dict[str, Any]:
    """Every rank's weights, optimizer and scheduler state and RNG at `step` (the last), by
    name, as the framework's own files hold them."""
    actor = checkpoints / f"global_step_{step}" / "actor"
    with warnings.catch_warnings():  # DTensors and their mesh unpickled without a group
        warnings.simplefilter("ignore")
        if framework == "verl":
            return {
                f"{rank}.{kind}.{k}": v
                for rank in range(2)
                for kind in ("model", "optim", "extra_state")
                for k, v in flatten(_load(actor / f"{kind}_world_size_2_rank_{rank}.pt")).items()
            }
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        with tempfile.TemporaryDirectory() as scratch:  # never beside a cached reference
            target = Path(scratch) / f"final-{step}.pt"
            dcp_to_torch_save(str(actor / "dcp_checkpoint"), str(target))
            state = flatten(_load(target))
        state.update(flatten(_load(actor / "model_state_dict" / "full_weights.pt"), "full."))
        return state


def _load(path: Path) -> Any:
    return torch.load(path, weights_only=False)  # the frameworks' own files: RNG states too


def assert_same_state(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert sorted(got) == sorted(want), "the final checkpoints hold different entries"
    differ = [
        k for k in want
        if (torch.is_tensor(want[k]) and not torch.equal(got[k], want[k]))
        or (not torch.is_tensor(want[k]) and got[k] != want[k])
    ]  # fmt: skip
    assert not differ, f"{len(differ)} entries differ from the uninterrupted run: {differ[:8]}"
