"""The nodes' image stores, made by a real containerd from the pause image's archive (the
small one) into a folder of the test's own."""

from __future__ import annotations

import os
import subprocess

import pytest
from rljob_testenv import images, imagestore, kind


@pytest.fixture
def stores(tmp_path, monkeypatch):
    monkeypatch.setattr(imagestore, "stores_dir", lambda family="": tmp_path / f"stores-{family}")
    return tmp_path / "stores-"


def test_a_node_shares_the_stores_layers_and_owns_its_databases(stores, tmp_path):
    store = imagestore.store_for([images.pause_archive()], say=lambda _: None)
    root = tmp_path / "node" / "root"
    imagestore.link_into(store, root)

    shared = [p for sub in imagestore.SHARED_DIRS for p in (store / sub).rglob("*") if p.is_file()]
    assert shared  # the blobs and the unpacked catatonit
    for original in shared:
        linked = root / original.relative_to(store)
        assert os.stat(linked).st_ino == os.stat(original).st_ino
    databases = list(store.rglob("*.db"))
    assert {p.name for p in databases} == {"meta.db", "metadata.db"}
    for original in databases:
        copied = root / original.relative_to(store)
        assert copied.read_bytes() == original.read_bytes()
        assert os.stat(copied).st_ino != os.stat(original).st_ino
    assert not (root / imagestore.OWN_ID).exists()
    said: list[str] = []  # the next start of kind's nodes finds the store made
    assert imagestore.store_for([images.pause_archive()], say=said.append) == store
    assert said == []


def test_an_archive_containerd_cannot_import_is_a_clear_error_and_leaves_no_store(stores, tmp_path):
    broken = tmp_path / "broken-0123.tar"
    broken.write_bytes(b"not a tar archive")
    with pytest.raises(imagestore.ImageStoreError, match=r"ctr could not import broken-0123\.tar"):
        imagestore.store_for([broken], say=lambda _: None)
    assert [p.name for p in stores.iterdir()] == [imagestore.LOCK]


def test_a_store_on_a_base_keeps_the_bases_images_and_lives_apart(stores, tmp_path):
    """kind's stores start from the node image's containerd root; a store of another family
    is left alone."""
    base = imagestore.store_for([images.pause_archive()], say=lambda _: None)
    on_base = imagestore.store_for([], say=lambda _: None, base=base, family="kind")
    assert on_base != base and base.is_dir()
    # Compared by the images containerd lists, not by blob files: containerd's garbage
    # collector may drop a blob no image refers to (the archive's own index) at any start.
    base_images = _image_names(base, tmp_path / "base")
    assert base_images and base_images <= _image_names(on_base, tmp_path / "on-base")


def _image_names(store, work) -> set[str]:
    work.mkdir()
    sockets = work / "s"
    sockets.mkdir()
    containerd = imagestore.binaries.require("containerd")
    with imagestore.private_containerd(containerd, store, work, sockets) as socket:
        listed = subprocess.run([*imagestore.ctr(socket), "images", "list", "-q"],
                                capture_output=True, text=True, check=True).stdout  # fmt: skip
    return set(listed.split())


def test_the_node_images_store_holds_each_archive_under_the_names_asked_for_pinned(tmp_path):
    """What a kind node image is built with (kind._import_images): the same private containerd
    as the stores', the image under every name kubeadm and containerd ask for, pinned so that
    the kubelet's image GC keeps it."""
    (tmp_path / "work").mkdir()
    names = ["registry.k8s.io/pause:3.10", "localhost/rljob-kind/pause:test"]
    kind._import_images(tmp_path / "rootfs", tmp_path / "work", {images.pause_archive(): names})
    store = tmp_path / "rootfs" / kind.CONTAINERD_ROOT.lstrip("/")
    assert not (store / imagestore.OWN_ID).exists()  # each node's containerd makes its own
    sockets = tmp_path / "s"
    sockets.mkdir()
    containerd = kind._binary("containerd")
    with imagestore.private_containerd(containerd, store, tmp_path / "work", sockets) as socket:
        listed = subprocess.run([*imagestore.ctr(socket), "images", "list"],
                                capture_output=True, text=True, check=True).stdout  # fmt: skip
    for name in names:
        (line,) = [row for row in listed.splitlines() if row.startswith(f"{name} ")]
        assert kind.PINNED in line
