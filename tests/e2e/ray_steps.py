"""Builders and checks for the Ray launcher's e2e tests: verl- and RLinf-shaped jobs.

The reference for bit-exactness is the same driver (ray_trainer.py), never interrupted,
on a local two-node Ray cluster started here with `ray start`, outside Kubernetes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from e2e_steps import CLAIM, MOUNT, POOL_LABEL
from kube_steps import free_port, wait_for
from rljob_contract import progress
from rljob_operator import constants as c
from rljob_operator.launcher.ray_node import head_reachable

DRIVER = Path(__file__).with_name("ray_trainer.py")
RAY = Path(sys.executable).with_name("ray")
STEPS, EVERY = 16, 4
STEP = re.compile(r"ray_trainer: step (\d+)/")
SAVED = re.compile(r"ray_trainer: saved \S*/global_step_(\d+)")
# The head's word, once the bridge reported the framework's save on notice.
SAVED_ON_NOTICE = re.compile(r"rljob: checkpointed on request: saved step (\d+) through")
RESUMED = re.compile(r"ray_trainer: resumed from (\S+) at step (\d+)")
LAYOUT = {"verl": "verl-fsdp", "rlinf": "rlinf-fsdp"}


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
@contextmanager
def local_ray_cluster(nnodes: int, log) -> Iterator[tuple[str, dict[str, str]]]:
    """`ray start` for a head and nnodes-1 workers on this machine; yields the head address
    and the environment its clients need, once the head listens (the driver's placement
    group waits for the workers, as it does under rljob).

    Each node runs `--block` in a session of its own, so that stopping it ends its Ray
    processes and no one else's (never `ray stop`, which would end every Ray on the host).
    The cluster and its clients get a home of their own, as the node agent gives each pod:
    Ray 2.60 turns token authentication on for every head started where `~/.ray/auth_token`
    exists (any local `ray.init()` on the host writes one), and `ray status` then fails.
    """
    port = free_port()
    address = f"127.0.0.1:{port}"
    nodes: list[subprocess.Popen] = []
    temp = Path(tempfile.mkdtemp(prefix="rjref-", dir="/tmp"))
    common = ["--block", "--num-cpus=1", "--disable-usage-stats"]
    (temp / "home").mkdir()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "HOME": str(temp / "home")}
    try:
        for rank in range(nnodes):
            role = (["--head", f"--port={port}", "--include-dashboard=false"] if rank == 0
                    else [f"--address={address}"])  # fmt: skip
            nodes.append(subprocess.Popen(
                [str(RAY), "start", *role, f"--temp-dir={temp}/n{rank}", *common],
                env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            ))  # fmt: skip
            if rank == 0:
                wait_for(
                    lambda: head_reachable(address), 60, "the reference Ray head", interval=0.1
                )
        yield address, env
    finally:
        for node in nodes:  # SIGKILL: SIGTERM would drain each node for 30 s
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.pid, signal.SIGKILL)
            node.wait(30)
        shutil.rmtree(temp, ignore_errors=True)


def run_reference(framework: str, root: Path, timeout: float = 300) -> Path:
    """The uninterrupted run on a local two-node Ray cluster; its checkpoint directory."""
    log = root.parent / f"reference-{framework}.log"
    with log.open("wb") as out, local_ray_cluster(2, out) as (address, cluster_env):
        env = {**cluster_env, "RAY_ADDRESS": address, "RLJOB_ATTEMPT": "0"}
        done = subprocess.run(
            [sys.executable, str(DRIVER), framework, *overrides(framework, str(root)),
             "trainer.seconds_per_step=0" if framework == "verl" else "runner.seconds_per_step=0"],
            env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout,
        )  # fmt: skip
    assert done.returncode == 0, f"the reference run failed:\n{log.read_text()[-3000:]}"
    return root / checkpoint_subdir(framework)


# --------------------------------------------------------------------------- final state
def final_state(framework: str, checkpoints: Path) -> dict[str, Any]:
    """Every rank's weights, optimizer and scheduler state and RNG of the last step, by name,
    as the framework's own files hold them."""
    actor = checkpoints / f"global_step_{STEPS}" / "actor"
    with warnings.catch_warnings():  # DTensors and their mesh unpickled without a group
        warnings.simplefilter("ignore")
        if framework == "verl":
            return {
                f"{rank}.{kind}.{k}": v
                for rank in range(2)
                for kind in ("model", "optim", "extra_state")
                for k, v in _flatten(_load(actor / f"{kind}_world_size_2_rank_{rank}.pt")).items()
            }
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        target = checkpoints.parent / f"final-{STEPS}.pt"
        dcp_to_torch_save(str(actor / "dcp_checkpoint"), str(target))
        state = _flatten(_load(target))
        state.update(_flatten(_load(actor / "model_state_dict" / "full_weights.pt"), "full."))
        return state


def _load(path: Path) -> Any:
    return torch.load(path, weights_only=False)  # the frameworks' own files: RNG states too


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts, lists and tuples as one level of dotted names; DTensors as their local
    shard, numpy arrays as tensors, so that every leaf compares exactly."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    else:
        if hasattr(value, "to_local"):
            value = value.to_local()
        elif isinstance(value, np.ndarray):
            value = torch.from_numpy(value)
        return {prefix.rstrip("."): value}
    out: dict[str, Any] = {}
    for key, item in items:
        out.update(_flatten(item, f"{prefix}{key}."))
    return out


def assert_same_state(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert sorted(got) == sorted(want), "the final checkpoints hold different entries"
    differ = [
        k for k in want
        if (torch.is_tensor(want[k]) and not torch.equal(got[k], want[k]))
        or (not torch.is_tensor(want[k]) and got[k] != want[k])
    ]  # fmt: skip
    assert not differ, f"{len(differ)} entries differ from the uninterrupted run: {differ[:8]}"
