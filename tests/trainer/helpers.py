"""Launch the trainer (under torchrun or alone) on CPU, kill it, and read what it wrote."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from kube_steps import free_port, wait_for
from rljob_contract import ENV_GRACE_SECONDS, ENV_TERMINATION_LOG
from rljob_contract.manifest import MANIFEST_NAME
from rljob_trainer.faults import ENV_TEST_SLOW_ROLLOUT_FROM_STEP, ENV_TEST_SLOW_ROLLOUT_TOKEN
from rljob_trainer.metrics import EXACT_METRICS, read_metrics
from safetensors.torch import load_file
from tiny_trainer import TINY

TORCHRUN = Path(sys.executable).with_name("torchrun")


def trainer_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLJOB_")}
    env.update({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    env.update(extra or {})
    return env


def trainer_command(output_dir: Path, overrides: list[str], nproc: int) -> list[str]:
    args = ["-m", "rljob_trainer", f"runner.output_dir={output_dir}", *TINY, *overrides]
    if nproc == 1:
        return [sys.executable, *args]
    return [
        str(TORCHRUN),
        f"--nproc_per_node={nproc}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=localhost:{free_port()}",
        *args,
    ]


@dataclass
class Run:
    output_dir: Path
    log_path: Path
    process: subprocess.Popen

    @property
    def experiment_dir(self) -> Path:
        return self.output_dir / "grpo_tiny"

    @property
    def checkpoint_dir(self) -> Path:
        return self.experiment_dir / "checkpoints"

    def log(self) -> str:
        return self.log_path.read_text()

    def wait(self, timeout: float = 300) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_tree(self.process.pid, signal.SIGKILL)
            raise

    def progress(self) -> dict[str, Any] | None:
        try:
            return json.loads((self.checkpoint_dir / "progress.json").read_text())
        except (OSError, ValueError):
            return None


def start(
    output_dir: Path,
    overrides: list[str],
    nproc: int = 2,
    env: dict[str, str] | None = None,
    log_name: str = "run",
) -> Run:
    output_dir.mkdir(parents=True, exist_ok=True)
    log_path = output_dir / f"{log_name}.log"
    with log_path.open("a") as log:
        process = subprocess.Popen(
            trainer_command(output_dir, overrides, nproc),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=trainer_env(env),
            start_new_session=True,
        )
    return Run(output_dir, log_path, process)


def run(output_dir: Path, overrides: list[str], nproc: int = 2, **kwargs: Any) -> Run:
    handle = start(output_dir, overrides, nproc, **kwargs)
    handle.wait()
    return handle


def descendants(pid: int) -> list[int]:
    """All processes below `pid` (torchrun starts each worker in a session of its own)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_tree(pid: int, sig: signal.Signals) -> None:
    """Like a node losing power: the launcher and every worker at once."""
    for target in [pid, *descendants(pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, sig)


EXITED: dict[str, Any] = {"exited": True}


def wait_for_step(handle: Run, step: int, timeout: float = 180) -> int:
    """Poll progress.json until the run finished `step`; return the step it shows. Often,
    so that a signal sent next lands early in the step after it."""

    def reached() -> dict[str, Any] | None:
        progress = handle.progress()
        if progress and progress["step"] >= step:
            return progress
        return EXITED if handle.process.poll() is not None else None

    try:
        found = wait_for(reached, timeout, f"step {step}", interval=0.02)
    except AssertionError as exc:  # timed out
        raise AssertionError(f"{exc}\n{handle.log()[-3000:]}") from None
    if found is EXITED:
        raise AssertionError(f"trainer exited early:\n{handle.log()[-3000:]}")
    return found["step"]


# A slow step and a short grace: from the step the notice comes in on, each sampled token
# takes SLOW_TOKEN_SECONDS more (3 per step), so that finishing that step never fits in the
# grace, while a save does with room to spare. The notice comes as the step starts: its first
# token goes on at the pace of the fast steps before, and the second finds the step too slow,
# which leaves the save about 10 s of the 18 s budget (a Megatron save on a busy 2-core machine
# outgrew 4 s).
SLOW_TOKEN_SECONDS = 8
GRACE_SECONDS = 20


def slow_rollout_env(termination_log: Path, from_step: int) -> dict[str, str]:
    """The environment of a run whose rollouts are slow from step `from_step` on."""
    return {
        ENV_TEST_SLOW_ROLLOUT_TOKEN: str(SLOW_TOKEN_SECONDS),
        ENV_TEST_SLOW_ROLLOUT_FROM_STEP: str(from_step),
        ENV_GRACE_SECONDS: str(GRACE_SECONDS),
        ENV_TERMINATION_LOG: str(termination_log),
    }


def terminate_in_rollout(handle: Run, step: int) -> Path:
    """SIGTERM torchrun (as Kubernetes does) once step `step` is done, in the next step's slow
    rollout; the save of step `step` must be sealed before the grace is over, when the kubelet
    would SIGKILL the pod. Its folder, once torchrun has ended after its workers' exit 75."""
    assert wait_for_step(handle, step) == step
    handle.process.send_signal(signal.SIGTERM)
    folder = handle.checkpoint_dir / f"global_step_{step}"
    try:
        wait_for((folder / MANIFEST_NAME).is_file, GRACE_SECONDS,
                 f"step {step} sealed within the grace of {GRACE_SECONDS} s")  # fmt: skip
    except AssertionError as exc:
        handle.wait()
        raise AssertionError(f"{exc}\n{handle.log()[-3000:]}") from None
    assert handle.wait() == 1, handle.log()[-3000:]
    return folder


def files_of(folder: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime in ns) of every file under `folder`, by relative path."""
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def final_weights(handle: Run, step: int) -> dict[str, torch.Tensor]:
    path = handle.checkpoint_dir / f"global_step_{step}" / "actor" / "model" / "model.safetensors"
    return load_file(str(path))


def metrics(handle: Run) -> list[dict[str, Any]]:
    return read_metrics(handle.experiment_dir / "metrics.jsonl")


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert sorted(a) == sorted(b)
    different = [k for k in a if not torch.equal(a[k], b[k])]
    assert not different, f"weights differ bitwise in {different}"


def assert_same_metrics(reference: list[dict[str, Any]], other: list[dict[str, Any]]) -> None:
    assert [e["step"] for e in other] == [e["step"] for e in reference], "steps logged differ"
    for ref, got in zip(reference, other, strict=True):
        for key in EXACT_METRICS:
            assert got[key] == ref[key], f"step {ref['step']}: {key} {got[key]!r} != {ref[key]!r}"
