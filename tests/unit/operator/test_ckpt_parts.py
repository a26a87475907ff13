"""A run's checkpoints agree on their parts: a folder that lacks what its older complete
peers all have is torn (RLinf's data/data.pt, written last; a critic/)."""

from __future__ import annotations

import shutil

import pytest
from ckpt_trees import (
    INC,
    OK,
    build_rlinf_fsdp,
    build_rlinf_megatron,
    build_verl_fsdp,
    remove,
    snapshot,
)
from rljob_operator.checkpoints import find_latest, list_checkpoints, verify_folder
from rljob_operator.checkpoints.parts import PEERS


@pytest.mark.parametrize(
    ("build", "layout"),
    [(build_rlinf_fsdp, "rlinf-fsdp"), (build_rlinf_megatron, "rlinf-megatron")],
)
def test_rlinf_folder_without_the_data_its_run_always_writes_is_torn(tmp_path, build, layout):
    for step in (10, 20):
        build(tmp_path, step)
    newest = build(tmp_path, 30)
    remove(newest / "data")  # killed after actor/ and critic/, before data/data.pt
    before = snapshot(tmp_path)

    result = find_latest(tmp_path, layout)

    assert result.step == 20
    (rejected,) = result.rejected
    assert rejected.verdict.status == INC
    assert (
        "data/data.pt is missing, though the older complete checkpoints" in rejected.verdict.reason
    )
    assert "global_step_20, global_step_10" in rejected.verdict.reason
    assert verify_folder(newest, layout).verdict.status == INC  # judged alone, it sees its peers
    assert snapshot(tmp_path) == before  # nothing is touched


def test_run_whose_folders_never_have_the_part_is_unaffected(tmp_path):
    """The embodied runners write no data/: every folder lacks it, none is torn."""
    for step in (10, 20, 30):
        remove(build_rlinf_fsdp(tmp_path, step) / "data")
    assert find_latest(tmp_path, "rlinf-fsdp").step == 30


def test_first_folder_of_a_run_has_no_peers_to_disagree_with(tmp_path):
    remove(build_rlinf_fsdp(tmp_path, 10) / "data")
    assert find_latest(tmp_path, "rlinf-fsdp").step == 10


def test_peers_that_disagree_among_themselves_set_no_rule(tmp_path):
    remove(build_rlinf_fsdp(tmp_path, 10) / "data")
    build_rlinf_fsdp(tmp_path, 20)
    remove(build_rlinf_fsdp(tmp_path, 30) / "data")
    assert find_latest(tmp_path, "rlinf-fsdp").step == 30


def test_incomplete_older_folders_are_no_evidence(tmp_path):
    """verl's retention removes actor/ of old saves: what is left of them says nothing."""
    for step in (10, 20):
        folder = build_verl_fsdp(tmp_path, step)
        shutil.copytree(folder / "actor", folder / "critic")
        shutil.rmtree(folder / "actor")
    build_verl_fsdp(tmp_path, 30)  # no critic/, and no complete peer that has one
    assert find_latest(tmp_path, "verl-fsdp").step == 30


def test_verl_folder_without_the_critic_every_peer_has_is_torn(tmp_path):
    for step in (10, 20):
        folder = build_verl_fsdp(tmp_path, step)
        shutil.copytree(folder / "actor", folder / "critic")
    build_verl_fsdp(tmp_path, 30)  # actor/ and data.pt, but its critic/ never came

    listed = {j.step: j.verdict for j in list_checkpoints(tmp_path, "verl-fsdp")}

    assert (listed[30].status, listed[20].status, listed[10].status) == (INC, OK, OK)
    assert "critic is missing" in listed[30].reason


def test_only_the_nearest_peers_are_read(tmp_path):
    """A run's habit is its last few complete saves, so a long history costs little."""
    for step in range(1, PEERS + 3):
        build_rlinf_fsdp(tmp_path, step * 10)
    oldest = tmp_path / "global_step_10"
    remove(oldest / "data")  # far older than the nearest peers: no say
    remove(build_rlinf_fsdp(tmp_path, 100) / "data")
    assert find_latest(tmp_path, "rlinf-fsdp").step == (PEERS + 2) * 10
