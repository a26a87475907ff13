"""rljob_testenv.stacks without a cluster: where each stack puts a claim's folder, and the
volume that makes every node see it."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from rljob_testenv import kind, stacks


def check_volume(folder: Path, volume: dict, node_path: str) -> None:
    assert folder.is_dir() and stat.S_IMODE(folder.stat().st_mode) == 0o777
    assert volume["spec"]["hostPath"] == {"path": node_path, "type": "Directory"}
    assert volume["spec"]["accessModes"] == ["ReadWriteMany"]
    assert volume["spec"]["claimRef"] == {"namespace": "ns", "name": "ckpts"}
    assert volume["metadata"]["name"] == "pv-a"


def test_kind_volumes_live_in_the_folder_every_node_mounts_at_its_path_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kind, "cluster_dir", lambda name: tmp_path / name)
    stack = stacks.KindStack("c", Path("."), workers=3)
    assert stack.nodes == ("c-worker", "c-worker2", "c-worker3")
    folder, volume = stack.claim_volume("pv-a", "ns", "ckpts")
    assert folder == tmp_path / "c" / "shared" / "volumes" / "pv-a"
    check_volume(folder, volume, f"{kind.SHARED_MOUNT}/volumes/pv-a")


def test_the_demos_kind_cluster_shares_a_folder_of_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make demo-kind`'s checkpoints and logs outlive the cluster, in the demo's output."""
    monkeypatch.setattr(kind, "cluster_dir", lambda name: tmp_path / "clusters" / name)
    stack = stacks.KindStack("demo", Path("."), workers=2, out=tmp_path / "out")
    folder, volume = stack.claim_volume("pv-a", "ns", "ckpts")
    assert folder == tmp_path / "out" / "shared" / "volumes" / "pv-a"
    check_volume(folder, volume, f"{kind.SHARED_MOUNT}/volumes/pv-a")


def test_node_agents_map_the_claim_by_namespace_and_name(tmp_path: Path) -> None:
    from rljob_nodeagent import claim_dir

    stack = stacks.AgentStack("demo", tmp_path, "ckpts", gpus_per_node=2)
    assert stack.nodes == ("demo-node-0", "demo-node-1")
    folder, volume = stack.claim_volume("pv-a", "ns", "ckpts")
    assert folder == claim_dir(tmp_path / "nodeagent", "ns", "ckpts")
    check_volume(folder, volume, str(folder))


def test_the_agents_operator_log_is_its_file_tail(tmp_path: Path) -> None:
    stack = stacks.AgentStack("demo", tmp_path, "ckpts", gpus_per_node=1)
    assert stack.operator_log() == ""
    (tmp_path / "operator.log").write_text("a\nb\nc\n")
    assert stack.operator_log(tail=2) == "b\nc"
    assert stack.operator_log() == "a\nb\nc"


def test_a_tests_agent_stack_lives_on_the_lanes_control_plane_and_does_not_own_it(
    tmp_path: Path,
) -> None:
    """The e2e tests' stacks: the lane's kubeconfig, no nodes until the test adds some, and
    not their own control plane (which `up` would start and `down` remove)."""
    from rljob_testenv import cluster

    stack = stacks.AgentStack("t-1", tmp_path, "ckpts", 1, nodes=0, control_plane="lane")
    assert stack.kubeconfig == cluster.kubeconfig_path("lane")
    assert stack.nodes == () and not stack.own_control_plane
    assert stacks.AgentStack("demo", tmp_path, "ckpts", 1).own_control_plane
