"""The Megatron backend on CPU under torchrun: TP2 (2 ranks) and TP2 x PP2 (4 ranks) runs that
are SIGKILLed or SIGTERMed resume bit-exactly from their dist_checkpointing saves, also when a
notice during a slow rollout saves the last finished step at once."""

from __future__ import annotations

import json
import random
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import (
    Run,
    assert_same_metrics,
    kill_tree,
    metrics,
    run,
    slow_rollout_env,
    start,
    terminate_in_rollout,
    trainer_env,
    wait_for_step,
)
from rljob_contract import CHECKPOINTED_ON_REQUEST_MESSAGE
from rljob_contract.manifest import MANIFEST_NAME, read_manifest
from rljob_testenv.scenario import differing_saved_state
from rljob_trainer.checkpoint import newest_complete
from rljob_trainer.convert import convert
from rljob_trainer.dcp_read import read_dcp_tensors
from rljob_trainer.megatron.checkpoint import TRACKER, iteration_dir, sealed_files
from safetensors.torch import load_file
from tiny_trainer import TINY

MAX_STEPS = 10
INTERVAL = 3
MEGATRON = [
    "runner.backend=megatron",
    f"runner.max_steps={MAX_STEPS}",
    f"runner.save_interval={INTERVAL}",
    "runner.max_num_checkpoints=2",
]
TP2 = [*MEGATRON, "megatron.tensor_model_parallel_size=2"]
TP2_PP2 = [*TP2, "megatron.pipeline_model_parallel_size=2"]
WHOLE_MODEL = Path(__file__).with_name("megatron_whole_model.py")


@pytest.fixture(scope="module")
def tp2(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The uninterrupted TP2 run (2 ranks, the distributed optimizer)."""
    handle = run(tmp_path_factory.mktemp("tp2"), TP2, nproc=2)
    assert handle.process.returncode == 0, handle.log()[-3000:]
    return handle


@pytest.fixture(scope="module")
def tp2_pp2(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The uninterrupted TP2 x PP2 run (4 ranks)."""
    handle = run(tmp_path_factory.mktemp("tp2pp2"), TP2_PP2, nproc=4)
    assert handle.process.returncode == 0, handle.log()[-3000:]
    return handle


def iteration(handle: Run, step: int) -> Path:
    return handle.checkpoint_dir / f"global_step_{step}" / iteration_dir(step)


def assert_matches(resumed: Run, baseline: Run) -> None:
    assert resumed.process.returncode == 0, resumed.log()[-3000:]
    saved = read_dcp_tensors(iteration(resumed, MAX_STEPS), lambda key: True, {})
    assert any(key.startswith("optimizer.") for key in saved), "no optimizer state saved"
    differ = differing_saved_state(iteration(resumed, MAX_STEPS), iteration(baseline, MAX_STEPS))
    assert not differ, f"tensors differ bitwise from the uninterrupted run in {differ}"
    assert_same_metrics(metrics(baseline), metrics(resumed))
    assert [e["step"] for e in metrics(resumed)] == list(range(1, MAX_STEPS + 1))


def test_a_save_is_rlinf_megatron_arrangement_sealed_by_the_manifest(tp2: Run) -> None:
    names = sorted(p.name for p in tp2.checkpoint_dir.iterdir() if p.is_dir())
    assert names == ["global_step_10", "global_step_9"]  # retention kept two
    folder = tp2.checkpoint_dir / "global_step_10"
    assert (folder / "actor" / TRACKER).read_text().strip() == "10"
    manifest = read_manifest(folder)
    assert manifest.world_size == 2
    paths = {entry.path for entry in manifest.files}
    iteration = "actor/iter_0000010"
    assert {
        f"{iteration}/.metadata",
        f"{iteration}/common.pt",
        f"{iteration}/metadata.json",
        f"{iteration}/__0_0.distcp",
        f"{iteration}/__1_0.distcp",
        f"actor/{TRACKER}",
        "data/data.pt",
    } <= paths
    assert set(sealed_files(10)) <= paths


def test_tp2_sigkill_then_resume_is_bit_exact(tp2: Run, tmp_path: Path) -> None:
    kill_after = random.Random().randint(INTERVAL + 1, MAX_STEPS - 3)
    handle = start(tmp_path, TP2, nproc=2, log_name="killed")
    reached = wait_for_step(handle, kill_after)
    kill_tree(handle.process.pid, signal.SIGKILL)
    print(f"SIGKILLed after step {reached} (asked for {kill_after})")
    assert handle.wait() == -signal.SIGKILL
    progress = handle.progress()
    assert progress is not None and progress["status"] == "running"
    newest = newest_complete(handle.checkpoint_dir, sealed_files)
    assert newest is not None, "no complete checkpoint before the kill"
    resumed = run(tmp_path, TP2, nproc=2, log_name="resumed")
    step = int(newest.name.removeprefix("global_step_"))
    assert f"resumed from {newest} at step {step}" in resumed.log()
    assert_matches(resumed, tp2)


def test_tp2_pp2_sigterm_checkpoints_exits_75_and_resumes_bit_exact(
    tp2_pp2: Run, tmp_path: Path
) -> None:
    handle = start(tmp_path, TP2_PP2, nproc=4, log_name="terminated")
    print(f"SIGTERM after step {wait_for_step(handle, random.Random().randint(2, MAX_STEPS - 3))}")
    handle.process.send_signal(signal.SIGTERM)  # to torchrun only, as Kubernetes does
    assert handle.wait() == 1  # torchrun's own exit after forwarding the signal
    log = handle.log()
    for rank in range(4):
        assert re.search(
            rf"\[rank{rank}\].*stopping on request \(SIGTERM\).*exiting with code 75", log
        ), log[-3000:]
    progress = handle.progress()
    assert progress is not None and progress["status"] == "checkpointed_on_request"
    stopped_at = progress["step"]
    folder = handle.checkpoint_dir / f"global_step_{stopped_at}"
    assert newest_complete(handle.checkpoint_dir, sealed_files) == folder
    resumed = run(tmp_path, TP2_PP2, nproc=4, log_name="resumed")
    assert f"resumed from {folder} at step {stopped_at}" in resumed.log()
    assert_matches(resumed, tp2_pp2)


def test_tp2_notice_during_a_slow_rollout_saves_the_last_finished_step_and_resumes_bit_exact(
    tp2: Run, tmp_path: Path
) -> None:
    # Saves at 2, 4, ...: the notice comes in step 4's rollout, which cannot end in the grace;
    # the ranks abandon it together (its tensor-parallel collectives stay in step) and save 3.
    config = [*TP2, "runner.save_interval=2"]
    termination_log = tmp_path / "termination-log"
    env = slow_rollout_env(termination_log, 4)
    handle = start(tmp_path, config, nproc=2, env=env, log_name="terminated")
    folder = terminate_in_rollout(handle, 3)
    message = termination_log.read_text().strip()
    assert message.startswith(f"{CHECKPOINTED_ON_REQUEST_MESSAGE}: saved at step 3 in "), message
    assert [e["step"] for e in metrics(handle)] == [1, 2, 3]
    assert newest_complete(handle.checkpoint_dir, sealed_files) == folder
    resumed = run(tmp_path, TP2, nproc=2, log_name="resumed")
    assert f"resumed from {folder} at step 3" in resumed.log()
    assert_matches(resumed, tp2)


def rljob_ckpt(*args: str) -> subprocess.CompletedProcess:
    command = [str(Path(sys.executable).with_name("rljob")), "ckpt", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_torn_saves_are_skipped_with_the_reason(tp2: Run, tmp_path: Path) -> None:
    """A save cut before its tracker, and one cut before DCP's .metadata: the trainer and
    `rljob ckpt latest` both pass over them to the older complete one, saying why."""
    root = tmp_path / "checkpoints"
    shutil.copytree(tp2.checkpoint_dir, root)
    complete = root / "global_step_10"
    for step, cut in ((11, f"actor/{TRACKER}"), (12, "actor/iter_0000012/.metadata")):
        torn = root / f"global_step_{step}"
        shutil.copytree(complete, torn)
        (torn / iteration_dir(10)).rename(torn / iteration_dir(step))
        (torn / "actor" / TRACKER).write_text(f"{step}\n")
        (torn / MANIFEST_NAME).unlink()
        (torn / cut).unlink()
    assert newest_complete(root, sealed_files) == complete
    latest = rljob_ckpt("latest", str(root), "--json")
    assert latest.returncode == 0, latest.stderr
    report = json.loads(latest.stdout)
    assert (report["path"], report["layout"]) == (str(complete), "rljob")
    reasons = {entry["step"]: entry["reason"] for entry in report["rejected"]}
    assert ".metadata is missing" in reasons[12], reasons
    assert f"{TRACKER} is missing" in reasons[11], reasons


def test_another_tensor_parallel_size_is_refused_naming_both_shapes(
    tp2: Run, tmp_path: Path
) -> None:
    source = tp2.checkpoint_dir / "global_step_9"
    config = [*MEGATRON, f"runner.resume_dir={source}", "runner.allow_world_size_change=true"]
    refused = run(tmp_path, config, nproc=2, log_name="refused")
    assert refused.process.returncode != 0
    assert "written as TP2 x PP1 x DP1 and this run is TP1 x PP1 x DP2" in refused.log()
    assert "megatron.tensor_model_parallel_size=2" in refused.log()


def test_another_data_parallel_size_reshards_with_the_flag(tp2: Run, tmp_path: Path) -> None:
    source = tp2.checkpoint_dir / "global_step_9"
    config = [*TP2, f"runner.resume_dir={source}"]
    refused = run(tmp_path / "refused", config, nproc=4, log_name="refused")
    assert refused.process.returncode != 0
    assert "runner.allow_world_size_change=true" in refused.log()

    allowed = run(tmp_path / "allowed", [*config, "runner.allow_world_size_change=true"], nproc=4)
    assert allowed.process.returncode == 0, allowed.log()[-3000:]
    assert f"resumed from {source} at step 9" in allowed.log()
    assert "TP2 x PP1 x DP1 to TP2 x PP1 x DP2" in allowed.log()
    assert read_manifest(allowed.checkpoint_dir / "global_step_10").world_size == 4


@pytest.mark.parametrize("baseline", ["tp2", "tp2_pp2"])
def test_convert_writes_the_whole_model_as_megatron_loads_it_on_one_rank(
    baseline: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    handle: Run = request.getfixturevalue(baseline)
    step_dir = handle.checkpoint_dir / f"global_step_{MAX_STEPS}"
    converted = load_file(str(convert(step_dir, tmp_path / "converted")))
    expected_file = tmp_path / "whole.pt"
    loaded = subprocess.run(
        [
            sys.executable,
            str(WHOLE_MODEL),
            str(iteration(handle, MAX_STEPS)),
            str(expected_file),
            *TINY,
        ],
        env=trainer_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    expected = torch.load(expected_file, weights_only=True)
    assert sorted(converted) == sorted(expected)
    different = [k for k in expected if not torch.equal(converted[k], expected[k])]
    assert not different, f"convert differs from megatron's own load in {different}"


def test_convert_refuses_a_save_without_its_manifest(tp2: Run, tmp_path: Path) -> None:
    torn = tmp_path / "global_step_10"
    shutil.copytree(tp2.checkpoint_dir / "global_step_10", torn)
    (torn / MANIFEST_NAME).unlink()
    with pytest.raises(RuntimeError, match="not completely written"):
        convert(torn, tmp_path / "out")
