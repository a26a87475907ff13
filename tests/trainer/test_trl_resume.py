"""TRL's real GRPOTrainer (trl's own code on CPU, driven by tests/e2e/trl_grpo.py), killed
without warning after a save and resumed the way rljob resumes a `framework: trl` job: the
newest complete `checkpoint-N` by the `hf-trainer` layout, a newer torn one passed over, and
TRL's own switch from the framework registry. The resumed run ends bitwise equal to an
uninterrupted one. (Not on a cluster: the job's pods and their preemption are the e2e tests'.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from kube_steps import wait_for
from rljob_operator.checkpoints import Status, find_latest
from rljob_operator.frameworks import resume_overrides

DRIVER = Path(__file__).resolve().parents[1] / "e2e" / "trl_grpo.py"
STEPS, EVERY = 8, 4  # within the first epoch of the driver's 16 prompts: see its docstring
WEIGHTS = "model.safetensors"


def command(output_dir: Path, *flags: str) -> list[str]:
    return [sys.executable, str(DRIVER), f"--output_dir={output_dir}", f"--max_steps={STEPS}",
            f"--save_steps={EVERY}", *flags]  # fmt: skip


def env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def run(output_dir: Path, *flags: str) -> None:
    done = subprocess.run(command(output_dir, *flags), env=env(), capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


def newest_step(output_dir: Path) -> int | None:
    return find_latest(output_dir, "hf-trainer").step if output_dir.is_dir() else None


def test_trl_killed_after_a_save_resumes_from_the_newest_complete_checkpoint_bit_exactly(
    tmp_path: Path,
) -> None:
    reference = tmp_path / "reference"
    run(reference)

    interrupted = tmp_path / "run"
    # A second a step, so that the kill comes after checkpoint-4 and before checkpoint-8.
    process = subprocess.Popen(command(interrupted, "--seconds_per_step=1"), env=env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_for(lambda: newest_step(interrupted) == EVERY, 120, "checkpoint-4, complete")
    finally:
        process.kill()
        process.wait(30)
    # A save cut short before its last files (the weights written, nothing after them).
    torn = interrupted / f"checkpoint-{STEPS}"
    torn.mkdir()
    shutil.copy(interrupted / f"checkpoint-{EVERY}" / WEIGHTS, torn / WEIGHTS)

    latest = find_latest(interrupted, "hf-trainer")
    assert latest.step == EVERY
    assert [(j.step, j.verdict.status) for j in latest.rejected] == [(STEPS, Status.INCOMPLETE)]
    switch = resume_overrides("trl", str(latest.path))
    assert switch == [f"--resume_from_checkpoint={interrupted / f'checkpoint-{EVERY}'}"]
    run(interrupted, *switch)

    resumed = interrupted / f"checkpoint-{STEPS}"
    assert find_latest(interrupted, "hf-trainer", "deep").step == STEPS
    assert (resumed / WEIGHTS).read_bytes() == (
        reference / f"checkpoint-{STEPS}" / WEIGHTS
    ).read_bytes()
