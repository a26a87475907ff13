"""Two CPU ranks under torchrun: interrupted runs resume bit-exactly from complete checkpoints,
and a notice during a slow step saves in time (or skips a save that is already there)."""

from __future__ import annotations

import json
import random
import re
import shutil
import signal
from pathlib import Path

import pytest
import torch
from helpers import (
    Run,
    assert_same_metrics,
    assert_same_weights,
    files_of,
    final_weights,
    kill_tree,
    metrics,
    run,
    slow_rollout_env,
    start,
    terminate_in_rollout,
    wait_for_step,
)
from rljob_contract import CHECKPOINTED_ON_REQUEST_MESSAGE
from rljob_contract.manifest import MANIFEST_NAME, read_manifest
from rljob_trainer.checkpoint import newest_complete
from rljob_trainer.convert import convert
from rljob_trainer.faults import ENV_TEST_KILL_BEFORE_MANIFEST
from rljob_trainer.fsdp.checkpoint import sealed_files
from rljob_trainer.model import model_from_config_dict
from safetensors.torch import load_file

MAX_STEPS = 14
INTERVAL = 3
CONFIG = [
    f"runner.max_steps={MAX_STEPS}",
    f"runner.save_interval={INTERVAL}",
    "runner.max_num_checkpoints=2",
]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The uninterrupted run every interrupted one must reproduce exactly."""
    handle = run(tmp_path_factory.mktemp("baseline"), CONFIG)
    assert handle.process.returncode == 0, handle.log()[-3000:]
    return handle


def _assert_matches_baseline(resumed: Run, baseline: Run) -> None:
    assert resumed.process.returncode == 0, resumed.log()[-3000:]
    assert_same_weights(final_weights(resumed, MAX_STEPS), final_weights(baseline, MAX_STEPS))
    assert_same_metrics(metrics(baseline), metrics(resumed))
    assert [e["step"] for e in metrics(resumed)] == list(range(1, MAX_STEPS + 1))


def test_baseline_keeps_newest_checkpoints(baseline: Run) -> None:
    names = sorted(p.name for p in baseline.checkpoint_dir.iterdir() if p.is_dir())
    assert names == ["global_step_12", "global_step_14"]
    for name in names:
        manifest = read_manifest(baseline.checkpoint_dir / name)
        assert manifest.world_size == 2
        paths = {entry.path for entry in manifest.files}
        assert {
            "actor/.metadata",
            "actor/__0_0.distcp",
            "actor/__1_0.distcp",
            "actor/model/model.safetensors",
            "actor/model/config.json",
            "data/data.pt",
        } <= paths
    progress = baseline.progress()
    assert progress is not None
    assert (progress["step"], progress["status"]) == (MAX_STEPS, "finished")


def test_sigkill_then_resume_is_bit_exact(baseline: Run, tmp_path: Path) -> None:
    kill_after = random.Random().randint(INTERVAL + 1, MAX_STEPS - 4)
    handle = start(tmp_path, CONFIG, log_name="killed")
    reached = wait_for_step(handle, kill_after)
    kill_tree(handle.process.pid, signal.SIGKILL)
    print(f"SIGKILLed after step {reached} (asked for {kill_after})")
    assert handle.wait() == -signal.SIGKILL
    progress = handle.progress()
    assert progress is not None
    assert progress["status"] == "running", f"the run finished before the kill at {reached}"
    newest = newest_complete(handle.checkpoint_dir, sealed_files)
    assert newest is not None, "no complete checkpoint before the kill"
    resumed = run(tmp_path, CONFIG, log_name="resumed")
    step = int(newest.name.removeprefix("global_step_"))
    assert f"resumed from {newest} at step {step}" in resumed.log()
    _assert_matches_baseline(resumed, baseline)


def test_sigterm_checkpoints_exits_75_and_resumes_bit_exact(baseline: Run, tmp_path: Path) -> None:
    # Asynchronous saving here, so the stop path also waits for an in-flight save.
    config = [*CONFIG, "runner.async_save=true"]
    handle = start(tmp_path, config, log_name="terminated")
    print(f"SIGTERM after step {wait_for_step(handle, random.Random().randint(2, MAX_STEPS - 4))}")
    handle.process.send_signal(signal.SIGTERM)  # to torchrun only, as Kubernetes does
    returncode = handle.wait()
    log = handle.log()
    # torchrun forwards SIGTERM to the workers, which save and exit 75; torchrun itself then
    # raises its SignalException and exits 1.
    assert returncode == 1, log[-3000:]
    for rank in (0, 1):
        assert re.search(
            rf"\[rank{rank}\].*stopping on request \(SIGTERM\).*exiting with code 75", log
        )
    progress = handle.progress()
    assert progress is not None
    assert progress["status"] == "checkpointed_on_request"
    stopped_at = progress["step"]
    assert stopped_at < MAX_STEPS
    folder = handle.checkpoint_dir / f"global_step_{stopped_at}"
    assert (folder / MANIFEST_NAME).is_file()
    assert newest_complete(handle.checkpoint_dir, sealed_files) == folder
    resumed = run(tmp_path, config, log_name="resumed")
    assert f"resumed from {folder} at step {stopped_at}" in resumed.log()
    _assert_matches_baseline(resumed, baseline)


def test_notice_during_a_slow_rollout_saves_the_last_finished_step_at_once(
    baseline: Run, tmp_path: Path
) -> None:
    # Saves at 2, 4, ...: step 3 is not saved yet when the notice comes in step 4's rollout,
    # and finishing step 4 (three slow tokens) cannot end within the grace.
    config = [*CONFIG, "runner.save_interval=2"]
    termination_log = tmp_path / "termination-log"
    handle = start(
        tmp_path, config, env=slow_rollout_env(termination_log, 4), log_name="terminated"
    )
    folder = terminate_in_rollout(handle, 3)
    message = termination_log.read_text().strip()
    assert message.startswith(f"{CHECKPOINTED_ON_REQUEST_MESSAGE}: saved at step 3 in "), message
    assert re.search(r"\[rank1\].*stopping on request \(SIGTERM\): saved at step 3", handle.log())
    progress = handle.progress()
    assert progress is not None
    assert (progress["step"], progress["status"]) == (3, "checkpointed_on_request")
    assert [e["step"] for e in metrics(handle)] == [1, 2, 3]  # step 4 was abandoned
    assert newest_complete(handle.checkpoint_dir, sealed_files) == folder
    resumed = run(tmp_path, CONFIG, log_name="resumed")
    assert f"resumed from {folder} at step 3" in resumed.log()
    _assert_matches_baseline(resumed, baseline)


def test_notice_right_after_a_save_exits_without_saving_again(tmp_path: Path) -> None:
    config = [*CONFIG, "runner.save_interval=2"]
    termination_log = tmp_path / "termination-log"
    handle = start(
        tmp_path, config, env=slow_rollout_env(termination_log, 3), log_name="terminated"
    )
    assert wait_for_step(handle, 2) == 2  # progress.json is written after the step's save
    folder = handle.checkpoint_dir / "global_step_2"
    saved = files_of(folder)
    assert MANIFEST_NAME in saved
    handle.process.send_signal(signal.SIGTERM)
    assert handle.wait() == 1, handle.log()[-3000:]
    message = termination_log.read_text().strip()
    assert message == f"{CHECKPOINTED_ON_REQUEST_MESSAGE}: skipped: step 2 already saved"
    assert files_of(folder) == saved, "the checkpoint of step 2 was written again"
    assert sorted(p.name for p in handle.checkpoint_dir.glob("global_step_*")) == [folder.name]
    progress = handle.progress()
    assert progress is not None
    assert (progress["step"], progress["status"]) == (2, "checkpointed_on_request")


def test_torn_checkpoint_is_never_loaded(baseline: Run, tmp_path: Path) -> None:
    crashed = run(
        tmp_path, CONFIG, env={ENV_TEST_KILL_BEFORE_MANIFEST: str(2 * INTERVAL)}, log_name="torn"
    )
    assert crashed.process.returncode != 0
    torn = crashed.checkpoint_dir / f"global_step_{2 * INTERVAL}"
    assert (torn / "actor" / ".metadata").is_file(), "the shards should have been written"
    assert not (torn / MANIFEST_NAME).exists()

    refused = run(tmp_path, [*CONFIG, f"runner.resume_dir={torn}"], nproc=1, log_name="refused")
    assert refused.process.returncode != 0
    assert f"refusing to resume from {torn}" in refused.log()

    resumed = run(tmp_path, CONFIG, log_name="resumed")
    previous = crashed.checkpoint_dir / f"global_step_{INTERVAL}"
    assert f"resumed from {previous} at step {INTERVAL}" in resumed.log()
    _assert_matches_baseline(resumed, baseline)


def test_world_size_change_needs_the_flag(baseline: Run, tmp_path: Path) -> None:
    source = baseline.checkpoint_dir / "global_step_12"
    config = [*CONFIG, f"runner.resume_dir={source}", "runner.max_steps=13"]
    refused = run(tmp_path / "refused", config, nproc=1)
    assert refused.process.returncode != 0
    assert "was written by 2 ranks and this run has 1" in refused.log()
    assert "runner.allow_world_size_change=true" in refused.log()

    allowed = run(tmp_path / "allowed", [*config, "runner.allow_world_size_change=true"], nproc=1)
    assert allowed.process.returncode == 0, allowed.log()[-3000:]
    assert f"resumed from {source} at step 12" in allowed.log()
    assert read_manifest(allowed.checkpoint_dir / "global_step_13").world_size == 1


def test_convert_matches_the_trained_weights(baseline: Run, tmp_path: Path) -> None:
    step_dir = baseline.checkpoint_dir / f"global_step_{MAX_STEPS}"
    target = convert(step_dir / "actor", tmp_path)
    weights = load_file(str(target))
    assert_same_weights(weights, final_weights(baseline, MAX_STEPS))
    config = json.loads((tmp_path / "config.json").read_text())
    model = model_from_config_dict(config)
    model.load_state_dict(weights, strict=True)
    assert all(torch.equal(p, weights[name]) for name, p in model.named_parameters())


def test_convert_refuses_a_torn_checkpoint(baseline: Run, tmp_path: Path) -> None:
    torn = tmp_path / "global_step_14"
    shutil.copytree(baseline.checkpoint_dir / "global_step_14", torn)
    (torn / MANIFEST_NAME).unlink()
    with pytest.raises(RuntimeError, match="not completely written"):
        convert(torn / "actor", tmp_path / "out")
