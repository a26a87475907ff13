"""A job reads checkpoints only from its own volume (issue #17, item 1): '..' is refused in
the spec, and a directory that resolves outside the volume (a symlink) is refused by the
operator's own lookup and by the inspector's `--within`."""

from __future__ import annotations

import json
import shutil

import pytest
from builders import job_ref, make_job
from ckpt_trees import build_rljob, snapshot
from passes import lookup
from rljob_operator.api.spec import SpecError, parse_spec
from rljob_operator.checkpoints import find_latest
from rljob_operator.cli import main
from rljob_operator.launcher.inspector import desired_inspector
from rljob_operator.launcher.pods import ResumeTarget
from rljob_operator.reconcile.lookup.finder import CheckpointFinder, LookupFailed


@pytest.mark.parametrize(
    ("checkpoint", "field"),
    [
        ({"directory": "../outside"}, "spec.checkpoint.directory"),
        ({"directory": "run/../../../../etc"}, "spec.checkpoint.directory"),
        ({"resume": "/checkpoints/../etc/global_step_1"}, "spec.checkpoint.resume"),
        ({"mountPath": "/data/../checkpoints"}, "spec.checkpoint.mountPath"),
    ],
)
def test_parent_segments_are_refused_naming_the_field(checkpoint, field):
    with pytest.raises(SpecError) as caught:
        parse_spec(make_job(checkpoint=checkpoint)["spec"])
    assert caught.value.field == field


def test_a_name_that_merely_holds_two_dots_is_fine():
    spec = parse_spec(make_job(checkpoint={"directory": "run..2/checkpoints"})["spec"])
    assert spec.checkpoint.path == "/checkpoints/run..2/checkpoints"


def escaping_volume(tmp_path):
    """A claim's directory whose checkpoint folder is a symlink to a sibling outside it."""
    outside = tmp_path / "outside"
    build_rljob(outside, 77)
    volume = tmp_path / "volume"
    (volume / "run").mkdir(parents=True)
    (volume / "run" / "checkpoints").symlink_to(outside)
    return volume, outside


def test_the_operator_does_not_read_past_its_volume(tmp_path):
    volume, outside = escaping_volume(tmp_path)
    before = snapshot(tmp_path)
    finder = CheckpointFinder(volumes={"ckpts": volume}, inspector_image="unused")
    job = make_job(checkpoint={"volume": {"persistentVolumeClaim": {"claimName": "ckpts"}},
                               "directory": "run/checkpoints", "layout": "rljob"})  # fmt: skip

    with pytest.raises(LookupFailed, match=f"resolves to {outside}, outside {volume}"):
        lookup(finder, job)
    assert snapshot(tmp_path) == before


def test_the_inspectors_command_refuses_a_directory_outside_within(tmp_path, capsys):
    volume, _ = escaping_volume(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "ckpt",
                "latest",
                str(volume / "run" / "checkpoints"),
                "--within",
                str(volume),
                "--json",
            ]
        )
    out, err = capsys.readouterr()
    assert (exit_info.value.code, out) == (2, "")
    assert "outside" in err and len(err.strip().splitlines()) == 1


def test_within_allows_symlinks_that_stay_inside(tmp_path, capsys):
    volume = tmp_path / "volume"
    build_rljob(volume / "real", 5)
    (volume / "alias").symlink_to(volume / "real")
    with pytest.raises(SystemExit) as exit_info:
        main(["ckpt", "latest", str(volume / "alias"), "--within", str(volume), "--json"])
    assert exit_info.value.code == 0
    assert json.loads(capsys.readouterr().out)["step"] == 5


def test_the_inspector_pod_confines_its_lookup_to_the_mounted_volume():
    job = make_job(checkpoint={"mountPath": "/ck", "directory": "run"})
    pod = desired_inspector(parse_spec(job["spec"]), job_ref(job), 0, "rljob-operator:1")
    command = pod["spec"]["containers"][0]["command"]
    assert command[2:4] == ["latest", "/ck/run"]
    assert command[command.index("--within") + 1] == "/ck"
    assert "--missing-ok" in command  # a job that never saved has no directory yet


def test_a_symlink_inside_a_checkpoint_folder_that_leads_outside_is_not_followed(tmp_path):
    """actor/ pointing at another run's shards: the folder is judged by its own files."""
    elsewhere = build_rljob(tmp_path / "other-run", 9)
    run = tmp_path / "run"
    build_rljob(run, 8)
    folder = build_rljob(run, 9)
    shutil.rmtree(folder / "actor")
    (folder / "actor").symlink_to(elsewhere / "actor")
    before = snapshot(tmp_path)

    result = find_latest(run, "rljob", "deep")

    assert result.step == 8
    assert result.rejected[0].verdict.status.value == "corrupt"
    assert "symlink that leads outside the checkpoint folder" in result.rejected[0].verdict.reason
    assert snapshot(tmp_path) == before


def named_job(resume: str, attempt: int = 0) -> dict:
    job = make_job(checkpoint={"volume": {"persistentVolumeClaim": {"claimName": "ckpts"}},
                               "directory": "run", "layout": "rljob", "resume": resume})  # fmt: skip
    job["status"] = {"attempt": attempt}
    return job


def test_an_explicit_resume_folder_is_verified_on_the_volume(tmp_path):
    volume = tmp_path / "volume"
    build_rljob(volume / "run", 5)
    build_rljob(volume / "run", 6, "no_manifest")
    build_rljob(volume / "run", 8)
    finder = CheckpointFinder(volumes={"ckpts": volume}, inspector_image="unused")

    whole = lookup(finder, named_job("/checkpoints/run/global_step_5"))
    torn = lookup(finder, named_job("/checkpoints/run/global_step_6"))
    later = lookup(finder, named_job("/checkpoints/run/global_step_5", attempt=1))

    assert whole.target == ResumeTarget("/checkpoints/run/global_step_5", 5)
    assert torn.target is None and torn.detail.startswith("incomplete (")
    assert later.target.step == 8  # a later attempt resumes from the newest complete one
    with pytest.raises(LookupFailed, match=r"global_step_7 cannot be read: .*no such directory"):
        lookup(finder, named_job("/checkpoints/run/global_step_7"))


def test_the_inspector_verifies_an_explicit_resume_folder_within_the_volume():
    job = named_job("/checkpoints/run/global_step_5")
    pod = desired_inspector(parse_spec(job["spec"]), job_ref(job), 0, "rljob-operator:1", (),
                            "/checkpoints/run/global_step_5")  # fmt: skip
    command = pod["spec"]["containers"][0]["command"]
    assert command[:4] == ["rljob", "ckpt", "verify", "/checkpoints/run/global_step_5"]
    assert command[command.index("--within") + 1] == "/checkpoints"
    assert "--output" in command and "--missing-ok" not in command  # named: it must exist


def test_verify_writes_its_verdict_for_the_inspector_and_refuses_outside_within(tmp_path, capsys):
    volume, _ = escaping_volume(tmp_path)
    build_rljob(volume / "ok", 3)
    output = tmp_path / "out.json"
    with pytest.raises(SystemExit) as exit_info:
        main(["ckpt", "verify", str(volume / "ok" / "global_step_3"), "--within", str(volume),
              "--json", "--output", str(output)])  # fmt: skip
    assert exit_info.value.code == 0
    assert json.loads(output.read_text())["verdict"] == "complete"
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(["ckpt", "verify", str(volume / "run" / "checkpoints" / "global_step_77"),
              "--within", str(volume)])  # fmt: skip
    assert exit_info.value.code == 2 and "outside" in capsys.readouterr().err
