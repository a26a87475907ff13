"""Single-process runs: the policy learns; the operator's env vars: a checkpoint request stops
the run with 75 (by the node's deadline where it names one), a resume step that does not match
the folder is refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from helpers import metrics, run, start, wait_for_step
from kube_steps import wait_for
from rljob_contract import (
    CHECKPOINTED_ON_REQUEST_MESSAGE,
    ENV_CHECKPOINT_REQUEST_FILE,
    ENV_GRACE_SECONDS,
    ENV_RESUME_DIR,
    ENV_RESUME_STEP,
    ENV_TERMINATION_LOG,
    ENV_TRAINED_MARKER,
    EXIT_CHECKPOINTED_ON_REQUEST,
    progress,
)
from rljob_contract.manifest import MANIFEST_NAME
from rljob_contract.request import format_request
from rljob_trainer.faults import ENV_TEST_SLOW_ROLLOUT_FROM_STEP, ENV_TEST_SLOW_ROLLOUT_TOKEN


def test_reward_rises_and_the_finished_run_tells_when_it_trained(tmp_path: Path) -> None:
    termination_log = tmp_path / "termination-log"
    handle = run(
        tmp_path,
        ["runner.max_steps=40", "runner.save_interval=100", "algorithm.lr=3e-3"],
        nproc=1,
        env={ENV_TERMINATION_LOG: str(termination_log)},
    )
    assert handle.process.returncode == 0, handle.log()[-3000:]
    logged = metrics(handle)
    rewards = [e["reward"] for e in logged]
    first, last = sum(rewards[:10]) / 10, sum(rewards[-10:]) / 10
    assert last > first + 0.05, f"mean reward of the first 10 steps {first}, last 10 {last}"
    # The operator times the attempt's training by the first and last step the log has too.
    said = progress.parse_trained(termination_log.read_text())
    assert said == (round(logged[0]["time"], 3), round(logged[-1]["time"], 3))


def test_request_file_stops_with_75_and_resume_step_must_match(tmp_path: Path) -> None:
    trained = tmp_path / "trained"
    request = tmp_path / "checkpoint-request"
    request.write_text("")  # projected but empty: no request
    handle = run(
        tmp_path,
        ["runner.max_steps=3", "runner.save_interval=100"],
        nproc=1,
        env={ENV_CHECKPOINT_REQUEST_FILE: str(request), ENV_TRAINED_MARKER: str(trained)},
    )
    assert handle.process.returncode == 0, handle.log()[-3000:]
    assert sorted(p.name for p in handle.checkpoint_dir.glob("global_step_*")) == ["global_step_3"]
    assert not trained.exists()  # taken back after the last step: ending is not training

    # The operator names the folder and its step; a mismatch is refused before any training.
    folder = handle.checkpoint_dir / "global_step_3"
    untrained = tmp_path / "trained-refused"
    env = {ENV_RESUME_DIR: str(folder), ENV_RESUME_STEP: "2", ENV_TRAINED_MARKER: str(untrained)}
    refused = run(tmp_path, ["runner.max_steps=4"], nproc=1, env=env, log_name="refused")
    assert refused.process.returncode != 0
    assert f"{ENV_RESUME_STEP}=2 but {folder} holds step 3" in refused.log()
    assert not untrained.exists()  # no step: never Ready, never counted as training

    request.write_text("2026-01-01T00:00:00Z")  # the operator annotated the pod
    termination_log = tmp_path / "termination-log"
    stopped = run(
        tmp_path,
        ["runner.max_steps=10", "runner.save_interval=100"],
        nproc=1,
        env={
            ENV_CHECKPOINT_REQUEST_FILE: str(request),
            ENV_TERMINATION_LOG: str(termination_log),
            ENV_TRAINED_MARKER: str(trained),
        },
    )
    assert stopped.process.returncode == EXIT_CHECKPOINTED_ON_REQUEST, stopped.log()[-3000:]
    assert trained.exists()  # the pod's readiness probe: a step of this attempt was done
    assert (handle.checkpoint_dir / "global_step_4" / MANIFEST_NAME).is_file()
    progress = stopped.progress()
    assert progress is not None
    assert (progress["step"], progress["status"]) == (4, "checkpointed_on_request")
    # torchrun would hide the 75; the termination message tells the operator instead.
    assert CHECKPOINTED_ON_REQUEST_MESSAGE in termination_log.read_text()


def test_a_request_that_says_when_the_node_goes_saves_the_last_finished_step_by_then(
    tmp_path: Path,
) -> None:
    """A grace period of 10 minutes would let the slow step under way (step 4: 3 tokens of 4 s)
    end and be saved; the request says the node goes in 10 s, which that does not fit. The trainer
    abandons the step's rollout and saves step 3, the last finished one, before the node goes,
    instead of step 4 after it."""
    request = tmp_path / "checkpoint-request"
    request.write_text("")
    termination_log = tmp_path / "termination-log"
    env = {
        ENV_CHECKPOINT_REQUEST_FILE: str(request),
        ENV_GRACE_SECONDS: "600",
        ENV_TEST_SLOW_ROLLOUT_TOKEN: "4",
        ENV_TEST_SLOW_ROLLOUT_FROM_STEP: "4",
        ENV_TERMINATION_LOG: str(termination_log),
    }
    # A periodic save at step 2 measures the save time, without which any notice rewinds.
    handle = start(tmp_path, ["runner.max_steps=10", "runner.save_interval=2"], nproc=1, env=env)
    assert wait_for_step(handle, 3) == 3
    goes = datetime.now(UTC) + timedelta(seconds=10)
    request.write_text(format_request(datetime.now(UTC), goes))

    folder = handle.checkpoint_dir / "global_step_3"
    left = (goes - datetime.now(UTC)).total_seconds()
    wait_for((folder / MANIFEST_NAME).is_file, left, "step 3 sealed before the node goes")
    assert handle.wait() == EXIT_CHECKPOINTED_ON_REQUEST, handle.log()[-3000:]
    assert not (handle.checkpoint_dir / "global_step_4").exists()
    assert "saved at step 3 in" in termination_log.read_text()
