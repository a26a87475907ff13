"""rljob_testenv.onkind without a cluster: node names, what an archive holds, the room check
made before a cluster exists, and which nodes still need an image."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest
from rljob_testenv import kind, onkind


def oci_archive(
    path: Path, ref: str, digest: str, padding: int = 0, layers: tuple[str, ...] = ("layer",)
) -> Path:
    index = {"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest,
        "annotations": {"org.opencontainers.image.ref.name": ref}}]}  # fmt: skip
    with tarfile.open(path, "w") as tar:
        blobs = [(f"blobs/sha256/{layer}", b"\0" * padding) for layer in layers]
        for name, data in (*blobs, ("index.json", json.dumps(index).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_node_names_are_kinds() -> None:
    assert kind.node_names("c", 3) == ("c-control-plane", ["c-worker", "c-worker2", "c-worker3"])


def test_an_archive_names_its_image_and_manifest(tmp_path: Path) -> None:
    archive = oci_archive(tmp_path / "a.tar", "localhost/rljob-trainer:cpu", "sha256:abc")
    assert onkind.archive_image(archive) == ("localhost/rljob-trainer:cpu", "sha256:abc")


def test_too_little_room_for_the_images_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = oci_archive(tmp_path / "a.tar", "img:1", "sha256:abc", padding=1 << 20)
    monkeypatch.setattr(kind, "provider_store", lambda: tmp_path)
    free = (kind.CLUSTER_DISK_GIB * 2**30) + 7 * 2**20  # room for 7 MiB unpacked
    monkeypatch.setattr(onkind.shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(0, 0, free))
    onkind.check_room([archive], say=lambda _: None)  # 3x the 1 MiB layer fits
    # An image built on the first shares its layer: only its own counts.
    built_on = oci_archive(tmp_path / "c.tar", "img:3", "sha256:c", 1 << 20, ("layer", "own"))
    onkind.check_room([archive, built_on], say=lambda _: None)  # 3x 2 MiB fit
    other = oci_archive(tmp_path / "b.tar", "img:2", "sha256:def", 1 << 20, ("layer", "more"))
    with pytest.raises(kind.KindError, match=r"needs about \d+ GiB free under"):
        onkind.check_room([archive, built_on, other], say=lambda _: None)  # 3x 3 MiB do not


def test_only_nodes_without_that_image_digest_are_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    held = {"w1": "localhost/t:cpu  application/vnd.oci.image.manifest.v1+json  sha256:new",
            "w2": "localhost/t:cpu  application/vnd.oci.image.manifest.v1+json  sha256:old",
            "w3": ""}  # fmt: skip
    monkeypatch.setattr(kind, "node_exec", lambda node, *cmd: held[node])
    assert onkind.nodes_lacking("localhost/t:cpu", "sha256:new", ["w1", "w2", "w3"]) == [
        "w2",
        "w3",
    ]
