"""rljob_testenv.kind without a cluster: its configuration, and the errors of a host that lacks
something (each must say what, never hang)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from rljob_testenv import kind

QUIRKS = {"cgroup_v1": True, "no_sys_resource": True}


def test_kind_config_mounts_the_shared_folder_on_every_node(tmp_path: Path) -> None:
    config = kind.kind_config("c", "localhost/node:1", 2, tmp_path, {})
    assert [n["role"] for n in config["nodes"]] == ["control-plane", "worker", "worker"]
    for node in config["nodes"]:
        assert node["image"] == "localhost/node:1"
        assert node["extraMounts"] == [
            {"hostPath": str(tmp_path), "containerPath": "/rljob/shared"}
        ]
    # Nothing for a host without quirks: the same config a cgroup v2 laptop gets.
    assert "kubeadmConfigPatches" not in config and "containerdConfigPatches" not in config
    assert "&id" not in yaml.safe_dump(config)  # no YAML anchors in what kind reads


def test_each_node_gets_its_own_containerd_root_in_kinds_node_order(tmp_path: Path) -> None:
    roots = [tmp_path / n for n in ("c-control-plane", "c-worker", "c-worker2")]
    config = kind.kind_config("c", "img", 2, tmp_path / "shared", {}, roots)
    for node, root in zip(config["nodes"], roots, strict=True):
        assert node["extraMounts"] == [
            {"hostPath": str(tmp_path / "shared"), "containerPath": kind.SHARED_MOUNT},
            {"hostPath": str(root), "containerPath": "/var/lib/containerd"},
        ]
    control_plane, workers = kind.node_names("c", 2)
    assert [control_plane, *workers] == [r.name for r in roots]


def test_kind_config_carries_this_hosts_quirks() -> None:
    config = kind.kind_config("c", "img", 1, None, QUIRKS)
    (patch,) = config["kubeadmConfigPatches"]
    kubelet = yaml.safe_load(patch)
    assert kubelet == {"kind": "KubeletConfiguration", "failCgroupV1": False, "oomScoreAdj": 0}
    (containerd,) = config["containerdConfigPatches"]
    assert "restrict_oom_score_adj = true" in containerd
    assert all(n["extraMounts"] == [] for n in config["nodes"])


def test_containers_conf_lowers_ulimits_only_without_cap_sys_resource(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kind, "_has_capability", lambda bit: False)
    text = kind._containers_conf(tmp_path).read_text()
    assert "default_ulimits" in text
    limits = dict(
        item.split("=") for item in text.split("[", 2)[2].strip("]\n").replace('"', "").split(", ")
    )
    soft, hard = (int(v) for v in limits["nproc"].split(":"))
    assert soft == hard <= kind.PODMAN_NPROC_CAP
    monkeypatch.setattr(kind, "_has_capability", lambda bit: True)
    assert "default_ulimits" not in kind._containers_conf(tmp_path).read_text()


def test_missing_podman_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kind.os, "geteuid", lambda: 0)
    monkeypatch.setattr(kind.shutil, "which", lambda prog: None)
    with pytest.raises(kind.KindError, match="podman is not installed"):
        kind.check_host()


def test_missing_cgroups_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kind, "CGROUP_ROOT", tmp_path)
    with pytest.raises(kind.KindError, match="no cgroup hierarchy"):
        kind.cgroup_version()
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    assert kind.cgroup_version() == 2


def test_too_little_disk_is_named(tmp_path: Path) -> None:
    with pytest.raises(kind.KindError, match=r"needs about \d+ GiB free"):
        kind._check_disk(tmp_path / "not-yet", 10**9, "a kind cluster")


def test_a_command_past_its_deadline_is_killed_with_an_error() -> None:
    started = time.monotonic()
    with pytest.raises(kind.KindError, match="sleeping did not finish in"):
        kind._run(["sh", "-c", "sleep 30 & sleep 30"], "sleeping", timeout=0.5)
    assert time.monotonic() - started < 10


def test_shared_dir_is_read_from_the_clusters_kind_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kind, "cluster_dir", lambda name: tmp_path / name)
    assert kind.shared_dir("c") is None  # not made here
    config = kind.kind_config("c", "img", 1, tmp_path / "shared", {})
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "kind-config.yaml").write_text(yaml.safe_dump(config))
    assert kind.shared_dir("c") == tmp_path / "shared"


def test_docker_as_provider_needs_a_docker_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLJOB_KIND_PROVIDER", "docker")
    monkeypatch.setattr(kind.os, "geteuid", lambda: 0)
    monkeypatch.setattr(kind.shutil, "which", lambda prog: None)
    with pytest.raises(kind.KindError, match="no Docker engine answers"):
        kind.check_host()
    assert kind.kind_env()["KIND_EXPERIMENTAL_PROVIDER"] == "docker"
    monkeypatch.setenv("RLJOB_KIND_PROVIDER", "lxc")
    with pytest.raises(kind.KindError, match="one of podman, docker"):
        kind.provider()
