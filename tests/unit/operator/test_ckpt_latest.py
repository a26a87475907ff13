"""Choosing the newest complete checkpoint from what real volumes hold."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from builders import make_job
from ckpt_trees import (
    build_dcp,
    build_rljob,
    build_rljob_megatron,
    build_verl_fsdp,
    snapshot,
    write_text,
    write_tracker,
)
from passes import lookup
from rljob_contract.progress import PROGRESS_FILE_NAME
from rljob_contract.steps import parse_step
from rljob_operator.checkpoints import (
    CheckpointInputError,
    Status,
    find_latest,
    list_checkpoints,
    probe,
    verify_folder,
)
from rljob_operator.reconcile.lookup.finder import CheckpointFinder


@pytest.mark.parametrize(
    ("name", "step"),
    [
        ("global_step_7", 7),
        ("global_step_007", 7),
        ("global_step_0", 0),
        ("global_step_", None),
        ("global_step_12abc", None),
        ("global_step_-1", None),
        ("global_step_1.5", None),
        ("global_step_ 3", None),
        ("xglobal_step_3", None),
        ("global_step_\u0663", None),  # a non-ASCII digit
        ("Global_Step_3", None),
    ],
)
def test_only_global_step_and_ascii_digits_name_a_step(name, step):
    assert parse_step(name) == step


def steps(judged):
    return [(j.step, j.verdict.status.value) for j in judged]


def test_newest_complete_wins_and_every_newer_folder_says_why_not(tmp_path):
    for step in (100, 150):
        build_rljob(tmp_path, step)
    build_rljob(tmp_path, 200, "no_manifest")
    build_rljob(tmp_path, 250, "size_mismatch")
    before = snapshot(tmp_path)
    result = find_latest(tmp_path)
    assert (result.found, result.step, result.layout) == (True, 150, "rljob")
    assert result.path == str(tmp_path.resolve() / "global_step_150")
    assert steps(result.rejected) == [(250, "corrupt"), (200, "incomplete")]
    assert "no rljob_manifest.json" in result.rejected[1].verdict.reason
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    ("build", "tear"),
    [(build_rljob, "checksum_mismatch"), (build_rljob_megatron, "changed_shard")],
)
def test_deep_verification_skips_a_folder_whose_checksum_fails(tmp_path, build, tear):
    build(tmp_path, 100)
    build(tmp_path, 200, tear)
    assert find_latest(tmp_path, verify="quick").step == 200
    deep = find_latest(tmp_path, verify="deep")
    assert (deep.step, steps(deep.rejected)) == (100, [(200, "corrupt")])


def test_nothing_complete_is_an_answer_with_every_reason(tmp_path):
    build_rljob(tmp_path, 100, "no_manifest")
    build_rljob(tmp_path, 200, "manifest_tmp_only")
    result = find_latest(tmp_path)
    assert (result.found, result.step, result.path, result.layout) == (False, None, None, None)
    assert steps(result.rejected) == [(200, "incomplete"), (100, "incomplete")]


def test_empty_directory_has_no_checkpoint(tmp_path):
    result = find_latest(tmp_path)
    assert (result.found, result.rejected) == (False, ())


def test_junk_names_are_ignored_and_plain_files_rejected(tmp_path):
    build_dcp(tmp_path, 5)
    build_dcp(tmp_path, 7).rename(tmp_path / "global_step_007")
    for junk in ("global_step_12abc", "global_step_", "global_step_-1", "checkpoints", "tmp"):
        build_dcp(tmp_path, 1).rename(tmp_path / junk)
    write_text(tmp_path / "global_step_999", "a plain file")
    write_text(tmp_path / "notes.txt", "hello")
    result = find_latest(tmp_path)
    assert (result.step, result.path) == (7, str(tmp_path.resolve() / "global_step_007"))
    assert [(j.step, j.verdict.reason) for j in result.rejected] == [(999, "not a directory")]
    assert steps(list_checkpoints(tmp_path)) == [
        (999, "incomplete"),
        (7, "complete"),
        (5, "complete"),
    ]


def test_same_step_twice_is_judged_twice(tmp_path):
    build_dcp(tmp_path, 7, "no_metadata")
    build_dcp(tmp_path, 8).rename(tmp_path / "global_step_007")
    result = find_latest(tmp_path)
    assert (result.step, result.path.endswith("global_step_007")) == (7, True)
    assert steps(result.rejected) == [(7, "incomplete")]


@pytest.mark.parametrize(
    ("target", "followed", "why"),
    [
        ("snapshots/global_step_300", True, ""),
        ("snapshots/global_step_200", False, "not step 300"),
        ("../outside/global_step_300", False, "outside"),
        ("snapshots/missing", False, "target is missing"),
        ("notes.txt", False, "not a directory"),
    ],
)
def test_symlinked_folder_is_followed_only_inside_and_to_the_same_step(
    tmp_path, target, followed, why
):
    root = tmp_path / "run"
    build_dcp(root, 100)
    build_dcp(root / "snapshots", 300)
    build_dcp(root / "snapshots", 200)
    build_dcp(tmp_path / "outside", 300)
    write_text(root / "notes.txt", "x")
    (root / "global_step_300").symlink_to(target)
    result = find_latest(root)
    if followed:
        assert (result.step, result.path) == (300, str(root.resolve() / "global_step_300"))
    else:
        assert result.step == 100
        assert why in result.rejected[0].verdict.reason


def test_unreadable_folder_is_rejected_not_a_crash(tmp_path, monkeypatch):
    build_dcp(tmp_path, 100)
    build_dcp(tmp_path, 200)
    real_listdir = os.listdir

    def listdir(path):
        if "global_step_200" in str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real_listdir(path)

    monkeypatch.setattr(probe.os, "listdir", listdir)
    result = find_latest(tmp_path, layout="dcp")
    assert result.step == 100
    assert result.rejected[0].verdict.reason == "cannot read global_step_200: Permission denied"


def test_folder_without_read_permission_is_rejected():
    """A real permission error, from the CLI run as an unprivileged user (root reads everything)."""
    root = Path(tempfile.mkdtemp(prefix="rljob-perm-"))
    try:
        root.chmod(0o755)
        build_dcp(root, 100)
        locked = build_dcp(root, 200)
        locked.chmod(0)
        command = [sys.executable, "-m", "rljob_operator", "ckpt", "latest", str(root), "--json"]
        if os.geteuid() == 0:
            command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]
        out = subprocess.run(command, capture_output=True, text=True, check=False)
        answer = json.loads(out.stdout)
    finally:
        for folder in root.iterdir():
            folder.chmod(0o755)
        shutil.rmtree(root)
    assert answer["step"] == 100
    assert "Permission denied" in answer["rejected"][0]["reason"]


def test_verl_tracker_bounds_the_answer_from_above(tmp_path):
    for step in (100, 150):
        build_verl_fsdp(tmp_path, step)
    write_tracker(tmp_path, 100)
    result = find_latest(tmp_path)
    assert result.step == 100
    assert (
        "newer than ../latest_checkpointed_iteration.txt (100)" in result.rejected[0].verdict.reason
    )


@pytest.mark.parametrize("tracker", ["300", "200", "garbage", ""])
def test_verl_tracker_ahead_or_at_a_deleted_folder_is_not_trusted(tmp_path, tracker):
    build_verl_fsdp(tmp_path, 100)
    build_verl_fsdp(tmp_path, 150)
    write_text(tmp_path / "latest_checkpointed_iteration.txt", tracker)
    assert find_latest(tmp_path).step == 150


def test_verls_async_save_without_a_tracker_resumes_from_the_newest_complete_folder(tmp_path):
    """verl's issue #7952: with async_save the trainer never writes the run's tracker, and
    verl's own resume_mode=auto then starts again from step 0. rljob does not read the tracker
    to name a folder: it takes the newest complete one, and passes over the one still being
    written (no data.pt yet, as verl writes it after the actor's shards)."""
    build_verl_fsdp(tmp_path, 100)
    build_verl_fsdp(tmp_path, 150)
    build_verl_fsdp(tmp_path, 200, "no_data_pt")
    before = snapshot(tmp_path)
    assert not (tmp_path / "latest_checkpointed_iteration.txt").exists()

    result = find_latest(tmp_path)

    assert (result.step, result.layout) == (150, "verl-fsdp")
    assert result.rejected[0].step == 200 and "data.pt" in result.rejected[0].verdict.reason
    assert snapshot(tmp_path) == before  # read only


def test_verl_folders_emptied_by_retention_are_skipped(tmp_path):
    build_verl_fsdp(tmp_path, 100, "only_data_pt_left")
    build_verl_fsdp(tmp_path, 150)
    build_verl_fsdp(tmp_path, 200, "missing_rank_shard")
    write_tracker(tmp_path, 150)
    result = find_latest(tmp_path)
    assert (result.step, result.layout) == (150, "verl-fsdp")
    listed = list_checkpoints(tmp_path)
    assert "only data.pt is left" in listed[-1].verdict.reason


def test_auto_reads_an_unsealed_folder_by_the_layout_of_its_sealed_siblings(tmp_path):
    build_rljob(tmp_path, 100)
    build_rljob(tmp_path, 200, "no_manifest")
    result = find_latest(tmp_path)
    assert result.step == 100
    assert result.rejected[0].verdict.layout == "rljob"


def test_auto_reads_every_folder_beside_the_rljob_trainers_progress_as_rljob(tmp_path):
    """The trainer's Megatron save shows rlinf-megatron's files, and its manifest comes last."""
    build_rljob_megatron(tmp_path, 100)
    build_rljob_megatron(tmp_path, 200, "no_manifest")
    listed = list_checkpoints(tmp_path)
    assert steps(listed) == [(200, "incomplete"), (100, "complete")]
    assert {j.verdict.layout for j in listed} == {"rljob"}


def test_the_operator_reads_an_rljob_megatron_job_as_rljob_before_any_progress_json(tmp_path):
    """Its first save torn before the trainer ever wrote progress.json: the spec decides."""
    build_rljob_megatron(tmp_path / "run", 100, "no_manifest")
    (tmp_path / "run" / PROGRESS_FILE_NAME).unlink()
    finder = CheckpointFinder(volumes={"ckpts": tmp_path}, inspector_image="unused")
    volume = {"persistentVolumeClaim": {"claimName": "ckpts"}}
    job = make_job(backend="megatron", checkpoint={"volume": volume, "directory": "run"})

    result = lookup(finder, job)

    assert result.target is None
    assert "rljob_manifest.json is missing: the save did not finish" in result.detail


def test_auto_reads_each_folder_by_its_own_decisive_files(tmp_path):
    build_verl_fsdp(tmp_path, 100)
    build_dcp(tmp_path, 200)
    assert [j.verdict.layout for j in list_checkpoints(tmp_path)] == ["dcp", "verl-fsdp"]


def test_folder_in_no_layout_is_incomplete_with_that_reason(tmp_path):
    write_text(tmp_path / "global_step_5/readme.txt", "not a checkpoint")
    verdict = find_latest(tmp_path).rejected[0].verdict
    assert (verdict.status, verdict.reason) == (
        Status.INCOMPLETE,
        "no recognisable checkpoint layout",
    )


def test_paths_are_absolute_without_trailing_slash(tmp_path, monkeypatch):
    build_rljob(tmp_path / "run", 150)
    monkeypatch.chdir(tmp_path)
    expected = str(tmp_path.resolve() / "run" / "global_step_150")
    assert find_latest("run/").path == expected
    judged = verify_folder("run/global_step_150/")
    assert (str(judged.path), judged.step, judged.verdict.ok) == (expected, 150, True)


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda d: find_latest(d / "missing"), "no such directory"),
        (lambda d: find_latest(d / "file"), "not a directory"),
        (lambda d: find_latest(d, layout="megatron"), "unknown layout 'megatron'"),
        (lambda d: find_latest(d, verify="thorough"), "unknown verify mode"),
        (lambda d: list_checkpoints(d / "missing"), "no such directory"),
        (lambda d: verify_folder(d / "file"), "not a global_step_N folder"),
        (lambda d: verify_folder(d / "global_step_9"), "no such directory"),
        (lambda d: verify_folder(d / "global_step_1"), "not a directory"),
    ],
)
def test_bad_input_raises_naming_the_problem(tmp_path, call, words):
    write_text(tmp_path / "file", "x")
    write_text(tmp_path / "global_step_1", "x")
    with pytest.raises(CheckpointInputError, match=words):
        call(tmp_path)


def test_excluded_folder_is_passed_over_whatever_it_holds(tmp_path):
    build_dcp(tmp_path / "real", 100)
    build_dcp(tmp_path / "real", 200)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    result = find_latest(tmp_path / "real", exclude=[f"{tmp_path}/link/global_step_200/"])
    assert result.step == 100
    assert result.rejected[0].verdict.status == Status.EXCLUDED
    assert find_latest(tmp_path / "real", exclude=[tmp_path / "real/global_step_9"]).step == 200
