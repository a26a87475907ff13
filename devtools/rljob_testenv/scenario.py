"""The preemption scenario that the demo and the end-to-end tests share.

A higher-priority pod takes a node's GPUs; the gang's pods are read by attempt; the
trainer's progress and final weights are read back; and the run is compared with an
uninterrupted reference run of the same config: bitwise equal weights, and equal metrics
at every step. `hack/demo.py` presents this scenario; the e2e tests assert on it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rljob_contract.progress import PROGRESS_FILE_NAME
from rljob_contract.steps import step_dir_name
from rljob_operator import constants as c
from rljob_trainer.metrics import EXACT_METRICS

from .ports import free_port

TORCHRUN = Path(sys.executable).with_name("torchrun")
PLACEHOLDER_IMAGE = "example.invalid/urgent:never-pulled"


def preemptor_pod(
    name: str,
    node: str,
    priority_class: str,
    gpus: int,
    image: str = PLACEHOLDER_IMAGE,
    labels: dict[str, str] | None = None,
    command: list[str] | None = None,
) -> dict[str, Any]:
    """A higher-priority pod that needs the node's GPUs: the scheduler preempts the trainer
    there. Kwok nodes and node agents run no image; real nodes need one they hold, and a
    `command` that keeps it running where the image's own would not."""
    container: dict[str, Any] = {
        "name": "urgent", "image": image, "imagePullPolicy": "IfNotPresent",
        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
    }  # fmt: skip
    if command:
        container["command"] = command
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": "preemptor"}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "priorityClassName": priority_class,
            "terminationGracePeriodSeconds": 0,
            "restartPolicy": "Never",
            "containers": [container],
        },
    }


def trainer_pods(core: Any, namespace: str, attempt: int | None = None) -> list[Any]:
    """The gang's pods (of one attempt, if given), by name."""
    selector = f"{c.LABEL_ROLE}={c.ROLE_TRAINER}"
    if attempt is not None:
        selector += f",{c.LABEL_ATTEMPT}={attempt}"
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    return sorted(pods, key=lambda p: p.metadata.name)


def read_progress(checkpoint_dir: Path) -> dict[str, Any] | None:
    """The trainer's progress.json (last finished step, attempt), None while there is none."""
    try:
        return json.loads((checkpoint_dir / PROGRESS_FILE_NAME).read_text())
    except (OSError, ValueError):
        return None


def final_model(checkpoint_dir: Path, step: int) -> Path:
    """The full model the trainer gathers at a save: global_step_N/actor/model/."""
    return checkpoint_dir / step_dir_name(step) / "actor" / "model" / "model.safetensors"


def differing_tensors(model: Path, reference: Path) -> list[str]:
    """The tensors in which two saved models differ (all of them if their names differ)."""
    import torch
    from safetensors.torch import load_file

    got, want = load_file(model), load_file(reference)
    if sorted(got) != sorted(want):
        return sorted(set(got) | set(want))
    return [name for name in want if not torch.equal(got[name], want[name])]


def differing_saved_state(folder: Path, reference: Path) -> list[str]:
    """The tensors in which two DCP folders (FSDP's `global_step_N/actor`, Megatron's
    `global_step_N/actor/iter_N`) differ bitwise, model and optimizer state alike (all if their
    names differ). Megatron's distributed optimizer pads its buffers with NaN: equal here."""
    import torch
    from rljob_trainer.dcp_read import read_dcp_tensors

    got, want = (read_dcp_tensors(f, lambda key: True, {}) for f in (folder, reference))
    if sorted(got) != sorted(want):
        return sorted(set(got) ^ set(want))
    return [
        key
        for key in want
        if not torch.allclose(got[key], want[key], rtol=0, atol=0, equal_nan=True)
    ]


def differing_steps(
    metrics: Sequence[dict[str, Any]], reference: Sequence[dict[str, Any]]
) -> list[int]:
    """The steps whose exact metrics differ from the reference's; a step one run lacks counts."""
    got = {e["step"]: {k: e.get(k) for k in EXACT_METRICS} for e in metrics}
    want = {e["step"]: {k: e.get(k) for k in EXACT_METRICS} for e in reference}
    return sorted(step for step in set(got) | set(want) if got.get(step) != want.get(step))


def run_reference(
    trainer_args: Sequence[str],
    env: dict[str, str],
    log: Path,
    nproc: int = 2,
    timeout: float | None = None,
    while_running: Callable[[], None] | None = None,
) -> None:
    """The same config, never interrupted, under a plain local torchrun (none of the
    operator's RLJOB_* variables but those in `env`); `while_running` is called every half
    second. Raises RuntimeError, with the end of the log, if it fails or outlasts `timeout`."""
    argv = [
        str(TORCHRUN), f"--nproc_per_node={nproc}", "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{free_port()}", "-m", "rljob_trainer", *trainer_args,
    ]  # fmt: skip
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RLJOB_")}
    run_watched(argv, {**clean, **env}, log, timeout=timeout, while_running=while_running)


def run_watched(
    argv: Sequence[str],
    env: dict[str, str],
    log: Path,
    cwd: Path | None = None,
    timeout: float | None = None,
    while_running: Callable[[], None] | None = None,
) -> None:
    """Run a reference to its end with its output in `log`, calling `while_running` every half
    second (the demo shows the reference's progress with it). Raises RuntimeError, with the end
    of the log, if it fails or outlasts `timeout`."""
    deadline = time.monotonic() + timeout if timeout else None
    with log.open("wb") as out:
        process = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        while process.poll() is None:
            if deadline and time.monotonic() > deadline:
                process.kill()
                process.wait()
                break
            if while_running:
                while_running()
            time.sleep(0.5)
    if process.returncode != 0:
        raise RuntimeError(f"the reference run failed (see {log}):\n{log.read_text()[-3000:]}")
