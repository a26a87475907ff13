"""A job reads checkpoints only from its own volume (issue #17, item 1): '..' is refused in
the spec, and a directory that resolves outside the volume (a symlink) is refused by the
operator's own lookup and by the inspector's `--within`."""

from __future__ import annotations

import json
import shutil

import pytest
from builders import job_ref, make_job
from ckpt_trees import build_rljob, snapshot
from rljob_operator.api.spec import SpecError, parse_spec
from rljob_operator.checkpoints import find_latest
from rljob_operator.cli import main
from rljob_operator.launcher.inspector import desired_inspector
from rljob_operator.reconcile.lookup import CheckpointFinder, LookupFailed


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
    finder = CheckpointFinder(kube=None, volumes={"ckpts": volume}, inspector_image="unused")
    job = make_job(checkpoint={"volume": {"persistentVolumeClaim": {"claimName": "ckpts"}},
                               "directory": "run/checkpoints", "layout": "rljob"})  # fmt: skip

    with pytest.raises(LookupFailed, match=f"resolves to {outside}, outside {volume}"):
        finder.lookup(job)
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
