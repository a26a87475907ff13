"""Pure parts of the test environment: wrapper modules, cache lookup, node manifests."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from rljob_testenv import binaries, cluster, images, peers, stages

REPO = Path(__file__).resolve().parents[3]


def test_kubernetes_wrapper_pins_every_staging_module_to_the_matching_release():
    component = next(c for c in binaries.COMPONENTS if c.name == "kubernetes")
    go_mod = binaries.wrapper_go_mod(component)

    assert f"require k8s.io/kubernetes {binaries.KUBERNETES_VERSION}" in go_mod
    minor_patch = binaries.KUBERNETES_VERSION.removeprefix("v1.")
    for module in ("api", "client-go", "kubectl", "kube-scheduler"):
        assert f"k8s.io/{module} => k8s.io/{module} v0.{minor_patch}" in go_mod


def test_kubernetes_release_has_disruption_target_conditions_ga():
    major, minor, _ = binaries.KUBERNETES_VERSION.removeprefix("v").split(".")
    assert (int(major), int(minor)) >= (1, 31)


@pytest.mark.parametrize(
    ("package", "binary"),
    [
        ("go.etcd.io/etcd/server/v3", "server"),
        ("k8s.io/kubernetes/cmd/kubectl", "kubectl"),
        ("helm.sh/helm/v3/cmd/helm", "helm"),
    ],
)
def test_go_names_a_binary_after_the_last_element_that_is_not_a_major_version(package, binary):
    assert binaries._go_binary_name(package) == binary


def _fake_binary(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_locate_prefers_the_users_directory_then_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(binaries.CACHE_DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(binaries.BIN_DIR_ENV, str(tmp_path / "mine"))
    etcd = next(c for c in binaries.COMPONENTS if c.name == "etcd")
    assert binaries.locate("etcd") is None

    _fake_binary(binaries.component_dir(etcd) / "etcd")
    assert binaries.locate("etcd") == binaries.component_dir(etcd) / "etcd"

    _fake_binary(tmp_path / "mine" / "etcd")
    assert binaries.locate("etcd") == tmp_path / "mine" / "etcd"


def test_require_names_the_missing_binary_and_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv(binaries.CACHE_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(binaries.BIN_DIR_ENV, raising=False)
    with pytest.raises(binaries.BinariesError, match=r"kube-apiserver.*rljob testenv install"):
        binaries.require("kube-apiserver")


def test_install_without_go_says_go_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv(binaries.CACHE_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(binaries.BIN_DIR_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(binaries.BinariesError, match="Go toolchain"):
        binaries.install(["etcd"], say=lambda _msg: None)


def test_install_returns_at_once_when_everything_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv(binaries.CACHE_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(binaries.BIN_DIR_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # building would fail: no go
    for component in binaries.COMPONENTS:
        for binary in component.commands:
            _fake_binary(binaries.component_dir(component) / binary)

    found = binaries.install(say=lambda _msg: None)

    assert set(found) == set(binaries.ALL_BINARIES)
    assert all(os.access(p, os.X_OK) for p in found.values())


def test_the_peers_are_built_only_when_asked_for(tmp_path, monkeypatch):
    monkeypatch.setenv(binaries.CACHE_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(binaries.BIN_DIR_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    for component in binaries.COMPONENTS:
        for binary in component.commands:
            _fake_binary(binaries.component_dir(component) / binary)

    assert set(binaries.install(say=lambda _msg: None)) == set(binaries.ALL_BINARIES)
    with pytest.raises(binaries.BinariesError, match="Go toolchain"):
        binaries.install(say=lambda _msg: None, peers=True)  # jobset-manager is not cached


def test_each_kueue_release_is_cached_apart_and_install_builds_every_one(tmp_path, monkeypatch):
    monkeypatch.setenv(binaries.CACHE_DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(binaries.BIN_DIR_ENV, str(tmp_path / "mine"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # building would fail: no go
    for component in binaries.COMPONENTS:
        for binary in component.commands:
            _fake_binary(binaries.component_dir(component) / binary)
    pinned, *others = binaries.KUEUES
    assert pinned.version == binaries.KUEUE_VERSION and others
    assert len({binaries.component_dir(k) for k in binaries.KUEUES}) == len(binaries.KUEUES)
    _fake_binary(binaries.component_dir(pinned) / "kueue-manager")
    # The user's directory cannot say which release its kueue-manager is: the pinned one.
    _fake_binary(tmp_path / "mine" / "kueue-manager")
    assert binaries.locate_in(pinned, "kueue-manager") == tmp_path / "mine" / "kueue-manager"
    assert binaries.locate_in(others[0], "kueue-manager") is None

    with pytest.raises(binaries.BinariesError, match="Go toolchain"):
        binaries.install(say=lambda _msg: None, kueue=True)  # the other release is not cached
    for component in others:
        _fake_binary(binaries.component_dir(component) / "kueue-manager")
    found = binaries.install(say=lambda _msg: None, kueue=True)
    assert found["kueue-manager"] == tmp_path / "mine" / "kueue-manager"
    assert binaries.ensure(others[0], "kueue-manager", say=lambda _msg: None) == (
        binaries.component_dir(others[0]) / "kueue-manager"
    )


def test_peer_webhooks_point_at_this_host_and_only_at_the_resources_asked_for():
    upstream = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "validating-webhook-configuration"},
        "webhooks": [
            {"name": name, "clientConfig": {"service": {"name": "svc", "path": f"/validate-{r}"}},
             "rules": [{"resources": [r]}]}
            for name, r in (("a", "pytorchjobs"), ("b", "tfjobs"))
        ],
    }  # fmt: skip

    local = peers.local_webhooks(upstream, "mine", 9443, b"CA", {"pytorchjobs"})

    assert local["metadata"] == {"name": "mine"}
    (hook,) = local["webhooks"]
    assert hook["clientConfig"] == {
        "url": "https://127.0.0.1:9443/validate-pytorchjobs",
        "caBundle": "Q0E=",
    }
    assert upstream["webhooks"][0]["clientConfig"]["service"]  # the upstream copy is untouched


def test_gpu_node_advertises_gpus_and_is_managed_by_kwok():
    node = cluster.gpu_node_manifest("gpu-node-7", cluster.NodeShape(gpus=4))

    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert node["metadata"]["annotations"][cluster.KWOK_NODE_ANNOTATION] == "fake"
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "gpu-node-7"


@pytest.mark.parametrize("name", ["", "Upper", "has_underscore", "-lead", "x" * 40])
def test_invalid_cluster_names_are_refused(name):
    with pytest.raises(cluster.ClusterError, match="not valid"):
        cluster.validate_name(name)


def test_kubelet_like_stages_end_a_deleted_pod_before_kwok_removes_it(tmp_path):
    for name in stages.KWOK_STAGE_FILES:  # stand-ins for kwok's files, by their names
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        stage = {
            "kind": "Stage",
            "metadata": {"name": Path(name).stem},
            "spec": {"selector": {"matchExpressions": [{"key": "k", "operator": "Exists"}]}},
        }
        (tmp_path / name).write_text(yaml.safe_dump(stage))

    loaded = {s["metadata"]["name"]: s for s in stages.kubelet_like_stages(tmp_path)}

    assert "pod-complete" not in loaded  # a running pod stays running, whoever owns it
    delete = loaded["pod-delete"]["spec"]["selector"]["matchExpressions"]
    assert {"key": ".status.phase", "operator": "In", "values": ["Succeeded", "Failed"]} in delete
    stop = loaded["pod-stop-on-delete"]["spec"]
    assert "exitCode: 143" in stop["next"]["statusTemplate"]
    assert "phase: Failed" in stop["next"]["statusTemplate"]


@pytest.mark.parametrize(
    "image", [images.OPERATOR, images.TRAINER, images.ray_driver_image()], ids=lambda i: i.tag
)
def test_an_images_key_covers_everything_its_dockerfile_copies(image):
    """A change to what an image copies rebuilds it; a change elsewhere does not."""
    dockerfile = (REPO / image.dockerfile).read_text()
    copied = re.findall(r"^COPY (?!--from)(.+) \S+$", dockerfile, re.M)
    sources = {str(Path(image.context, source)) for line in copied for source in line.split()}
    assert sources, f"{image.dockerfile} copies nothing"
    for source in sources:
        assert any(source == c or source.startswith(f"{c}/") for c in image.copies), source


def test_an_image_built_on_another_is_rebuilt_when_its_base_is():
    """The Ray driver's image is the trainer's plus libraries: a change to the trainer's
    sources changes its key too."""
    ray_image = images.ray_driver_image()
    assert ray_image.base == images.TRAINER
    moved = replace(ray_image, base=replace(images.TRAINER, build_args={"TORCH_REQUIREMENT": "x"}))
    assert moved.key(REPO) != ray_image.key(REPO)
    assert "ray==" in ray_image.build_args["PACKAGES"]
