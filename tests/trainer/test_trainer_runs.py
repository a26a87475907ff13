"""Single-process runs: the policy learns; the operator's env vars: a checkpoint request stops
the run with 75, a resume step that does not match the folder is refused."""

from __future__ import annotations

from pathlib import Path

from helpers import metrics, run
from rljob_contract import (
    CHECKPOINTED_ON_REQUEST_MESSAGE,
    ENV_CHECKPOINT_REQUEST_FILE,
    ENV_RESUME_DIR,
    ENV_RESUME_STEP,
    ENV_TERMINATION_LOG,
    EXIT_CHECKPOINTED_ON_REQUEST,
)
from rljob_contract.manifest import MANIFEST_NAME


def test_reward_rises(tmp_path: Path) -> None:
    handle = run(
        tmp_path,
        ["runner.max_steps=40", "runner.save_interval=100", "algorithm.lr=3e-3"],
        nproc=1,
    )
    assert handle.process.returncode == 0, handle.log()[-3000:]
    rewards = [e["reward"] for e in metrics(handle)]
    first, last = sum(rewards[:10]) / 10, sum(rewards[-10:]) / 10
    assert last > first + 0.05, f"mean reward of the first 10 steps {first}, last 10 {last}"


def test_request_file_stops_with_75_and_resume_step_must_match(tmp_path: Path) -> None:
    request = tmp_path / "checkpoint-request"
    request.write_text("")  # projected but empty: no request
    handle = run(
        tmp_path,
        ["runner.max_steps=3", "runner.save_interval=100"],
        nproc=1,
        env={ENV_CHECKPOINT_REQUEST_FILE: str(request)},
    )
    assert handle.process.returncode == 0, handle.log()[-3000:]
    assert sorted(p.name for p in handle.checkpoint_dir.glob("global_step_*")) == ["global_step_3"]

    # The operator names the folder and its step; a mismatch is refused before any training.
    folder = handle.checkpoint_dir / "global_step_3"
    env = {ENV_RESUME_DIR: str(folder), ENV_RESUME_STEP: "2"}
    refused = run(tmp_path, ["runner.max_steps=4"], nproc=1, env=env, log_name="refused")
    assert refused.process.returncode != 0
    assert f"{ENV_RESUME_STEP}=2 but {folder} holds step 3" in refused.log()

    request.write_text("2026-01-01T00:00:00Z")  # the operator annotated the pod
    termination_log = tmp_path / "termination-log"
    stopped = run(
        tmp_path,
        ["runner.max_steps=10", "runner.save_interval=100"],
        nproc=1,
        env={ENV_CHECKPOINT_REQUEST_FILE: str(request), ENV_TERMINATION_LOG: str(termination_log)},
    )
    assert stopped.process.returncode == EXIT_CHECKPOINTED_ON_REQUEST, stopped.log()[-3000:]
    assert (handle.checkpoint_dir / "global_step_4" / MANIFEST_NAME).is_file()
    progress = stopped.progress()
    assert progress is not None
    assert (progress["step"], progress["status"]) == (4, "checkpointed_on_request")
    # torchrun would hide the 75; the termination message tells the operator instead.
    assert CHECKPOINTED_ON_REQUEST_MESSAGE in termination_log.read_text()
